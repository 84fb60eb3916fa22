//! The jobs' inbox: signals written for later (`signal_in`), marked taken, and the NOTIFY that
//! wakes the runtime's inbox loop.

use serde_json::Value;
use sqlx::{Postgres, Transaction};

use super::outcome::SIGNAL_CHANNEL;
use crate::store::Result;

pub(super) async fn mark_taken(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    outcome: &str,
) -> Result<()> {
    sqlx::query("update workdo.signals set processed_at = now(), outcome = $2 where id = $1")
        .bind(id)
        .bind(outcome)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// NOTIFY the runtimes' machine loops that these jobs have signals waiting.
pub(crate) async fn notify_signals(tx: &mut Transaction<'_, Postgres>, jobs: &[i64]) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = jobs.iter().map(i64::to_string).collect();
    sqlx::query("select pg_notify($1, j) from unnest($2::text[]) as j")
        .bind(SIGNAL_CHANNEL)
        .bind(&ids)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A signal for job `job` from outside a transition (a function action's result), in `tx`,
/// with its NOTIFY.
pub(crate) async fn signal_in(
    tx: &mut Transaction<'_, Postgres>,
    job: i64,
    signal: &str,
    data: &Value,
    actor: &str,
) -> Result<()> {
    insert_signal(tx, job, signal, data, actor).await?;
    notify_signals(tx, &[job]).await
}

/// A signal into job `job`'s inbox, taken after the transaction commits (whoever inserts it
/// sends or collects the NOTIFY).
pub(crate) async fn insert_signal(
    tx: &mut Transaction<'_, Postgres>,
    job: i64,
    signal: &str,
    data: &Value,
    actor: &str,
) -> Result<()> {
    sqlx::query(
        "insert into workdo.signals (workflow_id, signal, data, actor) values ($1, $2, $3, $4)",
    )
    .bind(job)
    .bind(signal)
    .bind(data)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
