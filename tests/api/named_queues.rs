//! Queues on object conditions (seed 000's embargo case): `queue --property`, `property=` on
//! both queue APIs, and named queues — defined once, listed, shown, and used by the CLI,
//! `/api/queues/NAME` and `/workflow_queue?queue=NAME`.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};
use support::db;
use workdo::store::{NamedQueue, StartRequest};

#[tokio::test]
async fn queues_filter_by_property_and_can_be_named() {
    let t = db().await;
    support::load(
        &t.store,
        "q.yaml",
        "name: qWF\nsteps:\n  - { name: release }\n  - { name: publish, prereqs: [release] }\n",
    )
    .await;
    for (o, embargoed) in [
        ("obj:q1", Some("true")),
        ("obj:q2", Some("false")),
        ("obj:q3", None),
    ] {
        let mut props = BTreeMap::new();
        if let Some(e) = embargoed {
            props.insert("embargoed".to_string(), json!(e));
            props.insert("pages".to_string(), json!(12));
        }
        t.store
            .object_put(o, &props, &BTreeMap::new(), "t")
            .await
            .expect("object");
    }
    t.store
        .workflow_start(&StartRequest::new("qWF", &["obj:q1", "obj:q2", "obj:q3"]))
        .await
        .expect("start");
    let ids = |rows: Vec<workdo::store::QueueEntry>| -> Vec<String> {
        rows.into_iter().map(|r| r.object_id).collect()
    };
    let all = t
        .store
        .queue_waiting_with("qWF", "release", &[], None, &Value::Null, 100)
        .await
        .expect("queue");
    assert_eq!(ids(all).len(), 3);
    let free = t
        .store
        .queue_waiting_with(
            "qWF",
            "release",
            &[],
            None,
            &json!({"embargoed": "false"}),
            100,
        )
        .await
        .expect("queue");
    assert_eq!(ids(free), ["obj:q2"]);
    let typed = t
        .store
        .queue_waiting_with(
            "qWF",
            "release",
            &[],
            None,
            &json!({"embargoed": "true", "pages": 12}),
            100,
        )
        .await
        .expect("queue");
    assert_eq!(ids(typed), ["obj:q1"]);

    // The CLI's filter, and a named queue defined, listed and shown from it.
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = workdo(&[
        "--json",
        "queue",
        "qWF:release",
        "--property",
        "embargoed=false",
    ]);
    assert!(ok, "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    let (ok, _, stderr) = workdo(&[
        "queues",
        "define",
        "releasable",
        "--waiting",
        "qWF:release",
        "--property",
        "embargoed=false",
    ]);
    assert!(ok, "{stderr}");
    let (ok, stdout, _) = workdo(&["queues", "list"]);
    assert!(
        ok && stdout.contains("releasable") && stdout.contains("qWF:release"),
        "{stdout}"
    );
    let (ok, stdout, _) = workdo(&["queues", "show", "releasable"]);
    assert!(
        ok && stdout.contains("obj:q2") && !stdout.contains("obj:q1"),
        "{stdout}"
    );
    let (ok, _, stderr) = workdo(&["queues", "define", "bad name", "--waiting", "qWF:release"]);
    assert!(!ok && stderr.contains("bad name"), "{stderr}");
    let (ok, _, stderr) = workdo(&["queues", "define", "x", "--waiting", "qWF:nope"]);
    assert!(!ok && stderr.contains("nope"), "{stderr}");
    let (ok, _, stderr) = workdo(&["queues", "show", "missing"]);
    assert!(
        !ok && stderr.contains("there is no queue \"missing\""),
        "{stderr}"
    );

    // Both APIs.
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let named: Value = reqwest::get(format!("{base}/api/queues/releasable"))
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    assert_eq!(named[0]["object_id"], "obj:q2", "{named}");
    let filtered: Value = reqwest::get(format!(
        "{base}/api/queues/qWF/release?property=embargoed=true"
    ))
    .await
    .expect("GET")
    .json()
    .await
    .expect("json");
    assert_eq!(filtered.as_array().map(Vec::len), Some(1), "{filtered}");
    let xml = reqwest::get(format!("{base}/workflow_queue?queue=releasable"))
        .await
        .expect("GET")
        .text()
        .await
        .expect("xml");
    assert_eq!(xml, r#"<objects count="1"><object id="obj:q2"/></objects>"#);
    let missing = reqwest::get(format!("{base}/api/queues/missing"))
        .await
        .expect("GET");
    assert_eq!(missing.status().as_u16(), 404);

    // Redefined, deleted.
    t.store
        .queue_define(&NamedQueue {
            name: "releasable".into(),
            template: "qWF".into(),
            step: "release".into(),
            completed: vec![],
            properties: json!({"embargoed": "true"}),
            lane: None,
        })
        .await
        .expect("redefine");
    let now = t
        .store
        .queue_named_waiting("releasable", 10)
        .await
        .expect("queue");
    assert_eq!(ids(now), ["obj:q1"]);
    let (ok, _, _) = workdo(&["queues", "delete", "releasable"]);
    assert!(ok);
    assert!(t.store.queue_list().await.expect("list").is_empty());
}

/// `workdo worker --queue NAME` works only what the queue lists: the object whose properties
/// match is done, the other, ready at the same step, is left for another worker.
#[tokio::test]
async fn a_worker_on_a_named_queue_takes_only_what_it_lists() {
    let t = db().await;
    support::load(
        &t.store,
        "z.yaml",
        "name: zWF\nsteps:\n  - { name: release, function: { builtin: noop } }\n",
    )
    .await;
    for (o, embargoed) in [("obj:z1", "false"), ("obj:z2", "true")] {
        let mut props = BTreeMap::new();
        props.insert("embargoed".to_string(), json!(embargoed));
        t.store
            .object_put(o, &props, &BTreeMap::new(), "t")
            .await
            .expect("object");
    }
    t.store
        .workflow_start(&StartRequest::new("zWF", &["obj:z1", "obj:z2"]))
        .await
        .expect("start");
    t.store
        .queue_define(&NamedQueue {
            name: "free".into(),
            template: "zWF".into(),
            step: "release".into(),
            completed: vec![],
            properties: json!({"embargoed": "false"}),
            lane: None,
        })
        .await
        .expect("define");
    let mut worker = support::spawn_workdo(
        &t.url,
        &["worker", "--queue", "free", "--poll-interval", "200ms"],
    );
    support::wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:z1'",
        60,
    )
    .await;
    let other = support::step(t.pool(), "obj:z2", "release").await;
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(other.status, "ready", "the embargoed object was left alone");
}
