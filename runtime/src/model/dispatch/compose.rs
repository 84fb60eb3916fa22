//! The paper's Listing 1 (composing an activation set into a subnet) and the expansion of a
//! subnet into step rows.

use std::collections::{BTreeMap, BTreeSet};

use super::{Actset, Bricklet, Construction};
use crate::model::spec::StepSpec;

/// One vertex of a composed subnet: an instance of an active bricklet (from 1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Node {
    pub bricklet: String,
    pub instance: u32,
}

/// A composed subnet (Listing 1): vertices and directed edges between them (indices into
/// `nodes`). The paper's `start` and `end` are implicit: the vertices with no incoming edge
/// start the subnet, those with no outgoing edge end it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: BTreeSet<(usize, usize)>,
}

impl Graph {
    /// Edges as `(from, to)` labels such as `b1#1`, sorted: what tests compare.
    pub fn labelled_edges(&self) -> Vec<(String, String)> {
        let label = |i: usize| format!("{}#{}", self.nodes[i].bricklet, self.nodes[i].instance);
        self.edges
            .iter()
            .map(|&(a, b)| (label(a), label(b)))
            .collect()
    }
}

/// Listing 1: compose `actset` by `rules` into a subnet.
///
/// Every active bricklet becomes one vertex, instance 1. `sequence: A` expands A into `f(A)`
/// instances one after another (edges between successive instances); `parallel: A` expands it
/// into `f(A)` instances side by side. `before: [A, B]` (both active) adds an edge from A's exits
/// to B's entries, where a single vertex is both, a sequence enters at its first instance and
/// leaves at its last, and every parallel instance keeps all of the bricklet's edges.
pub fn compose(actset: &Actset, rules: &[Construction]) -> Graph {
    #[derive(Clone, Copy, PartialEq)]
    enum Shape {
        Single,
        Sequence,
        Parallel,
    }
    let shape = |b: &str| {
        rules
            .iter()
            .find_map(|r| match r {
                Construction::Sequence(x) if x == b => Some(Shape::Sequence),
                Construction::Parallel(x) if x == b => Some(Shape::Parallel),
                _ => None,
            })
            .unwrap_or(Shape::Single)
    };
    let mut g = Graph::default();
    // bricklet -> (its vertices, in instance order)
    let mut vertices: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (b, &f) in actset {
        let n = match shape(b) {
            Shape::Single => 1,
            _ => f.max(1),
        };
        let ids: Vec<usize> = (1..=n)
            .map(|instance| {
                g.nodes.push(Node {
                    bricklet: b.clone(),
                    instance,
                });
                g.nodes.len() - 1
            })
            .collect();
        if shape(b) == Shape::Sequence {
            for w in ids.windows(2) {
                g.edges.insert((w[0], w[1]));
            }
        }
        vertices.insert(b.as_str(), ids);
    }
    let entries = |b: &str| -> Vec<usize> {
        let ids = &vertices[b];
        match shape(b) {
            Shape::Sequence => ids.first().copied().into_iter().collect(),
            _ => ids.clone(),
        }
    };
    let exits = |b: &str| -> Vec<usize> {
        let ids = &vertices[b];
        match shape(b) {
            Shape::Sequence => ids.last().copied().into_iter().collect(),
            _ => ids.clone(),
        }
    };
    for r in rules {
        if let Construction::Before([a, b]) = r
            && vertices.contains_key(a.as_str())
            && vertices.contains_key(b.as_str())
        {
            for x in exits(a) {
                for y in entries(b) {
                    g.edges.insert((x, y));
                }
            }
        }
    }
    g
}

/// The most steps one generator composes: past it, the generator fails with an error saying so
/// (a rule matching a million fragments must not become a million step rows by accident).
pub const MAX_SUBNET_STEPS: u64 = 10_000;

/// How many steps composing `actset` by `rules` makes, counted without building the subnet
/// (saturating, so that absurd counts stay absurd instead of wrapping).
pub fn subnet_size(
    actset: &Actset,
    rules: &[Construction],
    bricklets: &BTreeMap<String, Bricklet>,
) -> u64 {
    actset
        .iter()
        .map(|(b, &f)| {
            let expanded = rules.iter().any(
                |r| matches!(r, Construction::Sequence(x) | Construction::Parallel(x) if x == b),
            );
            let instances = if expanded { u64::from(f.max(1)) } else { 1 };
            let steps = bricklets.get(b).map_or(0, |b| b.steps.len() as u64);
            instances.saturating_mul(steps)
        })
        .fold(0u64, u64::saturating_add)
}

/// A step of an expanded subnet, ready to become a step row.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedStep {
    /// `GENERATOR/BRICKLET#INSTANCE/STEP`: unique in the workflow and stable.
    pub name: String,
    pub bricklet: String,
    pub instance: u32,
    /// The bricklet's step this one runs.
    pub spec: StepSpec,
    /// Its actual predecessors (names of generated steps).
    pub prereqs: Vec<String>,
}

/// The name of instance `instance` of `bricklet`'s step `step` under `generator`.
pub fn generated_name(generator: &str, bricklet: &str, instance: u32, step: &str) -> String {
    format!("{generator}/{bricklet}#{instance}/{step}")
}

/// The steps of `graph` under `generator`: each vertex's bricklet steps, their prerequisites
/// within the bricklet kept per instance, and for each edge (u, v) the last steps of u's
/// bricklet (those no other of its steps waits for) before the first steps of v's (those with
/// no prerequisite in it). A vertex whose bricklet is not in `bricklets` yields nothing.
pub fn expand(
    generator: &str,
    graph: &Graph,
    bricklets: &BTreeMap<String, Bricklet>,
) -> Vec<GeneratedStep> {
    let firsts = |b: &Bricklet| -> Vec<String> {
        b.steps
            .iter()
            .filter(|s| s.prereqs.is_empty())
            .map(|s| s.name.clone())
            .collect()
    };
    let lasts = |b: &Bricklet| -> Vec<String> {
        b.steps
            .iter()
            .filter(|s| !b.steps.iter().any(|o| o.prereqs.contains(&s.name)))
            .map(|s| s.name.clone())
            .collect()
    };
    let mut out: Vec<GeneratedStep> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for node in &graph.nodes {
        let Some(b) = bricklets.get(&node.bricklet) else {
            continue;
        };
        for s in &b.steps {
            let name = generated_name(generator, &b.name, node.instance, &s.name);
            index.insert(name.clone(), out.len());
            out.push(GeneratedStep {
                name,
                bricklet: b.name.clone(),
                instance: node.instance,
                spec: s.clone(),
                prereqs: s
                    .prereqs
                    .iter()
                    .map(|p| generated_name(generator, &b.name, node.instance, p))
                    .collect(),
            });
        }
    }
    for &(u, v) in &graph.edges {
        let (nu, nv) = (&graph.nodes[u], &graph.nodes[v]);
        let (Some(bu), Some(bv)) = (bricklets.get(&nu.bricklet), bricklets.get(&nv.bricklet))
        else {
            continue;
        };
        for last in lasts(bu) {
            let from = generated_name(generator, &bu.name, nu.instance, &last);
            for first in firsts(bv) {
                let to = generated_name(generator, &bv.name, nv.instance, &first);
                if let Some(&i) = index.get(&to)
                    && !out[i].prereqs.contains(&from)
                {
                    out[i].prereqs.push(from.clone());
                }
            }
        }
    }
    out
}

/// The steps of a subnet that nothing in it waits for: the generator's dependants wait for them.
pub fn sinks(steps: &[GeneratedStep]) -> Vec<String> {
    let before: std::collections::HashSet<&str> = steps
        .iter()
        .flat_map(|s| s.prereqs.iter().map(String::as_str))
        .collect();
    steps
        .iter()
        .filter(|s| !before.contains(s.name.as_str()))
        .map(|s| s.name.clone())
        .collect()
}

/// A cycle among `refset` under the `before` rules, as a path `a -> b -> a`, if any (the paper
/// enforces acyclicity at modelling time by applying the rules to the whole refset).
pub fn before_cycle(refset: &[String], rules: &[Construction]) -> Option<String> {
    let edges: Vec<(&str, &str)> = rules
        .iter()
        .filter_map(|r| match r {
            Construction::Before([a, b]) => Some((a.as_str(), b.as_str())),
            _ => None,
        })
        .collect();
    fn visit<'a>(
        n: &'a str,
        edges: &[(&'a str, &'a str)],
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|p| *p == n) {
            let mut cycle: Vec<&str> = path[at..].to_vec();
            cycle.push(n);
            return Some(cycle.join(" -> "));
        }
        if done.contains(n) {
            return None;
        }
        path.push(n);
        for &(a, b) in edges {
            if a == n
                && let Some(c) = visit(b, edges, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n);
        None
    }
    let mut done = BTreeSet::new();
    for b in refset {
        let mut path = Vec::new();
        if let Some(c) = visit(b, &edges, &mut path, &mut done) {
            return Some(c);
        }
    }
    None
}
