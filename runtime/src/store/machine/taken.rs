//! What a job takes from outside: the signal a function call's end becomes, and whether a
//! rung alarm's signal still applies when it is taken.

use serde_json::Value;
use sqlx::{Postgres, Transaction};

use super::row::Job;
use crate::model::machine::call_end_data;
use crate::store::Result;

/// Machine call steps among `ids` that have just ended without the runtime's result of their
/// function — set by hand (robots may poll call steps, docs/dispatch.md), or put in `error` by the lease
/// sweep's last attempt: each tells its job, `done` or `error` with the step's note and
/// message, as the runtime's end of a call does. Without it the job waited for ever.
pub(crate) async fn calls_ended(tx: &mut Transaction<'_, Postgres>, ids: &[i64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    #[derive(sqlx::FromRow)]
    struct Ended {
        id: i64,
        workflow_id: i64,
        name: String,
        status: String,
        note: Option<String>,
        error_message: Option<String>,
    }
    let ended: Vec<Ended> = sqlx::query_as(
        "select s.id, s.workflow_id, s.name, s.status::text as status, s.note, s.error_message
           from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
          where s.id = any($1) and s.status in ('completed', 'error', 'exception')
            and starts_with(s.name, 'call/') and w.machine is not null
          order by s.id",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    for e in ended {
        let signal = if e.status == "completed" {
            "done"
        } else {
            "error"
        };
        let data = call_end_data(&e.name, e.note.as_deref(), e.error_message.as_deref());
        let actor = format!("call:{}", e.id);
        super::inbox::signal_in(tx, e.workflow_id, signal, &data, &actor).await?;
    }
    Ok(())
}

/// Why an alarm's signal taken from the inbox no longer applies: its alarm was cancelled, or
/// the job is in another state than the one that set it.
pub(super) async fn alarm_left(
    tx: &mut Transaction<'_, Postgres>,
    data: &Value,
    job: &Job,
) -> Result<Option<String>> {
    let Some(id) = data.get("alarm").and_then(Value::as_i64) else {
        return Ok(None);
    };
    let row: Option<(String, bool)> =
        sqlx::query_as("select state, cancelled_at is not null from workdo.alarms where id = $1")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
    let state = job.record().unwrap_or_default().state;
    Ok(match row {
        Some((set_in, cancelled)) if cancelled || set_in != state => {
            Some(format!("the alarm was set in {set_in}, which the job left"))
        }
        _ => None,
    })
}
