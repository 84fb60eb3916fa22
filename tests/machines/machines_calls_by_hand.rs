//! A machine's function call ended by hand — a robot polling call steps, or an operator — goes
//! back to its job as a signal, as the runtime's end of it does: the job waited for ever.

use crate::support;

use serde_json::json;
use support::machines::{job, send, state};
use support::{db, load};
use workdo::store::SetRequest;

const CALLER: &str = "name: byHandWF\nkind: machine\ninitial: Wait\nstates:\n  Wait:\n    on:\n      go: { to: Working, actions: [ { call: work } ] }\n  Working:\n    on:\n      done: Done\n      error: Failed\n  Done: { final: true }\n  Failed: { final: true }\nfunctions:\n  work: { exec: [/bin/true] }\n";

#[tokio::test]
async fn a_call_step_completed_or_failed_by_hand_signals_its_job() {
    let t = db().await;
    load(&t.store, "byhand.yaml", CALLER).await;
    for (object, status, end) in [
        ("obj:hand-ok", "completed", "Done"),
        ("obj:hand-bad", "error", "Failed"),
    ] {
        let id = job(&t, "byHandWF", object).await;
        send(&t, id, "go").await.expect("go");
        let step: String = sqlx::query_scalar(
            "select name from workdo.steps where workflow_id = $1 and name like 'call/work%'",
        )
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("the call's step");
        let mut set = SetRequest::new(object, "byHandWF", &step, status);
        set.note = Some("by hand".into());
        t.store.step_set(&set).await.expect("set by hand");
        t.store.machine_inbox_run(10).await.expect("take the inbox");
        assert_eq!(state(&t, id).await.0, end, "{object}");
        let data: serde_json::Value = sqlx::query_scalar(
            "select data from workdo.signals where workflow_id = $1 and actor like 'call:%'",
        )
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("the call's signal");
        assert_eq!(data["note"], json!("by hand"));
        assert_eq!(data["step"], json!(step));
    }
}

/// A call whose worker died on its last attempt goes to `error` by the lease sweep, with no
/// result of its function: its job is told all the same.
#[tokio::test]
async fn a_call_whose_last_lease_expires_signals_its_job() {
    let t = db().await;
    load(&t.store, "byhand.yaml", CALLER).await;
    let id = job(&t, "byHandWF", "obj:lease-gone").await;
    send(&t, id, "go").await.expect("go");
    sqlx::query(
        "update workdo.steps
            set status = 'started', lease_owner = 'gone', lease_token = gen_random_uuid(),
                lease_expires_at = now() - interval '1 second', attempts = max_attempts
          where workflow_id = $1 and name like 'call/work%'",
    )
    .bind(id)
    .execute(t.pool())
    .await
    .expect("a dead worker's lease");
    assert_eq!(t.store.steps_sweep_leases(100).await.expect("sweep"), 1);
    t.store.machine_inbox_run(10).await.expect("take the inbox");
    assert_eq!(state(&t, id).await.0, "Failed");
}
