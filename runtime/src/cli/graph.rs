//! `workdo graph OBJECT TEMPLATE`: a workflow's current step graph, generated subnets included,
//! as Mermaid or Graphviz DOT.

use std::io::Write;

use anyhow::{Result, bail};

use crate::store::Store;

/// Print the graph of `object`'s `template` workflow (its active one, else the newest).
pub(super) async fn graph(
    store: &Store,
    object: &str,
    template: &str,
    format: &str,
    out: &mut impl Write,
) -> Result<()> {
    let view = store.object_view(object, 0).await?;
    let Some(w) = view
        .workflows
        .iter()
        .filter(|w| w.workflow.template == template)
        .max_by_key(|w| (w.workflow.active, w.workflow.version, w.workflow.id))
    else {
        return Err(store.missing(object, template, "").await.into());
    };
    // A machine job is drawn as its machine, its current state marked.
    if let Some(mv) = &w.machine {
        let spec = store.template_by_id(w.workflow.template_id).await?.spec;
        if let Some(m) = &spec.machine {
            let text = match format {
                "dot" => crate::graph::machine_dot(m, Some(&mv.state)),
                _ => crate::graph::machine_mermaid(m, Some(&mv.state)),
            };
            out.write_all(text.as_bytes())?;
            return Ok(());
        }
    }
    let text = match format {
        "mermaid" => crate::graph::mermaid(&w.steps),
        "dot" => crate::graph::dot(&w.steps),
        other => bail!("--format {other:?}: use mermaid or dot"),
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}
