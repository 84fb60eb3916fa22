//! State machines from the CLI: `workdo signal`, `workdo machines migrate`, and how `show`,
//! `why` and `graph` present a machine job.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::actor;
use crate::output::emit;
use crate::store::{MachineView, Store};

/// `workdo signal OBJECT TEMPLATE SIGNAL`: the transition, then the signals the job sent itself.
pub(super) async fn signal(
    store: &Store,
    object: &str,
    template: &str,
    signal: &str,
    data: Option<&str>,
) -> Result<crate::store::Signalled> {
    let data: Value = match data {
        None => Value::Object(Default::default()),
        Some(text) => {
            crate::model::numbers::check_exact(text).context("--data")?;
            serde_json::from_str(text).with_context(|| format!("--data is not JSON: {text}"))?
        }
    };
    let job = store.machine_job(object, template).await?;
    Ok(store.machine_signal(job, signal, &data, &actor()).await?)
}

/// What a signal did, as `workdo signal` prints it.
pub(super) fn print_signalled(
    done: &crate::store::Signalled,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    emit(out, json, done, |o| {
        if done.queued {
            writeln!(
                o,
                "{}: the job is suspended; {} waits in its inbox until it is resumed",
                done.from, done.signal
            )?;
            return Ok(());
        }
        writeln!(o, "{} --{}--> {}", done.from, done.signal, done.to)?;
        for (s, to) in &done.followed {
            writeln!(o, "  then {s} --> {to}")?;
        }
        if done.finished {
            writeln!(o, "finished in {}", done.to)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// `workdo machines suspend|resume JOB`.
pub(super) async fn suspend(
    store: &Store,
    workflow: i64,
    suspend: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let done = store.machine_suspend(workflow, suspend, &actor()).await?;
    emit(out, json, &done, |o| {
        let word = if suspend { "suspended" } else { "resumed" };
        if done.changed {
            writeln!(o, "job {workflow} {word}")?;
        } else {
            writeln!(o, "job {workflow} was already {word}; nothing changed")?;
        }
        for (s, to) in &done.taken {
            writeln!(o, "  took {s} --> {to}")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// `workdo machines migrate TEMPLATE --to SHA256 [--map OLD=NEW …] [--workflow ID]`.
pub(super) async fn migrate(
    store: &Store,
    template: &str,
    to: &str,
    map: &[String],
    workflow: Option<i64>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let mut states = BTreeMap::new();
    for m in map {
        let Some((from, to)) = m.split_once('=') else {
            bail!("--map {m:?}: expected OLD=NEW");
        };
        states.insert(from.to_string(), to.to_string());
    }
    let n = store
        .machine_migrate(template, to, &states, workflow, &actor())
        .await?;
    emit(out, json, &serde_json::json!({"migrated": n}), |o| {
        writeln!(o, "{n} jobs of {template} migrated to {to}")
    })?;
    Ok(())
}

/// The lines `show` prints under a machine job.
pub(super) fn show(o: &mut dyn Write, m: &MachineView) -> std::io::Result<()> {
    writeln!(o, "state {}  variables {}", m.state, m.variables)?;
    if !m.accepts.is_empty() {
        writeln!(o, "accepts {}", m.accepts.join(", "))?;
    }
    for a in &m.alarms {
        writeln!(
            o,
            "alarm {} at {}",
            a["signal"].as_str().unwrap_or_default(),
            a["due_at"].as_str().unwrap_or_default()
        )?;
    }
    for c in &m.children {
        writeln!(
            o,
            "child {} {} on {} ({})",
            c["workflow_id"],
            c["template"].as_str().unwrap_or_default(),
            c["object"].as_str().unwrap_or_default(),
            c["state"]
                .as_str()
                .or(c["status"].as_str())
                .unwrap_or_default()
        )?;
    }
    if let Some(p) = m.parent {
        writeln!(o, "child of workflow {p}")?;
    }
    Ok(())
}

/// Why a job is where it is: its state, the signals it waits for, its alarms.
pub(super) fn why(m: &MachineView) -> Vec<String> {
    let mut out = vec![format!("in state {} (variables {})", m.state, m.variables)];
    if m.accepts.is_empty() {
        out.push("finished: it takes no more signals".into());
    } else {
        out.push(format!("waiting for a signal: {}", m.accepts.join(", ")));
    }
    for a in &m.alarms {
        out.push(format!(
            "alarm {} due at {}",
            a["signal"].as_str().unwrap_or_default(),
            a["due_at"].as_str().unwrap_or_default()
        ));
    }
    if m.suspended {
        out.push("suspended: it takes no signals until `workdo machines resume`".into());
    }
    for s in &m.inbox {
        out.push(format!(
            "in its inbox, not taken yet: {} from {} at {}",
            s["signal"].as_str().unwrap_or_default(),
            s["actor"].as_str().unwrap_or_default(),
            s["at"].as_str().unwrap_or_default()
        ));
    }
    out
}
