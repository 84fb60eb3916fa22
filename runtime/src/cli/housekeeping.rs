//! What an operator lists and tidies: `objects list|delete`, `workflows list|delete`,
//! `archive`, `schedules enable|disable|delete`, `templates versions|use`, `completions`.

use std::io::Write;

use anyhow::{Context, Result};
use chrono::Utc;

use super::actor;
use crate::output::{emit, table};
use crate::store::Store;

pub(super) async fn objects_list(
    store: &Store,
    prefix: Option<&str>,
    after: Option<&str>,
    limit: i64,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let rows = store.objects_list(prefix, after, limit).await?;
    emit(out, json, &rows, |o| {
        table(
            o,
            &[
                "object",
                "version",
                "workflows",
                "active",
                "updated",
                "properties",
            ],
            rows.iter().map(|r| {
                vec![
                    r.id.clone(),
                    r.version.to_string(),
                    r.workflows.to_string(),
                    r.active_workflows.to_string(),
                    r.updated_at.format("%Y-%m-%d %H:%M").to_string(),
                    r.properties.to_string(),
                ]
            }),
        )?;
        if rows.len() as i64 == limit
            && let Some(last) = rows.last()
        {
            writeln!(o, "more: --after {}", last.id)?;
        }
        Ok(())
    })?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn workflows_list(
    store: &Store,
    template: Option<&str>,
    status: Option<&str>,
    object: Option<&str>,
    after: i64,
    limit: i64,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let rows = store
        .workflows_list(template, status, object, after, limit)
        .await?;
    emit(out, json, &rows, |o| {
        table(
            o,
            &[
                "id",
                "object",
                "template",
                "version",
                "status",
                "unfinished",
                "state",
                "created",
            ],
            rows.iter().map(|r| {
                vec![
                    r.id.to_string(),
                    r.object_id.clone(),
                    r.template.clone(),
                    r.version.to_string(),
                    if r.active {
                        r.status.clone()
                    } else {
                        format!("{} (superseded)", r.status)
                    },
                    r.unfinished.to_string(),
                    r.state.clone().unwrap_or_default(),
                    r.created_at.format("%Y-%m-%d %H:%M").to_string(),
                ]
            }),
        )?;
        if rows.len() as i64 == limit
            && let Some(last) = rows.last()
        {
            writeln!(o, "more: --after {}", last.id)?;
        }
        Ok(())
    })?;
    Ok(())
}

pub(super) async fn archive(
    store: &Store,
    a: &super::args::ArchiveArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let mut said = serde_json::Map::new();
    if let Some(finished_before) = a.finished_before {
        let done = archive_finished(store, finished_before, a.batch, a.purge).await?;
        if let serde_json::Value::Object(fields) = serde_json::to_value(&done.0)? {
            said.extend(fields);
        }
        if !json {
            writeln!(
                out,
                "{} {} workflows finished before {} ({} steps, {} events, {} batches)",
                if a.purge { "purged" } else { "archived" },
                done.0.workflows,
                done.1.format("%Y-%m-%d %H:%M:%S UTC"),
                done.0.steps,
                done.0.events,
                done.0.batches
            )?;
        }
        // The space the moved rows held is reusable at once, not at autovacuum's next look:
        // the next starts fill it instead of growing the files (decision 0037).
        if done.0.workflows > 0 {
            let vacuumed = store.archived_tables_vacuum().await?;
            if !json && !vacuumed.is_empty() {
                writeln!(out, "vacuumed workdo.{}", vacuumed.join(", workdo."))?;
            }
            said.insert("vacuumed".into(), vacuumed.into());
        }
    }
    if let Some(older) = a.purge_archived_before {
        let before = Utc::now()
            - chrono::Duration::from_std(older).context("--purge-archived-before is too long")?;
        let mut gone = 0u64;
        loop {
            let n = store.archive_purge_before(before, a.batch).await?;
            if n == 0 {
                break;
            }
            gone += n;
        }
        said.insert("purged_from_archive".into(), gone.into());
        if !json {
            writeln!(
                out,
                "deleted {gone} workflows archived before {} from workdo.archive",
                before.format("%Y-%m-%d %H:%M:%S UTC")
            )?;
        }
    }
    if json {
        writeln!(out, "{}", serde_json::Value::Object(said))?;
    }
    Ok(())
}

/// Archive (or purge) the workflows finished before `finished_before`, a batch at a time.
async fn archive_finished(
    store: &Store,
    finished_before: std::time::Duration,
    batch: i64,
    purge: bool,
) -> Result<(crate::store::Archived, chrono::DateTime<Utc>)> {
    let before = Utc::now()
        - chrono::Duration::from_std(finished_before).context("--finished-before is too long")?;
    // A batch at a time, with a progress bar on a terminal (none when stderr is not one).
    let pending = store.archive_pending(before).await?;
    // The rate as a whole number a second (indicatif's own `{per_sec}` writes four decimals:
    // `1029.8555/s`).
    let bar = indicatif::ProgressBar::new(u64::try_from(pending).unwrap_or(0)).with_style(
        indicatif::ProgressStyle::with_template(
            "{msg} {wide_bar} {human_pos}/{human_len} workflows ({rate}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        ),
    );
    bar.set_message(if purge { "purging" } else { "archiving" });
    let mut done = crate::store::Archived::default();
    let mut cursor = None;
    loop {
        let b = store.archive_batch(before, batch, purge, cursor).await?;
        if b.workflows == 0 {
            // Once more from the start: a workflow another transaction held is behind the cursor.
            if cursor.take().is_some() {
                continue;
            }
            break;
        }
        cursor = b.cursor;
        done.workflows += b.workflows;
        done.steps += b.steps;
        done.events += b.events;
        done.batches += 1;
        bar.inc(b.workflows);
    }
    bar.finish_and_clear();
    Ok((done, before))
}

pub(super) async fn workflow_delete(store: &Store, id: i64, out: &mut impl Write) -> Result<()> {
    store.workflow_delete_by_id(id, &actor()).await?;
    writeln!(out, "deleted workflow {id}")?;
    Ok(())
}

pub(super) async fn object_delete(store: &Store, id: &str, out: &mut impl Write) -> Result<()> {
    store.object_delete(id, &actor()).await?;
    writeln!(out, "deleted object {id} with its workflows and documents")?;
    Ok(())
}

pub(super) async fn template_versions(
    store: &Store,
    name: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let rows = store.template_versions(name).await?;
    emit(out, json, &rows, |o| {
        table(
            o,
            &["sha256", "current", "loaded", "origin", "steps"],
            rows.iter().map(|r| {
                vec![
                    r.sha256.clone(),
                    if r.is_current {
                        "yes".into()
                    } else {
                        String::new()
                    },
                    r.loaded_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                    r.origin.clone().unwrap_or_default(),
                    r.spec.steps.len().to_string(),
                ]
            }),
        )
    })?;
    Ok(())
}

pub(super) async fn template_use(
    store: &Store,
    name: &str,
    sha: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let row = store.template_use(name, sha).await?;
    emit(out, json, &row, |o| {
        writeln!(
            o,
            "{name} {} (loaded {}) is the current version; new workflows start on it",
            &row.sha256[..12],
            row.loaded_at.format("%Y-%m-%d %H:%M:%S UTC")
        )
    })?;
    Ok(())
}

/// Shell completions for `shell`, printed.
pub(super) fn completions(shell: clap_complete::Shell, out: &mut impl Write) -> Result<()> {
    use clap::CommandFactory;
    let mut cmd = super::Cli::command();
    // clap_complete panics when its writer fails: write to memory, then print, so a closed
    // pipe (`workdo completions bash | head`) is the quiet exit every command makes.
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut cmd, "workdo", &mut text);
    out.write_all(&text)?;
    Ok(())
}
