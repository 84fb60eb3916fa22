//! Documents as the page shows them: XML indented as written, anything else as it is.

/// A document as text, indented when it is well-formed XML (one element per line, an element
/// holding only text kept on its line; prefixes, attributes and text as written); anything
/// else as it is.
pub(super) fn pretty_xml(text: &str) -> String {
    // A byte order mark may open the document (XML 1.0, 4.3.3); it is not shown.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if !text.trim_start().starts_with('<') || roxmltree::Document::parse(text).is_err() {
        return text.to_string();
    }
    // Markup tokens: `<…>` (quotes, comments, CDATA and PIs kept whole) and the text between.
    let mut tokens: Vec<&str> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('<') {
            let end = if r.starts_with("!--") {
                r.find("-->").map(|i| i + 4)
            } else if r.starts_with("![CDATA[") {
                r.find("]]>").map(|i| i + 4)
            } else {
                let mut quote = None;
                r.char_indices()
                    .find(|&(_, c)| match quote {
                        Some(q) if c == q => {
                            quote = None;
                            false
                        }
                        Some(_) => false,
                        None if c == '"' || c == '\'' => {
                            quote = Some(c);
                            false
                        }
                        None => c == '>',
                    })
                    .map(|(i, _)| i + 2)
            };
            let end = end.unwrap_or(rest.len()).min(rest.len());
            tokens.push(&rest[..end]);
            rest = &rest[end..];
        } else {
            let end = rest.find('<').unwrap_or(rest.len());
            if !rest[..end].trim().is_empty() {
                tokens.push(rest[..end].trim());
            }
            rest = &rest[end..];
        }
    }
    let mut out = String::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        let opens = t.starts_with('<')
            && !t.starts_with("</")
            && !t.starts_with("<?")
            && !t.starts_with("<!")
            && !t.ends_with("/>");
        if t.starts_with("</") {
            depth = depth.saturating_sub(1);
        }
        out.push_str(&"  ".repeat(depth));
        // `<a>text</a>` on one line.
        if opens
            && let (Some(text), Some(close)) = (tokens.get(i + 1), tokens.get(i + 2))
            && !text.starts_with('<')
            && close.starts_with("</")
        {
            out.push_str(t);
            out.push_str(text);
            out.push_str(close);
            out.push('\n');
            i += 3;
            continue;
        }
        out.push_str(t);
        out.push('\n');
        if opens {
            depth += 1;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::pretty_xml;

    #[test]
    fn xml_is_indented_as_written_and_anything_else_is_left_alone() {
        let mods = r#"<?xml version="1.0"?><mods:mods xmlns:mods="http://www.loc.gov/mods/v3"><mods:titleInfo><mods:title>A &amp; B</mods:title></mods:titleInfo><!-- a <note> --><mods:note type="a>b">x</mods:note><mods:empty/></mods:mods>"#;
        assert_eq!(
            pretty_xml(mods),
            "<?xml version=\"1.0\"?>\n<mods:mods xmlns:mods=\"http://www.loc.gov/mods/v3\">\n  <mods:titleInfo>\n    <mods:title>A &amp; B</mods:title>\n  </mods:titleInfo>\n  <!-- a <note> -->\n  <mods:note type=\"a>b\">x</mods:note>\n  <mods:empty/>\n</mods:mods>\n"
        );
        // Saved with a byte order mark: indented the same, the mark not shown.
        assert_eq!(pretty_xml(&format!("\u{feff}{mods}")), pretty_xml(mods));
        for other in ["plain text", "<unclosed>", "{\"json\": 1}", ""] {
            assert_eq!(pretty_xml(other), other);
        }
    }
}
