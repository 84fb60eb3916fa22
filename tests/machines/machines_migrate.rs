//! What an adversary found in `workdo machines migrate`, held: a job is never migrated into a
//! final state (it stayed active, its alarms pending, accepting no signal), and the new
//! version's variables a job lacks start at their declared values (its every transition that
//! read one rolled back).

use crate::support;

use std::collections::BTreeMap;

use serde_json::json;
use support::machines::{COUNTER, job, send, state};
use support::{db, load};
use workdo::model::template::sha256_hex;

#[tokio::test]
async fn a_job_is_not_migrated_into_a_final_state() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:to-final").await;
    send(&t, id, "arm").await.expect("arm");
    // Version 2 is the same description with one more (unused) variable, so its SHA differs.
    let v2 = COUNTER.replace(
        "variables: { count: 0 }",
        "variables: { count: 0, spare: 1 }",
    );
    load(&t.store, "counter.yaml", &v2).await;
    let mut map = BTreeMap::new();
    map.insert("Armed".to_string(), "Rung".to_string());
    let err = t
        .store
        .machine_migrate("counterWF", &sha256_hex(&v2), &map, None, "t")
        .await
        .expect_err("refused");
    assert!(
        err.to_string().contains("final states Rung in counterWF"),
        "{err}"
    );
    assert_eq!(state(&t, id).await.0, "Armed", "nothing moved");
    // An empty --to named every version; it names none.
    let empty = t
        .store
        .machine_migrate("counterWF", "", &map, None, "t")
        .await
        .expect_err("refused");
    assert!(empty.to_string().contains("--to must be"), "{empty}");
    let (status, pending): (String, i64) = sqlx::query_as(
        "select w.status::text,
                (select count(*) from workdo.alarms a
                  where a.workflow_id = w.id and a.fired_at is null and a.cancelled_at is null)
           from workdo.workflows w where w.id = $1",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("job");
    assert_eq!((status.as_str(), pending), ("active", 1));
    // Its alarm still rings it to Rung the ordinary way.
    send(&t, id, "ring").await.expect("ring");
    assert_eq!(state(&t, id).await.0, "Rung");
}

#[tokio::test]
async fn a_migrated_job_gets_the_new_versions_variables() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:new-vars").await;
    send(&t, id, "bump").await.expect("bump");
    // Version 2 declares `bonus` and adds it on every bump.
    let v2 = COUNTER
        .replace(
            "variables: { count: 0 }",
            "variables: { count: 0, bonus: 10 }",
        )
        .replace(
            "set: { count: \"${count + 1}\", by: \"${signal.actor}\" }",
            "set: { count: \"${count + 1}\", bonus: \"${bonus + 1}\" }",
        );
    assert_ne!(v2, COUNTER);
    load(&t.store, "counter.yaml", &v2).await;
    let n = t
        .store
        // As printed in upper case, too.
        .machine_migrate(
            "counterWF",
            &sha256_hex(&v2).to_uppercase(),
            &BTreeMap::new(),
            None,
            "t",
        )
        .await
        .expect("migrated");
    assert_eq!(n, 1);
    let vars = state(&t, id).await.1;
    assert_eq!(
        (vars["count"].clone(), vars["bonus"].clone()),
        (json!(1), json!(10))
    );
    send(&t, id, "bump")
        .await
        .expect("a bump reading the new variable");
    let vars = state(&t, id).await.1;
    assert_eq!(
        (vars["count"].clone(), vars["bonus"].clone()),
        (json!(2), json!(11))
    );
}
