//! Template parsing and validation: every error names the file, line and field.

use crate::support;

use std::path::Path;

use workdo::model::template::{Format, Runner, parse};

fn problems(origin: &str, source: &str) -> Vec<String> {
    let format = Format::from_path(Path::new(origin)).expect("known extension");
    match parse(origin, format, source) {
        Ok(_) => panic!("{origin} should not parse"),
        Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
    }
}

fn one(origin: &str, source: &str) -> String {
    let p = problems(origin, source);
    assert_eq!(p.len(), 1, "{p:#?}");
    p.into_iter().next().unwrap_or_default()
}

#[test]
fn xml_unknown_prerequisite_names_file_line_and_field() {
    let src = r#"<workflow-def id="aWF">
  <process name="a"/>
  <process name="b">
    <prereq>nope</prereq>
  </process>
</workflow-def>"#;
    assert_eq!(
        one("a.xml", src),
        r#"a.xml:4: prereq: unknown prerequisite "nope" of step "b": no step of that name in aWF"#
    );
}

#[test]
fn xml_cycle_is_reported_with_its_path() {
    let src = r#"<workflow-def id="cWF">
  <process name="a"><prereq>c</prereq></process>
  <process name="b"><prereq>a</prereq></process>
  <process name="c"><prereq>b</prereq></process>
</workflow-def>"#;
    let p = one("c.xml", src);
    assert!(
        p.starts_with("c.xml:2: prereq: prerequisites form a cycle: "),
        "{p}"
    );
    assert!(p.contains("a -> c -> b -> a"), "{p}");
}

#[test]
fn xml_duplicate_step_and_bad_attribute_values() {
    let src = r#"<workflow-def id="dWF">
  <process name="a"/>
  <process name="a" error-limit="many"/>
  <process name="b" skip-queue="perhaps" status="done"/>
</workflow-def>"#;
    let p = problems("d.xml", src);
    assert_eq!(
        p,
        vec![
            r#"d.xml:3: error-limit: "many" is not a whole number"#,
            r#"d.xml:3: name: duplicate step "a" (first at line 2)"#,
            r#"d.xml:4: skip-queue: "perhaps" is not true or false"#,
            r#"d.xml:4: status: "done": a template step may start waiting, completed or skipped"#,
        ]
    );
    let dup = one(
        "d.xml",
        "<workflow-def id=\"dWF\">\n<process name=\"a\"/>\n<process name=\"a\"/>\n</workflow-def>",
    );
    assert_eq!(
        dup,
        r#"d.xml:3: name: duplicate step "a" (first at line 2)"#
    );
}

#[test]
fn xml_typos_in_attributes_and_elements_are_errors() {
    let src = r#"<workflow-def id="tWF" repository="dor" reposit="x">
  <process name="a" eror-limit="7" sequence="1" queue-limit="5"
           lifecycel="x">
    <functoin exec="bin/a"/>
    <function exec="bin/a" timout="5s"/>
  </process>
  <proces name="b"/>
</workflow-def>"#;
    let p = problems("t.xml", src);
    assert_eq!(p.len(), 6, "{p:#?}");
    assert!(
        p[0].starts_with(r#"t.xml:1: reposit: unknown attribute "reposit" on <workflow-def>"#),
        "{p:#?}"
    );
    assert!(p[1].starts_with(r#"t.xml:2: eror-limit: unknown attribute "eror-limit" on <process>; known: name, status"#), "{p:#?}");
    assert!(
        p[2].starts_with(r#"t.xml:3: lifecycel: unknown attribute"#),
        "{p:#?}"
    );
    assert!(p[3].starts_with(r#"t.xml:4: functoin: unknown element <functoin> in <process>; known: label, prereq, function"#), "{p:#?}");
    assert!(
        p[4].starts_with(r#"t.xml:5: timout: unknown attribute "timout" on <function>"#),
        "{p:#?}"
    );
    assert!(
        p[5].starts_with(r#"t.xml:7: proces: unknown element <proces> in <workflow-def>"#),
        "{p:#?}"
    );
}

#[test]
fn every_problem_of_a_file_is_reported_at_once() {
    let yaml = "name: allWF\nsteps:\n  - name: a\n    prereqs: [nope]\n  - name: b\n    prereqs: [b]\n  - name: c\n    function: { exec: bin/c, timeout: banana }\n";
    let p = problems("all.yaml", yaml);
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(p[0].contains("unknown prerequisite \"nope\""), "{p:#?}");
    assert!(
        p[1].contains("\"b\"") && p[1].contains("its own prerequisite"),
        "{p:#?}"
    );
    assert!(p[2].contains("\"banana\" is not a duration"), "{p:#?}");
    let xml = r#"<workflow-def id="allWF">
  <process name="a"><prereq>nope</prereq></process>
  <process name="b"><prereq>b</prereq></process>
  <process name="c"><function exec="bin/c" timeout="banana"/></process>
</workflow-def>"#;
    let p = problems("all.xml", xml);
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(p[2].contains("\"banana\" is not a duration"), "{p:#?}");
}

#[test]
fn xml_malformed_and_wrong_root() {
    let p = one(
        "m.xml",
        "<workflow-def id=\"x\">\n  <process name=\"a\">\n</workflow-def>",
    );
    assert!(p.starts_with("m.xml:3: xml: malformed XML:"), "{p}");
    let p = one("r.xml", "<?xml version=\"1.0\"?>\n<workflows/>");
    assert_eq!(
        p,
        "r.xml:2: workflow-def: root element is <workflows>, expected <workflow-def>"
    );
    let p = one(
        "n.xml",
        "<workflow-def>\n<process name=\"a\"/>\n</workflow-def>",
    );
    assert_eq!(p, "n.xml:1: id: <workflow-def> has no id attribute");
}

#[test]
fn xml_bootstrap_step_and_workflow_service_attributes() {
    let src = r#"<workflow-def id="accessionWF" repository="dor">
  <process lifecycle="submitted" name="start-accession" status="completed" sequence="1">
    <label>Start Accessioning</label>
  </process>
  <process batch-limit="1000" error-limit="10" name="content-metadata" sequence="2" queue-limit="5">
    <label>Content Metadata</label>
    <prereq>dor:accessionWF:start-accession</prereq>
    <function warm="python3 fn.py" pool="2" timeout="90s" concurrency="4"/>
  </process>
</workflow-def>"#;
    let t = parse("a.xml", Format::Xml, src).unwrap_or_else(|e| panic!("{e}"));
    let s = &t.template.steps;
    assert_eq!(s[0].initial_status, Some(workdo::Status::Completed));
    assert_eq!(s[0].lifecycle.as_deref(), Some("submitted"));
    assert_eq!(
        s[1].prereqs,
        vec!["start-accession"],
        "qualified name of the same workflow"
    );
    assert_eq!((s[1].error_limit, s[1].batch_limit), (10, Some(1000)));
    let f = s[1].function.as_ref().expect("function");
    assert_eq!(f.timeout_secs, 90.0);
    assert_eq!(f.concurrency, 4);
    assert_eq!(
        f.runner,
        Runner::Warm {
            argv: vec!["python3".into(), "fn.py".into()],
            pool: 2,
            pipeline: 1,
        }
    );
    assert_eq!(t.sha256, workdo::model::template::sha256_hex(src));
}

#[test]
fn yaml_errors_name_line_and_field() {
    let src = "name: yWF\nsteps:\n  - name: a\n  - name: b\n    prereqs: [a, zz]\n";
    assert_eq!(
        one("y.yaml", src),
        r#"y.yaml:5: prereq: unknown prerequisite "zz" of step "b": no step of that name in yWF"#
    );
    let typo = one(
        "t.yaml",
        "name: tWF\nsteps:\n  - name: a\n    eror-limit: 3\n",
    );
    assert!(typo.starts_with("t.yaml:4: "), "{typo}");
    assert!(typo.contains("unknown field `eror-limit`"), "{typo}");
    let bad_type = one(
        "b.yaml",
        "name: bWF\nsteps:\n  - name: a\n    error-limit: lots\n",
    );
    assert!(bad_type.starts_with("b.yaml:4: "), "{bad_type}");
    assert!(bad_type.contains("error-limit"), "{bad_type}");
    let malformed = one("m.yaml", "name: mWF\nsteps:\n  - name: [a\n");
    assert!(malformed.starts_with("m.yaml:"), "{malformed}");
    assert!(malformed.contains("malformed YAML"), "{malformed}");
    let zero = one(
        "z.yaml",
        "name: zWF\nsteps:\n  - name: a\n  - name: b\n    error-limit: 0\n",
    );
    assert_eq!(
        zero,
        "z.yaml:5: error-limit: must be at least 1 (the number of attempts)"
    );
    let cyc = one(
        "c.yaml",
        "name: cWF\nsteps:\n  - name: a\n    prereqs: [b]\n  - name: b\n    prereqs: [a]\n",
    );
    assert!(
        cyc.starts_with("c.yaml:4: prereq: prerequisites form a cycle: a -> b -> a"),
        "{cyc}"
    );
    let dup = one("d.yaml", "name: dWF\nsteps:\n  - name: a\n  - name: a\n");
    assert_eq!(
        dup,
        r#"d.yaml:4: name: duplicate step "a" (first at line 3)"#
    );
    let func = one(
        "f.yaml",
        "name: fWF\nsteps:\n  - name: a\n    function:\n      exec: x\n      http: http://h/\n",
    );
    assert_eq!(
        func,
        "f.yaml:4: function: needs exactly one of exec, warm, http, builtin or deployed"
    );
    let pipe = one(
        "p.yaml",
        "name: pWF\nsteps:\n  - name: a\n    function:\n      warm: x\n      pipeline: 0\n",
    );
    assert_eq!(pipe, "p.yaml:6: pipeline: must be at least 1");
}

#[test]
fn shipped_workflows_load() {
    let files = workdo::cli::files::find_files(&support::workflows_dir()).expect("read workflows/");
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        workdo::cli::files::parse_file(&f).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test]
async fn versions_are_kept_and_workflows_stay_locked_to_theirs() {
    let t = support::db().await;
    let v1 =
        "name: vWF\nsteps:\n  - name: a\n    statuses: [HELD]\n  - name: b\n    prereqs: [a]\n";
    let v2 = "name: vWF\nsteps:\n  - name: a\n  - name: c\n    prereqs: [a]\n";
    support::load(&t.store, "v.yaml", v1).await;
    t.store
        .workflow_start(&workdo::store::StartRequest::new("vWF", &["obj:old"]))
        .await
        .unwrap();
    support::load(&t.store, "v.yaml", v2).await;
    // Loading the same source again adds no version.
    let (_, saved) = t
        .store
        .template_save(&support::template("v.yaml", v2))
        .await
        .unwrap();
    assert_eq!(saved, workdo::store::Saved::Unchanged);
    let current = t.store.template_current("vWF").await.unwrap();
    assert_eq!(current.versions, 2);
    assert_eq!(current.sha256, workdo::model::template::sha256_hex(v2));
    t.store
        .workflow_start(&workdo::store::StartRequest::new("vWF", &["obj:new"]))
        .await
        .unwrap();
    let steps = |o: &'static str| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "select name from workdo.steps where object_id = $1 order by id",
            )
            .bind(o)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(steps("obj:old").await, vec!["a", "b"]);
    assert_eq!(steps("obj:new").await, vec!["a", "c"]);
    // Loading the older source again says it made that version current again, and when that
    // version was first loaded.
    let first = t
        .store
        .template_by_id(
            sqlx::query_scalar::<_, i64>(
                "select id from workdo.templates where name = 'vWF' order by id limit 1",
            )
            .fetch_one(t.pool())
            .await
            .unwrap(),
        )
        .await
        .unwrap();
    let (_, saved) = t
        .store
        .template_save(&support::template("v.yaml", v1))
        .await
        .unwrap();
    assert_eq!(
        saved,
        workdo::store::Saved::MadeCurrent {
            loaded_at: first.loaded_at
        }
    );
    assert_eq!(
        t.store.template_current("vWF").await.unwrap().sha256,
        workdo::model::template::sha256_hex(v1)
    );
    // The old workflow still answers to its own version's declared statuses.
    t.store
        .step_set(&workdo::store::SetRequest::new(
            "obj:old", "vWF", "a", "HELD",
        ))
        .await
        .expect("v1 declares HELD");
    assert!(
        t.store
            .step_set(&workdo::store::SetRequest::new(
                "obj:new", "vWF", "a", "HELD"
            ))
            .await
            .is_err(),
        "v2 does not"
    );
}

#[test]
fn a_warm_pool_gets_four_calls_per_process_unless_the_step_says() {
    let yaml = "name: w\nsteps:\n  - { name: a, function: { warm: fn, pool: 3 } }\n  - { name: b, function: { warm: fn, pool: 3, concurrency: 2 } }\n  - { name: c, function: { exec: fn } }\n  - { name: d, function: { warm: fn, pool: 2, pipeline: 8 } }\n";
    let t = parse("w.yaml", Format::Yaml, yaml).unwrap_or_else(|e| panic!("{e}"));
    let c: Vec<u32> = t
        .template
        .steps
        .iter()
        .map(|s| s.function.as_ref().map_or(0, |f| f.concurrency))
        .collect();
    assert_eq!(
        c,
        vec![12, 2, 1, 16],
        "a deeper pipeline fills every process's"
    );
    let xml = r#"<workflow-def id="w" repository="dor"><process name="a"><function warm="fn" pool="2"/></process><process name="b"><function warm="fn" pool="2" pipeline="6"/></process></workflow-def>"#;
    let t = parse("w.xml", Format::Xml, xml).unwrap_or_else(|e| panic!("{e}"));
    let f: Vec<(u32, Option<u32>)> = t
        .template
        .steps
        .iter()
        .filter_map(|s| s.function.as_ref())
        .map(|f| {
            let pipeline = match f.runner {
                Runner::Warm { pipeline, .. } => Some(pipeline),
                _ => None,
            };
            (f.concurrency, pipeline)
        })
        .collect();
    assert_eq!(f, vec![(8, Some(1)), (12, Some(6))]);
}

#[test]
fn a_large_xml_template_loads_and_names_lines_deep_in_it() {
    // 20,000 processes took 25–30 s to load when each line number was found by scanning from
    // the start; the lines must still be right at the end of a large file.
    let mut src = String::from("<workflow-def id=\"bigWF\">\n");
    for i in 0..20_000 {
        src.push_str(&format!("  <process name=\"p{i}\"/>\n"));
    }
    src.push_str(
        "  <process name=\"last\">\n    <prereq>nope</prereq>\n  </process>\n</workflow-def>\n",
    );
    assert_eq!(
        one("big.xml", &src),
        r#"big.xml:20003: prereq: unknown prerequisite "nope" of step "last": no step of that name in bigWF"#
    );
    let ok = src.replace("<prereq>nope</prereq>", "<prereq>p19999</prereq>");
    let loaded = support::template("big.xml", &ok);
    assert_eq!(loaded.template.steps.len(), 20_001);
}

#[test]
fn dispatch_rules_are_checked_when_loading_all_at_once() {
    let yaml = r#"name: badDispatchWF
steps:
  - name: look
    observe:
      document: content
      rules:
        - { match: "//file[", op: add, generator: gen, bricklets: [a] }
        - { match: "//file", op: add, generator: nope, bricklets: [a] }
        - { match: "//file", op: merge, generator: gen, bricklets: [zz] }
        - { match: "//file", op: undo, generator: gen, bricklets: [a] }
  - name: gen
    prereqs: [look]
    generate:
      refset: [a, b]
      rules:
        - before: [a, b]
        - before: [b, a]
        - sequence: a
        - parallel: a
        - parallel: c
bricklets:
  - { name: a, steps: [{ name: run }] }
  - { name: b, steps: [{ name: run, prereqs: [nothere] }] }
"#;
    let p = problems("d.yaml", yaml);
    let all = p.join("\n");
    for expected in [
        "match: rule 1: \"//file[\": not an XPath 1.0 expression",
        "generator: rule 2: \"nope\" is not a generator step of badDispatchWF",
        "bricklets: rule 3: bricklet \"zz\" is not in the refset of gen",
        "bricklets: rule 4: undo of \"a\", which names no compensate",
        "rules: \"a\" is expanded both by sequence and by parallel: choose one",
        "rules: parallel: \"c\" is not in the refset",
        "rules: before rules form a cycle: a -> b -> a",
        "bricklets: b: prereq: unknown prerequisite \"nothere\"",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    // Each names the file and a line.
    assert!(p.iter().all(|x| x.starts_with("d.yaml:")), "{all}");
}

#[tokio::test]
async fn a_refset_naming_an_unloaded_bricklet_file_is_refused_when_saved() {
    let t = support::db().await;
    let yaml = "name: needsWF\nsteps:\n  - name: gen\n    generate: { refset: [ext-md] }\n";
    let err = t
        .store
        .template_save(&support::template("needs.yaml", yaml))
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("neither defined in it nor loaded: ext-md"),
        "{err}"
    );
    // Loaded as a bricklet file first, the same template saves.
    support::load(
        &t.store,
        "ext-md.yaml",
        "kind: bricklet\nname: ext-md\nsteps:\n  - name: extract\n    function: { builtin: noop }\n",
    )
    .await;
    t.store
        .template_save(&support::template("needs.yaml", yaml))
        .await
        .expect("saved once the bricklet is loaded");
    // A bricklet is not a template: it cannot be started, and a template cannot take its name.
    assert!(t.store.template_current("ext-md").await.is_err());
    let clash = t
        .store
        .template_save(&support::template(
            "clash.yaml",
            "name: ext-md\nsteps:\n  - name: a\n",
        ))
        .await
        .expect_err("refused");
    assert!(
        clash.to_string().contains("is a bricklet already"),
        "{clash}"
    );
}
