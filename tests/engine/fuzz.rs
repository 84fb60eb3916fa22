//! Property tests over what users and functions hand workdo: template files (YAML and XML),
//! schedules files and function results. Whatever the bytes, parsing never panics, and every
//! failure is an error that names the file (or says what was wrong with the answer).

use proptest::prelude::*;
use workdo::invoke::parse_result;
use workdo::model::schedule;
use workdo::model::template::{self, Format};

const YAML: &str = "name: fuzzWF\nsteps:\n  - name: a\n    function: { builtin: noop, timeout: 5s }\n  - name: b\n    prereqs: [a]\n    lifecycle: released\n";
const XML: &str = "<workflow-def id=\"fuzzWF\" repository=\"dor\">\n  <process name=\"a\" status=\"completed\"/>\n  <process name=\"b\" lifecycle=\"released\"><prereq>a</prereq></process>\n</workflow-def>\n";
const SCHEDULES: &str = "schedules:\n  - name: nightly\n    cron: \"0 0 3 * * *\"\n    start: fuzzWF\n    objects: { ids: [druid:bb123cd4567] }\n";
const RESULT: &str =
    r#"{"status":"completed","note":"n","object":{"properties":{"a":1}},"context":{"k":"v"}}"#;

/// `base` with `insert` put in at `at` (a char boundary at or before it).
fn mutate(base: &str, at: usize, insert: &str) -> String {
    let mut at = at % (base.len() + 1);
    while !base.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}{insert}{}", &base[..at], &base[at..])
}

fn template_errors_name_the_file(origin: &str, format: Format, source: &str) {
    if let Err(e) = template::parse(origin, format, source) {
        let text = e.to_string();
        assert!(text.contains(origin), "{text}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn yaml_templates_never_panic(source in "\\PC{0,400}") {
        template_errors_name_the_file("f.yaml", Format::Yaml, &source);
    }

    #[test]
    fn mutated_yaml_templates_never_panic(at in 0usize..400, insert in "[\\x00-\\x7f]{0,12}|\\PC{0,6}") {
        template_errors_name_the_file("f.yaml", Format::Yaml, &mutate(YAML, at, &insert));
    }

    #[test]
    fn xml_templates_never_panic(source in "\\PC{0,400}") {
        template_errors_name_the_file("f.xml", Format::Xml, &source);
    }

    #[test]
    fn mutated_xml_templates_never_panic(at in 0usize..400, insert in "[\\x00-\\x7f]{0,12}|\\PC{0,6}") {
        template_errors_name_the_file("f.xml", Format::Xml, &mutate(XML, at, &insert));
    }

    #[test]
    fn mutated_schedules_never_panic(at in 0usize..200, insert in "[\\x00-\\x7f]{0,12}|\\PC{0,6}") {
        if let Err(e) = schedule::parse_file("s.yaml", &mutate(SCHEDULES, at, &insert)) {
            prop_assert!(e.to_string().contains("s.yaml"));
        }
    }

    #[test]
    fn function_results_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Err(e) = parse_result(&bytes) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn mutated_results_never_panic_and_nothing_unstorable_passes(at in 0usize..120, insert in "[\\x00-\\x7f]{0,8}|\\\\u0000") {
        let text = mutate(RESULT, at, &insert);
        if let Ok(o) = parse_result(text.as_bytes()) {
            // Whatever was accepted holds no NUL anywhere.
            let json = serde_json::to_string(&o).unwrap_or_default();
            prop_assert!(!json.contains("\\u0000"), "{json}");
        }
    }
}

/// Malformed inputs found by hand or by an adversary, kept as regression cases.
#[test]
fn known_malformed_inputs_are_clear_errors() {
    let cases: [(&str, Format, &str, &str); 4] = [
        (
            "nul.yaml",
            Format::Yaml,
            "name: \"x\\0y\"\nsteps: []\n",
            "nul.yaml",
        ),
        ("empty.xml", Format::Xml, "", "nul"),
        ("root.xml", Format::Xml, "<workflow/>", "root.xml"),
        ("tabs.yaml", Format::Yaml, "name:\tx\n\tsteps:", "tabs.yaml"),
    ];
    for (origin, format, source, _) in cases {
        template_errors_name_the_file(origin, format, source);
    }
    // A NUL anywhere in a template is refused, naming the field.
    let nul = "name: nulWF\nsteps:\n  - name: a\n    lifecycle: \"x\\0y\"\n";
    let e = template::parse("nul.yaml", Format::Yaml, nul)
        .expect_err("a NUL in a lifecycle")
        .to_string();
    assert!(
        e.contains("nul.yaml") && e.contains("lifecycle") && e.contains("NUL"),
        "{e}"
    );
    for bad in [
        &b"{\"status\":\"completed\",\"note\":\"a\\u0000b\"}"[..],
        &b"\xff\xfe"[..],
        &b"{\"status\":\"defer\",\"seconds\":1e999}"[..],
    ] {
        assert!(
            parse_result(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}
