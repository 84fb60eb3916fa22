//! `workdo show`, `status`: what an object and the whole system look like.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;

use crate::output::{emit, table};
use crate::store::Store;

pub(super) async fn object(
    store: &Store,
    id: &str,
    events: i64,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let view = store.object_view(id, events).await?;
    Ok(emit(out, json, &view, |o| {
        writeln!(o, "{} (version {})", view.id, view.version)?;
        if view.properties.as_object().is_some_and(|p| !p.is_empty()) {
            writeln!(o, "properties: {}", view.properties)?;
        }
        if !view.documents.is_empty() {
            writeln!(o, "documents: {}", view.documents.join(", "))?;
        }
        for w in &view.workflows {
            // A superseded workflow's status is what it was when a newer object version
            // took its place; say that, not "active".
            let cancelled = w.machine.as_ref().is_some_and(|m| m.cancelled);
            let state = if cancelled {
                "cancelled with its parent".to_string()
            } else if w.workflow.active {
                w.workflow.status.clone()
            } else {
                format!(
                    "superseded by a newer object version, was {}",
                    w.workflow.status
                )
            };
            writeln!(
                o,
                "\n{} on object version {} [{state}] template sha256 {} priority {} lane {}",
                w.workflow.template,
                w.workflow.version,
                w.workflow.template_sha256.get(..12).unwrap_or_default(),
                w.workflow.priority,
                w.workflow.lane
            )?;
            if let Some(m) = &w.machine {
                super::machines::show(o, m)?;
                if w.steps.is_empty() {
                    continue;
                }
            }
            table(
                o,
                &[
                    "step",
                    "status",
                    "attempts",
                    "elapsed",
                    "lifecycle",
                    "note / error",
                ],
                w.steps.iter().map(|s| {
                    vec![
                        s.name.clone(),
                        s.status.clone(),
                        format!("{}/{}", s.attempts, s.max_attempts),
                        s.elapsed
                            .map(crate::output::human_duration)
                            .unwrap_or_default(),
                        s.lifecycle.clone().unwrap_or_default(),
                        crate::output::step_remark(
                            &s.status,
                            s.error_message.as_deref(),
                            s.note.as_deref(),
                            s.run_at,
                            chrono::Utc::now(),
                        ),
                    ]
                }),
            )?;
            for f in &w.functions {
                match (f.version, &f.sha256) {
                    (Some(v), Some(sha)) => writeln!(
                        o,
                        "  {} runs {} version {v} (sha256 {})",
                        f.step,
                        f.name,
                        sha.get(..12).unwrap_or_default()
                    )?,
                    _ => writeln!(o, "  {} runs {} (not deployed)", f.step, f.name)?,
                }
            }
        }
        for w in &view.workflows {
            dispatch_lines(o, &w.workflow.template, &w.workflow.dispatch)?;
        }
        if !view.milestones.is_empty() {
            writeln!(o, "\nmilestones:")?;
            for m in &view.milestones {
                writeln!(
                    o,
                    "  {} {} (version {})",
                    m.at.format("%Y-%m-%d %H:%M:%S"),
                    m.name,
                    m.version
                )?;
            }
        }
        if !view.events.is_empty() {
            writeln!(o, "\nevents:")?;
            for e in &view.events {
                writeln!(
                    o,
                    "  {} {} {}{}{}",
                    e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
                    e.kind,
                    e.template.clone().unwrap_or_default(),
                    e.step.as_ref().map(|s| format!(":{s}")).unwrap_or_default(),
                    e.status
                        .as_ref()
                        .map(|s| format!(" -> {s}"))
                        .unwrap_or_default()
                )?;
            }
        }
        Ok(())
    })?)
}

pub(super) fn status_table(
    o: &mut dyn Write,
    facets: &[crate::store::Facet],
) -> std::io::Result<()> {
    // One row per template step, one column per status present.
    let mut statuses: Vec<&str> = facets.iter().map(|f| f.status.as_str()).collect();
    let order = |s: &str| {
        crate::model::status::Status::BUILTIN
            .iter()
            .position(|b| *b == s)
            .unwrap_or(usize::MAX)
    };
    statuses.sort_by_key(|s| (order(s), s.to_string()));
    statuses.dedup();
    // Rows in the order the facets come: by template, then the steps' order in the template.
    let mut rows: Vec<((String, String), BTreeMap<String, i64>)> = Vec::new();
    for f in facets {
        let key = (f.template.clone(), f.step.clone());
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, counts)) => {
                counts.insert(f.status.clone(), f.count);
            }
            None => rows.push((key, BTreeMap::from([(f.status.clone(), f.count)]))),
        }
    }
    let mut headers = vec!["template", "step"];
    headers.extend(statuses.iter());
    table(
        o,
        &headers,
        rows.iter().map(|((t, s), counts)| {
            let mut row = vec![t.clone(), s.clone()];
            row.extend(statuses.iter().map(|st| {
                counts
                    .get(*st)
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into())
            }));
            row
        }),
    )
}

/// Why each bricklet was activated ([`crate::model::dispatch::activation_lines`]).
fn dispatch_lines(
    o: &mut dyn Write,
    template: &str,
    record: &serde_json::Value,
) -> std::io::Result<()> {
    let lines = crate::model::dispatch::activation_lines(record);
    if lines.is_empty() {
        return Ok(());
    }
    writeln!(o, "\n{template}: why its bricklets were activated")?;
    for (depth, line) in lines {
        writeln!(o, "{}{line}", "  ".repeat(depth + 1))?;
    }
    Ok(())
}

/// `workdo status`: the facets, paused steps, and hand-offs queued in Sidekiq past the
/// service's 12 hours (the runtime pushes each again).
pub(super) async fn status(
    store: &Store,
    template: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    if let Some(t) = template {
        store.template_current(t).await?; // a typo is said (exit 2), not "(none)"
    }
    let facets = store.facets(template).await?;
    let paused = store.paused_list().await?;
    let lost = store
        .handoff_queued_over(crate::runtime::handoff::PUSH_AGAIN_AFTER, 5)
        .await?;
    Ok(emit(out, json, &facets, |o| {
        status_table(o, &facets)?;
        for p in &paused {
            writeln!(o, "paused: {}", super::steps::paused_line(p))?;
        }
        for h in &lost {
            writeln!(
                o,
                "queued in Sidekiq over 12h: {} {}:{} (pushed {} to {}, {} push(es)); the \
                 runtime pushes it again",
                h.object_id,
                h.template,
                h.step,
                h.pushed_at.map(|p| p.to_rfc3339()).unwrap_or_default(),
                h.queue.as_deref().unwrap_or(""),
                h.attempts
            )?;
        }
        Ok(())
    })?)
}
