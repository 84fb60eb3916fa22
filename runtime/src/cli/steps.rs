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
        service_words: None,
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
    let f = known_filter(store, filter).await?;
    if !all
        && f.objects.is_empty()
        && f.template.is_none()
        && f.step.is_none()
        && f.property.is_none()
    {
        bail!(
            "prioritize needs at least one of --object, --template, --step or --property, or --all for every unfinished step"
        );
    }
    let n = crate::output::spinning(
        "prioritizing",
        store.steps_prioritize(&f, priority, &actor()),
    )
    .await?;
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
    (again, current_functions): (bool, bool),
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let f = known_filter(store, filter).await?;
    if again
        && f.objects.is_empty()
        && f.template.is_none()
        && f.step.is_none()
        && f.property.is_none()
    {
        bail!("retry --again needs at least one of --object, --template, --step or --property");
    }
    let (n, moved) = match (again, current_functions) {
        (_, true) => {
            crate::output::spinning("retrying", store.steps_retry_current(&f, again, &actor()))
                .await?
        }
        (true, false) => (
            crate::output::spinning("running again", store.steps_again(&f, &actor())).await?,
            0,
        ),
        (false, false) => (
            crate::output::spinning("retrying", store.steps_retry(&f, &actor())).await?,
            0,
        ),
    };
    let said = serde_json::json!({"steps": n, "pins_moved": moved});
    Ok(emit(out, json, &said, |o| {
        writeln!(o, "{n} steps put back in the queue")?;
        if current_functions {
            writeln!(
                o,
                "{moved} workflow function pin(s) moved to the current version"
            )?;
        }
        Ok(())
    })?)
}

pub(super) async fn skip(
    store: &Store,
    filter: &FilterArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let f = known_filter(store, filter).await?;
    if f.objects.is_empty() && f.template.is_none() && f.step.is_none() && f.property.is_none() {
        bail!("skip needs at least one of --object, --template, --step or --property");
    }
    let n = crate::output::spinning("skipping", store.steps_skip(&f, &actor())).await?;
    Ok(emit(out, json, &serde_json::json!({"steps": n}), |o| {
        writeln!(o, "{n} steps skipped")
    })?)
}

/// The bulk commands' filter, every `--object` it names registered: a misspelt one is an
/// error naming it (exit 2), before anything changes.
async fn known_filter(store: &Store, filter: &FilterArgs) -> Result<crate::store::StepFilter> {
    let f = step_filter(filter)?;
    if let Some(missing) = store.objects_missing(&f.objects).await? {
        return Err(crate::store::StoreError::UnknownObject(missing).into());
    }
    Ok(f)
}

/// A paused queue in a line, as `workdo pause` lists it and `workdo status` ends with it.
pub(super) fn paused_line(p: &crate::store::Paused) -> String {
    format!(
        "{}:{} since {} by {}{}",
        p.template,
        p.step,
        p.paused_at.format("%Y-%m-%d %H:%M:%S"),
        p.paused_by,
        p.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// `workdo pause [TEMPLATE:STEP]`: pause one, or list the paused.
pub(super) async fn pause(
    store: &Store,
    step: Option<&str>,
    reason: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let Some(step) = step else {
        let paused = store.paused_list().await?;
        return Ok(emit(out, json, &paused, |o| {
            if paused.is_empty() {
                writeln!(o, "no queue is paused")?;
            }
            for p in &paused {
                writeln!(o, "{}", paused_line(p))?;
            }
            Ok(())
        })?);
    };
    let (template, name) = split_step(step)?;
    let new = store.step_pause(template, name, &actor(), reason).await?;
    Ok(emit(
        out,
        json,
        &serde_json::json!({"paused": step, "was_running": new}),
        |o| {
            if new {
                writeln!(
                    o,
                    "{step} paused: its workers claim nothing until `workdo resume {step}`"
                )
            } else {
                writeln!(o, "{step} was already paused")
            }
        },
    )?)
}

/// `workdo resume TEMPLATE:STEP`.
pub(super) async fn resume(
    store: &Store,
    step: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let (template, name) = split_step(step)?;
    let was = store.step_resume(template, name).await?;
    Ok(emit(
        out,
        json,
        &serde_json::json!({"resumed": step, "was_paused": was}),
        |o| {
            if was {
                writeln!(o, "{step} resumed")
            } else {
                writeln!(o, "{step} was not paused")
            }
        },
    )?)
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
