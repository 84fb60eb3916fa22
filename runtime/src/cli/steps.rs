//! `workdo queue`, `step set`, `prioritize`, `retry`, `skip` and `why`: reading and changing steps.

use std::io::Write;

use anyhow::{Result, bail};

use super::args::{FilterArgs, QueueArgs, SetArgs};
use super::{actor, split_step, step_filter};
use crate::output::{emit, table};
use crate::store::{SetRequest, Store};

/// `workdo queues define|list|show|delete`.
pub(super) async fn queues(
    store: &Store,
    cmd: super::args::QueuesCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    use super::args::QueuesCmd;
    match cmd {
        QueuesCmd::Define {
            name,
            waiting,
            completed,
            property,
            property_json,
            lane,
        } => {
            let (t, s) = split_step(&waiting)?;
            let properties =
                serde_json::to_value(super::parse_properties(&property, &property_json)?)?;
            let q = crate::store::NamedQueue {
                name: name.clone(),
                template: t.to_string(),
                step: s.to_string(),
                completed,
                properties,
                lane,
            };
            store.queue_define(&q).await?;
            emit(out, json, &q, |o| writeln!(o, "queue {name} defined"))?;
        }
        QueuesCmd::List => {
            let rows = store.queue_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &["queue", "waiting at", "completed", "properties", "lane"],
                    rows.iter().map(|q| {
                        vec![
                            q.name.clone(),
                            format!("{}:{}", q.template, q.step),
                            q.completed.join(" "),
                            q.properties.to_string(),
                            q.lane.clone().unwrap_or_default(),
                        ]
                    }),
                )
            })?;
        }
        QueuesCmd::Show { name, limit } => {
            let rows = store.queue_named_waiting(&name, limit).await?;
            print_entries(&rows, json, out)?;
        }
        QueuesCmd::Delete { name } => {
            if !store.queue_delete(&name).await? {
                bail!("there is no queue {name:?} (workdo queues list)");
            }
            writeln!(out, "queue {name} deleted")?;
        }
    }
    Ok(())
}

/// A WorkDo queue: objects waiting at TEMPLATE:STEP, or those in error there.
pub(super) async fn queue(
    store: &Store,
    args: &QueueArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let (t, s) = split_step(&args.step)?;
    store.step_known(t, s).await?;
    if args.errors {
        let rows = store.queue_errors(t, s, args.limit).await?;
        return Ok(emit(out, json, &rows, |o| {
            table(
                o,
                &["object", "attempts", "message"],
                rows.iter().map(|r| {
                    vec![
                        r.object_id.clone(),
                        format!("{}/{}", r.attempts, r.max_attempts),
                        r.error_message.clone().unwrap_or_default(),
                    ]
                }),
            )
        })?);
    }
    let completed = args
        .completed
        .iter()
        .map(|c| split_step(c).map(|(a, b)| (a.to_string(), b.to_string())))
        .collect::<Result<Vec<_>>>()?;
    for (ct, cs) in &completed {
        store.step_known(ct, cs).await?;
    }
    let properties = serde_json::to_value(super::parse_properties(
        &args.property,
        &args.property_json,
    )?)?;
    let rows = store
        .queue_waiting_with(
            t,
            s,
            &completed,
            args.lane.as_deref(),
            &properties,
            args.limit,
        )
        .await?;
    print_entries(&rows, json, out)
}

/// A queue's entries as a table (or JSON).
fn print_entries(
    rows: &[crate::store::QueueEntry],
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    Ok(emit(out, json, &rows, |o| {
        table(
            o,
            &["object", "version", "lane", "status", "priority", "since"],
            rows.iter().map(|r| {
                vec![
                    r.object_id.clone(),
                    r.version.to_string(),
                    r.lane.clone(),
                    r.status.clone(),
                    r.priority.to_string(),
                    r.run_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                ]
            }),
        )
    })?)
}

/// The WorkDo update call.
pub(super) async fn set(
    store: &Store,
    args: SetArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let req = SetRequest {
        object: args.object,
        template: args.template,
        step: args.step,
        status: args.status,
        note: args.note,
        error_message: args.message,
        error_text: args.text,
        lifecycle: args.lifecycle,
        elapsed: args.elapsed,
        current_status: args.current_status,
        version: args.version,
        actor: actor(),
    };
    let outcome = store.step_set(&req).await?;
    Ok(emit(out, json, &outcome, |o| {
        writeln!(
            o,
            "{}:{} on {} is {}{}",
            req.template,
            req.step,
            req.object,
            outcome.step.status,
            if outcome.next_steps.is_empty() {
                String::new()
            } else {
                format!("; now ready: {}", outcome.next_steps.join(", "))
            }
        )
    })?)
}

pub(super) async fn prioritize(
    store: &Store,
    priority: i32,
    filter: &FilterArgs,
    all: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let f = step_filter(filter)?;
    if !all
        && f.object.is_none()
        && f.template.is_none()
        && f.step.is_none()
        && f.property.is_none()
    {
        bail!(
            "prioritize needs at least one of --object, --template, --step or --property, or --all for every unfinished step"
        );
    }
    let n = store.steps_prioritize(&f, priority, &actor()).await?;
    Ok(emit(
        out,
        json,
        &serde_json::json!({"steps": n, "priority": priority}),
        |o| writeln!(o, "priority {priority} set on {n} steps"),
    )?)
}

pub(super) async fn retry(
    store: &Store,
    filter: &FilterArgs,
    again: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let f = step_filter(filter)?;
    let n = if again {
        if f.object.is_none() && f.template.is_none() && f.step.is_none() && f.property.is_none() {
            bail!("retry --again needs at least one of --object, --template, --step or --property");
        }
        store.steps_again(&f, &actor()).await?
    } else {
        store.steps_retry(&f, &actor()).await?
    };
    Ok(emit(out, json, &serde_json::json!({"steps": n}), |o| {
        writeln!(o, "{n} steps put back in the queue")
    })?)
}

pub(super) async fn skip(
    store: &Store,
    filter: &FilterArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let f = step_filter(filter)?;
    if f.object.is_none() && f.template.is_none() && f.step.is_none() && f.property.is_none() {
        bail!("skip needs at least one of --object, --template, --step or --property");
    }
    let n = store.steps_skip(&f, &actor()).await?;
    Ok(emit(out, json, &serde_json::json!({"steps": n}), |o| {
        writeln!(o, "{n} steps skipped")
    })?)
}

/// Why a step is not running.
pub(super) async fn why(
    store: &Store,
    object: &str,
    template: &str,
    step: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Some(step) = step else {
        // A machine job: its state, the signals it waits for, its alarms.
        let job = store.machine_job(object, template).await?;
        let Some(m) = store.machine_view(job).await? else {
            bail!("{template} on {object} is not a machine job: name a step");
        };
        let reasons = super::machines::why(&m);
        return Ok(emit(
            out,
            json,
            &serde_json::json!({"workflow_id": job, "machine": m, "reasons": reasons}),
            |o| {
                writeln!(o, "{template} on {object} (job {job})")?;
                for r in &reasons {
                    writeln!(o, "  - {r}")?;
                }
                Ok(())
            },
        )?);
    };
    let why = store.why(object, template, step).await?;
    Ok(emit(out, json, &why, |o| {
        writeln!(
            o,
            "{}:{} on {} (version {}) is {}",
            why.step.template, why.step.name, why.step.object_id, why.step.version, why.step.status
        )?;
        for r in &why.reasons {
            writeln!(o, "  - {r}")?;
        }
        Ok(())
    })?)
}
