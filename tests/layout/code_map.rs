//! ARCHITECTURE.md's code map checked against the code: every source file named in its room's
//! section, and every method it names defined in the file it is named under.

use std::path::{Path, PathBuf};

use super::{module_of, rust_files, src};

/// ARCHITECTURE.md's code map names every source file, in its room's section.
#[test]
fn the_code_map_names_every_file() {
    let map =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
    // Each `### ` section's heading and text.
    let sections: Vec<(&str, &str)> = map
        .split("\n### ")
        .skip(1)
        .map(|s| s.split_once('\n').unwrap_or((s, "")))
        .collect();
    let mut missing = Vec::new();
    for f in rust_files(&src()) {
        let rel = f
            .strip_prefix(src())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let Some(room) = module_of(&f) else {
            if !map.contains(&format!("`{rel}`")) && !map.contains(&format!("runtime/src/{rel}")) {
                missing.push(rel);
            }
            continue;
        };
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let in_room = &rel[room.len()..].trim_start_matches('/');
        let named = sections.iter().any(|(heading, text)| {
            let of_room = [
                format!("runtime/src/{room}/"),
                format!("runtime/src/{room}.rs"),
                format!("`{room}/`"),
                format!("`{room}.rs`"),
            ];
            of_room.iter().any(|r| heading.contains(r.as_str()))
                && (heading.contains(&format!("runtime/src/{rel}"))
                    || text.contains(&format!("`{name}`"))
                    || text.contains(&format!("`{in_room}`"))
                    || text.contains(&format!("{in_room}`")))
        });
        if !named {
            missing.push(rel);
        }
    }
    assert!(
        missing.is_empty(),
        "source files ARCHITECTURE.md's code map does not name:\n{}",
        missing.join("\n")
    );
}

/// The methods (snake-case names in backticks) the code map names after a file are defined in
/// that file, so the map cannot drift when code moves.
#[test]
fn the_code_map_names_methods_where_they_are() {
    let map =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
    let wrong = misplaced(&map);
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's code map names methods where they are not:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_method_check_sees_a_method_named_under_the_wrong_file() {
    let map = "# map\n\n### `runtime/src/store/`\n- `queues.rs` — `queue_all_queued`, `why`; `Store::why` and `trust` are not checked.\n";
    let wrong = misplaced(map);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].starts_with("why is not defined in"), "{wrong:?}");
}

/// Each method `map` names under a file that does not define it, as a sentence.
fn misplaced(map: &str) -> Vec<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Only names that are a function somewhere are methods: `trust`, `cron` or `ready` are words.
    let mut functions = std::collections::BTreeSet::new();
    for f in rust_files(&src()) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for part in text.split("fn ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            functions.insert(name);
        }
    }
    let root = repo.join("runtime/src");
    let mut wrong = Vec::new();
    for section in map.split("\n### ").skip(1) {
        let (heading, text) = section.split_once('\n').unwrap_or((section, ""));
        let Some(base) = heading
            .split('`')
            .find(|s| s.starts_with("runtime/src/"))
            .map(|s| repo.join(s))
        else {
            continue;
        };
        let mut file: Option<(PathBuf, String)> = if base.extension().is_some() {
            std::fs::read_to_string(&base)
                .ok()
                .map(|t| (base.clone(), t))
        } else {
            None
        };
        for (i, span) in text.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            // A folder (`admin/`) names where the files after it are; a file is found beside the
            // file named last or in a folder above it, else in the heading's folder or above.
            let folder = span.ends_with('/') && !span.contains(' ');
            if folder || span.ends_with(".rs") {
                let from_file = file
                    .as_ref()
                    .and_then(|(p, _)| p.parent().map(Path::to_path_buf));
                let from_base = if base.extension().is_some() {
                    base.parent().map(Path::to_path_buf)
                } else {
                    Some(base.clone())
                };
                let mut found = None;
                for start in [from_file, from_base].into_iter().flatten() {
                    let mut dir = Some(start);
                    while let Some(d) = dir {
                        let at = d.join(span);
                        if (folder && at.is_dir()) || (!folder && at.is_file()) {
                            found = Some(at);
                            break;
                        }
                        dir = d
                            .parent()
                            .filter(|p| p.starts_with(&root))
                            .map(Path::to_path_buf);
                    }
                    if found.is_some() {
                        break;
                    }
                }
                match (found, folder) {
                    (Some(dir), true) => {
                        let list = dir.join("mod.rs");
                        let text = std::fs::read_to_string(&list).unwrap_or_default();
                        file = Some((list, text));
                    }
                    (Some(path), false) => {
                        file = std::fs::read_to_string(&path).ok().map(|t| (path, t));
                    }
                    (None, true) => {}
                    (None, false) if span.contains(' ') => {}
                    (None, false) => {
                        wrong.push(format!(
                            "{span} is named, but no such file or folder is there"
                        ));
                        file = None;
                    }
                }
                continue;
            }
            let method = functions.contains(span)
                && !span.is_empty()
                && span.starts_with(|c: char| c.is_ascii_lowercase())
                && span
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if let (true, Some((path, code))) = (method, &file) {
                let defined =
                    code.contains(&format!("fn {span}(")) || code.contains(&format!("fn {span}<"));
                if !defined {
                    wrong.push(format!("{span} is not defined in {}", path.display()));
                }
            }
        }
    }
    wrong
}
