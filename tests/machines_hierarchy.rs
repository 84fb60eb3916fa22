//! Machines in hierarchies (seed 002): three generations — a parent machine forks two child
//! machines, each forks a step workflow. A parent signals its children; a child that ends tells
//! its parent (`child_done`), whose guard can count the children still running (a join); a
//! parent that reaches a final state cancels what still runs below it, grandchildren included.

mod support;

use serde_json::json;
use support::db;
use support::machines::{job, send, state};
use workdo::store::SetRequest;

const GRAND: &str = "name: grandWF\nsteps:\n  - { name: a }\n";

const CHILD: &str = r#"
name: childWF
kind: machine
initial: Open
states:
  Open:
    enter:
      - fork: { template: grandWF, object: "${grand}" }
    on:
      poke: { to: Open, internal: true, actions: [ { set: { poked: "${signal.actor}" } } ] }
      child_done: Done
  Done: { final: true }
"#;

const PARENT: &str = r#"
name: parentWF
kind: machine
initial: Running
states:
  Running:
    enter:
      - fork: { template: childWF, object: "obj:h-c1", context: { grand: "obj:h-g1" } }
      - fork: { template: childWF, object: "obj:h-c2", context: { grand: "obj:h-g2" } }
    on:
      poke-all: { to: Running, internal: true, actions: [ { signal-children: poke } ] }
      child_done:
        to: Running
        internal: true
        actions:
          - set: { left: "${children.running}", last: "${signal.data.template}:${signal.data.state}" }
      finish:
        to: Finished
        actions:
          - fail: { when: "children.running > 0", message: "${children.running} children still running" }
      withdraw: Withdrawn
  Finished: { final: true }
  Withdrawn: { final: true }
"#;

async fn workflow(t: &support::TestDb, object: &str) -> (i64, Option<i64>, String) {
    sqlx::query_as("select id, parent_id, status from workdo.workflows where object_id = $1")
        .bind(object)
        .fetch_one(t.pool())
        .await
        .expect("workflow")
}

#[tokio::test]
async fn three_generations_signal_join_and_cancel() {
    let t = db().await;
    support::load(&t.store, "grand.yaml", GRAND).await;
    support::load(&t.store, "child.yaml", CHILD).await;
    support::load(&t.store, "parent.yaml", PARENT).await;
    let parent = job(&t, "parentWF", "obj:h-p").await;
    let (c1, c1_parent, _) = workflow(&t, "obj:h-c1").await;
    let (c2, c2_parent, _) = workflow(&t, "obj:h-c2").await;
    let (_, g1_parent, _) = workflow(&t, "obj:h-g1").await;
    let (g2, g2_parent, _) = workflow(&t, "obj:h-g2").await;
    assert_eq!(
        (c1_parent, c2_parent, g1_parent, g2_parent),
        (Some(parent), Some(parent), Some(c1), Some(c2))
    );

    // A parent signals its children; they take it from their inboxes.
    send(&t, parent, "poke-all").await.expect("poke-all");
    t.store.machine_inbox_run(100).await.expect("inboxes");
    assert_eq!(
        state(&t, c1).await.1["poked"],
        json!(format!("parent:{parent}"))
    );
    assert_eq!(
        state(&t, c2).await.1["poked"],
        json!(format!("parent:{parent}"))
    );

    // A grandchild (a step workflow) completes: its parent hears child_done and ends; that
    // parent's end reaches the top, whose guard now counts one child still running.
    t.store
        .step_set(&SetRequest::new("obj:h-g1", "grandWF", "a", "completed"))
        .await
        .expect("complete g1's step");
    t.store.machine_inbox_run(100).await.expect("inboxes");
    t.store.machine_inbox_run(100).await.expect("inboxes");
    assert_eq!(state(&t, c1).await.0, "Done");
    let (s, vars) = state(&t, parent).await;
    assert_eq!(
        (s.as_str(), &vars["left"], &vars["last"]),
        ("Running", &json!(1), &json!("childWF:Done"))
    );
    let err = send(&t, parent, "finish")
        .await
        .expect_err("not joined yet");
    assert!(
        err.to_string().contains("1 children still running"),
        "{err}"
    );

    // Withdrawn while c2 and its grandchild still run: both are cancelled with it.
    let done = send(&t, parent, "withdraw").await.expect("withdraw");
    assert!(done.finished);
    let (_, _, c2_status) = workflow(&t, "obj:h-c2").await;
    let (_, _, g2_status) = workflow(&t, "obj:h-g2").await;
    assert_eq!(
        (c2_status.as_str(), g2_status.as_str()),
        ("completed", "completed")
    );
    let c2_record: serde_json::Value =
        sqlx::query_scalar("select machine from workdo.workflows where id = $1")
            .bind(c2)
            .fetch_one(t.pool())
            .await
            .expect("record");
    assert_eq!(
        (&c2_record["state"], &c2_record["cancelled"]),
        (&json!("Open"), &json!(true))
    );
    let g2_step = support::step(t.pool(), "obj:h-g2", "a").await;
    assert_eq!(g2_step.status, "skipped");
    let kinds: Vec<String> = sqlx::query_scalar(
        "select kind from workdo.events where workflow_id = any($1) order by id",
    )
    .bind(vec![parent, c2, g2])
    .fetch_all(t.pool())
    .await
    .expect("events");
    for k in ["children_cancelled", "job_cancelled", "skipped"] {
        assert!(kinds.iter().any(|e| e == k), "no {k} in {kinds:?}");
    }
    // The ends of c2 and g2 told their (finished) parents nothing they had to refuse aloud.
    t.store.machine_inbox_run(100).await.expect("inboxes");
    let refused: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'signal_refused'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(refused, 0);
}

#[tokio::test]
async fn keep_children_leaves_them_running() {
    let t = db().await;
    support::load(&t.store, "grand.yaml", GRAND).await;
    support::load(&t.store, "child.yaml", CHILD).await;
    support::load(
        &t.store,
        "parent.yaml",
        &PARENT.replace("initial: Running", "initial: Running\nkeep-children: true"),
    )
    .await;
    let parent = job(&t, "parentWF", "obj:h-p").await;
    send(&t, parent, "withdraw").await.expect("withdraw");
    let (_, _, c1_status) = workflow(&t, "obj:h-c1").await;
    assert_ne!(c1_status, "completed", "a kept child runs on");
}

/// A child that is complete the moment it starts (every step bootstrapped completed) still
/// tells its parent; an ordinary transition back to the same state that sets an alarm keeps it.
#[tokio::test]
async fn a_child_done_at_once_still_tells_its_parent() {
    let t = db().await;
    support::load(
        &t.store,
        "done.yaml",
        "name: doneWF\nsteps:\n  - { name: a, status: completed }\n",
    )
    .await;
    support::load(
        &t.store,
        "p.yaml",
        r#"
name: pWF
kind: machine
initial: Wait
states:
  Wait:
    on:
      go: { to: Wait, actions: [ { fork: { template: doneWF, object: "obj:done1" } } ] }
      again: { to: Wait, actions: [ { alarm: { signal: late, in: 1h } } ] }
      child_done: Done
  Done: { final: true }
"#,
    )
    .await;
    let id = job(&t, "pWF", "obj:p1").await;
    send(&t, id, "again").await.expect("again");
    let armed: i64 = sqlx::query_scalar(
        "select count(*) from workdo.alarms where workflow_id = $1 and fired_at is null and cancelled_at is null",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("alarms");
    assert_eq!(armed, 1, "the alarm set on the way back into Wait stands");
    let done = send(&t, id, "go").await.expect("go");
    t.store.machine_inbox_run(100).await.expect("inbox");
    let (s, _) = state(&t, id).await;
    assert_eq!(
        s, "Done",
        "child_done arrived from a child complete at start: {done:?}"
    );
}
