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

use chrono::Utc;
use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Message};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::model::alert::{Mail, render_digest, render_step_error, render_stuck};
use crate::store::{FoldedRow, OutboxMark, OutboxRow, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("alert configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Send(String),
    /// The mail can never be delivered as it is (a malformed address, or the server's permanent
    /// refusal): retrying would not help.
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Store(#[from] StoreError),
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

/// How many times an alert mail is tried before it ends `failed` (about an hour and a half of
/// tries, the delays doubling up to five minutes).
pub const MAX_ALERT_ATTEMPTS: i32 = 25;

fn parse_duration(key: &str, v: &str) -> Result<Duration, AlertError> {
    crate::model::template::parse_duration_secs(v)
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

    async fn send(&self, recipients: &[String], mail: &Mail) -> Result<(), AlertError> {
        use tracing::Instrument;
        let span = tracing::info_span!("alert.mail", otel.name = %format!("mail {}", mail.subject));
        self.deliver(recipients, mail).instrument(span).await
    }

    async fn deliver(&self, recipients: &[String], mail: &Mail) -> Result<(), AlertError> {
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
                    .map_err(|e| AlertError::Rejected(e.to_string()))?,
            )
            .subject(&mail.subject)
            .header(ContentType::TEXT_PLAIN);
        for r in to {
            builder = builder.to(r
                .parse::<Mailbox>()
                .map_err(|e| AlertError::Rejected(format!("recipient {r:?}: {e}")))?);
        }
        let message = builder
            .body(mail.body.clone())
            .map_err(|e| AlertError::Rejected(e.to_string()))?;
        self.transport.send(message).await.map(|_| ()).map_err(|e| {
            if e.is_permanent() {
                AlertError::Rejected(e.to_string())
            } else {
                AlertError::Send(e.to_string())
            }
        })
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
        let mut outbox = self.store.outbox_begin().await?;
        let rows: Vec<OutboxRow> = outbox.due(100).await?;
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
                && outbox
                    .last_sent(&key)
                    .await?
                    .is_some_and(|t| now - t < interval);
            if throttled {
                outbox.mark(&[row.id], OutboxMark::Folded).await?;
                report.folded += 1;
                continue;
            }
            let mail = match row.kind.as_str() {
                "stuck" => render_stuck(&row.payload),
                "mail" => crate::model::alert::render_machine_mail(&row.payload),
                _ => render_step_error(&row.payload, &self.config.api_url),
            };
            match self.send(&row.recipients, &mail).await {
                Ok(()) => {
                    tracing::info!(outbox = row.id, kind = %row.kind, to = ?row.recipients,
                        subject = %mail.subject, "alert mail sent");
                    outbox.mark(&[row.id], OutboxMark::Sent).await?;
                    if row.kind == "step_error" {
                        outbox.set_sent(&key).await?;
                    }
                    report.sent += 1;
                }
                // This mail can never go as it is: it ends `failed`; the others still go.
                Err(AlertError::Rejected(e)) => {
                    outbox.delay(row.id, &e, None).await?;
                    warn!(error = %e, outbox = row.id, "alert mail refused for good; marked failed");
                    report.failed += 1;
                }
                Err(e) => {
                    // Probably the server is down: back off this row and stop for now; after
                    // MAX_ALERT_ATTEMPTS tries it ends `failed`.
                    let e = e.to_string();
                    let last = row.attempts + 1 >= MAX_ALERT_ATTEMPTS;
                    let delay = 2f64.powi(row.attempts.clamp(0, 8)).min(300.0);
                    outbox
                        .delay(row.id, &e, (!last).then(|| Duration::from_secs_f64(delay)))
                        .await?;
                    warn!(error = %e, outbox = row.id, last, "alert mail failed");
                    report.failed += 1;
                    smtp_down = true;
                    break;
                }
            }
        }
        if !smtp_down {
            let mut groups: BTreeMap<(String, String), Vec<FoldedRow>> = BTreeMap::new();
            for f in outbox.folded().await? {
                groups
                    .entry((f.template.clone(), f.step.clone()))
                    .or_default()
                    .push(f);
            }
            for ((template, step), items) in groups {
                let key = format!("step:{template}:{step}");
                let due = flush
                    || outbox
                        .last_sent(&key)
                        .await?
                        .is_none_or(|t| now - t >= interval);
                if !due {
                    continue;
                }
                let payloads: Vec<Value> = items.iter().map(|i| i.payload.clone()).collect();
                let mail = render_digest(&template, &step, &payloads, items.len());
                let recipients = items
                    .first()
                    .map(|i| i.recipients.clone())
                    .unwrap_or_default();
                match self.send(&recipients, &mail).await {
                    Ok(()) => {
                        tracing::info!(%template, %step, alerts = items.len(), to = ?recipients,
                            "alert digest sent");
                        let ids: Vec<i64> = items.iter().map(|i| i.id).collect();
                        outbox.mark(&ids, OutboxMark::Digested).await?;
                        outbox.set_sent(&key).await?;
                        report.digests += 1;
                    }
                    Err(AlertError::Rejected(e)) => {
                        for i in &items {
                            outbox.delay(i.id, &e, None).await?;
                        }
                        warn!(error = %e, %template, %step, "alert digest refused for good; marked failed");
                        report.failed += 1;
                    }
                    Err(e) => {
                        warn!(error = %e, "alert digest failed; will retry");
                        report.failed += 1;
                        break;
                    }
                }
            }
        }
        outbox.commit().await?;
        Ok(report)
    }

    /// Rows not yet sent (pending or folded).
    pub async fn unsent(&self) -> Result<i64, AlertError> {
        Ok(self.store.outbox_unsent().await?)
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

/// See [`Sender::check_stuck`]; usable without SMTP (the row waits in the outbox).
///
/// # Errors
/// Database errors.
pub async fn check_stuck(
    store: &Store,
    config: &AlertConfig,
    bound: &[String],
) -> Result<bool, AlertError> {
    Ok(store
        .outbox_raise_stuck(
            config.interval,
            config.stuck_started,
            config.stuck_ready,
            bound,
        )
        .await?)
}

/// The alert service: send mail every second, look for stuck steps every `stuck_every`, and
/// flush on shutdown.
pub async fn serve(
    sender: Sender,
    bound: Vec<String>,
    stuck_every: Duration,
    stop: CancellationToken,
) {
    let mut last_stuck = std::time::Instant::now();
    loop {
        if last_stuck.elapsed() >= stuck_every {
            last_stuck = std::time::Instant::now();
            if let Err(e) = sender.check_stuck(&bound).await {
                warn!(error = %e, "stuck-step check failed");
            }
        }
        if let Err(e) = sender.run_once(false).await {
            warn!(error = %e, "sending alerts failed");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.cancelled() => break,
        }
    }
    // Do not leave mail behind: send what is pending, digests included (bounded wait).
    if let Err(e) = sender.flush(Duration::from_secs(30)).await {
        warn!(error = %e, "flushing alerts on shutdown failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
