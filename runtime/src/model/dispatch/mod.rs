//! Dynamic dispatch (seed 001, "Flexible Publication Workflows Using Dynamic Dispatch"): pure
//! data and pure functions, no I/O.
//!
//! - A [`Bricklet`] (Definition 1) is a reusable fragment of one or more steps.
//! - An observer step ([`Observe`], Definition 2) holds matching rules: an XPath 1.0 expression
//!   evaluated on a named XML document of the object, a change operation ([`Op`], Definition 3),
//!   the generator it feeds and the bricklets it names. A rule's matched fragments are counted:
//!   `f(b)`.
//! - A generator step ([`Generate`], Definition 4) allows the bricklets of its `refset` and
//!   composes its activation set with its construction rules ([`Construction`], Definition 5)
//!   by the paper's Listing 1 ([`compose`]) into a subnet, which [`expand`] turns into step rows.
//!
//! How the engine stores and runs this is in `store/dispatch/`; ARCHITECTURE.md has the whole
//! picture and docs/dispatch.md the YAML keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::spec::{Bricklet, Construction, Generate, MatchRule, Observe, Op};

mod compose;
#[cfg(test)]
mod tests;

pub use compose::{
    GeneratedStep, Graph, MAX_SUBNET_STEPS, Node, before_cycle, compose, expand, generated_name,
    sinks, subnet_size,
};

/// Active bricklets of one generator and their fragment counts `f(b)`.
pub type Actset = BTreeMap<String, u32>;

/// What one rule found when an observer ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleMatch {
    /// The rule's position in the observer's `rules` (from 0).
    pub rule: usize,
    pub op: Op,
    pub generator: String,
    pub bricklets: Vec<String>,
    /// `f(b)`: how many fragments matched (0: the rule did not match and changes nothing).
    pub fragments: u32,
    /// The matched nodes as XML, in document order (the paper's `pfrag`): an element with its
    /// content, an attribute's or a text node's value. Empty for a boolean, number or string
    /// result; a node over [`MAX_FRAGMENT_BYTES`] is kept as `null`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matched: Vec<Option<String>>,
    /// For an `undo` rule, what its XPath matches in the document now, as `fragments` and
    /// `matched` are for other rules: the next observation compares against it
    /// ([`undo_removals`]). `fragments` and `matched` of an undo rule are the fragments removed
    /// since the first observation, which its compensation undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<Present>,
}

/// What an `undo` rule's XPath matched in the document at the last observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Present {
    pub fragments: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matched: Vec<Option<String>>,
}

/// Seed 001's `undo`: the compensating bricklets are appended "to roll back operations B_j
/// after a data fragment was removed from the document". So an undo rule counts the fragments
/// its XPath matched at an earlier observation and matches no more, not those it matches now:
/// `current` (this observation's matches, as [`observe`] found them) becomes, for each undo
/// rule, the fragments removed since the workflow's first observation (`previous`, as last
/// recorded), with what matches now kept in [`RuleMatch::present`] for the next comparison.
/// Fragments are compared by their XML text, as a multiset; a rule whose result is a count (a
/// boolean, a number) compares counts. The first observation removes nothing. Other rules are
/// returned as they are.
pub fn undo_removals(previous: &[RuleMatch], current: &[RuleMatch]) -> Vec<RuleMatch> {
    current
        .iter()
        .map(|m| {
            if m.op != Op::Undo {
                return m.clone();
            }
            let now = Present {
                fragments: m.fragments,
                matched: m.matched.clone(),
            };
            let before = previous
                .iter()
                .find(|p| p.rule == m.rule && p.op == Op::Undo);
            let (mut removed, mut count) = match before {
                Some(p) if p.present.is_some() => (p.matched.clone(), p.fragments),
                _ => (Vec::new(), 0),
            };
            if let Some(was) = before.and_then(|p| p.present.as_ref()) {
                // By text only when every fragment was kept on both sides: one over the size
                // limits is `None`, and two `None`s would compare equal (or a kept one turned
                // `None` would count as removed).
                let whole = |p: &Present| {
                    p.matched.len() == p.fragments as usize && p.matched.iter().all(Option::is_some)
                };
                let by_text = whole(was) && whole(&now) && (was.fragments > 0 || now.fragments > 0);
                if by_text {
                    let mut left = now.matched.clone();
                    for f in &was.matched {
                        match left.iter().position(|l| l == f) {
                            Some(i) => {
                                left.swap_remove(i);
                            }
                            None => {
                                removed.push(f.clone());
                                count = count.saturating_add(1);
                            }
                        }
                    }
                } else {
                    count = count.saturating_add(was.fragments.saturating_sub(now.fragments));
                }
            }
            RuleMatch {
                fragments: count,
                matched: removed,
                present: Some(now),
                ..m.clone()
            }
        })
        .collect()
}

/// The largest matched node kept as a fragment, as XML text (64 KiB).
pub const MAX_FRAGMENT_BYTES: usize = 64 * 1024;

/// The most fragment text one observation keeps, all rules together (1 MiB): past it, further
/// instances get none (`null`), and their functions read the document themselves.
pub const MAX_FRAGMENTS_BYTES: usize = 1024 * 1024;

/// Each activated bricklet's instances' fragments, in instance order (`None` where an instance
/// has none), alongside the [`Actset`] the same rules make.
pub type Fragments = BTreeMap<String, Vec<Option<String>>>;

/// Whether `xpath` is an XPath 1.0 expression; why not.
///
/// # Errors
/// The parser's message.
pub fn check_xpath(xpath: &str) -> Result<(), String> {
    match sxd_xpath::Factory::new().build(xpath) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("an empty XPath expression".into()),
        Err(e) => Err(format!("not an XPath 1.0 expression: {e}")),
    }
}

/// The largest document an observer's rules run on (8 MiB).
pub const MAX_OBSERVED_BYTES: usize = 8 * 1024 * 1024;

/// How deep elements may nest in a document an observer reads: libxml2's default limit (its
/// parser refuses deeper documents unless told they are huge). Deeper ones are refused before
/// any rule runs: XPath over a document nested 200,000 deep ran for minutes, and writing out a
/// matched fragment that deep would overflow the stack.
pub const MAX_OBSERVED_DEPTH: usize = 256;

/// The longest an observer's rules may take on one document (they run on a thread of their
/// own; a rule still running then is abandoned and the step fails, saying so).
pub const OBSERVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Evaluate `observe`'s rules on `document` (the XML text of `observe.document`).
///
/// # Errors
/// The document is not well-formed XML, or a rule fails to evaluate (e.g. an unknown function).
pub fn observe(observe: &Observe, document: &str) -> Result<Vec<RuleMatch>, String> {
    if document.len() > MAX_OBSERVED_BYTES {
        return Err(format!(
            "has {} bytes, over the {} MiB an observer reads",
            document.len(),
            MAX_OBSERVED_BYTES / (1024 * 1024)
        ));
    }
    // A UTF-8 byte order mark may open a document (XML 1.0, 4.3.3): many editors and
    // exports write one. The parser reads it as content and refused the whole document.
    let document = document.strip_prefix('\u{feff}').unwrap_or(document);
    match nests_deeper(document, MAX_OBSERVED_DEPTH) {
        Nesting::Within => {}
        Nesting::Deeper => {
            return Err(format!(
                "nests elements more than {MAX_OBSERVED_DEPTH} deep, deeper than an observer reads"
            ));
        }
        Nesting::Unclosed => {
            return Err(
                "is not well-formed XML: a tag, comment, CDATA section, processing instruction or DOCTYPE is never closed"
                    .into(),
            );
        }
    }
    let package = match sxd_document::parser::parse(document) {
        Ok(package) => package,
        // sxd-document wants an XML declaration before a DOCTYPE, which XML 1.0 does not
        // (`<!DOCTYPE ead …><ead>`, as older finding aids are written): the same document with
        // one. Its own error is the one reported if that fails too.
        Err(e) if !document.trim_start().starts_with("<?xml") => {
            sxd_document::parser::parse(&format!("<?xml version=\"1.0\"?>{document}"))
                .map_err(|_| format!("is not well-formed XML: {e}"))?
        }
        Err(e) => return Err(format!("is not well-formed XML: {e}")),
    };
    let doc = package.as_document();
    let factory = sxd_xpath::Factory::new();
    let context = sxd_xpath::Context::new();
    let mut out = Vec::with_capacity(observe.rules.len());
    let mut kept = 0usize;
    for (i, rule) in observe.rules.iter().enumerate() {
        let xpath = factory
            .build(&rule.xpath)
            .map_err(|e| format!("rule {}: {:?}: {e}", i + 1, rule.xpath))?
            .ok_or_else(|| format!("rule {}: an empty XPath expression", i + 1))?;
        // sxd-xpath panics on a prefix the context does not declare (workdo declares none): an
        // error naming the rule, not a panic.
        let evaluated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            xpath.evaluate(&context, doc.root())
        }))
        .map_err(|_| {
            format!(
                "rule {} ({:?}) cannot be evaluated: it uses a namespace prefix, and rules declare none; match namespaced names with *[local-name()='NAME']",
                i + 1,
                rule.xpath
            )
        })?;
        let value = evaluated
            .map_err(|e| format!("rule {} ({:?}) cannot be evaluated: {e}", i + 1, rule.xpath))?;
        let mut matched = Vec::new();
        let fragments = match value {
            sxd_xpath::Value::Nodeset(n) => {
                matched = n
                    .document_order()
                    .into_iter()
                    .take(usize::try_from(compose::MAX_SUBNET_STEPS).unwrap_or(usize::MAX))
                    .map(|node| {
                        let xml = xml_of(node);
                        let fits = xml.len() <= MAX_FRAGMENT_BYTES
                            && kept + xml.len() <= MAX_FRAGMENTS_BYTES;
                        if fits {
                            kept += xml.len();
                        }
                        Some(xml).filter(|_| fits)
                    })
                    .collect();
                u32::try_from(n.size()).unwrap_or(u32::MAX)
            }
            sxd_xpath::Value::Boolean(b) => u32::from(b),
            sxd_xpath::Value::Number(n) if n.is_finite() && n >= 1.0 => {
                // Truncation intended: a count of fragments; huge numbers saturate.
                n.min(f64::from(u32::MAX)) as u32
            }
            sxd_xpath::Value::Number(_) => 0,
            sxd_xpath::Value::String(s) => u32::from(!s.is_empty()),
        };
        out.push(RuleMatch {
            rule: i,
            op: rule.op,
            generator: rule.generator.clone(),
            bricklets: rule.bricklets.clone(),
            fragments,
            matched,
            present: None,
        });
    }
    Ok(out)
}

/// What a scan of a document's tags finds about its nesting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nesting {
    Within,
    Deeper,
    /// Markup (a tag, comment, CDATA section, processing instruction or DOCTYPE) that never
    /// closes: not well-formed, and not measured.
    Unclosed,
}

/// Whether elements nest more than `limit` deep in `document`, by a scan of its tags: comments,
/// CDATA sections and processing instructions skipped to their ends, quoted attribute values
/// read whole, a DOCTYPE's internal subset ended at its first `]` as sxd-document's parser ends
/// it. Exact for well-formed XML; markup left open is [`Nesting::Unclosed`], so no document
/// the scan cannot measure reaches the parser. It runs before sxd-document's parser, which took
/// 100 s (debug build) on a document nested 200,000 deep.
fn nests_deeper(document: &str, limit: usize) -> Nesting {
    let b = document.as_bytes();
    // The index just past `pat`, searched from `from`.
    let past = |from: usize, pat: &[u8]| {
        b.get(from..)
            .and_then(|rest| rest.windows(pat.len()).position(|w| w == pat))
            .map(|p| from + p + pat.len())
    };
    // The index of the `>` ending a tag begun before `from` (quoted values read whole), or of
    // the `[` opening a DOCTYPE's subset when `subset`.
    let tag_end = |from: usize, subset: bool| {
        let mut quote = None;
        for (j, &c) in b.iter().enumerate().skip(from) {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') => quote = Some(c),
                (None, b'[') if subset => return Some(j),
                (None, b'>') => return Some(j),
                _ => {}
            }
        }
        None
    };
    let (mut i, mut depth) = (0usize, 0usize);
    while let Some(p) = b
        .get(i..)
        .and_then(|rest| rest.iter().position(|&c| c == b'<'))
    {
        i += p;
        let rest = &b[i..];
        let next = if rest.starts_with(b"<!--") {
            past(i + 4, b"-->")
        } else if rest.starts_with(b"<![CDATA[") {
            past(i + 9, b"]]>")
        } else if rest.starts_with(b"<?") {
            past(i + 2, b"?>")
        } else if rest.starts_with(b"<!") {
            match tag_end(i + 2, true) {
                Some(j) if b[j] == b'[' => {
                    past(j, b"]").and_then(|k| tag_end(k, false)).map(|k| k + 1)
                }
                Some(j) => Some(j + 1),
                None => None,
            }
        } else {
            tag_end(i + 1, false).map(|j| {
                if rest.get(1) == Some(&b'/') {
                    depth = depth.saturating_sub(1);
                } else if b[j - 1] != b'/' {
                    depth += 1;
                } else if depth == limit {
                    // Closes itself: one deeper than those open, for itself alone.
                    depth += 1;
                }
                j + 1
            })
        };
        if depth > limit {
            return Nesting::Deeper;
        }
        match next {
            Some(n) => i = n,
            None => return Nesting::Unclosed,
        }
    }
    Nesting::Within
}

/// A matched node as XML text: an element with its attributes and content (namespace prefixes
/// as written, the element's namespaces declared on it), or the value of an attribute, text,
/// comment or the document's text.
fn xml_of(node: sxd_xpath::nodeset::Node<'_>) -> String {
    use sxd_xpath::nodeset::Node;
    let mut out = String::new();
    match node {
        Node::Element(e) => element_xml(e, true, &mut out),
        Node::Attribute(a) => out.push_str(a.value()),
        Node::Text(t) => out.push_str(t.text()),
        Node::Comment(c) => out.push_str(c.text()),
        Node::ProcessingInstruction(p) => out.push_str(p.value().unwrap_or_default()),
        Node::Namespace(n) => out.push_str(n.uri()),
        Node::Root(r) => {
            for c in r.children() {
                if let sxd_document::dom::ChildOfRoot::Element(e) = c {
                    element_xml(e, true, &mut out);
                }
            }
        }
    }
    out
}

fn escape_into(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

fn element_xml(e: sxd_document::dom::Element<'_>, top: bool, out: &mut String) {
    use sxd_document::dom::ChildOfElement;
    let qualified = |prefix: Option<&str>, local: &str| match prefix {
        Some(p) if !p.is_empty() => format!("{p}:{local}"),
        _ => local.to_string(),
    };
    let name = qualified(e.preferred_prefix(), e.name().local_part());
    out.push('<');
    out.push_str(&name);
    if top {
        // A fragment stands alone: the namespaces it may use are declared on it.
        if let Some(uri) = e.recursive_default_namespace_uri() {
            out.push_str(" xmlns=\"");
            escape_into(uri, out);
            out.push('"');
        }
        for ns in e.namespaces_in_scope() {
            if ns.prefix() == "xml" {
                continue;
            }
            out.push_str(&format!(" xmlns:{}=\"", ns.prefix()));
            escape_into(ns.uri(), out);
            out.push('"');
        }
    }
    for a in e.attributes() {
        out.push(' ');
        out.push_str(&qualified(a.preferred_prefix(), a.name().local_part()));
        out.push_str("=\"");
        escape_into(a.value(), out);
        out.push('"');
    }
    let children = e.children();
    if children.is_empty() {
        out.push_str("/>");
        return;
    }
    out.push('>');
    for c in children {
        match c {
            ChildOfElement::Element(child) => element_xml(child, false, out),
            ChildOfElement::Text(t) => escape_into(t.text(), out),
            ChildOfElement::Comment(c) => {
                out.push_str("<!--");
                out.push_str(c.text());
                out.push_str("-->");
            }
            ChildOfElement::ProcessingInstruction(p) => {
                out.push_str("<?");
                out.push_str(p.target());
                if let Some(v) = p.value() {
                    out.push(' ');
                    out.push_str(v);
                }
                out.push_str("?>");
            }
        }
    }
    out.push_str("</");
    out.push_str(&name);
    out.push('>');
}

/// Follow [`apply`] for the fragments: each instance an `add` makes gets the fragment that
/// matched for it, `merge` keeps the first rule's, `delete` drops them, `undo` gives the
/// compensating bricklet's instances the fragments of what they undo.
pub fn apply_fragments(
    fragments: &mut Fragments,
    m: &RuleMatch,
    compensation: &dyn Fn(&str) -> Option<String>,
) {
    if m.fragments == 0 {
        return;
    }
    let each = || -> Vec<Option<String>> {
        let n = (m.fragments as usize)
            .min(usize::try_from(compose::MAX_SUBNET_STEPS).unwrap_or(usize::MAX));
        (0..n)
            .map(|i| m.matched.get(i).cloned().flatten())
            .collect()
    };
    for b in &m.bricklets {
        match m.op {
            Op::Add => fragments.entry(b.clone()).or_default().extend(each()),
            Op::Merge => {
                fragments.entry(b.clone()).or_insert_with(each);
            }
            Op::Delete => {
                fragments.remove(b);
            }
            Op::Undo => {
                if let Some(c) = compensation(b) {
                    fragments.entry(c).or_default().extend(each());
                }
            }
        }
    }
}

/// Apply one matched rule to `actset` (Definition 3). A rule with no fragments changes nothing.
/// `compensation` names each bricklet's compensating bricklet, for `undo`.
pub fn apply(actset: &mut Actset, m: &RuleMatch, compensation: &dyn Fn(&str) -> Option<String>) {
    if m.fragments == 0 {
        return;
    }
    for b in &m.bricklets {
        match m.op {
            // Counts saturate: a huge count is refused by the subnet's size limit, never
            // wrapped to a small one.
            Op::Add => {
                let n = actset.entry(b.clone()).or_insert(0);
                *n = n.saturating_add(m.fragments);
            }
            Op::Merge => {
                actset.entry(b.clone()).or_insert(m.fragments);
            }
            Op::Delete => {
                actset.remove(b);
            }
            Op::Undo => {
                if let Some(c) = compensation(b) {
                    let n = actset.entry(c).or_insert(0);
                    *n = n.saturating_add(m.fragments);
                }
            }
        }
    }
}

/// Why each bricklet was activated, from a workflow's dispatch record: for each generator its
/// set (composed, or so far) at depth 0, then each observer rule that fed it at depth 1
/// (`get-docs rule 2 add b1, b2: 2 fragment(s)`, numbered from 1 as in the template).
pub fn activation_lines(record: &serde_json::Value) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let observed = record["observed"].as_object();
    let mut generators: Vec<String> = record["actsets"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(c) = record["composed"].as_object() {
        let more: Vec<String> = c
            .keys()
            .filter(|k| !generators.contains(k))
            .cloned()
            .collect();
        generators.extend(more);
    }
    for g in &generators {
        let (set, how) = match record["composed"].get(g) {
            Some(c) => (&c["actset"], "composed"),
            None => (
                &record["actsets"][g],
                "will compose (activation set so far)",
            ),
        };
        let list: Vec<String> = set
            .as_object()
            .map(|m| m.iter().map(|(b, n)| format!("{b} ×{n}")).collect())
            .unwrap_or_default();
        let list = if list.is_empty() {
            "nothing".to_string()
        } else {
            list.join(", ")
        };
        out.push((0, format!("{g} {how}: {list}")));
        for (observer, matches) in observed.into_iter().flatten() {
            for m in matches.as_array().into_iter().flatten() {
                if m["generator"] != *g {
                    continue;
                }
                let bricklets: Vec<&str> = m["bricklets"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|b| b.as_str()).collect())
                    .unwrap_or_default();
                let rule = m["rule"].as_u64().map_or(0, |r| r + 1);
                let fragments = m["fragments"].as_u64().unwrap_or(0);
                let bricklets = bricklets.join(", ");
                let op = m["op"].as_str().unwrap_or("?");
                out.push((
                    1,
                    if fragments == 0 {
                        format!("{observer} rule {rule} {op} {bricklets}: no match")
                    } else {
                        format!("{observer} rule {rule} {op} {bricklets}: {fragments} fragment(s)")
                    },
                ));
            }
        }
    }
    out
}
