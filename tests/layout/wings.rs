//! The store's wings: each folder's `mod.rs` lists, in its module docs, every public `Store`
//! method its files define, so that a wing's whole surface reads in one place.

use std::path::Path;

use super::{folders, rust_files, src};

/// The public methods of `impl Store` blocks in `text`.
fn store_methods(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let text = text.replace("\nimpl crate::store::Store {", "\nimpl Store {");
    for block in text.split("\nimpl Store {").skip(1) {
        let body = block.split("\n}").next().unwrap_or_default();
        for line in body.lines() {
            let rest = [
                "    pub async fn ",
                "    pub fn ",
                "    pub(crate) async fn ",
                "    pub(crate) fn ",
            ]
            .iter()
            .find_map(|p| line.strip_prefix(p));
            if let Some(rest) = rest {
                out.push(
                    rest.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect(),
                );
            }
        }
    }
    out
}

#[test]
fn each_wing_lists_its_methods() {
    let store = src().join("store");
    let mut unlisted = Vec::new();
    let mut wings = 0;
    for (_, dir) in folders(&store) {
        let listing = dir.join("mod.rs");
        wings += 1;
        let docs: String = std::fs::read_to_string(&listing)
            .expect("mod.rs")
            .lines()
            .filter(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for f in rust_files(&dir) {
            let text = std::fs::read_to_string(&f).expect("a source file");
            for m in store_methods(&text) {
                if !docs.contains(&format!("`{m}`")) {
                    let rel = f
                        .strip_prefix(&store)
                        .unwrap_or(Path::new("?"))
                        .display()
                        .to_string();
                    unlisted.push(format!("{m} ({rel})"));
                }
            }
        }
    }
    assert!(wings >= 9, "the store has {wings} wings");
    assert!(
        unlisted.is_empty(),
        "methods their wing's mod.rs does not list:\n{}",
        unlisted.join("\n")
    );
}

#[test]
fn the_listing_check_sees_methods() {
    let text = "impl Other {\n    pub fn no() {}\n}\nimpl crate::store::Store {\n    pub fn session_shared(&self) {}\n}\nimpl Store {\n    pub async fn step_set(&self) {}\n    fn private() {}\n    pub fn steps_in(&self) {}\n    pub(crate) async fn steps_apply(&self) {}\n}\n";
    assert_eq!(
        store_methods(text),
        vec!["session_shared", "step_set", "steps_in", "steps_apply"]
    );
}

/// A wing's `mod.rs` is its list: module docs, `mod` and `use` lines, nothing else; its files
/// name each other by file (`super::row::Job`, not `super::Job` through the list), so the room
/// check sees every edge between them.
#[test]
fn a_wing_is_a_list_and_its_files_name_each_other_by_file() {
    let store = src().join("store");
    let mut wrong = Vec::new();
    for (wing, dir) in folders(&store) {
        let list = dir.join("mod.rs");
        let text = std::fs::read_to_string(&list).expect("mod.rs");
        let mut in_use = false;
        for line in text.lines() {
            let t = line.trim();
            let listing = t.is_empty()
                || t.starts_with("//")
                || t.starts_with("#[")
                || t.contains("mod ") && t.ends_with(';')
                || t.starts_with("pub use ")
                || t.starts_with("pub(crate) use ")
                || t.starts_with("use ");
            if !(listing || in_use) {
                wrong.push(format!("{wing}/mod.rs holds code: {t}"));
            }
            let starts_use = ["use ", "pub use ", "pub(crate) use "]
                .iter()
                .any(|p| t.starts_with(p));
            if starts_use && !t.ends_with(';') {
                in_use = true;
            } else if in_use && t.ends_with(';') {
                in_use = false;
            }
        }
        let units: Vec<String> = rust_files(&dir)
            .iter()
            .filter_map(|f| f.file_stem().and_then(|s| s.to_str()).map(String::from))
            .filter(|s| s != "mod")
            .collect();
        for f in rust_files(&dir) {
            if f.file_name().is_some_and(|n| n == "mod.rs") {
                continue;
            }
            let code = std::fs::read_to_string(&f).expect("a file");
            // Up to the unit tests: their `super::` is the file itself.
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            for prefix in ["super::".to_string(), format!("crate::store::{wing}::")] {
                for (i, _) in code.match_indices(prefix.as_str()) {
                    if prefix == "super::" && code[..i].ends_with("super::") {
                        continue;
                    }
                    let rest = &code[i + prefix.len()..];
                    let names = super::names_after(rest);
                    for n in names {
                        if !units.contains(&n) {
                            wrong.push(format!("{wing}/{name} names {prefix}{n} through the list"));
                        }
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
