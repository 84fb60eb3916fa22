//! Alert mail: a step that used up its attempts (or is stuck) reaches the people responsible.
//!
//! The store writes an outbox row in the transaction that puts a step in `error`. The sender
//! claims pending rows with `SKIP LOCKED`, sends them through SMTP (lettre) and marks them sent in
//! the same transaction; an SMTP outage leaves them pending with a back-off, so mail is delayed,
//! never lost. Throttling: at most one mail per template step per interval; the failures in
//! between are folded and go out as one digest with counts when the interval has passed (or when
//! the runtime shuts down). The stuck-step monitor adds one row per interval listing steps
//! `started` or `ready` for too long.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Message};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};

use crate::store::Store;

/// How much of an error text a mail quotes.
const TEXT_EXCERPT: usize = 2000;
/// Objects listed by name in a digest.
const DIGEST_LIST: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("alert configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

/// Alert settings, from the environment or a config file of `KEY=VALUE` lines (the environment
/// wins).
#[derive(Debug, Clone)]
pub struct AlertConfig {
    /// lettre's URL form: `smtp://127.0.0.1:2525`, `smtp://host:587?tls=required`,
    /// `smtps://user:pass@mail.example.org`.
    pub smtp_url: String,
    pub from: String,
    /// Recipients of templates that name none, and of the stuck-step monitor.
    pub to: Vec<String>,
    /// At most one mail per template step per this interval.
    pub interval: Duration,
    /// A step `started` longer than this is stuck.
    pub stuck_started: Duration,
    /// A step `ready` and unclaimed longer than this is stuck.
    pub stuck_ready: Duration,
    /// Base URL of the API, for the retry call quoted in mails.
    pub api_url: String,
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, AlertError> {
    crate::template::parse_duration_secs(v)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| AlertError::Config(format!("{key}={v:?} is not a duration such as 10m")))
}

impl AlertConfig {
    /// The settings, or `None` when no SMTP URL is configured (alerts stay in the outbox).
    ///
    /// # Errors
    /// An unreadable file, a malformed line, or a bad value, each named.
    pub fn load(file: Option<&Path>) -> Result<Option<AlertConfig>, AlertError> {
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| AlertError::Config(format!("cannot read {}: {e}", path.display())))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (k, v) = line.split_once('=').ok_or_else(|| {
                    AlertError::Config(format!(
                        "{}:{}: expected KEY=VALUE, got {line:?}",
                        path.display(),
                        n + 1
                    ))
                })?;
                values.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
            }
        }
        for (k, v) in std::env::vars() {
            if k.starts_with("WORKDO_") {
                values.insert(k, v);
            }
        }
        Self::from_values(&values)
    }

    /// The settings from explicit `WORKDO_*` values.
    ///
    /// # Errors
    /// A missing sender or recipient, or a bad value.
    pub fn from_values(
        values: &BTreeMap<String, String>,
    ) -> Result<Option<AlertConfig>, AlertError> {
        let Some(smtp_url) = values.get("WORKDO_SMTP_URL").filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let from = values
            .get("WORKDO_ALERT_FROM")
            .cloned()
            .unwrap_or_else(|| "workdo@localhost".into());
        from.parse::<Mailbox>()
            .map_err(|e| AlertError::Config(format!("WORKDO_ALERT_FROM={from:?}: {e}")))?;
        let to: Vec<String> = values
            .get("WORKDO_ALERT_TO")
            .map(|t| {
                t.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if to.is_empty() {
            return Err(AlertError::Config(
                "WORKDO_SMTP_URL is set but WORKDO_ALERT_TO (comma-separated addresses) is not"
                    .into(),
            ));
        }
        for a in &to {
            a.parse::<Mailbox>()
                .map_err(|e| AlertError::Config(format!("WORKDO_ALERT_TO: {a:?}: {e}")))?;
        }
        let dur = |key: &str, default: &str| {
            parse_duration(key, values.get(key).map(String::as_str).unwrap_or(default))
        };
        let config = AlertConfig {
            smtp_url: smtp_url.clone(),
            from,
            to,
            interval: dur("WORKDO_ALERT_INTERVAL", "10m")?,
            stuck_started: dur("WORKDO_STUCK_STARTED", "1h")?,
            stuck_ready: dur("WORKDO_STUCK_READY", "1h")?,
            api_url: values
                .get("WORKDO_API_URL")
                .cloned()
                .unwrap_or_else(|| "http://127.0.0.1:7070".into()),
        };
        // Fail early on a URL lettre cannot use.
        crate::install_crypto();
        AsyncSmtpTransport::<Tokio1Executor>::from_url(&config.smtp_url)
            .map_err(|e| AlertError::Config(format!("WORKDO_SMTP_URL: {e}")))?;
        Ok(Some(config))
    }
}

/// A rendered mail.
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    pub subject: String,
    pub body: String,
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn excerpt(text: &str) -> String {
    if text.chars().count() <= TEXT_EXCERPT {
        text.to_string()
    } else {
        let cut: String = text.chars().take(TEXT_EXCERPT).collect();
        format!(
            "{cut}\n[… {} more characters]",
            text.chars().count() - TEXT_EXCERPT
        )
    }
}

/// The mail for one step in error.
pub fn render_step_error(p: &Value, api_url: &str) -> Mail {
    let (object, template, step) = (s(p, "object"), s(p, "template"), s(p, "step"));
    let attempts = p.get("attempts").and_then(Value::as_i64).unwrap_or(0);
    let max = p.get("max_attempts").and_then(Value::as_i64).unwrap_or(0);
    let subject =
        format!("[workdo] {template}:{step} failed for {object} after {attempts} attempts");
    let mut body = format!(
        "The step {step} of {template} on {object} (version {}) is in error after {attempts} of {max} attempts.\n\n\
         Message:      {}\nFirst failed: {}\nLast failed:  {}\n",
        p.get("version").and_then(Value::as_i64).unwrap_or(1),
        if s(p, "message").is_empty() {
            "(none)"
        } else {
            s(p, "message")
        },
        s(p, "first_failed_at"),
        s(p, "last_failed_at"),
    );
    if !s(p, "text").is_empty() {
        body.push_str(&format!("\nError text:\n{}\n", excerpt(s(p, "text"))));
    }
    body.push_str(&format!(
        "\nRetry it (attempts start again):\n  workdo retry --object {object} --template {template} --step {step}\n  \
         curl -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n    \
         -d '{}' {api_url}/api/retry\n\nSee why:\n  workdo why {object} {template} {step}\n",
        json!({"object": object, "template": template, "step": step})
    ));
    Mail { subject, body }
}

/// The digest of failures folded while a template step's mail was throttled.
pub fn render_digest(template: &str, step: &str, payloads: &[Value], total: usize) -> Mail {
    let subject = format!("[workdo] {total} more failures of {template}:{step}");
    let mut body = format!(
        "{total} more objects failed at {template}:{step} after their last attempt since the previous mail.\n\n"
    );
    for p in payloads.iter().take(DIGEST_LIST) {
        body.push_str(&format!(
            "  {}  attempts {}  {}\n",
            s(p, "object"),
            p.get("attempts").and_then(Value::as_i64).unwrap_or(0),
            s(p, "message")
        ));
    }
    if total > DIGEST_LIST {
        body.push_str(&format!("  … and {} more\n", total - DIGEST_LIST));
    }
    body.push_str(&format!(
        "\nRetry them all:\n  workdo retry --template {template} --step {step}\nList them:\n  workdo queue {template}:{step} --errors\n"
    ));
    Mail { subject, body }
}

/// The stuck-step monitor's mail.
pub fn render_stuck(p: &Value) -> Mail {
    let list = |key: &str| {
        p.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (started, ready) = (list("started"), list("ready"));
    let subject = format!("[workdo] {} steps stuck", started.len() + ready.len());
    let mut body = String::new();
    let mut section = |title: String, rows: &[Value]| {
        if rows.is_empty() {
            return;
        }
        body.push_str(&title);
        for r in rows {
            body.push_str(&format!(
                "  {} {}:{} since {}\n",
                s(r, "object"),
                s(r, "template"),
                s(r, "step"),
                s(r, "since")
            ));
        }
        body.push('\n');
    };
    section(
        format!("Started longer than {}:\n", s(p, "started_threshold")),
        &started,
    );
    section(
        format!(
            "Ready and unclaimed longer than {}:\n",
            s(p, "ready_threshold")
        ),
        &ready,
    );
    body.push_str("Check the workers (`workdo status`, `workdo why OBJECT TEMPLATE STEP`).\n");
    Mail { subject, body }
}

/// Sends what the outbox holds.
pub struct Sender {
    store: Store,
    config: AlertConfig,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

/// What one pass of the sender did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub sent: usize,
    pub folded: usize,
    pub digests: usize,
    pub failed: usize,
}

/// A folded row: id, recipients, payload.
type Folded = (i64, Vec<String>, Value);

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    kind: String,
    template: Option<String>,
    step: Option<String>,
    recipients: Vec<String>,
    payload: Value,
    attempts: i32,
}

impl Sender {
    /// # Errors
    /// When the SMTP URL is unusable.
    pub fn new(store: Store, config: AlertConfig) -> Result<Self, AlertError> {
        crate::install_crypto();
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&config.smtp_url)
            .map_err(|e| AlertError::Config(format!("WORKDO_SMTP_URL: {e}")))?
            .timeout(Some(Duration::from_secs(10)))
            .build();
        Ok(Sender {
            store,
            config,
            transport,
        })
    }

    async fn send(&self, recipients: &[String], mail: &Mail) -> Result<(), String> {
        use tracing::Instrument;
        let span = tracing::info_span!("alert.mail", otel.name = %format!("mail {}", mail.subject));
        self.deliver(recipients, mail).instrument(span).await
    }

    async fn deliver(&self, recipients: &[String], mail: &Mail) -> Result<(), String> {
        let to: &[String] = if recipients.is_empty() {
            &self.config.to
        } else {
            recipients
        };
        let mut builder = Message::builder()
            .from(
                self.config
                    .from
                    .parse::<Mailbox>()
                    .map_err(|e| e.to_string())?,
            )
            .subject(&mail.subject)
            .header(ContentType::TEXT_PLAIN);
        for r in to {
            builder = builder.to(r
                .parse::<Mailbox>()
                .map_err(|e| format!("recipient {r:?}: {e}"))?);
        }
        let message = builder.body(mail.body.clone()).map_err(|e| e.to_string())?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// One pass: send due pending rows (throttled per template step), then digests whose
    /// interval has passed — or all digests at once when `flush` (shutdown).
    ///
    /// # Errors
    /// Database errors; SMTP errors only delay rows.
    pub async fn run_once(&self, flush: bool) -> Result<Report, AlertError> {
        use tracing::Instrument;
        self.pass(flush)
            .instrument(tracing::info_span!("alerts.send"))
            .await
    }

    async fn pass(&self, flush: bool) -> Result<Report, AlertError> {
        let mut report = Report::default();
        let mut tx = self.store.pool().begin().await?;
        let rows: Vec<Row> = sqlx::query_as(
            "select id, kind, template, step, recipients, payload, attempts from workdo.alert_outbox
              where status = 'pending' and next_attempt_at <= now()
              order by id limit 100 for update skip locked",
        )
        .fetch_all(&mut *tx)
        .await?;
        let interval = chrono::Duration::from_std(self.config.interval).unwrap_or_default();
        let now = Utc::now();
        let mut smtp_down = false;
        for row in rows {
            let key = format!(
                "step:{}:{}",
                row.template.as_deref().unwrap_or(""),
                row.step.as_deref().unwrap_or("")
            );
            let throttled = row.kind == "step_error"
                && last_sent(&mut tx, &key)
                    .await?
                    .is_some_and(|t| now - t < interval);
            if throttled {
                mark(&mut tx, &[row.id], "folded").await?;
                report.folded += 1;
                continue;
            }
            let mail = match row.kind.as_str() {
                "stuck" => render_stuck(&row.payload),
                _ => render_step_error(&row.payload, &self.config.api_url),
            };
            match self.send(&row.recipients, &mail).await {
                Ok(()) => {
                    mark(&mut tx, &[row.id], "sent").await?;
                    if row.kind == "step_error" {
                        set_sent(&mut tx, &key).await?;
                    }
                    report.sent += 1;
                }
                Err(e) => {
                    // Probably the server is down: back off this row and stop for now.
                    let delay = 2f64.powi(row.attempts.clamp(0, 8)).min(300.0);
                    sqlx::query(
                        "update workdo.alert_outbox set attempts = attempts + 1, last_error = $2,
                                next_attempt_at = now() + make_interval(secs => $3)
                          where id = $1",
                    )
                    .bind(row.id)
                    .bind(&e)
                    .bind(delay)
                    .execute(&mut *tx)
                    .await?;
                    tracing::warn!(error = %e, outbox = row.id, "alert mail failed; will retry");
                    report.failed += 1;
                    smtp_down = true;
                    break;
                }
            }
        }
        if !smtp_down {
            let folded: Vec<(i64, String, String, Vec<String>, Value)> = sqlx::query_as(
                "select id, coalesce(template, ''), coalesce(step, ''), recipients, payload from workdo.alert_outbox
                  where status = 'folded' order by id for update skip locked",
            )
            .fetch_all(&mut *tx)
            .await?;
            let mut groups: BTreeMap<(String, String), Vec<Folded>> = BTreeMap::new();
            for (id, t, st, r, p) in folded {
                groups.entry((t, st)).or_default().push((id, r, p));
            }
            for ((template, step), items) in groups {
                let key = format!("step:{template}:{step}");
                let due = flush
                    || last_sent(&mut tx, &key)
                        .await?
                        .is_none_or(|t| now - t >= interval);
                if !due {
                    continue;
                }
                let payloads: Vec<Value> = items.iter().map(|i| i.2.clone()).collect();
                let mail = render_digest(&template, &step, &payloads, items.len());
                let recipients = items.first().map(|i| i.1.clone()).unwrap_or_default();
                match self.send(&recipients, &mail).await {
                    Ok(()) => {
                        let ids: Vec<i64> = items.iter().map(|i| i.0).collect();
                        mark(&mut tx, &ids, "digested").await?;
                        set_sent(&mut tx, &key).await?;
                        report.digests += 1;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "alert digest failed; will retry");
                        report.failed += 1;
                        break;
                    }
                }
            }
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Rows not yet sent (pending or folded).
    pub async fn unsent(&self) -> Result<i64, AlertError> {
        Ok(sqlx::query_scalar(
            "select count(*) from workdo.alert_outbox where status in ('pending', 'folded')",
        )
        .fetch_one(self.store.pool())
        .await?)
    }

    /// Send until the outbox is empty (digests included), or until `deadline`.
    pub async fn flush(&self, deadline: Duration) -> Result<(), AlertError> {
        let until = std::time::Instant::now() + deadline;
        loop {
            self.run_once(true).await?;
            if self.unsent().await? == 0 || std::time::Instant::now() >= until {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The stuck-step monitor: at most one alert per interval listing steps started longer than
    /// `stuck_started`, or ready longer than `stuck_ready` (of steps that have workers: `bound`
    /// as `template:step`). Returns whether it raised one.
    pub async fn check_stuck(&self, bound: &[String]) -> Result<bool, AlertError> {
        check_stuck(&self.store, &self.config, bound).await
    }
}

async fn last_sent(
    tx: &mut Transaction<'_, Postgres>,
    key: &str,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("select last_sent_at from workdo.alert_throttle where key = $1 for update")
        .bind(key)
        .fetch_optional(&mut **tx)
        .await
}

async fn set_sent(tx: &mut Transaction<'_, Postgres>, key: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into workdo.alert_throttle (key, last_sent_at) values ($1, now())
         on conflict (key) do update set last_sent_at = now()",
    )
    .bind(key)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn mark(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[i64],
    status: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update workdo.alert_outbox set status = $2,
                sent_at = case when $2 in ('sent', 'digested') then now() else sent_at end
          where id = any($1)",
    )
    .bind(ids)
    .bind(status)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// See [`Sender::check_stuck`]; usable without SMTP (the row waits in the outbox).
pub async fn check_stuck(
    store: &Store,
    config: &AlertConfig,
    bound: &[String],
) -> Result<bool, AlertError> {
    let mut tx = store.pool().begin().await?;
    let interval = chrono::Duration::from_std(config.interval).unwrap_or_default();
    if last_sent(&mut tx, "monitor:stuck")
        .await?
        .is_some_and(|t| Utc::now() - t < interval)
    {
        return Ok(false);
    }
    let rows: Vec<(String, String, String, String, DateTime<Utc>)> = sqlx::query_as(
        "select 'started', object_id, template, name, coalesce(started_at, updated_at) from workdo.steps
          where status = 'started' and active and coalesce(started_at, updated_at) < now() - make_interval(secs => $1)
         union all
         select 'ready', object_id, template, name, run_at from workdo.steps
          where status = 'ready' and active and run_at < now() - make_interval(secs => $2)
            and template || ':' || name = any($3)
         order by 5 limit 200",
    )
    .bind(config.stuck_started.as_secs_f64())
    .bind(config.stuck_ready.as_secs_f64())
    .bind(bound)
    .fetch_all(&mut *tx)
    .await?;
    if rows.is_empty() {
        return Ok(false);
    }
    let entry = |r: &(String, String, String, String, DateTime<Utc>)| json!({"object": r.1, "template": r.2, "step": r.3, "since": r.4.to_rfc3339()});
    let payload = json!({
        "started": rows.iter().filter(|r| r.0 == "started").map(entry).collect::<Vec<_>>(),
        "ready": rows.iter().filter(|r| r.0 == "ready").map(entry).collect::<Vec<_>>(),
        "started_threshold": format!("{}s", config.stuck_started.as_secs()),
        "ready_threshold": format!("{}s", config.stuck_ready.as_secs()),
    });
    sqlx::query("insert into workdo.alert_outbox (kind, payload) values ('stuck', $1)")
        .bind(&payload)
        .execute(&mut *tx)
        .await?;
    set_sent(&mut tx, "monitor:stuck").await?;
    tx.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_error_mail_names_everything_needed_to_act() {
        let p = json!({"object": "druid:bb123cd4567", "template": "googleScannedBookWF", "step": "google-download",
            "version": 1, "attempts": 5, "max_attempts": 5, "message": "Item for barcode 1 not found",
            "text": "x".repeat(2100), "first_failed_at": "2026-11-22T03:00:00Z", "last_failed_at": "2026-11-22T03:05:00Z"});
        let m = render_step_error(&p, "http://h:7070");
        assert_eq!(
            m.subject,
            "[workdo] googleScannedBookWF:google-download failed for druid:bb123cd4567 after 5 attempts"
        );
        for needle in [
            "after 5 of 5 attempts",
            "Message:      Item for barcode 1 not found",
            "First failed: 2026-11-22T03:00:00Z",
            "Last failed:  2026-11-22T03:05:00Z",
            "[… 100 more characters]",
            "workdo retry --object druid:bb123cd4567 --template googleScannedBookWF --step google-download",
            "http://h:7070/api/retry",
        ] {
            assert!(
                m.body.contains(needle),
                "{needle:?} missing from\n{}",
                m.body
            );
        }
    }

    #[test]
    fn digest_counts_and_lists() {
        let payloads: Vec<Value> = (0..25)
            .map(|i| json!({"object": format!("o{i}"), "attempts": 3, "message": "m"}))
            .collect();
        let m = render_digest("aWF", "s", &payloads, 25);
        assert_eq!(m.subject, "[workdo] 25 more failures of aWF:s");
        assert!(m.body.contains("  o19  attempts 3  m") && !m.body.contains("o20 "));
        assert!(m.body.contains("… and 5 more"));
    }

    #[test]
    fn config_needs_recipients_and_valid_values() {
        let mut v = BTreeMap::new();
        assert!(
            AlertConfig::from_values(&v).expect("ok").is_none(),
            "no SMTP: no alerts"
        );
        v.insert(
            "WORKDO_SMTP_URL".to_string(),
            "smtp://127.0.0.1:2525".to_string(),
        );
        let e = AlertConfig::from_values(&v)
            .expect_err("no recipients")
            .to_string();
        assert!(e.contains("WORKDO_ALERT_TO"), "{e}");
        v.insert(
            "WORKDO_ALERT_TO".to_string(),
            "ops@example.org, lib@example.org".to_string(),
        );
        v.insert("WORKDO_ALERT_INTERVAL".to_string(), "soon".to_string());
        let e = AlertConfig::from_values(&v)
            .expect_err("bad interval")
            .to_string();
        assert!(e.contains("WORKDO_ALERT_INTERVAL=\"soon\""), "{e}");
        v.insert("WORKDO_ALERT_INTERVAL".to_string(), "90s".to_string());
        let c = AlertConfig::from_values(&v).expect("ok").expect("some");
        assert_eq!(c.to, vec!["ops@example.org", "lib@example.org"]);
        assert_eq!(c.interval, Duration::from_secs(90));
        v.insert("WORKDO_SMTP_URL".to_string(), "gopher://x".to_string());
        assert!(AlertConfig::from_values(&v).is_err());
    }
}
