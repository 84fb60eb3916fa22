//! Workflows drawn as text: a step graph (generated subnets as subgraphs) or a machine's state
//! diagram, as Mermaid or Graphviz DOT. `workdo graph` prints them; the admin page shows them.

use std::collections::BTreeMap;

use crate::model::machine::Machine;
use crate::store::StepRow;

/// Each step with its index, and the generator each generated step came from.
fn generator_of(s: &StepRow) -> Option<String> {
    s.generated
        .as_ref()
        .and_then(|g| g["generator"].as_str())
        .map(String::from)
}

/// The template's own steps, and each generator's subnet (indices into `steps`).
fn partition(steps: &[StepRow]) -> (Vec<usize>, BTreeMap<String, Vec<usize>>) {
    let mut top = Vec::new();
    let mut subnets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, st) in steps.iter().enumerate() {
        match generator_of(st) {
            Some(g) => subnets.entry(g).or_default().push(i),
            None => top.push(i),
        }
    }
    (top, subnets)
}

/// Edges: each step's prerequisites, and a generator to the first steps of its subnet.
pub(crate) fn edges(steps: &[StepRow]) -> Vec<(usize, usize, bool)> {
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
    let (top, subnets) = partition(steps);
    for i in top {
        s.push_str(&node(i, &steps[i]));
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
    let (top, subnets) = partition(steps);
    for i in top {
        s.push_str(&node(i, &steps[i]));
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

/// A machine as a Mermaid state diagram: states, transitions by signal, global signals from
/// every non-final state, `current` marked.
pub fn machine_mermaid(m: &Machine, current: Option<&str>) -> String {
    let mut s = String::from("stateDiagram-v2\n");
    s.push_str(&format!("    [*] --> {}\n", m.initial));
    for (name, st) in &m.states {
        for (signal, t) in &st.on {
            s.push_str(&format!("    {name} --> {}: {signal}\n", t.target()));
        }
        if st.is_final {
            s.push_str(&format!("    {name} --> [*]\n"));
        } else {
            for (signal, t) in &m.global {
                if !st.on.contains_key(signal) {
                    s.push_str(&format!(
                        "    {name} --> {}: {signal} (global)\n",
                        t.target()
                    ));
                }
            }
        }
    }
    if let Some(c) = current {
        s.push_str(&format!(
            "    classDef current fill:#fd0\n    class {c} current\n"
        ));
    }
    s
}

/// The same as Graphviz DOT.
pub fn machine_dot(m: &Machine, current: Option<&str>) -> String {
    let mut s = String::from("digraph machine {\n  rankdir=LR;\n  start [shape=point];\n");
    for (name, st) in &m.states {
        let shape = if st.is_final {
            "doublecircle"
        } else {
            "circle"
        };
        let fill = if Some(name.as_str()) == current {
            ", style=filled, fillcolor=gold"
        } else {
            ""
        };
        s.push_str(&format!("  \"{name}\" [shape={shape}{fill}];\n"));
    }
    s.push_str(&format!("  start -> \"{}\";\n", m.initial));
    for (name, st) in &m.states {
        for (signal, t) in &st.on {
            s.push_str(&format!(
                "  \"{name}\" -> \"{}\" [label=\"{signal}\"];\n",
                t.target()
            ));
        }
        if !st.is_final {
            for (signal, t) in &m.global {
                if !st.on.contains_key(signal) {
                    s.push_str(&format!(
                        "  \"{name}\" -> \"{}\" [label=\"{signal}\", style=dashed];\n",
                        t.target()
                    ));
                }
            }
        }
    }
    s.push_str("}\n");
    s
}
