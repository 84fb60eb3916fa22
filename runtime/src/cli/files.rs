//! Template files on disk: the one place that reads them (the model only parses text).

use std::path::Path;

use crate::model::template::{Format, Loaded, TemplateError, parse};

/// Read and parse one template file; the format comes from its extension.
///
/// # Errors
/// Unreadable file, unknown extension, or the template's own problems.
pub fn parse_file(path: &Path) -> Result<Loaded, TemplateError> {
    let origin = path.display().to_string();
    let format = Format::from_path(path).ok_or_else(|| {
        TemplateError::one(
            &origin,
            None,
            "file",
            "unknown extension: expected .yaml, .yml or .xml",
        )
    })?;
    let bytes = std::fs::read(path)
        .map_err(|e| TemplateError::one(&origin, None, "file", format!("cannot read: {e}")))?;
    let source = String::from_utf8(bytes).map_err(|e| {
        TemplateError::one(
            &origin,
            None,
            "file",
            format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
    })?;
    parse(&origin, format, &source)
}

/// Template files under `path`: the file itself, or every .yaml/.yml/.xml file in the folder
/// (recursively), sorted so loads are repeatable.
///
/// # Errors
/// When `path` cannot be read.
pub fn find_files(path: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if Format::from_path(&p).is_some() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}
