//! What a worker runs: a `Binding` per step with a function (or that observes or generates),
//! per machine function action and per bricklet step a generator may compose, read from the
//! current template versions.

use crate::model::dispatch::Observe;
use crate::model::template::{FunctionSpec, StepSpec};
use std::collections::BTreeMap;

use crate::store::{Store, StoreError};

use super::WorkerError;

/// A template step bound to the function that performs it.
#[derive(Debug, Clone)]
pub struct Binding {
    pub template: String,
    /// The template version (its id) whose definition the worker was made from.
    pub template_id: i64,
    /// The template has unfinished workflows of other versions: each claimed step runs its
    /// own version's definition (runtime/functions.rs).
    pub other_versions: bool,
    pub step: String,
    pub function: FunctionSpec,
    pub batch_limit: Option<u32>,
    /// Intermediate statuses the step may report.
    pub declared: Vec<String>,
    /// What the step is besides the function it runs.
    pub kind: StepKind,
    /// Generated steps are claimed by the bricklet step they run: `TEMPLATE:BRICKLET/STEP`
    /// (then `step` is `BRICKLET/STEP`); a machine's function actions by `TEMPLATE:call/NAME`.
    pub queue: Option<String>,
    /// Claim only what this named queue lists (`workdo worker --queue NAME`): objects whose
    /// properties and completed steps it names.
    pub named: Option<crate::store::NamedQueue>,
}

/// What a bound step is besides the function it runs (a step observes or generates, never
/// both: the template's validation refuses it).
#[derive(Debug, Clone)]
pub enum StepKind {
    /// Its function's result is the step's.
    Plain,
    /// An observer: its rules are evaluated on its document after its function (dispatch).
    Observer(Observe),
    /// A generator: its completion composes its subnet.
    Generator,
    /// A machine's function action: its end goes back to the job as a signal.
    MachineCall,
}

impl StepKind {
    /// A template's (or a bricklet's) step's kind.
    pub fn of(step: &crate::model::template::StepSpec) -> StepKind {
        match (&step.observe, &step.generate) {
            (Some(o), _) => StepKind::Observer(o.clone()),
            (None, Some(_)) => StepKind::Generator,
            (None, None) => StepKind::Plain,
        }
    }

    /// An observer's rules.
    pub fn observe(&self) -> Option<&Observe> {
        match self {
            StepKind::Observer(o) => Some(o),
            _ => None,
        }
    }
}

impl Binding {
    pub fn key(&self) -> String {
        format!("{}:{}", self.template, self.step)
    }

    /// Template version `t`'s step `step`, claimed by its name, running the runtime's no-op
    /// until a definition is laid on it ([`Binding::defined_by`]).
    fn new(t: &crate::store::TemplateRow, step: String) -> Binding {
        Binding {
            template: t.name.clone(),
            template_id: t.id,
            other_versions: false,
            step,
            function: noop_function(),
            batch_limit: None,
            declared: Vec::new(),
            kind: StepKind::Plain,
            queue: None,
            named: None,
        }
    }

    /// Claimed by its queue, `TEMPLATE:STEP` (a machine's function action, a bricklet step).
    fn by_queue(mut self) -> Binding {
        self.queue = Some(self.key());
        self
    }

    /// What `step` (a template's or a bricklet's) defines laid on it: its function (an observer
    /// or generator without one runs the runtime's no-op, and an observer's function gets its
    /// document), declared statuses, kind and batch limit.
    pub(super) fn defined_by(mut self, step: &StepSpec) -> Binding {
        self.function = step.function.clone().unwrap_or_else(noop_function);
        if let Some(o) = &step.observe
            && !self.function.documents.contains(&o.document)
        {
            self.function.documents.push(o.document.clone());
        }
        self.declared = step.statuses.clone();
        self.kind = StepKind::of(step);
        self.batch_limit = step.batch_limit;
        self
    }
}

/// Steps of the current template versions that have a function; with `only`, just those
/// (`template:step`), each of which must exist and have a function.
///
/// # Errors
/// An unknown template or step in `only`, or one without a function.
pub async fn bindings(store: &Store, only: &[String]) -> Result<Vec<Binding>, WorkerError> {
    let mut out = Vec::new();
    for t in store.template_list().await? {
        let mut own = template_bindings(store, &t).await?;
        // A workflow runs the template version it started with: while older versions have
        // unfinished workflows, each claim looks up its steps' versions (runtime/functions.rs),
        // and a step a newer version removed keeps a worker for them.
        let older = store.template_versions_active(&t.name).await?;
        if !older.is_empty() {
            for b in &mut own {
                b.other_versions = true;
            }
            for id in older {
                let row = store.template_by_id(id).await?;
                for mut b in template_bindings(store, &row).await? {
                    if own.iter().all(|o| o.key() != b.key()) {
                        b.other_versions = true;
                        own.push(b);
                    }
                }
            }
        }
        out.extend(own);
    }
    if only.is_empty() {
        return Ok(out);
    }
    let mut chosen = Vec::new();
    for key in only {
        match out.iter().find(|b| &b.key() == key) {
            Some(b) => chosen.push(b.clone()),
            None => {
                let (t, s) = key.split_once(':').unwrap_or((key.as_str(), ""));
                let template = store.template_current(t).await?;
                if template.spec.step(s).is_none() {
                    return Err(StoreError::UnknownStep {
                        template: t.into(),
                        step: s.into(),
                    }
                    .into());
                }
                return Err(WorkerError::NotBound(key.clone()));
            }
        }
    }
    Ok(chosen)
}

/// What an observer or generator with no function of its own runs: in process and quick (a
/// short lease, so that a crashed runtime's observer or generator is taken up again soon).
fn noop_function() -> FunctionSpec {
    FunctionSpec {
        runner: crate::model::template::Runner::Builtin {
            name: "noop".into(),
        },
        timeout_secs: 5.0,
        concurrency: 32,
        env: BTreeMap::new(),
        documents: Vec::new(),
    }
}

/// The bindings of one template version: its steps with a function (or that observe or
/// generate), its machine's function actions and the steps of the bricklets its generators may
/// compose.
async fn template_bindings(
    store: &Store,
    t: &crate::store::TemplateRow,
) -> Result<Vec<Binding>, WorkerError> {
    let mut out = Vec::new();
    // Its steps that are run (an observer or generator with no function of its own is
    // performed by the runtime alone: a no-op call, then its rules or its composition).
    for s in t.spec.steps.iter().filter(|s| s.is_run()) {
        out.push(Binding::new(t, s.name.clone()).defined_by(s));
    }
    // A machine's function actions, each claimed by its queue.
    if let Some(m) = &t.spec.machine {
        for (name, f) in &m.functions {
            let call = Binding {
                function: f.clone(),
                kind: StepKind::MachineCall,
                ..Binding::new(t, format!("call/{name}"))
            };
            out.push(call.by_queue());
        }
    }
    // The steps of the bricklets its generators may compose, each claimed by its queue.
    if t.spec.steps.iter().any(|s| s.generate.is_some()) {
        let bricklets = store.bricklets_of(&t.spec).await?;
        for b in bricklets.by_name.values() {
            for s in b
                .steps
                .iter()
                .filter(|s| s.function.is_some() && !s.skip_queue)
            {
                let step = format!("{}/{}", b.name, s.name);
                out.push(Binding::new(t, step).defined_by(s).by_queue());
            }
        }
    }
    Ok(out)
}
