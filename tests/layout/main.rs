//! The code's shape, checked: SQL only in the store, no import cycle between the crate's
//! top-level modules, and files one can read in a sitting (ARCHITECTURE.md, "Invariants").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod code_map;
mod wings;

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
/// The folders of `dir` that are modules (they hold a `mod.rs`), with their names, in name
/// order: a room's folders, the store's wings.
fn folders(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .expect("a source folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("mod.rs").is_file())
        .filter_map(|p| Some((p.file_name()?.to_str()?.to_string(), p)))
        .collect();
    out.sort();
    out
}

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

/// The first name of each path that follows a prefix: `X` in `X::y`, `X` and `Y` in `{X, Y::z}`
/// (empty names, as `*`, left out).
fn names_after(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let names: Vec<String> = match rest.strip_prefix('{') {
        Some(group) => group[..group.find('}').unwrap_or(group.len())]
            .split(',')
            .map(ident)
            .collect(),
        None => vec![ident(rest)],
    };
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

/// `crate::X` and `crate::{X, Y}` references of a file.
fn crate_refs(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .flat_map(|(i, _)| names_after(&text[i + "crate::".len()..]))
        .collect()
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
            panic!(
                "module {m} has no room in ARCHITECTURE.md's order (tests/layout/main.rs ROOMS)"
            );
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

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests")
}

/// The test files too: none past 600 lines.
#[test]
fn test_files_are_readable_in_a_sitting() {
    let mut long = Vec::new();
    for f in rust_files(&tests_dir()) {
        let lines = std::fs::read_to_string(&f)
            .expect("read a test file")
            .lines()
            .count();
        if lines > 600 {
            long.push(format!("{}: {lines} lines", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "test files over 600 lines:\n{}",
        long.join("\n")
    );
}

/// The integration tests link the crate once per binary: a few binaries, one per area, each a
/// `tests/AREA/main.rs` with its files as modules (and the two that stand alone).
#[test]
fn the_tests_are_a_few_binaries() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("Cargo.toml");
    let binaries = manifest.matches("[[test]]").count();
    assert!(
        (1..=10).contains(&binaries),
        "{binaries} test binaries: put a new test file in its area's folder, as a module of its main.rs"
    );
}

/// A room's units: its files and folders one level down (`steps` for `store/steps.rs`,
/// `machine` for everything in `store/machine/`), and for each the other units it names.
/// The import graph between the files (and folders) directly in `room`, the module
/// `crate::{module}`: a folder counts as one unit, a `mod.rs` as none.
fn room_graph(room: &Path, module: &str) -> BTreeMap<String, BTreeSet<String>> {
    let unit_of = |f: &Path| -> Option<String> {
        let rel = f.strip_prefix(room).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.trim_end_matches(".rs");
        (name != "mod").then(|| name.to_string())
    };
    let files = rust_files(room);
    let units: BTreeSet<String> = files.iter().filter_map(|f| unit_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(u) = unit_of(f) else { continue };
        // Unit tests (`tests.rs`, `*_tests.rs`) are compiled for tests only: not the room's
        // shape.
        let stem = f.file_stem().and_then(|n| n.to_str()).unwrap_or_default();
        if stem == "tests" || stem.ends_with("_tests") {
            continue;
        }
        let depth = f
            .strip_prefix(room)
            .map(|r| r.components().count())
            .unwrap_or(1);
        // Code only: a doc comment's link (`[`super::db`]`) is no import.
        let text: String = std::fs::read_to_string(f)
            .expect("read a source file")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(|l| format!("{l}\n"))
            .collect();
        // How this file names its room: `super::` one level down, `super::super::` two.
        let mut prefixes = vec![format!("crate::{module}::")];
        prefixes.push(match depth {
            1 => "super::".to_string(),
            2 => "super::super::".to_string(),
            _ => "super::super::super::".to_string(),
        });
        let deps = graph.entry(u.clone()).or_default();
        for prefix in &prefixes {
            for (i, _) in text.match_indices(prefix.as_str()) {
                // `super::super::x` also contains `super::x` at an offset: only whole prefixes.
                if depth >= 2 && prefix == "super::super::" && text[..i].ends_with("super::") {
                    continue;
                }
                let rest = &text[i + prefix.len()..];
                let names = names_after(rest);
                for n in names {
                    if n != u && units.contains(&n) {
                        deps.insert(n);
                    }
                }
            }
        }
    }
    graph
}

/// Every cycle of `graph`, each once, as the edge that closes it (`from -> to`).
fn closing_edges(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<(String, String)> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        out: &mut BTreeSet<(String, String)>,
    ) {
        if done.contains(m) {
            return;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if path.contains(d) {
                out.insert((m.to_string(), d.clone()));
            } else {
                visit(d, graph, path, done, out);
            }
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut out = BTreeSet::new();
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, graph, &mut Vec::new(), &mut done, &mut out);
    }
    out
}

/// Import cycles between the files of one room that are known and still to be opened (issue
/// 51's wings for the store), each as the edge that closes it. The list may only shrink: an
/// edge listed here that no longer closes a cycle fails too, so it is struck off when opened.
const KNOWN_ROOM_CYCLES: &[(&str, &str, &str)] = &[
    // None: the store's wings opened theirs (a leaf for what two wings share: `requests.rs`
    // for `StartRequest`, the root for `READY_CHANNEL`, `connect/errors.rs` for `DbError`).
];

/// No import cycle between the files of any room, but those listed as known.
#[test]
fn no_import_cycle_inside_a_room() {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(src()).expect("src") {
        let room = entry.expect("entry").path();
        if !room.is_dir() {
            continue;
        }
        let name = room
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for (a, b) in closing_edges(&room_graph(&room, &name)) {
            found.insert((name.clone(), a, b));
        }
        // And inside each of its folders (the store's wings): between their files, `mod.rs`
        // aside.
        for (wing_name, dir) in folders(&room) {
            let module = format!("{name}::{wing_name}");
            for (a, b) in closing_edges(&room_graph(&dir, &module)) {
                found.insert((module.clone(), a, b));
            }
        }
    }
    let known: BTreeSet<(String, String, String)> = KNOWN_ROOM_CYCLES
        .iter()
        .map(|(r, a, b)| (r.to_string(), a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "import cycles inside a room (room, from, to):\n{new:?}"
    );
    assert!(
        gone.is_empty(),
        "opened, strike them off KNOWN_ROOM_CYCLES: {gone:?}"
    );
}

#[test]
fn the_room_check_sees_cycles() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &["a"][..]),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(closing_edges(&graph).len(), 1);
}
