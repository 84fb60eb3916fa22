//! Printing for people and scripts: JSON when asked (`--json`), aligned tables otherwise.
//! The CLI, the bench and the demo all print through here.

use std::io::Write;

use serde::Serialize;

/// Print `value` as JSON, or run `text` to print it for people.
pub fn emit<T: Serialize + ?Sized>(
    out: &mut impl Write,
    json: bool,
    value: &T,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        text(out)?;
    }
    Ok(())
}

/// Left-aligned columns.
pub fn table(
    o: &mut dyn Write,
    headers: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |o: &mut dyn Write, cells: Vec<&str>| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        writeln!(o, "{}", s.trim_end())
    };
    line(o, headers.to_vec())?;
    for r in &rows {
        line(o, r.iter().map(String::as_str).collect())?;
    }
    if rows.is_empty() {
        writeln!(o, "(none)")?;
    }
    Ok(())
}
