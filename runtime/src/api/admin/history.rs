//! An object's history a row a sentence: what each event did, from its kind, place, status and
//! detail.

/// What a history row's event did, in words, from its detail: a machine's signal, states and
/// reasons, which the kind, step and status columns do not say.
pub(super) fn summary(
    kind: &str,
    actor: Option<&str>,
    detail: Option<&serde_json::Value>,
) -> String {
    let Some(d) = detail else {
        return String::new();
    };
    let t = |k: &str| super::json_text(&d[k]);
    let by = actor.map(|a| format!(" by {a}")).unwrap_or_default();
    match kind {
        "signal_received" => format!("{} in {}{by}", t("signal"), t("state")),
        "state_entered" => format!("{} → {} on {}", t("from"), t("state"), t("signal")),
        "signal_refused" => format!(
            "{} refused in {}{by}: {}",
            t("signal"),
            t("state"),
            t("reason")
        ),
        "transition_rollback" => format!(
            "{} in {} rolled back: {}",
            t("transition"),
            t("state"),
            t("reason")
        ),
        "alarm_set" => format!("{} due {} (in {})", t("signal"), t("due_at"), t("state")),
        "alarm_fired" => t("signal"),
        "action_fired" => format!("{} on {} of {}", t("action"), t("association"), t("state")),
        "child_started" => format!("{} on {}", t("template"), t("object")),
        "children_cancelled" => format!("cancelled {}", t("children")),
        "job_cancelled" => format!("with its parent {}", t("parent")),
        "job_started" => format!("in {}", t("state")),
        "job_suspended" | "job_resumed" => {
            format!("in {}, {} signal(s) waiting{by}", t("state"), t("waiting"))
        }
        "released" | "lease_expired" => t("reason"),
        _ => String::new(),
    }
}

/// One history row in words: where (`template:step`, or the template alone), the status it
/// reached and the attempt, what the detail says, and who — never a dangling colon.
pub(super) fn happened(e: &crate::store::EventRow) -> String {
    let place = match (e.template.as_deref(), e.step.as_deref()) {
        (Some(t), Some(st)) if !t.is_empty() && !st.is_empty() => format!("{t}:{st}"),
        (Some(t), _) if !t.is_empty() => t.to_string(),
        (_, Some(st)) if !st.is_empty() => st.to_string(),
        _ => String::new(),
    };
    let what = summary(&e.kind, e.actor.as_deref(), e.detail.as_ref());
    let mut parts = Vec::new();
    match e.kind.as_str() {
        "workflow_started" => parts.push(format!("started {place}")),
        "workflow_completed" => parts.push(format!("{place} completed")),
        "object_registered" => parts.push("registered".to_string()),
        "object_updated" => parts.push("properties or documents changed".to_string()),
        _ => {
            if !place.is_empty() {
                parts.push(place);
            }
            if let Some(st) = e.status.as_deref().filter(|s| !s.is_empty()) {
                parts.push(format!("→ {st}"));
            }
        }
    }
    if let Some(a) = e.attempt.filter(|a| *a > 0) {
        parts.push(format!("(attempt {a})"));
    }
    if !what.is_empty() {
        parts.push(what.clone());
    } else if let Some(d) = &e.detail {
        for key in ["message", "note", "reason"] {
            if let Some(m) = d[key].as_str().filter(|m| !m.is_empty()) {
                parts.push(format!("— {m}"));
                break;
            }
        }
    }
    if let Some(a) = e.actor.as_deref().filter(|a| !a.is_empty())
        && !what.contains(" by ")
    {
        parts.push(format!("by {a}"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod summary_tests {
    use serde_json::json;

    #[test]
    fn machine_events_say_what_happened() {
        let d = json!({"signal": "approve", "state": "Notified", "reason": "not now"});
        assert_eq!(
            super::summary("signal_refused", Some("ann"), Some(&d)),
            "approve refused in Notified by ann: not now"
        );
        let d = json!({"from": "Review", "state": "Notified", "signal": "notified"});
        assert_eq!(
            super::summary("state_entered", None, Some(&d)),
            "Review → Notified on notified"
        );
        assert_eq!(super::summary("completed", None, None), "");
    }

    #[test]
    fn a_history_row_reads_as_one_line() {
        let row = |kind: &str, template: Option<&str>, step: Option<&str>, status: Option<&str>| {
            crate::store::EventRow {
                id: 1,
                at: chrono::Utc::now(),
                workflow_id: Some(1),
                template: template.map(String::from),
                version: Some(1),
                step: step.map(String::from),
                kind: kind.into(),
                status: status.map(String::from),
                attempt: None,
                actor: Some("robot".into()),
                detail: Some(json!({"message": "scanner jammed"})),
            }
        };
        assert_eq!(
            super::happened(&row("workflow_started", Some("accessionWF"), None, None)),
            "started accessionWF — scanner jammed by robot"
        );
        let line = super::happened(&row(
            "status_changed",
            Some("accessionWF"),
            Some("shelve"),
            Some("error"),
        ));
        assert_eq!(line, "accessionWF:shelve → error — scanner jammed by robot");
        assert!(!super::happened(&row("x", None, None, None)).starts_with(':'));
    }
}
