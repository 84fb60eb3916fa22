//! `workdo objects add` and `workdo start`: registering objects and starting workflows on them.

use std::collections::BTreeMap;
use std::io::Write;

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
        let content = std::fs::read_to_string(path)
            .with_context(|| format!("--document {name}: cannot read {path}"))?;
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

/// Start a template on objects.
pub(super) async fn start(
    store: &Store,
    args: StartArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let context = match &args.context {
        None => Value::Object(Default::default()),
        Some(text) => serde_json::from_str(text)
            .with_context(|| format!("--context is not valid JSON: {text}"))?,
    };
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
    let started = store
        .workflow_start(&req)
        .await
        .map_err(anyhow::Error::from);
    super::idempotent::once_end(store, key.as_deref(), &started).await?;
    let started = started?;
    Ok(emit(out, json, &started, |o| {
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
