//! Cron schedules (fired once however many runtimes race, missed ticks, with their template),
//! future-dated work, and task injection (`workdo run`).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{count, db, load, wait_for};
use tokio_util::sync::CancellationToken;
use workdo::runtime::{self, Config};
use workdo::store::StartRequest;

const SCHEDULE: &str = "schedules:\n  - name: every-second\n    cron: \"* * * * * *\"\n    start: tickWF\n    objects: { ids: [druid:bb123cd4567] }\n    restart: true\n";

#[tokio::test]
async fn a_due_schedule_fires_once_however_many_runtimes_race() {
    let t = db().await;
    load(&t.store, "t.yaml", "name: tickWF\nsteps:\n  - name: a\n").await;
    // Hourly, so the race is for one tick: a schedule due every second is rightly due again
    // when the eight schedulers' race crosses a second boundary (as it did on a slow host).
    let hourly = SCHEDULE.replace("\"* * * * * *\"", "\"0 0 * * * *\"");
    assert_ne!(hourly, SCHEDULE, "the cron was replaced");
    let specs = workdo::model::schedule::parse_file("s.yaml", &hourly).expect("schedules");
    t.store.schedules_put(&specs, "s.yaml").await.expect("put");
    // Make it due, then let eight schedulers race for it.
    sqlx::query("update workdo.schedules set next_fire_at = now() - interval '1 second'")
        .execute(t.pool())
        .await
        .expect("due");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            store.schedules_fire_due().await.expect("fire")
        }));
    }
    let mut fired = 0;
    for task in tasks {
        fired += task.await.expect("join").len();
    }
    assert_eq!(fired, 1);
    assert_eq!(
        count(
            t.pool(),
            "select count(*) from workdo.events where kind = 'workflow_started'"
        )
        .await,
        1
    );
    let next_in_future: bool =
        sqlx::query_scalar("select next_fire_at > now() from workdo.schedules")
            .fetch_one(t.pool())
            .await
            .expect("next");
    assert!(next_in_future);
}

#[tokio::test]
async fn missed_ticks_after_downtime_fire_once() {
    let t = db().await;
    load(&t.store, "t.yaml", "name: tickWF\nsteps:\n  - name: a\n").await;
    let specs = workdo::model::schedule::parse_file(
        "s.yaml",
        "schedules:\n  - name: every-minute\n    cron: \"0 * * * * *\"\n    start: tickWF\n    objects: { ids: [druid:bb123cd4567] }\n    restart: true\n",
    )
    .expect("schedules");
    t.store.schedules_put(&specs, "s.yaml").await.expect("put");
    // Down for an hour: sixty ticks missed.
    sqlx::query("update workdo.schedules set next_fire_at = now() - interval '1 hour'")
        .execute(t.pool())
        .await
        .expect("downtime");
    assert_eq!(t.store.schedules_fire_due().await.expect("fire").len(), 1);
    assert!(t.store.schedules_fire_due().await.expect("fire").is_empty());
    assert_eq!(
        count(t.pool(), "select count(*) from workdo.workflows").await,
        1
    );
    let rows = t.store.schedules_list().await.expect("list");
    assert!(rows[0].next_fire_at > chrono::Utc::now());
    assert!(rows[0].next_fire_at <= chrono::Utc::now() + chrono::Duration::seconds(61));
}

#[tokio::test]
async fn two_runtimes_fire_each_tick_exactly_once() {
    let t = db().await;
    load(&t.store, "t.yaml", "name: tickWF\nsteps:\n  - name: a\n").await;
    t.store
        .schedules_put(
            &workdo::model::schedule::parse_file("s.yaml", SCHEDULE).expect("parse"),
            "s.yaml",
        )
        .await
        .expect("put");
    let token = CancellationToken::new();
    let mut runtimes = Vec::new();
    for _ in 0..2 {
        runtimes.push(tokio::spawn(runtime::run(
            t.store.clone(),
            Config::default(),
            Vec::new(),
            token.clone(),
        )));
    }
    wait_for("three ticks", 30, || async {
        count(
            t.pool(),
            "select count(*) from workdo.events where kind = 'schedule_fired'",
        )
        .await
            >= 3
    })
    .await;
    token.cancel();
    for r in runtimes {
        r.await.expect("join").expect("runtime");
    }
    let (fires, ticks): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct detail ->> 'tick') from workdo.events where kind = 'schedule_fired'",
    )
    .fetch_one(t.pool())
    .await
    .expect("ticks");
    assert_eq!(fires, ticks, "no tick fired twice");
    let starts = count(t.pool(), "select count(*) from workdo.events where kind in ('workflow_started', 'workflow_replaced')").await;
    assert_eq!(starts, fires, "one start per tick");
}

#[tokio::test]
async fn template_schedules_load_with_the_template() {
    let t = db().await;
    load(
        &t.store,
        "emb.yaml",
        "name: embargoReleaseWF\nsteps:\n  - name: release\nschedules:\n  - name: nightly\n    cron: \"0 0 3 * * *\"\n    timezone: America/Los_Angeles\n    objects: { property: embargo_until, before: now }\n",
    )
    .await;
    let rows = t.store.schedules_list().await.expect("list");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].template.as_str(), rows[0].timezone.as_str()),
        ("embargoReleaseWF", "America/Los_Angeles")
    );
    // Only objects whose embargo has passed, and only once.
    let mut past = BTreeMap::new();
    past.insert("embargo_until".to_string(), serde_json::json!("2020-01-01"));
    let mut future = BTreeMap::new();
    future.insert(
        "embargo_until".to_string(),
        serde_json::json!("2999-01-01T00:00:00Z"),
    );
    t.store
        .object_put("druid:bb111cc2222", &past, &BTreeMap::new(), "t")
        .await
        .expect("obj");
    t.store
        .object_put("druid:bb333cc4444", &future, &BTreeMap::new(), "t")
        .await
        .expect("obj");
    for _ in 0..2 {
        sqlx::query("update workdo.schedules set next_fire_at = now() - interval '1 second'")
            .execute(t.pool())
            .await
            .expect("due");
        t.store.schedules_fire_due().await.expect("fire");
    }
    let started: Vec<String> = sqlx::query_scalar("select object_id from workdo.workflows")
        .fetch_all(t.pool())
        .await
        .expect("workflows");
    assert_eq!(started, vec!["druid:bb111cc2222"]);
    let bad = workdo::model::template::parse(
        "bad.yaml",
        workdo::model::template::Format::Yaml,
        "name: x\nsteps:\n  - name: a\nschedules:\n  - name: n\n    cron: \"0 0 3 * * *\"\n    timezone: Nowhere/Here\n    objects: { ids: [] }\n",
    )
    .expect_err("bad time zone")
    .to_string();
    assert!(
        bad.starts_with("bad.yaml:4: schedules: schedule n: unknown time zone"),
        "{bad}"
    );
}

#[tokio::test]
async fn future_dated_steps_run_when_due_and_not_before() {
    let t = db().await;
    load(
        &t.store,
        "n.yaml",
        "name: laterWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    let start_at = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let mut req = StartRequest::new("laterWF", &["druid:bb123cd4567"]);
    req.start_at = Some(start_at);
    t.store.workflow_start(&req).await.expect("start");
    let token = CancellationToken::new();
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let rt = tokio::spawn(runtime::run(
        t.store.clone(),
        Config::default(),
        bindings,
        token.clone(),
    ));
    wait_for("completion", 30, || async {
        count(
            t.pool(),
            "select count(*) from workdo.steps where status = 'completed'",
        )
        .await
            == 1
    })
    .await;
    token.cancel();
    rt.await.expect("join").expect("runtime");
    let started_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select started_at from workdo.steps")
            .fetch_one(t.pool())
            .await
            .expect("started");
    assert!(
        started_at >= start_at,
        "claimed early: {started_at} < {start_at}"
    );
    assert!(
        started_at - start_at < chrono::Duration::seconds(5),
        "claimed late: {}",
        started_at - start_at
    );
}

async fn cli(url: &str, args: &[&str]) -> String {
    let (out, result) = cli_result(url, args).await;
    result.expect("command");
    out
}

/// What a command printed, and whether it succeeded.
async fn cli_result(url: &str, args: &[&str]) -> (String, anyhow::Result<()>) {
    use clap::Parser;
    let mut argv = vec!["workdo", "--database-url", url];
    argv.extend_from_slice(args);
    let cli = workdo::cli::Cli::try_parse_from(argv).expect("arguments");
    let mut out = Vec::new();
    let result = workdo::cli::run(cli, &mut out).await;
    (String::from_utf8(out).expect("utf-8"), result)
}

#[tokio::test]
async fn run_injects_a_task_ahead_of_the_queue_and_prioritize_filters_by_property() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("dir");
    let f = dir.path().join("ok.sh");
    std::fs::write(
        &f,
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"note\":\"injected\"}'\n",
    )
    .expect("script");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&f)
        .status()
        .expect("chmod");
    let yaml = format!(
        "name: injWF\nsteps:\n  - name: first\n  - name: scan\n    function: {{ exec: {} }}\n  - name: after\n    prereqs: [first]\n    function: {{ exec: {} }}\n",
        f.display(),
        f.display()
    );
    load(&t.store, "inj.yaml", &yaml).await;
    let mut rush = BTreeMap::new();
    rush.insert("rush".to_string(), serde_json::json!(true));
    t.store
        .object_put("druid:bb123cd4567", &rush, &BTreeMap::new(), "t")
        .await
        .expect("obj");
    t.store
        .workflow_start(&StartRequest::new(
            "injWF",
            &[
                "druid:bb123cd4567",
                "druid:cc123dd4567",
                "druid:dd123ff4567",
            ],
        ))
        .await
        .expect("start");
    let out = cli(
        &t.url,
        &["run", "injWF:scan", "--object", "druid:cc123dd4567"],
    )
    .await;
    assert_eq!(out.trim(), "druid:cc123dd4567 completed");
    let view = t
        .store
        .object_view("druid:cc123dd4567", 50)
        .await
        .expect("view");
    let scan = view.workflows[0]
        .steps
        .iter()
        .find(|s| s.name == "scan")
        .expect("scan");
    assert_eq!(
        (scan.status.as_str(), scan.note.as_deref()),
        ("completed", Some("injected"))
    );
    assert!(view.events.iter().any(|e| {
        e.kind == "completed"
            && e.actor
                .as_deref()
                .is_some_and(|a| a.starts_with("cli:run:"))
    }));
    // A step still waiting for its prerequisites is not run, the output says why, and the
    // command fails.
    let (out, result) = cli_result(
        &t.url,
        &["run", "injWF:after", "--object", "druid:cc123dd4567"],
    )
    .await;
    assert!(result.is_err());
    assert!(
        out.contains("druid:cc123dd4567 not run: waiting for prerequisite first (ready)"),
        "{out}"
    );
    // Priority injection by a property filter.
    let out = cli(
        &t.url,
        &["prioritize", "100", "--property-json", "rush=true"],
    )
    .await;
    assert_eq!(out.trim(), "priority 100 set on 3 steps");
    let top = t
        .store
        .step_claim("injWF", "scan", None, 1, "w", Duration::from_secs(60))
        .await
        .expect("claim");
    assert_eq!(top[0].object_id, "druid:bb123cd4567");
}

/// A schedule that signals: the jobs of a machine in the given state get the signal (those in
/// other states and finished ones do not), each once per tick, and take it as any signal.
#[tokio::test]
async fn a_schedule_signals_the_jobs_of_a_machine_in_a_state() {
    let t = db().await;
    let shipped = std::fs::read_to_string(support::workflows_dir().join("loanReviewWF.yaml"))
        .expect("loanReviewWF.yaml");
    load(&t.store, "loanReviewWF.yaml", &shipped).await;
    let mut jobs = Vec::new();
    for o in ["obj:n1", "obj:n2", "obj:n3"] {
        let started = t
            .store
            .workflow_start(&StartRequest::new("loanReviewWF", &[o]))
            .await
            .expect("start");
        jobs.push(started[0].workflow_id);
    }
    // n1 and n3 notified (n3 then approved: finished); n2 still in Review.
    for j in [jobs[0], jobs[2]] {
        t.store
            .machine_signal(j, "notified", &serde_json::json!({}), "t")
            .await
            .expect("notified");
    }
    t.store
        .machine_signal(jobs[2], "approve", &serde_json::json!({}), "t")
        .await
        .expect("approve");
    let specs = workdo::model::schedule::parse_file(
        "nudge.yaml",
        "schedules:\n  - name: nudge\n    cron: \"0 0 9 * * *\"\n    signal: remind\n    jobs: { template: loanReviewWF, state: Notified }\n",
    )
    .expect("schedules");
    t.store
        .schedules_put(&specs, "nudge.yaml")
        .await
        .expect("put");
    sqlx::query("update workdo.schedules set next_fire_at = now() - interval '1 second'")
        .execute(t.pool())
        .await
        .expect("due");
    let fired = t.store.schedules_fire_due().await.expect("fire");
    assert_eq!(fired.len(), 1);
    assert_eq!((fired[0].started, fired[0].signalled), (0, 1));
    t.store.machine_inbox_run(100).await.expect("inbox");
    let reminders: Vec<serde_json::Value> = sqlx::query_scalar(
        "select machine -> 'variables' -> 'reminders' from workdo.workflows where id = any($1) order by id",
    )
    .bind(&jobs)
    .fetch_all(t.pool())
    .await
    .expect("reminders");
    assert_eq!(
        reminders,
        [
            serde_json::json!(1),
            serde_json::json!(0),
            serde_json::json!(0)
        ]
    );
    let listed = t.store.schedules_list().await.expect("list");
    assert_eq!(
        (listed[0].signal.as_deref(), listed[0].state.as_deref()),
        (Some("remind"), Some("Notified"))
    );
}

/// A schedule naming a bare druid started the workflow again at every tick, progress wiped
/// (`restart: false` compared the id as written with the stored `druid:` id); and one schedule
/// that could not fire stayed due, first in line, and stopped every other schedule.
#[tokio::test]
async fn bare_druids_are_found_and_a_schedule_that_cannot_fire_stops_no_other() {
    let t = db().await;
    load(
        &t.store,
        "t.yaml",
        "name: tickWF\nsteps:\n  - name: a\n  - name: b\n    prereqs: [a]\n",
    )
    .await;
    let specs = workdo::model::schedule::parse_file(
        "s.yaml",
        "schedules:\n  - name: a-first\n    cron: \"0 0 3 * * *\"\n    start: tickWF\n    objects: { ids: [druid:cc111cc1111] }\n  - name: bare\n    cron: \"0 0 4 * * *\"\n    start: tickWF\n    objects: { ids: [kk111kk1111] }\n",
    )
    .expect("schedules");
    t.store.schedules_put(&specs, "s.yaml").await.expect("put");
    let fired = t.store.schedule_fire_now("bare").await.expect("fire");
    assert_eq!(fired[0].started, 1);
    t.store
        .step_set(&workdo::store::SetRequest::new(
            "druid:kk111kk1111",
            "tickWF",
            "a",
            "completed",
        ))
        .await
        .expect("progress");
    let fired = t.store.schedule_fire_now("bare").await.expect("fire again");
    assert_eq!(fired[0].started, 0, "the object already has the workflow");
    let a: String = sqlx::query_scalar(
        "select status::text from workdo.steps where object_id = 'druid:kk111kk1111' and name = 'a'",
    )
    .fetch_one(t.pool())
    .await
    .expect("step");
    assert_eq!(a, "completed", "progress kept");

    // `a-first`, stored by an older version with an id no start accepts, comes first in line.
    sqlx::raw_sql(
        "update workdo.schedules set objects = '{\"ids\": [\"bad id\"]}',
                next_fire_at = now() - interval '2 minutes' where name = 'a-first';
         update workdo.schedules set next_fire_at = now() - interval '1 minute' where name = 'bare'",
    )
    .execute(t.pool())
    .await
    .expect("both due");
    let fired = t.store.schedules_fire_due().await.expect("fire due");
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].schedule, "bare");
    let rows = t.store.schedules_list().await.expect("list");
    let poison = rows.iter().find(|r| r.name == "a-first").expect("a-first");
    assert!(
        poison.next_fire_at > chrono::Utc::now(),
        "moved to its next tick"
    );
    assert_eq!(
        count(
            t.pool(),
            "select count(*) from workdo.events where kind = 'schedule_failed'"
        )
        .await,
        1
    );
    assert!(
        t.store
            .schedules_fire_due()
            .await
            .expect("nothing due")
            .is_empty()
    );
}

/// `schedules fire NAME` that fails takes no tick away (issue 47 item 7): the failure is
/// recorded and said, and the schedule's next regular tick is where it was.
#[tokio::test]
async fn a_fire_by_hand_that_fails_keeps_the_next_tick() {
    let t = db().await;
    load(&t.store, "t.yaml", "name: handWF\nsteps:\n  - name: a\n").await;
    let specs = workdo::model::schedule::parse_file(
        "s.yaml",
        "schedules:\n  - name: nightly\n    cron: \"0 0 3 * * *\"\n    start: handWF\n    objects: { ids: [druid:cc111cc1111] }\n",
    )
    .expect("schedules");
    t.store.schedules_put(&specs, "s.yaml").await.expect("put");
    // An id no start accepts, as an older version may have stored; and a tick due an hour ago
    // (no runtime ran): a failed fire by hand must not move it past now.
    sqlx::raw_sql(
        "update workdo.schedules set objects = '{\"ids\": [\"bad id\"]}',
                next_fire_at = date_trunc('second', now()) - interval '1 hour'",
    )
    .execute(t.pool())
    .await
    .expect("poison");
    let before = t.store.schedules_list().await.expect("list")[0].next_fire_at;
    let err = t
        .store
        .schedule_fire_now("nightly")
        .await
        .expect_err("cannot fire");
    assert!(err.to_string().contains("bad id"), "{err}");
    let after = t.store.schedules_list().await.expect("list")[0].next_fire_at;
    assert_eq!(after, before, "the failed fire moved the next tick");
    assert_eq!(
        count(
            t.pool(),
            "select count(*) from workdo.events where kind = 'schedule_failed'"
        )
        .await,
        1
    );
}
