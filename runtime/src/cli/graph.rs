//! `workdo graph OBJECT TEMPLATE`: a workflow's current step graph, generated subnets included,
//! as Mermaid or Graphviz DOT.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, bail};

use crate::store::{StepRow, Store};

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
                "dot" => super::machines::dot(m, Some(&mv.state)),
                _ => super::machines::mermaid(m, Some(&mv.state)),
            };
            out.write_all(text.as_bytes())?;
            return Ok(());
        }
    }
    let text = match format {
        "mermaid" => mermaid(&w.steps),
        "dot" => dot(&w.steps),
        other => bail!("--format {other:?}: use mermaid or dot"),
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Each step with its index, and the generator each generated step came from.
fn generator_of(s: &StepRow) -> Option<String> {
    s.generated
        .as_ref()
        .and_then(|g| g["generator"].as_str())
        .map(String::from)
}

/// Edges: each step's prerequisites, and a generator to the first steps of its subnet.
fn edges(steps: &[StepRow]) -> Vec<(usize, usize, bool)> {
    let index: BTreeMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        for p in &s.prereqs {
            if let Some(&j) = index.get(p.as_str()) {
                out.push((j, i, false));
            }
        }
        if s.prereqs.is_empty()
            && let Some(g) = generator_of(s)
            && let Some(&j) = index.get(g.as_str())
        {
            out.push((j, i, true));
        }
    }
    out
}

/// Mermaid flowchart: a node per step (name and status), each generator's subnet a subgraph,
/// dotted edges from a generator to the steps it composed first.
pub fn mermaid(steps: &[StepRow]) -> String {
    let mut s = String::from("flowchart TD\n");
    let node = |i: usize, st: &StepRow| {
        format!(
            "    s{i}[\"{}<br/>{}\"]\n",
            st.name.replace('"', "'"),
            st.status
        )
    };
    let mut subnets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, st) in steps.iter().enumerate() {
        match generator_of(st) {
            Some(g) => subnets.entry(g).or_default().push(i),
            None => s.push_str(&node(i, st)),
        }
    }
    for (g, members) in &subnets {
        s.push_str(&format!("  subgraph {g}-subnet [\"{g}: generated\"]\n"));
        for &i in members {
            s.push_str("  ");
            s.push_str(&node(i, &steps[i]));
        }
        s.push_str("  end\n");
    }
    for (a, b, composed) in edges(steps) {
        s.push_str(&format!(
            "    s{a} {} s{b}\n",
            if composed { "-.->" } else { "-->" }
        ));
    }
    s
}

/// Graphviz DOT: the same graph, subnets as clusters.
pub fn dot(steps: &[StepRow]) -> String {
    let mut s = String::from("digraph workflow {\n  rankdir=TB;\n  node [shape=box];\n");
    let node = |i: usize, st: &StepRow| {
        format!(
            "  s{i} [label=\"{}\\n{}\"];\n",
            st.name.replace('"', "'"),
            st.status
        )
    };
    let mut subnets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, st) in steps.iter().enumerate() {
        match generator_of(st) {
            Some(g) => subnets.entry(g).or_default().push(i),
            None => s.push_str(&node(i, st)),
        }
    }
    for (n, (g, members)) in subnets.iter().enumerate() {
        s.push_str(&format!(
            "  subgraph cluster_{n} {{\n    label=\"{g}: generated\";\n"
        ));
        for &i in members {
            s.push_str("  ");
            s.push_str(&node(i, &steps[i]));
        }
        s.push_str("  }\n");
    }
    for (a, b, composed) in edges(steps) {
        s.push_str(&format!(
            "  s{a} -> s{b}{};\n",
            if composed { " [style=dashed]" } else { "" }
        ));
    }
    s.push_str("}\n");
    s
}
