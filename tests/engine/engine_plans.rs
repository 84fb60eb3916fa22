//! The engine's plans: the claim and the completion under lease use indexes only, whatever the
//! number of waiting and finished rows.

use crate::support;

use support::db;
use support::engine::{LEASE, load_one_step};
use workdo::store::StartRequest;

/// The generic plan (the one a workdo function caches) of `function`'s `return query`
/// statement, its parameters numbered as `params` list them and typed as `types`, run with
/// `args`. Nested loops are off: any join the plan relied on would turn into a hash or merge
/// join, which is what the planner picks on its own at a million rows. Returns the plan's
/// nodes as (depth, node type, index or relation).
async fn generic_plan(
    conn: &mut sqlx::PgConnection,
    function: &str,
    params: &[&str],
    types: &str,
    args: &str,
) -> Vec<(usize, String, String)> {
    let src: String = sqlx::query_scalar(
        "select prosrc from pg_proc where proname = $1 and pronamespace = 'workdo'::regnamespace",
    )
    .bind(function)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let start = src.find("return query").expect("return query") + "return query".len();
    let end = src.rfind(';').expect("end of the statement");
    let mut body = src[start..end].to_string();
    // Longest names first, so that no name is replaced inside a longer one.
    let mut numbered: Vec<(usize, &str)> = params.iter().copied().enumerate().collect();
    numbered.sort_by_key(|(_, p)| std::cmp::Reverse(p.len()));
    for (n, name) in numbered {
        body = body.replace(name, &format!("${}", n + 1));
    }
    plan_of(conn, &body, types, args, false).await
}

/// The generic plan of `body` (a statement of a workdo function, its parameters `$n` typed as
/// `types`) run with `args`, nested loops allowed or not, as (depth, node type, index or
/// relation).
async fn plan_of(
    conn: &mut sqlx::PgConnection,
    body: &str,
    types: &str,
    args: &str,
    nestloop: bool,
) -> Vec<(usize, String, String)> {
    // The text is a function's own definition, read from the catalog by the caller.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "set plan_cache_mode = force_generic_plan;
         set enable_nestloop = {nestloop};
         prepare plan_check({types}) as {body}"
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "explain (format json) execute plan_check({args})"
    )))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    sqlx::raw_sql("deallocate plan_check; reset plan_cache_mode; reset enable_nestloop")
        .execute(&mut *conn)
        .await
        .unwrap();
    fn walk(v: &serde_json::Value, depth: usize, out: &mut Vec<(usize, String, String)>) {
        if let Some(kind) = v.get("Node Type").and_then(|k| k.as_str()) {
            let rel = v
                .get("Index Name")
                .or(v.get("Relation Name"))
                .and_then(|r| r.as_str())
                .unwrap_or("");
            out.push((depth, kind.to_string(), rel.to_string()));
        }
        for child in v
            .get("Plans")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            walk(child, depth + 1, out);
        }
        if let Some(p) = v.get("Plan") {
            walk(p, depth, out);
        }
    }
    let mut nodes = Vec::new();
    walk(&plan[0], 0, &mut nodes);
    nodes
}

/// No sequential scan, no hash or merge join, and a sort only at the top.
fn assert_index_only(what: &str, nodes: &[(usize, String, String)]) {
    let text = format!("{nodes:#?}");
    for (depth, kind, _) in nodes {
        assert!(
            !["Seq Scan", "Hash Join", "Merge Join"].contains(&kind.as_str()),
            "{kind} in the plan of {what}: {text}"
        );
        assert!(
            kind != "Sort" || *depth == 0,
            "a sort below the top of {what}: {text}"
        );
    }
}

/// `n` ready one-step workflows, the tables analyzed as they are now, and a connection to
/// plan on.
async fn analyzed_queue(
    t: &support::TestDb,
    n: usize,
) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    load_one_step(&t.store).await;
    let mut req = StartRequest::new("oneWF", &[]);
    req.objects = (0..n).map(|i| format!("obj:{i:05}")).collect();
    t.store.workflow_start(&req).await.unwrap();
    let mut conn = t.pool().acquire().await.unwrap();
    sqlx::query("analyze workdo.steps, workdo.workflows, workdo.objects")
        .execute(&mut *conn)
        .await
        .unwrap();
    conn
}

/// The claim's plans (the generic ones its functions cache) walk the ready index and look rows
/// up by primary key, whatever the table's size: no sequential scan, no hash or merge join, and
/// the only sort is of the leased rows (at most the limit) into claim order.
#[tokio::test]
async fn the_claim_plan_uses_indexes_only() {
    let t = db().await;
    let mut conn = analyzed_queue(&t, 20_000).await;
    let claim = generic_plan(
        &mut conn,
        "claim",
        &[
            "p_template",
            "p_step",
            "p_lane",
            "p_limit",
            "p_owner",
            "p_lease_secs",
        ],
        "text, text, text, bigint, text, float8",
        "'oneWF', 'work', null, 100, 'w', 60",
    )
    .await;
    assert_index_only("workdo.claim", &claim);
    assert!(
        claim
            .iter()
            .any(|(_, kind, index)| kind == "Index Scan" && index == "steps_claim"),
        "the claim reads the ready index: {claim:#?}"
    );
    assert!(
        claim
            .iter()
            .any(|(_, kind, index)| kind == "Index Scan" && index == "steps_pkey"),
        "and updates the steps it found by primary key: {claim:#?}"
    );
    let lease = generic_plan(
        &mut conn,
        "lease",
        &["p_ids", "p_owner", "p_lease_secs"],
        "bigint[], text, float8",
        "array[1, 2, 3]::bigint[], 'w', 60",
    )
    .await;
    assert_index_only("workdo.lease", &lease);
}

/// A batch of worker completions finds each step by its primary key. The statement's first
/// plan read every leased step through `steps_leased` for each completion (the planner, with
/// statistics taken while nothing was started, expected one leased step): a batch got slower
/// the more steps were out on lease.
#[tokio::test]
async fn completions_under_lease_find_steps_by_primary_key() {
    let t = db().await;
    let mut conn = analyzed_queue(&t, 5_000).await;
    let leased = t
        .store
        .step_claim("oneWF", "work", None, 1_000, "w", LEASE)
        .await
        .unwrap();
    assert_eq!(leased.len(), 1_000);
    let src: String = sqlx::query_scalar(
        "select prosrc from pg_proc where proname = 'apply_batch' and pronamespace = 'workdo'::regnamespace",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    // The completions' statement: the first one of the function, without its `into`.
    let start = src
        .find("with input as")
        .expect("the completions' statement");
    let end =
        start + src[start..].find("from changed u;").expect("its end") + "from changed u".len();
    let body = src[start..end].replace("into st", "");
    assert!(body.contains("status = 'completed'"), "{body}");
    let types = "bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], \
                 int[], bool[], uuid[], text[], jsonb[], text";
    let args = format!(
        "array[{id}]::bigint[], array['completed'], array[null]::text[], array[null]::text[], \
         array[null]::text[], array[null]::text[], array[null]::float8[], \
         array[null]::timestamptz[], array[0], array[false], array['{lease}']::uuid[], \
         array['completed'], array[null]::jsonb[], 'w'",
        id = leased[0].id,
        lease = leased[0].lease_token
    );
    let plan = plan_of(&mut conn, &body, types, &args, true).await;
    assert!(
        plan.iter()
            .any(|(_, kind, index)| kind == "Index Scan" && index == "steps_pkey"),
        "steps found by primary key: {plan:#?}"
    );
    assert!(
        !plan
            .iter()
            .any(|(_, kind, rel)| rel == "steps_leased" || kind == "Seq Scan"),
        "no scan of the leased steps: {plan:#?}"
    );
}
