//! Starts and machines held to their checks and limits: workflows a function's result starts go
//! through the one start path, and machine inputs (signal data, variables, forks) are bounded.

use crate::support;

use serde_json::json;
use support::{db, load};
use workdo::store::StartRequest;

const DOOR: &str = "name: doorWF\nkind: machine\ninitial: Closed\nstates:\n  Closed:\n    on: { open: Open, knock: Closed }\n  Open:\n    on: { close: Closed }\n";

/// A function's result starts workflows through the one start path: a machine started so gets
/// its initial state and takes signals; a bad lane, or the running workflow's own template on
/// its own object, is refused and recorded (the step still completes); an unparseable
/// `start_at` makes the result invalid instead of being dropped.
#[tokio::test]
async fn workflows_started_by_a_result_get_every_check_of_a_start() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    load(&t.store, "door.yaml", DOOR).await;
    let f = support::function_script(
        dir.path(),
        "starter.sh",
        "#!/bin/sh\nevent=$(cat)\ncase \"$event\" in\n  *'\"obj:machine\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\"}]}' ;;\n  *'\"obj:lane\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\",\"lane\":\"no lane at all!\"}]}' ;;\n  *'\"obj:self\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"starterWF\"}]}' ;;\n  *'\"obj:when\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\",\"start_at\":\"next tuesday\"}]}' ;;\nesac\n",
    );
    load(
        &t.store,
        "starter.yaml",
        &format!("name: starterWF\nsteps:\n  - name: a\n    error-limit: 1\n    function: {{ exec: {f} }}\n"),
    )
    .await;
    let mut req = StartRequest::new("starterWF", &[]);
    req.objects = ["obj:machine", "obj:lane", "obj:self", "obj:when"]
        .map(String::from)
        .into();
    t.store.workflow_start(&req).await.expect("start");
    let rt = support::start(&t.store, support::config()).await;
    support::wait_until(
        t.pool(),
        "select bool_and(status in ('completed', 'error')) from workdo.steps where template = 'starterWF'",
        60,
    )
    .await;
    rt.stop().await;
    // The machine started by a result is in its initial state and takes a signal.
    let job = t
        .store
        .machine_job("obj:machine", "doorWF")
        .await
        .expect("a machine job");
    let done = t
        .store
        .machine_signal(job, "open", &json!({}), "test")
        .await
        .expect("it takes signals");
    assert_eq!((done.from.as_str(), done.to.as_str()), ("Closed", "Open"));
    for (object, says) in [
        ("obj:lane", "lane"),
        ("obj:self", "cannot start its own template"),
    ] {
        let (status, reason): (String, Option<String>) = sqlx::query_as(
            "select (select status from workdo.steps where object_id = $1),
                    (select detail->>'reason' from workdo.events where object_id = $1 and kind = 'start_failed')",
        )
        .bind(object)
        .fetch_one(t.pool())
        .await
        .expect("row");
        assert_eq!(status, "completed", "{object}");
        assert!(
            reason.as_deref().is_some_and(|r| r.contains(says)),
            "{object}: {reason:?}"
        );
    }
    let workflows: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where object_id in ('obj:lane', 'obj:self')",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(workflows, 2, "only the starter workflows themselves");
    let (status, message): (String, Option<String>) = sqlx::query_as(
        "select status, error_message from workdo.steps where object_id = 'obj:when'",
    )
    .fetch_one(t.pool())
    .await
    .expect("row");
    assert_eq!(status, "error");
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("not an RFC 3339 time")),
        "{message:?}"
    );
}

/// Machines are bounded: a signal's data over 64 KiB is refused, a transition that would grow
/// the variables past 1 MiB rolls back saying so, and a start whose children fork children
/// stops at 100 jobs in one transaction instead of forking thousands.
#[tokio::test]
async fn machine_inputs_have_limits_that_say_so() {
    let t = db().await;
    load(
        &t.store,
        "grow.yaml",
        "name: growWF\nkind: machine\ninitial: Idle\nstates:\n  Idle:\n    on:\n      add: { to: Idle, actions: [ { set: { blob: \"${blob + signal.data.more}\" } } ] }\n",
    )
    .await;
    let mut req = StartRequest::new("growWF", &["obj:grow"]);
    req.context = json!({"blob": ""});
    let job = t.store.workflow_start(&req).await.expect("start")[0].workflow_id;
    let huge = json!({"more": "x".repeat(70 * 1024)});
    let e = t
        .store
        .machine_signal(job, "add", &huge, "test")
        .await
        .expect_err("data over 64 KiB");
    assert!(e.to_string().contains("over the limit of 65536"), "{e}");
    // 60 KiB a signal: the 18th would pass 1 MiB.
    let chunk = json!({"more": "y".repeat(60 * 1024)});
    let mut refused = None;
    for i in 0..20 {
        if let Err(e) = t.store.machine_signal(job, "add", &chunk, "test").await {
            refused = Some((i, e.to_string()));
            break;
        }
    }
    let (at, said) = refused.expect("the variables stopped growing");
    assert!(at >= 16, "refused too early, at {at}");
    // Whichever check meets it first (the text the expression makes, or the variables as
    // JSON), the refusal names the 1 MiB bound.
    assert!(
        said.contains("over the 1 MiB") || said.contains("over the limit of 1048576"),
        "{said}"
    );
    let size: i64 = sqlx::query_scalar(
        "select length((machine -> 'variables')::text)::bigint from workdo.workflows where id = $1",
    )
    .bind(job)
    .fetch_one(t.pool())
    .await
    .expect("size");
    assert!(size <= 1024 * 1024, "{size}");

    // One state forking 101 children: past the limit of 100 jobs in one transaction.
    load(&t.store, "leaf.yaml", "name: leafWF\nsteps:\n  - name: a\n").await;
    let forks: String = (0..101)
        .map(|i| format!("      - fork: {{ template: leafWF, object: \"obj:leaf{i}\" }}\n"))
        .collect();
    load(
        &t.store,
        "fan.yaml",
        &format!(
            "name: fanWF\nkind: machine\ninitial: Start\nstates:\n  Start:\n    enter:\n{forks}"
        ),
    )
    .await;
    let e = t
        .store
        .workflow_start(&StartRequest::new("fanWF", &["obj:fan"]))
        .await
        .expect_err("fans out past the limit");
    assert!(e.to_string().contains("more than 100 jobs forked"), "{e}");
    let jobs: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where template in ('fanWF', 'leafWF')",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(jobs, 0, "a refused start left jobs behind");
}
