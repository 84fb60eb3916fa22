//! Template files on disk: the one place that reads them (the model only parses text).

use std::path::{Path, PathBuf};

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
    let bytes = read_regular(path).map_err(|e| TemplateError::one(&origin, None, "file", e))?;
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

/// The most a file the CLI reads may hold (a template, a document, a `--from` list): 64 MiB.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The bytes of a file of at most [`MAX_FILE_BYTES`], read no further (`/dev/zero` as a
/// document grew the process to 24 GB). A file named by the user may be a pipe (`--from <(cmd)`,
/// `/dev/stdin`); a folder's files must be regular ([`find_files`]).
///
/// # Errors
/// What is wrong with the file, in words.
pub fn read_regular(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.is_dir() {
        return Err("is a folder; give a file".into());
    }
    let too_big = |n: u64| {
        format!(
            "is {n} bytes, over the {} MiB a file may hold",
            MAX_FILE_BYTES >> 20
        )
    };
    if meta.is_file() && meta.len() > MAX_FILE_BYTES {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text; errors name the file.
///
/// # Errors
/// What is wrong with the file, naming it.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    let bytes = read_regular(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
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
                // A FIFO among the templates hung the load, a device never ended: a folder's
                // templates must be regular files.
                if !p.is_file() {
                    return Err(std::io::Error::other(format!(
                        "{}: is not a regular file (a FIFO, device or socket); a folder's templates must be files",
                        p.display()
                    )));
                }
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The per-user data directory: `$XDG_DATA_HOME/workdo`, else `$HOME/.local/share/workdo`,
/// else `.workdo` (no home at all).
pub fn default_data_dir() -> PathBuf {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(x) = non_empty("XDG_DATA_HOME") {
        return PathBuf::from(x).join("workdo");
    }
    match non_empty("HOME") {
        Some(h) => PathBuf::from(h).join(".local/share/workdo"),
        None => PathBuf::from(".workdo"),
    }
}
