//! Where things are in a YAML template's source, for messages that name a line.

use super::Locate;

/// Finds lines in block-style YAML: where each item of `steps:` starts, and keys within it.
/// Flow-style templates still load; their messages just carry no line.
pub(super) struct Lines<'a> {
    pub(super) lines: Vec<&'a str>,
    /// (first line index, end line index exclusive) of each step item.
    items: Vec<(usize, usize)>,
}

impl<'a> Lines<'a> {
    pub(super) fn new(source: &'a str) -> Self {
        let lines: Vec<&str> = source.lines().collect();
        let mut items = Vec::new();
        let indent = |l: &str| l.len() - l.trim_start().len();
        let content = |l: &str| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#')
        };
        if let Some(steps_at) = lines.iter().position(|l| l.starts_with("steps:")) {
            let mut item_indent = None;
            let mut i = steps_at + 1;
            while i < lines.len() {
                let l = lines[i];
                if content(l) {
                    let ind = indent(l);
                    if ind == 0 && !l.trim_start().starts_with('-') {
                        break; // next top-level key
                    }
                    let is_item = l.trim_start().starts_with("- ") || l.trim() == "-";
                    match item_indent {
                        None if is_item => {
                            item_indent = Some(ind);
                            items.push((i, lines.len()));
                        }
                        Some(ii) if is_item && ind == ii => {
                            if let Some(last) = items.last_mut() {
                                last.1 = i;
                            }
                            items.push((i, lines.len()));
                        }
                        Some(ii) if ind < ii => break,
                        _ => {}
                    }
                }
                i += 1;
            }
            if let Some(last) = items.last_mut() {
                last.1 = last.1.min(i);
            }
        }
        Lines { lines, items }
    }

    pub(super) fn key_line(&self, from: usize, to: usize, keys: &[&str]) -> Option<usize> {
        (from..to).find(|&i| {
            let t = self.lines[i].trim_start();
            let t = t.strip_prefix("- ").unwrap_or(t).trim_start();
            keys.iter().any(|k| {
                t.strip_prefix(k)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
        })
    }
}

impl Locate for Lines<'_> {
    fn line(&self, step: Option<usize>, field: &str) -> Option<usize> {
        let keys: &[&str] = match field {
            "prereq" => &["prereqs", "prereq"],
            "http" | "pool" | "pipeline" | "deployed" | "mode" => &[field, "function"],
            other => &[other],
        };
        let found = match step {
            None => {
                let end = self.items.first().map_or(self.lines.len(), |i| i.0);
                self.key_line(0, end, keys)
                    .or_else(|| self.key_line(0, self.lines.len(), &["steps"]))
            }
            Some(i) => {
                let &(from, to) = self.items.get(i)?;
                // The field's own line when it has one (a block mapping), else the first
                // fallback's (`function: { warm: x, pool: 0 }` on one line).
                keys.iter()
                    .find_map(|k| self.key_line(from, to, &[k]))
                    .or(Some(from))
            }
        };
        found.map(|i| i + 1)
    }
}
