//! The one access decision every route that starts, signals, changes or deletes goes through:
//! the token's role, a job-scoped token's job and signals, and a machine's own `access` rules
//! (who may start it, who may send which signal). The JSON routes, the workflow-service XML
//! routes and the admin page ask here, so no route can start a machine its rules forbid.

use axum::http::StatusCode;

use super::{ApiError, ApiResult, AppState, Caller};
use crate::store::Role;

/// What a request is about to do.
pub enum Act<'a> {
    /// Start (or re-create) workflows of `template`.
    Start { template: &'a str },
    /// Send `signal` to machine job `job`.
    Signal { job: i64, signal: &'a str },
    /// Anything else that changes or deletes: needs `role`.
    Change(Role),
}

fn forbidden(m: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, m)
}

/// 403 (or 404/409 naming what is missing) unless `c` may do `act`.
///
/// # Errors
/// What the caller may not do, or the database refused.
pub async fn decide(s: &AppState, c: &Caller, act: Act<'_>) -> ApiResult<()> {
    match act {
        Act::Change(role) => c.require(role),
        Act::Start { template } => {
            c.require(Role::Robot)?;
            // A machine may say who starts it (the current version is the one started). An
            // unknown template is the route's 404; any other failure to read it refuses, never
            // skips the rule.
            let t = match s.store.template_current(template).await {
                Ok(t) => t,
                Err(crate::store::StoreError::UnknownTemplate(_)) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if let Some(m) = &t.spec.machine
                && !m.access.clone().unwrap_or_default().may_start(c.0.as_str())
            {
                return Err(forbidden(format!(
                    "a {} token may not start {template}",
                    c.0.as_str()
                )));
            }
            Ok(())
        }
        Act::Signal { job, signal } => {
            if let Some(scope) = &c.1 {
                if scope.workflow != job || !scope.signals.iter().any(|x| x == signal) {
                    return Err(forbidden(format!(
                        "this token may only send {} to workflow {}",
                        scope.signals.join(", "),
                        scope.workflow
                    )));
                }
                return Ok(());
            }
            let (name, access) = match s.store.machine_access(job).await? {
                Some(found) => found,
                None if s.store.workflow_template_id(job).await?.is_none() => {
                    return Err(ApiError::not_found(format!("no workflow {job}")));
                }
                None => {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!("workflow {job} is not a machine job"),
                    ));
                }
            };
            if !access.may_signal(c.0.as_str(), signal) {
                return Err(forbidden(format!(
                    "a {} token may not send {signal:?} to {name}",
                    c.0.as_str()
                )));
            }
            Ok(())
        }
    }
}
