//! Listing 1, the change operations and the rules on documents.

use super::*;
use crate::model::spec::StepSpec;

fn set(items: &[(&str, u32)]) -> Actset {
    items.iter().map(|(b, n)| (b.to_string(), *n)).collect()
}

fn before(a: &str, b: &str) -> Construction {
    Construction::Before([a.into(), b.into()])
}

fn edges(g: &Graph) -> Vec<(String, String)> {
    g.labelled_edges()
}

fn e(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn the_papers_example_composes_to_figure_3d() {
    // R2 = {b1 ≺ b2, b3 ≺ b4, b4 ≺ b5, b1 sequential, b4 parallel, b6 parallel}; two
    // fragments for b1, b4 and b6.
    let rules = vec![
        before("b1", "b2"),
        before("b3", "b4"),
        before("b4", "b5"),
        Construction::Sequence("b1".into()),
        Construction::Parallel("b4".into()),
        Construction::Parallel("b6".into()),
    ];
    let actset = set(&[
        ("b1", 2),
        ("b2", 2),
        ("b3", 2),
        ("b4", 2),
        ("b5", 2),
        ("b6", 2),
    ]);
    let g = compose(&actset, &rules);
    assert_eq!(g.nodes.len(), 9);
    assert_eq!(
        edges(&g),
        vec![
            e("b1#1", "b1#2"),
            e("b1#2", "b2#1"),
            e("b3#1", "b4#1"),
            e("b3#1", "b4#2"),
            e("b4#1", "b5#1"),
            e("b4#2", "b5#1"),
        ]
    );
}

#[test]
fn before_applies_only_when_both_are_active() {
    let g = compose(&set(&[("a", 1)]), &[before("a", "b")]);
    assert!(g.edges.is_empty());
    assert_eq!(g.nodes.len(), 1);
}

#[test]
fn sequence_enters_at_its_first_and_leaves_at_its_last() {
    let rules = vec![
        before("p", "s"),
        before("s", "q"),
        Construction::Sequence("s".into()),
    ];
    let g = compose(&set(&[("p", 1), ("s", 3), ("q", 1)]), &rules);
    assert_eq!(
        edges(&g),
        vec![
            e("p#1", "s#1"),
            e("s#1", "s#2"),
            e("s#2", "s#3"),
            e("s#3", "q#1")
        ]
    );
}

#[test]
fn parallel_instances_keep_every_edge_and_meet_a_sequence() {
    // A parallel bricklet before a sequential one, and after one: every parallel instance
    // feeds the sequence's first instance and follows the other's last.
    let rules = vec![
        before("s", "p"),
        before("p", "t"),
        Construction::Sequence("s".into()),
        Construction::Parallel("p".into()),
        Construction::Sequence("t".into()),
    ];
    let g = compose(&set(&[("s", 2), ("p", 3), ("t", 2)]), &rules);
    assert_eq!(
        edges(&g),
        vec![
            e("p#1", "t#1"),
            e("p#2", "t#1"),
            e("p#3", "t#1"),
            e("s#1", "s#2"),
            e("s#2", "p#1"),
            e("s#2", "p#2"),
            e("s#2", "p#3"),
            e("t#1", "t#2"),
        ]
    );
}

#[test]
fn a_bricklet_without_an_expansion_rule_is_one_vertex_whatever_its_count() {
    let g = compose(&set(&[("a", 5)]), &[]);
    assert_eq!(
        g.nodes,
        vec![Node {
            bricklet: "a".into(),
            instance: 1
        }]
    );
}

#[test]
fn an_empty_activation_set_composes_an_empty_subnet() {
    assert_eq!(
        compose(&Actset::new(), &[before("a", "b")]),
        Graph::default()
    );
}

#[test]
fn operations_change_the_activation_set() {
    let comp = |b: &str| (b == "video").then(|| "unvideo".to_string());
    let m = |op, bricklets: &[&str], fragments| RuleMatch {
        rule: 0,
        op,
        generator: "g".into(),
        bricklets: bricklets.iter().map(|s| s.to_string()).collect(),
        fragments,
        matched: Vec::new(),
        present: None,
    };
    let mut a = Actset::new();
    apply(&mut a, &m(Op::Add, &["video", "text"], 2), &comp);
    apply(&mut a, &m(Op::Add, &["video"], 1), &comp);
    assert_eq!(a, set(&[("text", 2), ("video", 3)]));
    apply(&mut a, &m(Op::Merge, &["text", "image"], 4), &comp);
    assert_eq!(a, set(&[("image", 4), ("text", 2), ("video", 3)]));
    apply(&mut a, &m(Op::Delete, &["text"], 1), &comp);
    apply(&mut a, &m(Op::Undo, &["video"], 1), &comp);
    assert_eq!(a, set(&[("image", 4), ("unvideo", 1), ("video", 3)]));
    // A rule that matched nothing changes nothing.
    apply(&mut a, &m(Op::Delete, &["video"], 0), &comp);
    assert!(a.contains_key("video"));
}

#[test]
fn rules_count_fragments_on_the_document() {
    let obs = Observe {
        document: "content".into(),
        watch: false,
        rules: vec![
            MatchRule {
                xpath: "//file[@type='image']".into(),
                op: Op::Add,
                generator: "g".into(),
                bricklets: vec!["img".into()],
            },
            MatchRule {
                xpath: "not(//file[@type='audio'])".into(),
                op: Op::Add,
                generator: "g".into(),
                bricklets: vec!["silent".into()],
            },
            MatchRule {
                xpath: "count(//file)".into(),
                op: Op::Add,
                generator: "g".into(),
                bricklets: vec!["all".into()],
            },
        ],
    };
    let doc = "<content><file type='image'/><file type='image'/><file type='pdf'/></content>";
    let found: Vec<u32> = observe(&obs, doc)
        .expect("evaluates")
        .iter()
        .map(|m| m.fragments)
        .collect();
    assert_eq!(found, vec![2, 1, 3]);
    // The same document saved with a byte order mark, as many editors write it.
    let with_bom = format!("\u{feff}{doc}");
    let found: Vec<u32> = observe(&obs, &with_bom)
        .expect("a byte order mark opens a document")
        .iter()
        .map(|m| m.fragments)
        .collect();
    assert_eq!(found, vec![2, 1, 3]);
    // Nested as deep as an observer reads, and one deeper.
    let nested = |n: usize| {
        format!(
            "{}<file type='image'/>{}",
            "<d>".repeat(n - 1),
            "</d>".repeat(n - 1)
        )
    };
    let found = observe(&obs, &nested(MAX_OBSERVED_DEPTH)).expect("as deep as allowed");
    assert_eq!(found[0].fragments, 1);
    let err = observe(&obs, &nested(MAX_OBSERVED_DEPTH + 1)).expect_err("too deep");
    assert!(err.contains("more than 256 deep"), "{err}");
    let err = observe(&obs, &nested(200_000)).expect_err("far too deep");
    assert!(err.contains("more than 256 deep"), "{err}");
    // A DOCTYPE without an XML declaration is well-formed XML (the parser wanted one).
    let found: Vec<u32> = observe(&obs, &format!("<!DOCTYPE content>{doc}"))
        .expect("a DOCTYPE opens a document")
        .iter()
        .map(|m| m.fragments)
        .collect();
    assert_eq!(found, vec![2, 1, 3]);
    let err = observe(&obs, "<content>").expect_err("malformed");
    assert!(err.contains("not well-formed XML"), "{err}");
    assert!(check_xpath("//a[").is_err());
    assert!(check_xpath("//a[@b='c']").is_ok());
}

#[test]
fn expansion_names_steps_and_links_bricklets_last_to_first() {
    let step = |name: &str, prereqs: &[&str]| StepSpec {
        prereqs: prereqs.iter().map(|s| s.to_string()).collect(),
        ..StepSpec::named(name)
    };
    let mut bricklets = BTreeMap::new();
    bricklets.insert(
        "a".to_string(),
        Bricklet {
            name: "a".into(),
            compensate: None,
            steps: vec![step("x", &[]), step("y", &["x"])],
        },
    );
    bricklets.insert(
        "b".to_string(),
        Bricklet {
            name: "b".into(),
            compensate: None,
            steps: vec![step("z", &[])],
        },
    );
    let g = compose(
        &set(&[("a", 1), ("b", 2)]),
        &[before("a", "b"), Construction::Parallel("b".into())],
    );
    let steps = expand("gen", &g, &bricklets);
    let shown: Vec<(String, Vec<String>)> = steps
        .iter()
        .map(|s| (s.name.clone(), s.prereqs.clone()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("gen/a#1/x".to_string(), vec![]),
            ("gen/a#1/y".to_string(), vec!["gen/a#1/x".to_string()]),
            ("gen/b#1/z".to_string(), vec!["gen/a#1/y".to_string()]),
            ("gen/b#2/z".to_string(), vec!["gen/a#1/y".to_string()]),
        ]
    );
    assert_eq!(sinks(&steps), vec!["gen/b#1/z", "gen/b#2/z"]);
}

#[test]
fn cycles_among_before_rules_are_found() {
    let refset: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    assert_eq!(
        before_cycle(
            &refset,
            &[before("a", "b"), before("b", "c"), before("c", "a")]
        ),
        Some("a -> b -> c -> a".into())
    );
    assert_eq!(
        before_cycle(&refset, &[before("a", "b"), before("a", "c")]),
        None
    );
}

#[test]
fn entity_bombs_and_doctype_tricks_are_refused_not_expanded() {
    let obs = Observe {
        document: "d".into(),
        watch: false,
        rules: vec![MatchRule {
            xpath: "//a".into(),
            op: Op::Add,
            generator: "g".into(),
            bricklets: vec!["b".into()],
        }],
    };
    let bomb = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\"><!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">]><a>&lol3;</a>";
    let started = std::time::Instant::now();
    let result = observe(&obs, bomb);
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    match result {
        Err(e) => assert!(e.contains("not well-formed XML"), "{e}"),
        // A parser that ignores the DTD must not have expanded it either.
        Ok(m) => assert_eq!(m[0].fragments, 1),
    }
    // An external entity is never fetched: the document is refused.
    let external = "<!DOCTYPE a [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><a>&x;</a>";
    assert!(observe(&obs, external).is_err());
}

/// Counts saturate instead of wrapping: 4294967295 fragments and 2 more are still too many
/// (the subnet's size limit refuses them), never 1.
#[test]
fn fragment_counts_saturate() {
    let mut actset = Actset::new();
    let m = |fragments| RuleMatch {
        rule: 0,
        op: Op::Add,
        generator: "g".into(),
        bricklets: vec!["b".into()],
        fragments,
        matched: Vec::new(),
        present: None,
    };
    apply(&mut actset, &m(u32::MAX), &|_| None);
    apply(&mut actset, &m(2), &|_| None);
    assert_eq!(actset.get("b"), Some(&u32::MAX));
}

/// A document over the observer's size limit is refused by its size, before it is parsed.
#[test]
fn an_observed_document_has_a_size_limit() {
    let obs = Observe {
        document: "contentMetadata".into(),
        watch: false,
        rules: vec![],
    };
    let big = format!("<a>{}</a>", "x".repeat(MAX_OBSERVED_BYTES));
    let e = observe(&obs, &big).expect_err("too big");
    assert!(e.contains("over the 8 MiB an observer reads"), "{e}");
}

#[test]
fn fragments_follow_the_operations_instance_by_instance() {
    let m = |op: Op, bricklets: &[&str], matched: &[&str]| RuleMatch {
        rule: 0,
        op,
        generator: "g".into(),
        bricklets: bricklets.iter().map(|b| b.to_string()).collect(),
        fragments: matched.len() as u32,
        matched: matched.iter().map(|x| Some(x.to_string())).collect(),
        present: None,
    };
    let mut f = Fragments::new();
    let comp = |b: &str| (b == "audio").then(|| "purge".to_string());
    apply_fragments(
        &mut f,
        &m(Op::Add, &["audio"], &["<a n='1'/>", "<a n='2'/>"]),
        &comp,
    );
    apply_fragments(&mut f, &m(Op::Add, &["audio"], &["<a n='3'/>"]), &comp);
    apply_fragments(&mut f, &m(Op::Merge, &["audio"], &["<x/>"]), &comp);
    assert_eq!(
        f["audio"],
        [
            Some("<a n='1'/>".into()),
            Some("<a n='2'/>".into()),
            Some("<a n='3'/>".into())
        ]
    );
    apply_fragments(&mut f, &m(Op::Undo, &["audio"], &["<r/>"]), &comp);
    assert_eq!(f["purge"], [Some("<r/>".into())]);
    apply_fragments(&mut f, &m(Op::Delete, &["audio"], &["<d/>"]), &comp);
    assert!(!f.contains_key("audio"));
    // A count with no nodes (a number or boolean match) gives instances without fragments.
    let mut counted = m(Op::Add, &["video"], &[]);
    counted.fragments = 2;
    apply_fragments(&mut f, &counted, &comp);
    assert_eq!(f["video"], [None, None]);
}

#[test]
fn an_observation_keeps_each_matched_node_as_xml() {
    let obs = Observe {
        document: "d".into(),
        watch: false,
        rules: vec![MatchRule {
            xpath: "//*[local-name()='file'][@kind='audio']".into(),
            op: Op::Add,
            generator: "g".into(),
            bricklets: vec!["audio".into()],
        }],
    };
    let doc = r#"<c xmlns:m="urn:m"><m:file kind="audio" n="1">a &amp; b<m:part/></m:file><m:file kind="video"/><m:file kind="audio" n="2"/></c>"#;
    let found = observe(&obs, doc);
    let found = found.expect("observed");
    assert_eq!(found[0].fragments, 2);
    let first = found[0].matched[0].clone().unwrap_or_default();
    assert!(
        first.starts_with("<m:file xmlns:m=\"urn:m\"")
            && first.contains("kind=\"audio\"")
            && first.ends_with(">a &amp; b<m:part/></m:file>"),
        "{first}"
    );
    let second = found[0].matched[1].clone().unwrap_or_default();
    assert!(
        second.contains("n=\"2\"") && second.ends_with("/>"),
        "{second}"
    );
}

#[test]
fn an_undeclared_prefix_is_an_error_not_a_panic() {
    let obs = Observe {
        document: "d".into(),
        watch: false,
        rules: vec![MatchRule {
            xpath: "//m:file".into(),
            op: Op::Add,
            generator: "g".into(),
            bricklets: vec!["audio".into()],
        }],
    };
    let e = observe(&obs, r#"<c xmlns:m="urn:m"><m:file/></c>"#).expect_err("no namespaces");
    assert!(e.contains("rule 1") && e.contains("local-name()"), "{e}");
}

#[test]
fn nesting_is_measured_by_tags_not_by_what_looks_like_them() {
    // Each document nests exactly 3 deep; what else it holds must not count.
    for doc in [
        "<a><b><c/></b></a>",
        "<?xml version='1.0'?><!DOCTYPE a [ <!ELEMENT a ANY> <!ENTITY e '<x><y>'> ]><a><b><c></c></b></a>",
        "<a><!-- <x><y><z> --><b x='>' y=\"/>\" z='<q>'><c>t<![CDATA[<x><y><z>]]></c></b></a>",
        "<a><?pi <x><y>?><b><c/><c/><c></c></b><b/></a>",
        "<a>\n  <b>\n    <c attr='v'\n       other='w' />\n  </b>\n</a>\n",
    ] {
        assert_eq!(nests_deeper(doc, 3), Nesting::Within, "{doc}");
        assert_eq!(nests_deeper(doc, 2), Nesting::Deeper, "{doc}");
    }
    assert_eq!(nests_deeper("", 0), Nesting::Within);
    assert_eq!(nests_deeper("plain text", 0), Nesting::Within);
    let deep = "<d>".repeat(200_000);
    assert_eq!(nests_deeper(&deep, MAX_OBSERVED_DEPTH), Nesting::Deeper);
    // Found by a review: a DOCTYPE subset the parser ends at its first `]` whatever it holds
    // (a second `[`, a quote in a comment) must not hide what follows from the scan.
    for prefix in [
        "<!DOCTYPE r [[]>",
        "<!DOCTYPE r [<!-- don't -->]>",
        "<!DOCTYPE r [ \" ]>",
    ] {
        let doc = format!("{prefix}{deep}");
        assert_eq!(
            nests_deeper(&doc, MAX_OBSERVED_DEPTH),
            Nesting::Deeper,
            "{prefix}"
        );
    }
    // Markup left open is not measured, whatever follows: never "within".
    for open in [
        "<a><b",
        "<!-- <a>",
        "<![CDATA[ <a>",
        "<?pi <a>",
        "<!DOCTYPE r [ <a>",
        "<a x='>",
    ] {
        assert_eq!(nests_deeper(open, 10), Nesting::Unclosed, "{open}");
    }
    assert_eq!(nests_deeper("</a></b><c/>", 1), Nesting::Within);
}

/// Seed 001's undo counts fragments removed since the first observation, not those matched now.
#[test]
fn undo_counts_the_fragments_that_went_away() {
    let undo = |matched: &[&str]| RuleMatch {
        rule: 3,
        op: Op::Undo,
        generator: "g".into(),
        bricklets: vec!["audio".into()],
        fragments: matched.len() as u32,
        matched: matched.iter().map(|x| Some(x.to_string())).collect(),
        present: None,
    };
    // First observation: two recordings; nothing removed, nothing to compensate.
    let first = undo_removals(&[], &[undo(&["<a n='1'/>", "<a n='2'/>"])]);
    assert_eq!((first[0].fragments, first[0].matched.len()), (0, 0));
    // One recording deleted: one compensation, with the fragment that went away.
    let second = undo_removals(&first, &[undo(&["<a n='2'/>"])]);
    assert_eq!(second[0].fragments, 1);
    assert_eq!(second[0].matched, vec![Some("<a n='1'/>".to_string())]);
    // Nothing changes: the compensation stays (the activation set is recomputed each time).
    let third = undo_removals(&second, &[undo(&["<a n='2'/>"])]);
    assert_eq!(third[0].fragments, 1);
    // A new recording added, the last old one removed: one more.
    let fourth = undo_removals(&third, &[undo(&["<a n='3'/>"])]);
    assert_eq!(fourth[0].fragments, 2);
    // A rule that counts (a boolean): a count that falls.
    let mut yes = undo(&[]);
    yes.fragments = 1;
    let mut no = undo(&[]);
    no.fragments = 0;
    let a = undo_removals(&[], &[yes]);
    let b = undo_removals(&a, &[no]);
    assert_eq!(b[0].fragments, 1);
    // Other rules pass as they are.
    let mut add = undo(&["<a/>"]);
    add.op = Op::Add;
    assert_eq!(undo_removals(&[], std::slice::from_ref(&add)), vec![add]);
}

/// Fragments over the size limits are kept as `None`: such a rule is compared by count, never
/// by text, so a kept fragment turning `None` is no removal.
#[test]
fn undo_compares_counts_when_a_fragment_was_not_kept() {
    let undo = |matched: Vec<Option<String>>| RuleMatch {
        rule: 0,
        op: Op::Undo,
        generator: "g".into(),
        bricklets: vec!["audio".into()],
        fragments: matched.len() as u32,
        matched,
        present: None,
    };
    let first = undo_removals(&[], &[undo(vec![Some("<a/>".into()), Some("<b/>".into())])]);
    let second = undo_removals(&first, &[undo(vec![None, None])]);
    assert_eq!(second[0].fragments, 0, "the same two, only not kept");
    let third = undo_removals(&second, &[undo(vec![None])]);
    assert_eq!(third[0].fragments, 1, "one fewer: one removed");
}
