//! `workdo templates load|list|show`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::args::TemplatesCmd;

use crate::output::{emit, table};
use crate::store::{Saved, Store};

pub(super) async fn run(
    store: &Store,
    cmd: TemplatesCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        TemplatesCmd::Load { paths } => load(store, &paths, json, out).await,
        TemplatesCmd::List => list(store, json, out).await,
        TemplatesCmd::Show { name } => show(store, &name, json, out).await,
        TemplatesCmd::Versions { name } => {
            super::housekeeping::template_versions(store, &name, json, out).await
        }
        TemplatesCmd::Use { name, sha256 } => {
            super::housekeeping::template_use(store, &name, &sha256, json, out).await
        }
    }
}

/// Parse everything first: one bad file loads nothing, and every problem is reported.
async fn load(
    store: &Store,
    paths: &[std::path::PathBuf],
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    // Parse everything first: one bad file loads nothing, and every problem is reported.
    let mut loaded = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let files = super::files::find_files(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if files.is_empty() {
            problems.push(format!("{}: no .yaml, .yml or .xml files", path.display()));
        }
        for f in files {
            match super::files::parse_file(&f) {
                Ok(l) => loaded.push(l),
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    if !problems.is_empty() {
        bail!("nothing loaded:\n{}", problems.join("\n"));
    }
    // Bricklet files first: a template's generators may name them.
    loaded.sort_by_key(|l| l.kind != crate::model::template::Kind::Bricklet);
    // One transaction: a file the database refuses (its name is a machine's already, it names
    // a bricklet not loaded, a schedule of it starts a template not loaded) loads nothing, as a
    // file that does not parse.
    let all = store
        .templates_save_all(&loaded)
        .await
        .map_err(|(origin, e)| anyhow::anyhow!("nothing loaded:\n{origin}: {e}"))?;
    let mut report = Vec::new();
    for (l, (id, saved)) in loaded.iter().zip(all) {
        let mut r = serde_json::json!({
            "name": l.template.name, "sha256": l.sha256, "id": id, "new": saved == Saved::New,
            "saved": saved.as_str(), "steps": l.template.steps.len(), "origin": l.origin,
        });
        if let Saved::MadeCurrent { loaded_at } = saved {
            r["first_loaded_at"] = serde_json::json!(loaded_at);
        }
        report.push((r, saved));
    }
    let rows: Vec<&Value> = report.iter().map(|(r, _)| r).collect();
    emit(out, json, &rows, |o| {
        for (l, (_, saved)) in loaded.iter().zip(&report) {
            // A state machine is counted in states, not in the steps it has none of.
            let size = match &l.template.machine {
                Some(m) => crate::output::plural(m.states.len(), "state", "states"),
                None => crate::output::plural(l.template.steps.len(), "step", "steps"),
            };
            let what = format!(
                "{}{} ({size}, sha256 {}) from {}",
                if l.kind == crate::model::template::Kind::Bricklet {
                    "bricklet "
                } else {
                    ""
                },
                l.template.name,
                &l.sha256[..12],
                l.origin
            );
            match saved {
                Saved::New => writeln!(o, "loaded {what}")?,
                Saved::Unchanged => writeln!(o, "unchanged {what}")?,
                Saved::MadeCurrent { loaded_at } => writeln!(
                    o,
                    "made current again {what}: the version first loaded at {}, sha256 {}, is \
                     the current version again; new workflows start on it",
                    loaded_at.format("%Y-%m-%d %H:%M:%S UTC"),
                    &l.sha256[..12]
                )?,
            }
        }
        Ok(())
    })?;
    Ok(())
}

async fn list(store: &Store, json: bool, out: &mut impl Write) -> Result<()> {
    let mut rows = store.template_list().await?;
    rows.extend(store.bricklet_list().await?);
    emit(out, json, &rows, |o| {
        table(
            o,
            &["template", "kind", "steps", "versions", "sha256", "loaded"],
            rows.iter().map(|r| {
                vec![
                    r.name.clone(),
                    if r.kind == "bricklet" {
                        "bricklet".into()
                    } else {
                        "template".into()
                    },
                    r.spec.steps.len().to_string(),
                    r.versions.to_string(),
                    r.sha256[..12].to_string(),
                    r.loaded_at.format("%Y-%m-%d %H:%M").to_string(),
                ]
            }),
        )
    })?;
    Ok(())
}

async fn show(store: &Store, name: &str, json: bool, out: &mut impl Write) -> Result<()> {
    let row = match store.template_current(name).await {
        Ok(row) => row,
        Err(e) => store.bricklet_current(name).await?.ok_or(e)?,
    };
    emit(out, json, &row, |o| {
        writeln!(
            o,
            "{} (sha256 {}, {} version(s))",
            row.name, row.sha256, row.versions
        )?;
        table(
            o,
            &[
                "step",
                "prerequisites",
                "lifecycle",
                "error-limit",
                "function",
                "dispatch",
            ],
            row.spec.steps.iter().map(|s| {
                vec![
                    s.name.clone(),
                    s.prereqs.join(", "),
                    s.lifecycle.clone().unwrap_or_default(),
                    s.error_limit.to_string(),
                    match (&s.function, s.skip_queue) {
                        (_, true) => "skip-queue".into(),
                        (None, _) if s.observe.is_some() || s.generate.is_some() => {
                            "runtime".into()
                        }
                        (None, _) => "human".into(),
                        (Some(f), _) => format!("{:?}", f.runner)
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_lowercase(),
                    },
                    dispatch_of(s),
                ]
            }),
        )?;
        for b in &row.spec.bricklets {
            writeln!(
                o,
                "bricklet {}{}: {}",
                b.name,
                b.compensate
                    .as_ref()
                    .map(|c| format!(" (compensated by {c})"))
                    .unwrap_or_default(),
                b.steps
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

/// What a step does in dynamic dispatch: the document and rules it observes, or the refset
/// and construction rules it composes.
fn dispatch_of(s: &crate::model::template::StepSpec) -> String {
    use crate::model::dispatch::Construction;
    if let Some(o) = &s.observe {
        let rules: Vec<String> = o
            .rules
            .iter()
            .map(|r| {
                format!(
                    "{} {} -> {} [{}]",
                    r.op.as_str(),
                    r.xpath,
                    r.generator,
                    r.bricklets.join(", ")
                )
            })
            .collect();
        return format!("observes {}: {}", o.document, rules.join("; "));
    }
    if let Some(g) = &s.generate {
        let rules: Vec<String> = g
            .rules
            .iter()
            .map(|r| match r {
                Construction::Before([a, b]) => format!("{a} < {b}"),
                Construction::Sequence(a) => format!("{a} in sequence"),
                Construction::Parallel(a) => format!("{a} in parallel"),
            })
            .collect();
        return format!(
            "generates from refset [{}]{}",
            g.refset.join(", "),
            if rules.is_empty() {
                String::new()
            } else {
                format!(": {}", rules.join(", "))
            }
        );
    }
    String::new()
}
