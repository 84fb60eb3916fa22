//! Alert mail as text: what a step in error, a digest of folded failures and the stuck-step
//! monitor say. Pure: the outbox rows' payloads in, subject and body out.

use serde_json::{Value, json};

/// How much of an error text a mail quotes.
const TEXT_EXCERPT: usize = 2000;
/// Objects listed by name in a digest.
const DIGEST_LIST: usize = 20;

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
/// A state machine's `mail` action: its subject and body as the transition evaluated them.
pub fn render_machine_mail(p: &Value) -> Mail {
    Mail {
        subject: format!("[workdo] {}", s(p, "subject")),
        body: format!(
            "{}\n\n-- \n{} on {} (state {})\n",
            s(p, "body"),
            s(p, "template"),
            s(p, "object"),
            s(p, "state")
        ),
    }
}

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
}
