//! The store's wings: each folder's `mod.rs` lists, in its module docs, every public `Store`
//! method its files define, so that a wing's whole surface reads in one place.

use std::path::Path;

use super::{rust_files, src};

/// The public methods of `impl Store` blocks in `text`.
fn store_methods(text: &str) -> Vec<String> {
    let mut out = Vec::new();
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
    for entry in std::fs::read_dir(&store).expect("store/") {
        let dir = entry.expect("an entry").path();
        let listing = dir.join("mod.rs");
        if !listing.is_file() {
            continue;
        }
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
    let text = "impl Other {\n    pub fn no() {}\n}\nimpl Store {\n    pub async fn step_set(&self) {}\n    fn private() {}\n    pub fn steps_in(&self) {}\n    pub(crate) async fn steps_apply(&self) {}\n}\n";
    assert_eq!(
        store_methods(text),
        vec!["step_set", "steps_in", "steps_apply"]
    );
}
