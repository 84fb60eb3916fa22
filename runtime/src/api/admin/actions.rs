//! What the overview's and a facet list's forms do: retry, skip or prioritize the chosen steps
//! or all a facet matches, and pause or resume a queue.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::{actor, enc, failure, field, form_pairs};
use crate::api::AppState;
use crate::store::Role;

pub(super) async fn act(State(s): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    // As `POST /api/priority`: injecting priority is the admin's (decided before any step
    // is looked up).
    let need = match field(&pairs, "action") {
        Some("prioritize") => Role::Admin,
        _ => Role::Robot,
    };
    let why = "giving steps a priority needs the admin role";
    let v = match super::actor_for(&s, &headers, &pairs, need, why).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    // "All matching": the facet's steps found again now, not the page's rows.
    let all = field(&pairs, "scope") == Some("all");
    let ids: Vec<i64> = if all {
        let (template, step, status) = (
            field(&pairs, "template").unwrap_or(""),
            field(&pairs, "step").unwrap_or(""),
            field(&pairs, "status").unwrap_or(""),
        );
        let text = |k: &str| field(&pairs, k).map(str::to_string);
        let filters = super::overview::Filters {
            lane: text("lane"),
            milestone: text("milestone"),
            property: text("property"),
            ..Default::default()
        };
        let filter = match filters.to_store() {
            Ok(f) => f,
            Err(e) => return failure(&e),
        };
        match s
            .store
            .steps_in_all(template, step, status, &filter, super::steps::ALL_MAX)
            .await
        {
            Ok((_, ids)) => ids,
            Err(e) => return failure(&e.to_string()),
        }
    } else {
        pairs
            .iter()
            .filter(|(k, _)| k == "id")
            .filter_map(|(_, v)| v.parse().ok())
            .collect()
    };
    let who = format!("ui:{}", v.role.as_str());
    // The chosen steps: retry acts on those in error, skip on those unfinished (the same
    // bulk commands as the CLI's, narrowed to the chosen ids).
    let n = ids.len();
    let chosen = crate::store::StepFilter {
        ids: Some(ids),
        ..Default::default()
    };
    let (done, verb) = match field(&pairs, "action") {
        Some("prioritize") => {
            let Some(priority) =
                field(&pairs, "priority").and_then(|p| p.trim().parse::<i32>().ok())
            else {
                return failure("the priority is not a whole number");
            };
            (
                s.store.steps_prioritize(&chosen, priority, &who).await,
                format!("Gave priority {priority} to"),
            )
        }
        Some("skip") => (s.store.steps_skip(&chosen, &who).await, "Skipped".into()),
        // "on today's functions": the retried steps' workflows move to the deployed
        // functions' current versions (retry --current-functions).
        _ if field(&pairs, "current_functions").is_some() => (
            s.store
                .steps_retry_current(&chosen, false, &who)
                .await
                .map(|(n, _)| n),
            "Retried on today's functions".into(),
        ),
        _ => (s.store.steps_retry(&chosen, &who).await, "Retried".into()),
    };
    let changed = match done {
        Ok(changed) => changed,
        Err(e) => return failure(&e.to_string()),
    };
    // Back to the list only when it is one of ours (no open redirect), saying what was done.
    let back = field(&pairs, "back")
        .filter(|b| b.starts_with("/ui/") && !b.starts_with("//"))
        .unwrap_or("/ui/errors");
    if back.chars().any(|c| c.is_control()) {
        return (
            StatusCode::BAD_REQUEST,
            "the form's back address contains a control character",
        )
            .into_response();
    }
    let said = if all {
        format!(
            "{verb} {} steps: all that matched ({} when the page was shown).",
            super::overview::count(changed as i64),
            super::overview::count(
                field(&pairs, "expected")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(n as i64)
            )
        )
    } else if changed == n {
        format!(
            "{verb} {}.",
            crate::output::plural(changed, "step", "steps")
        )
    } else {
        format!(
            "{verb} {changed} of the {n} chosen steps; the others had moved on (finished, or no longer in that status)."
        )
    };
    let sep = if back.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{back}{sep}done={}", enc(&said))).into_response()
}

/// Pause or resume a queue from the overview.
pub(super) async fn pause(State(s): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let v = match actor(&s, &headers, &pairs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (Some(template), Some(step)) = (field(&pairs, "template"), field(&pairs, "step")) else {
        return failure("the form names no template and step");
    };
    let done = if field(&pairs, "action") == Some("resume") {
        s.store.step_resume(template, step).await.map(|_| "resumed")
    } else {
        s.store
            .step_pause(template, step, &format!("ui:{}", v.role.as_str()), None)
            .await
            .map(|_| "paused")
    };
    match done {
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => failure(&e.to_string()),
    }
}
