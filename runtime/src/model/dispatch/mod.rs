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
//! How the engine stores and runs this is in `store/dispatch.rs`; ARCHITECTURE.md has the whole
//! picture and README.md the YAML keys.

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
}

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

/// The longest an observer's rules may take on one document (they run on a blocking thread; a
/// rule still running then is abandoned and the step fails, saying so).
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
    let package = sxd_document::parser::parse(document)
        .map_err(|e| format!("is not well-formed XML: {e}"))?;
    let doc = package.as_document();
    let factory = sxd_xpath::Factory::new();
    let context = sxd_xpath::Context::new();
    let mut out = Vec::with_capacity(observe.rules.len());
    for (i, rule) in observe.rules.iter().enumerate() {
        let xpath = factory
            .build(&rule.xpath)
            .map_err(|e| format!("rule {}: {:?}: {e}", i + 1, rule.xpath))?
            .ok_or_else(|| format!("rule {}: an empty XPath expression", i + 1))?;
        let value = xpath
            .evaluate(&context, doc.root())
            .map_err(|e| format!("rule {} ({:?}) cannot be evaluated: {e}", i + 1, rule.xpath))?;
        let fragments = match value {
            sxd_xpath::Value::Nodeset(n) => u32::try_from(n.size()).unwrap_or(u32::MAX),
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
        });
    }
    Ok(out)
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
