//! The code's shape, checked: SQL only in the store, no import cycle between the crate's
//! top-level modules, and files one can read in a sitting (ARCHITECTURE.md, "Invariants").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read a source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file belongs to (`store` for `src/store/steps.rs`), or `None` for
/// the crate root and the binary.
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// SQL text: a string literal that starts a statement. Outside `store/` only the store's
/// callers' names may appear, never a statement.
fn sql_lines(text: &str) -> Vec<String> {
    let statement = [
        "select ",
        "insert into",
        "update workdo.",
        "delete from",
        "truncate ",
    ];
    text.lines()
        .filter(|line| {
            let l = line.to_lowercase();
            l.contains("sqlx::query")
                || l.split('"')
                    .skip(1)
                    .step_by(2)
                    .any(|lit| statement.iter().any(|s| lit.trim_start().starts_with(s)))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn only_the_store_has_sql() {
    let mut found = Vec::new();
    for f in rust_files(&src()) {
        if module_of(&f).as_deref() == Some("store") {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("read a source file");
        for line in sql_lines(&text) {
            found.push(format!("{}: {}", f.display(), line.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "SQL outside store/:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_sql_check_sees_sql() {
    // The check above must be able to fail.
    assert_eq!(
        sql_lines("let n = \"select count(*) from workdo.steps\";").len(),
        1
    );
    assert_eq!(sql_lines("sqlx::query(q).execute(&pool)").len(), 1);
    assert!(sql_lines("// selects the steps; \"a select b\"").is_empty());
}

/// `crate::X` and `crate::{X, Y}` references of a file.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let mut modules: BTreeSet<String> = BTreeSet::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let files = rust_files(&src());
    for f in &files {
        if let Some(m) = module_of(f) {
            modules.insert(m);
        }
    }
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let text = std::fs::read_to_string(f).expect("read a source file");
        let deps = graph.entry(m.clone()).or_default();
        for r in crate_refs(&text) {
            if r != m && modules.contains(&r) {
                deps.insert(r);
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        if let Some(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
    // The model is pure: it depends on no other room.
    assert!(
        graph.get("model").is_none_or(BTreeSet::is_empty),
        "model depends on {:?}",
        graph.get("model")
    );
    // The rooms in ARCHITECTURE.md's order: each depends only on rooms above it (the surfaces
    // share the last rank). A module missing here fails too: it must be given its place.
    const ROOMS: &[&[&str]] = &[
        &["model"],
        &["artifact"],
        &["pg"],
        &["store"],
        &["invoke"],
        &["telemetry"],
        &["graph"],
        &["runtime"],
        &["api", "bench", "demo", "cli", "output"],
    ];
    let rank = |m: &str| ROOMS.iter().position(|r| r.contains(&m));
    for (m, deps) in &graph {
        let Some(mine) = rank(m) else {
            panic!("module {m} has no room in ARCHITECTURE.md's order (tests/layout.rs ROOMS)");
        };
        for d in deps {
            assert!(
                rank(d).is_some_and(|r| r <= mine),
                "{m} depends on {d}, a room below it in ARCHITECTURE.md's order"
            );
        }
    }
}

/// The model does no I/O: no files, processes, network or async runtime.
#[test]
fn the_model_does_no_io() {
    let model = src().join("model");
    let mut found = Vec::new();
    for f in rust_files(&model) {
        let text = std::fs::read_to_string(&f).expect("read a source file");
        for needle in ["std::fs", "std::process", "std::net", "tokio::", "std::env"] {
            if text.contains(needle) {
                found.push(format!("{}: {needle}", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "I/O in the model: {found:?}");
}

#[test]
fn the_cycle_check_sees_references() {
    let refs =
        crate_refs("use crate::store::Store;\nuse crate::{api, demo};\nlet x = crate::model::f();");
    let expected: BTreeSet<String> = ["store", "api", "demo", "model"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, expected);
}

/// Files allowed past 600 lines, each with its reason in ARCHITECTURE.md.
const LONG_FILES: &[&str] = &[];

#[test]
fn files_are_readable_in_a_sitting() {
    let mut long = Vec::new();
    for f in rust_files(&src()) {
        let lines = std::fs::read_to_string(&f)
            .expect("read a source file")
            .lines()
            .count();
        let rel = f
            .strip_prefix(src())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if lines > 600 && !LONG_FILES.contains(&rel.as_str()) {
            long.push(format!("{rel}: {lines} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "files over 600 lines:\n{}",
        long.join("\n")
    );
}

/// Inside the model, the three systems share their types through the leaf `model/spec.rs`:
/// dispatch and machines name none of the template module (which holds them both), and the
/// leaf names none of the three; so `model/` has no import cycle.
#[test]
fn the_model_shares_types_through_a_leaf() {
    let model = src().join("model");
    let refs_to = |text: &str, module: &str| {
        [
            format!("model::{module}"),
            format!("super::{module}"),
            format!("super::super::{module}"),
        ]
        .iter()
        .any(|r| text.contains(&format!("{r}::")) || text.contains(&format!("{r};")))
    };
    let mut wrong = Vec::new();
    for (dir, forbidden) in [
        ("dispatch", &["template", "machine"][..]),
        ("machine", &["template", "dispatch"][..]),
    ] {
        for f in rust_files(&model.join(dir)) {
            if f.to_string_lossy().contains("tests") {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("read");
            for m in forbidden {
                if refs_to(&text, m) {
                    wrong.push(format!("{} names {m}", f.display()));
                }
            }
        }
    }
    let spec = std::fs::read_to_string(model.join("spec.rs")).expect("spec.rs");
    for m in ["template", "dispatch", "machine"] {
        if refs_to(&spec, m) {
            wrong.push(format!("spec.rs names {m}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}
