//! Alert mail through a real SMTP server and the stuck-step monitor.

use crate::support;

use std::collections::BTreeMap;

use std::time::{Duration, Instant};

use support::{count, db, load, wait_for};
use tokio_util::sync::CancellationToken;
use workdo::runtime::alerts::{AlertConfig, Sender};
use workdo::runtime::{self, Config};
use workdo::store::{SetRequest, StartRequest, Store};

/// The SMTP server (tests/support/smtp.rs): real SMTP over loopback TCP, in this process.
struct Smtp(support::smtp::Smtp);

impl Smtp {
    fn start() -> Smtp {
        Smtp(support::smtp::Smtp::start())
    }

    fn port(&self) -> u16 {
        self.0.port
    }

    fn mails(&self) -> Vec<String> {
        self.0.mails().iter().map(|m| unfold(m)).collect()
    }
}

/// Undo quoted-printable soft breaks and folded headers, so assertions read plain text.
fn unfold(mail: &str) -> String {
    mail.replace("=\n", "")
        .replace("\n ", " ")
        .replace("=E2=80=A6", "…")
        .replace("=3D", "=")
}

fn alert_config(port: u16, interval: Duration) -> AlertConfig {
    let mut v = BTreeMap::new();
    v.insert(
        "WORKDO_SMTP_URL".to_string(),
        format!("smtp://127.0.0.1:{port}"),
    );
    v.insert(
        "WORKDO_ALERT_TO".to_string(),
        "ops@library.example.org".to_string(),
    );
    v.insert(
        "WORKDO_ALERT_FROM".to_string(),
        "workdo@library.example.org".to_string(),
    );
    v.insert(
        "WORKDO_ALERT_INTERVAL".to_string(),
        format!("{}ms", interval.as_millis()),
    );
    v.insert("WORKDO_STUCK_STARTED".to_string(), "1m".to_string());
    v.insert("WORKDO_STUCK_READY".to_string(), "1m".to_string());
    AlertConfig::from_values(&v)
        .expect("config")
        .expect("enabled")
}

/// Put `n` objects' only step in error, as a robot reporting failures would.
async fn errors(store: &Store, n: usize) {
    load(store, "e.yaml", "name: errWF\nalerts:\n  to: [digitization@library.example.org]\nsteps:\n  - name: fetch\n    error-limit: 1\n").await;
    let objects: Vec<String> = (0..n).map(|i| format!("obj:{i:04}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    store
        .workflow_start(&StartRequest::new("errWF", &refs))
        .await
        .expect("start");
    for o in &objects {
        let mut req = SetRequest::new(o, "errWF", "fetch", "error");
        req.error_message = Some(format!("barcode of {o} not found"));
        req.error_text = Some("GET /grin: 404".into());
        store.step_set(&req).await.expect("error");
    }
}

#[tokio::test]
async fn a_step_at_its_attempt_limit_sends_one_mail_with_what_to_do() {
    let t = db().await;
    let smtp = Smtp::start();
    load(&t.store, "f.yaml", "name: failWF\nsteps:\n  - name: fetch\n    error-limit: 2\n    function: { builtin: fail }\n").await;
    t.store
        .workflow_start(&StartRequest::new("failWF", &["druid:bb123cd4567"]))
        .await
        .expect("start");
    let config = Config {
        alerts: Some(alert_config(smtp.port(), Duration::from_secs(3600))),
        poll_interval: Duration::from_millis(200),
        backoff: workdo::model::retry::Backoff {
            base: Duration::from_millis(50),
            ..Default::default()
        },
        ..Config::default()
    };
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let token = CancellationToken::new();
    let rt = tokio::spawn(runtime::run(
        t.store.clone(),
        config,
        bindings,
        token.clone(),
    ));
    wait_for("the mail", 30, || async { !smtp.mails().is_empty() }).await;
    token.cancel();
    rt.await.expect("join").expect("runtime");
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "one mail, never twice");
    let m = &mails[0];
    for needle in [
        "To: ops@library.example.org",
        "Subject: [workdo] failWF:fetch failed for druid:bb123cd4567 after 2 attempts",
        "is in error after 2 of 2 attempts",
        "Message:      builtin fail on attempt 2",
        "First failed: ",
        "Last failed:  ",
        "workdo retry --object druid:bb123cd4567 --template failWF --step fetch",
        "/api/retry",
    ] {
        assert!(m.contains(needle), "{needle:?} missing from\n{m}");
    }
    assert_eq!(
        count(
            t.pool(),
            "select count(*) from workdo.alert_outbox where status = 'sent'"
        )
        .await,
        1
    );
}

/// `workdo up` says what goes wrong without being asked: each failed attempt, the step that
/// ran out of attempts and the alert mail, at `info`, here as JSON lines for a log collector.
#[tokio::test]
async fn up_logs_each_failure_and_alert_at_info_as_json() {
    let t = db().await;
    let smtp = Smtp::start();
    load(&t.store, "f.yaml", "name: failWF\nsteps:\n  - name: fetch\n    error-limit: 2\n    function: { builtin: fail }\n").await;
    t.store
        .workflow_start(&StartRequest::new("failWF", &["druid:bb123cd4567"]))
        .await
        .expect("start");
    let logs = tempfile::NamedTempFile::new().expect("log file");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args([
            "up",
            "--no-api",
            "--retry-base",
            "50ms",
            "--log-format",
            "json",
        ])
        .env("DATABASE_URL", &t.url)
        .env_remove("WORKDO_LOG")
        .env(
            "WORKDO_SMTP_URL",
            format!("smtp://127.0.0.1:{}", smtp.port()),
        )
        .env("WORKDO_ALERT_TO", "ops@library.example.org")
        .env("WORKDO_ALERT_FROM", "workdo@library.example.org")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(logs.reopen().expect("log file"))
        .spawn()
        .expect("spawn workdo up");
    wait_for("the mail", 30, || async { !smtp.mails().is_empty() }).await;
    // The mail is sent before its "sent" line is written: wait for the line, then stop.
    let read = || {
        std::fs::read_to_string(logs.path())
            .expect("read logs")
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
            })
            .collect::<Vec<_>>()
    };
    wait_for("the alert's log line", 30, || async {
        read().iter().any(|l| l["message"] == "alert mail sent")
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let lines = read();
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in {lines:#?}"))
            .clone()
    };
    let retry = find("step failed; will retry");
    assert_eq!(retry["level"], "INFO");
    assert_eq!(retry["step"], "failWF:fetch");
    assert_eq!(retry["object"], "druid:bb123cd4567");
    assert!(
        retry["error"]
            .as_str()
            .is_some_and(|e| e.contains("builtin fail")),
        "{retry}"
    );
    let error = find("step failed; no attempts left: in error");
    assert_eq!(error["limit"], 2);
    let mail = find("alert mail sent");
    assert_eq!(mail["level"], "INFO");
    assert!(
        mail["subject"]
            .as_str()
            .is_some_and(|s| s.contains("failWF:fetch failed")),
        "{mail}"
    );
}

/// A mail the server refuses for good (550 to its recipient) ends `failed` with the server's
/// answer after one attempt, instead of being retried for ever; the other mails still go.
#[tokio::test]
async fn a_mail_refused_for_good_ends_failed_and_the_others_go() {
    let t = db().await;
    load(&t.store, "g.yaml", "name: goneWF\nalerts:\n  to: [gone@library.example.org]\nsteps:\n  - name: fetch\n    error-limit: 1\n").await;
    t.store
        .workflow_start(&StartRequest::new("goneWF", &["obj:gone"]))
        .await
        .expect("start");
    let mut req = SetRequest::new("obj:gone", "goneWF", "fetch", "error");
    req.error_message = Some("lost".into());
    t.store.step_set(&req).await.expect("error");
    errors(&t.store, 1).await;
    let smtp = Smtp::start();
    smtp.0.refuse("gone@library.example.org");
    let sender = Sender::new(
        t.store.clone(),
        alert_config(smtp.port(), Duration::from_secs(3600)),
    )
    .expect("sender");
    for _ in 0..3 {
        sender.run_once(false).await.expect("pass");
    }
    let rows: Vec<(String, String, i32, Option<String>)> = sqlx::query_as(
        "select template, status, attempts, last_error from workdo.alert_outbox order by template",
    )
    .fetch_all(t.pool())
    .await
    .expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("errWF", "sent"));
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1.as_str(), rows[1].2),
        ("goneWF", "failed", 1)
    );
    assert!(
        rows[1].3.as_deref().is_some_and(|e| e.contains("550")),
        "{:?}",
        rows[1].3
    );
    assert_eq!(smtp.mails().len(), 1);
}

#[tokio::test]
async fn an_smtp_outage_delays_mail_and_loses_none() {
    let t = db().await;
    errors(&t.store, 1).await;
    // The server answers every session "421 Service not available" (a transient failure).
    let server = support::smtp::Smtp::start_down();
    let sender = Sender::new(
        t.store.clone(),
        alert_config(server.port, Duration::from_secs(3600)),
    )
    .expect("sender");
    // The row stays pending with the error and a back-off.
    let r = sender.run_once(false).await.expect("pass");
    assert_eq!((r.sent, r.failed), (0, 1));
    let (status, attempts, last_error): (String, i32, Option<String>) =
        sqlx::query_as("select status, attempts, last_error from workdo.alert_outbox")
            .fetch_one(t.pool())
            .await
            .expect("row");
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    assert!(last_error.is_some_and(|e| !e.is_empty()));
    // The server comes back: the mail goes out, once.
    server.up();
    let smtp = Smtp(server);
    wait_for("the delayed mail", 30, || async {
        sender.run_once(false).await.expect("pass");
        !smtp.mails().is_empty()
    })
    .await;
    for _ in 0..3 {
        sender.run_once(false).await.expect("pass");
    }
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1);
    assert!(
        mails[0].contains("To: digitization@library.example.org"),
        "the template's recipients"
    );
}

#[tokio::test]
async fn a_burst_of_500_failures_makes_one_mail_and_one_digest() {
    let t = db().await;
    let smtp = Smtp::start();
    errors(&t.store, 500).await;
    let sender = Sender::new(
        t.store.clone(),
        alert_config(smtp.port(), Duration::from_millis(800)),
    )
    .expect("sender");
    let mut total = workdo::runtime::alerts::Report::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while total.digests == 0 {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the digest"
        );
        let r = sender.run_once(false).await.expect("pass");
        total.sent += r.sent;
        total.folded += r.folded;
        total.digests += r.digests;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((total.sent, total.folded, total.digests), (1, 499, 1));
    let mails = smtp.mails();
    assert_eq!(
        mails.len(),
        2,
        "a thousand failures do not make a thousand mails"
    );
    let digest = mails
        .iter()
        .find(|m| m.contains("more failures"))
        .expect("digest");
    assert!(
        digest.contains("Subject: [workdo] 499 more failures of errWF:fetch"),
        "{digest}"
    );
    assert!(digest.contains("… and 479 more"), "{digest}");
    assert!(digest.contains("workdo retry --template errWF --step fetch"));
    assert_eq!(
        count(
            t.pool(),
            "select count(*) from workdo.alert_outbox where status in ('pending', 'folded')"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn the_stuck_step_monitor_raises_one_alert_per_interval() {
    let t = db().await;
    let smtp = Smtp::start();
    load(
        &t.store,
        "s.yaml",
        "name: stuckWF\nsteps:\n  - name: scan\n    function: { builtin: noop }\n  - name: human\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new(
            "stuckWF",
            &["druid:bb111cc2222", "druid:bb333cc4444"],
        ))
        .await
        .expect("start");
    // One claimed two hours ago and never finished; one ready for two hours with no taker.
    t.store
        .step_claim(
            "stuckWF",
            "scan",
            None,
            1,
            "lost-worker",
            Duration::from_secs(86400),
        )
        .await
        .expect("claim");
    sqlx::query(
        "update workdo.steps set started_at = now() - interval '2 hours' where status = 'started'",
    )
    .execute(t.pool())
    .await
    .expect("age");
    sqlx::query(
        "update workdo.steps set run_at = now() - interval '2 hours' where status = 'ready'",
    )
    .execute(t.pool())
    .await
    .expect("age");
    let sender = Sender::new(
        t.store.clone(),
        alert_config(smtp.port(), Duration::from_secs(3600)),
    )
    .expect("sender");
    let bound = vec!["stuckWF:scan".to_string()];
    assert!(sender.check_stuck(&bound).await.expect("check"));
    assert!(
        !sender.check_stuck(&bound).await.expect("check"),
        "one alert per interval"
    );
    sender.run_once(false).await.expect("send");
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1);
    let m = &mails[0];
    assert!(m.contains("Subject: [workdo] 2 steps stuck"), "{m}");
    assert!(
        m.contains("Started longer than 60s:") && m.contains("druid:bb111cc2222 stuckWF:scan"),
        "{m}"
    );
    assert!(
        m.contains("Ready and unclaimed longer than 60s:")
            && m.contains("druid:bb333cc4444 stuckWF:scan"),
        "{m}"
    );
    assert!(
        !m.contains("stuckWF:human"),
        "a human step waiting is not stuck"
    );
}

/// The outbox on the schedules page: a page at a time, and when mail waits with no attempt, the
/// page says nothing sends it and what to set (issue 50).
#[tokio::test]
async fn the_outbox_says_when_nothing_sends_mail_and_is_paged() {
    let t = db().await;
    sqlx::query(
        "insert into workdo.alert_outbox (created_at, kind, template, step, object_id, payload)
         select now() - interval '1 hour', 'step_error', 'oneWF', 'work', 'obj:m' || i, '{}'
           from generate_series(1, 60) i",
    )
    .execute(t.pool())
    .await
    .expect("outbox rows");
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let get = |path: &'static str| {
        let url = format!("{base}{path}");
        async move {
            reqwest::get(url)
                .await
                .expect("page")
                .text()
                .await
                .expect("html")
        }
    };
    let first = get("/ui/schedules").await;
    assert!(
        first.contains("60 messages wait over a minute with no attempt")
            && first.contains("WORKDO_SMTP_URL"),
        "{first}"
    );
    let rows = |html: &str| {
        html.split("id=\"outbox\"")
            .nth(1)
            .and_then(|t| t.split("</table>").next())
            .and_then(|t| t.split("<tbody>").nth(1))
            .map_or(0, |t| t.matches("<tr>").count())
    };
    assert_eq!(rows(&first), 50, "a page of the outbox");
    assert!(
        first.contains("id=\"outbox-older\""),
        "a link to older rows"
    );
    let second = get("/ui/schedules?outbox=2").await;
    assert_eq!(rows(&second), 10, "the rest");
    assert!(!second.contains("id=\"outbox-older\""));
}
