//! `workdo objects add` and `workdo start`: registering objects and starting workflows on them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::actor;
use super::args::StartArgs;
use crate::output::emit;
use crate::store::{StartRequest, Store};

/// Register an object, or update its properties and documents (`NAME=FILE`).
pub(super) async fn add(
    store: &Store,
    id: &str,
    props: &BTreeMap<String, serde_json::Value>,
    documents: &[String],
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let mut docs = BTreeMap::new();
    for d in documents {
        let (name, path) = d
            .split_once('=')
            .with_context(|| format!("--document {d:?}: expected NAME=FILE"))?;
        let content = super::files::read_text(Path::new(path))
            .with_context(|| format!("--document {name}"))?;
        docs.insert(name.to_string(), content);
    }
    let created = store.object_put(id, props, &docs, &actor()).await?;
    Ok(emit(
        out,
        json,
        &serde_json::json!({"id": id, "created": created}),
        |o| writeln!(o, "{} {id}", if created { "registered" } else { "updated" }),
    )?)
}

/// One object of a `--from` file: its id, properties and documents.
struct Row {
    id: String,
    properties: BTreeMap<String, Value>,
    documents: BTreeMap<String, String>,
}

/// The rows of a `--from` file: JSON lines, or a CSV with an `id` column (its other columns are
/// string properties; an empty cell sets nothing). Every problem names the file and line.
fn rows_of(path: &Path) -> Result<Vec<Row>> {
    let text = super::files::read_text(path)?;
    // A byte-order mark (spreadsheets write one) is not part of the first cell.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let at = |line: usize| format!("{}:{}", path.display(), line + 1);
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    let mut rows = Vec::new();
    let Some(&(first_at, first)) = lines.first() else {
        return Ok(rows);
    };
    if first.trim_start().starts_with('{') {
        for (n, line) in lines {
            crate::model::numbers::check_exact(line).map_err(|e| {
                // One line of the file: its column, not "line 1".
                anyhow::anyhow!(
                    "{}: {}",
                    at(n),
                    e.to_string().replacen(
                        &format!("at line 1, column {}", e.column),
                        &format!("at column {}", e.column),
                        1
                    )
                )
            })?;
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}: not a JSON object", at(n)))?;
            let id = v["id"]
                .as_str()
                .with_context(|| format!("{}: no \"id\" string", at(n)))?;
            let id = crate::model::object_id::normalize(id)
                .map_err(|e| anyhow::anyhow!("{}: {e}", at(n)))?;
            let properties = match &v["properties"] {
                Value::Null => BTreeMap::new(),
                Value::Object(m) => m.clone().into_iter().collect(),
                _ => anyhow::bail!("{}: \"properties\" must be an object", at(n)),
            };
            let documents = match &v["documents"] {
                Value::Null => BTreeMap::new(),
                Value::Object(m) => m
                    .iter()
                    .map(|(k, d)| match d {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        _ => Err(anyhow::anyhow!(
                            "{}: document {k:?} must be a string (its content)",
                            at(n)
                        )),
                    })
                    .collect::<Result<_>>()?,
                _ => anyhow::bail!("{}: \"documents\" must be an object", at(n)),
            };
            rows.push(Row {
                id,
                properties,
                documents,
            });
        }
        return Ok(rows);
    }
    // A CSV read by a CSV reader: quoted cells ("Smith, John"), doubled quotes and line breaks
    // inside quotes, as spreadsheets write them; `#` lines and blank lines skipped.
    // `first` is a slice of `text`: the CSV starts where it does.
    let body = &text[(first.as_ptr() as usize).saturating_sub(text.as_ptr() as usize)..];
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(body.as_bytes());
    let line_of = |pos: Option<&csv::Position>| first_at + pos.map_or(1, |p| p.line() as usize) - 1;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| anyhow::anyhow!("{}: {e}", at(first_at)))?
        .iter()
        .map(str::to_string)
        .collect();
    let Some(id_col) = header.iter().position(|h| h == "id") else {
        anyhow::bail!(
            "{}: a CSV's header must have an \"id\" column (or give JSON lines)",
            at(first_at)
        );
    };
    for record in reader.records() {
        let record = record.map_err(|e| anyhow::anyhow!("{}: {e}", at(line_of(e.position()))))?;
        let n = line_of(record.position());
        if record.iter().all(str::is_empty) {
            continue;
        }
        if record.len() != header.len() {
            anyhow::bail!(
                "{}: {} cells, the header has {}",
                at(n),
                record.len(),
                header.len()
            );
        }
        let id = crate::model::object_id::normalize(&record[id_col])
            .map_err(|e| anyhow::anyhow!("{}: {e}", at(n)))?;
        let properties = header
            .iter()
            .zip(record.iter())
            .enumerate()
            .filter(|(i, (_, c))| *i != id_col && !c.is_empty())
            .map(|(_, (h, c))| (h.clone(), Value::String(c.to_string())))
            .collect();
        rows.push(Row {
            id,
            properties,
            documents: BTreeMap::new(),
        });
    }
    Ok(rows)
}

/// `workdo objects add --from FILE`: every row registered or updated (the command's own
/// `--property` values added to each), in file order; stops at the first row the database
/// refuses, naming it (rows before it are kept).
pub(super) async fn add_from(
    store: &Store,
    path: &Path,
    common: &BTreeMap<String, Value>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let rows = rows_of(path)?;
    let objects: Vec<crate::store::NewObject> = rows
        .into_iter()
        .map(|r| {
            let mut properties = common.clone();
            properties.extend(r.properties);
            crate::store::NewObject {
                id: r.id,
                properties,
                documents: r.documents,
            }
        })
        .collect();
    // One transaction: a file is registered whole or (an error) not at all.
    let new = crate::output::spinning(
        &format!("registering {} objects", objects.len()),
        store.objects_put(&objects, &actor()),
    )
    .await
    .with_context(|| format!("{}: nothing registered", path.display()))?;
    let created = new.iter().filter(|n| **n).count();
    let updated = new.len() - created;
    Ok(emit(
        out,
        json,
        &serde_json::json!({"registered": created, "updated": updated}),
        |o| writeln!(o, "{created} objects registered, {updated} updated"),
    )?)
}

/// The object ids of a `start --from` file.
fn ids_of(path: &Path) -> Result<Vec<String>> {
    let text = super::files::read_text(path)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .unwrap_or_default();
    if first.trim_start().starts_with('{')
        || first.split(',').any(|h| h.trim().trim_matches('"') == "id")
    {
        return Ok(rows_of(path)?.into_iter().map(|r| r.id).collect());
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(n, l)| {
            crate::model::object_id::normalize(l.trim())
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))
        })
        .collect()
}

/// Start a template on objects.
/// Past this many objects, `start` prints one line for them all.
const START_LINES: usize = 20;

pub(super) async fn start(
    store: &Store,
    args: StartArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let context = match &args.context {
        None => Value::Object(Default::default()),
        Some(text) => {
            crate::model::numbers::check_exact(text).context("--context")?;
            serde_json::from_str(text)
                .with_context(|| format!("--context is not valid JSON: {text}"))?
        }
    };
    let mut args = args;
    if let Some(path) = &args.from {
        // Each id once, in the order given (a set: a file of 100,000 ids is not 10^10
        // comparisons).
        let mut seen: std::collections::HashSet<String> = args.objects.iter().cloned().collect();
        for id in ids_of(path)? {
            if seen.insert(id.clone()) {
                args.objects.push(id);
            }
        }
    }
    let request = serde_json::json!({"start": [
        &args.template, &args.objects, args.version, args.priority, &args.lane,
        args.start_at, &context
    ]});
    let key = args.idempotency_key.clone();
    if super::idempotent::once_begin(store, key.as_deref(), &request, json, out).await? {
        return Ok(());
    }
    let req = StartRequest {
        template: args.template,
        objects: args.objects,
        version: args.version,
        priority: args.priority,
        lane: args.lane,
        start_at: args.start_at,
        context,
        actor: actor(),
        parent: None,
    };
    let started = crate::output::spinning(
        &format!("starting {} on {} objects", req.template, req.objects.len()),
        store.workflow_start(&req),
    )
    .await
    .map_err(anyhow::Error::from);
    super::idempotent::once_end(store, key.as_deref(), &started).await?;
    let started = started?;
    Ok(emit(out, json, &started, |o| {
        // Thousands of lines help no one: past a screenful, one line says what happened.
        if started.len() > START_LINES {
            let restarted = started.iter().filter(|s| s.replaced).count();
            let (first, last) = (
                started.iter().map(|s| s.workflow_id).min().unwrap_or(0),
                started.iter().map(|s| s.workflow_id).max().unwrap_or(0),
            );
            return writeln!(
                o,
                "started {} on {} objects ({} new, {} restarted; workflows {first} to {last}); --json lists each",
                req.template,
                started.len(),
                started.len() - restarted,
                restarted
            );
        }
        for s in &started {
            writeln!(
                o,
                "{} {} on {} (version {}, workflow {}){}",
                if s.replaced { "restarted" } else { "started" },
                s.template,
                s.object_id,
                s.version,
                s.workflow_id,
                if s.ready.is_empty() {
                    String::new()
                } else {
                    format!("; ready: {}", s.ready.join(", "))
                }
            )?;
        }
        Ok(())
    })?)
}
