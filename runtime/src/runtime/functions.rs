//! Which function runs a claimed step. A workflow is locked to the template version it started
//! with, functions included: a step of an older version runs that version's `exec`, `warm`,
//! `http` or `builtin` definition, even after a newer version changed or removed the step, and a
//! deployed function runs the version its workflow pinned, from this host's cache.
//!
//! A worker is made for its step of the current version (or, for a step a newer version
//! removed, of the newest version that still has it with unfinished workflows). When its template
//! has unfinished workflows of another version, or its function is deployed, each claim is
//! resolved step by step here; otherwise every step runs the worker's own function, with no
//! query added to the claim.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::Mutex;

use super::Binding;
use super::function_cache::FunctionCache;
use crate::invoke::Invoker;
use crate::model::outcome::InvokeError;
use crate::model::template::{FunctionSpec, Runner, Template};
use crate::store::functions::FunctionPin;
use crate::store::{Claimed, Store};

/// What one claimed step runs.
pub(super) struct Resolved {
    /// The step as its workflow's template version defines it, when that is not the worker's.
    pub binding: Option<Arc<Binding>>,
    pub invoker: Arc<Invoker>,
    /// Its definition, as run (a deployed function's made concrete: its cached file).
    pub function: FunctionSpec,
    /// The deployed version, when it is one.
    pub deployed: Option<FunctionPin>,
}

/// A worker's functions: its own, and those of the versions and pins it meets.
pub(super) struct StepFunctions {
    store: Store,
    cache: Arc<FunctionCache>,
    env: BTreeMap<String, String>,
    binding: Arc<Binding>,
    /// The binding's own invoker, when its function is not deployed.
    own: Option<Arc<Invoker>>,
    /// Invokers made for other definitions, by what they run.
    others: Mutex<HashMap<String, Arc<Invoker>>>,
    /// The step as each other template version met defines it (a version never changes).
    versions: Mutex<HashMap<i64, Option<Arc<Binding>>>>,
    /// Fixed versions (`name@N`) met: a version never changes either.
    fixed_pins: Mutex<HashMap<(String, u32), FunctionPin>>,
}

impl StepFunctions {
    /// # Errors
    /// The binding's own function cannot run here (an unknown builtin of a newer binary).
    pub(super) fn new(
        store: Store,
        cache: Arc<FunctionCache>,
        env: BTreeMap<String, String>,
        binding: Arc<Binding>,
    ) -> Result<StepFunctions, InvokeError> {
        let own = match binding.function.runner {
            Runner::Deployed { .. } => None,
            _ => Some(Arc::new(Invoker::new(&binding.function, &env)?)),
        };
        Ok(StepFunctions {
            store,
            cache,
            env,
            binding,
            own,
            others: Mutex::new(HashMap::new()),
            versions: Mutex::new(HashMap::new()),
            fixed_pins: Mutex::new(HashMap::new()),
        })
    }

    /// Every step runs the worker's own function: nothing to look up per claim.
    pub(super) fn fixed(&self) -> Option<&Arc<Invoker>> {
        if self.binding.other_versions {
            None
        } else {
            self.own.as_ref()
        }
    }

    /// What each of `claimed` runs, or why it cannot be had (the step then fails with it, and
    /// is retried under its attempts like any failure).
    pub(super) async fn resolve(
        &self,
        claimed: &[Claimed],
    ) -> HashMap<i64, Result<Resolved, String>> {
        let mut out = HashMap::new();
        if claimed.is_empty() {
            return out;
        }
        // The step as each claimed step's template version defines it.
        let mut version_of: HashMap<i64, Arc<Binding>> = HashMap::new();
        if self.binding.other_versions {
            let wids: Vec<i64> = claimed.iter().map(|c| c.workflow_id).collect();
            match self.store.workflow_template_ids(&wids).await {
                Ok(versions) => {
                    let mut known = self.versions.lock().await;
                    for c in claimed {
                        let Some(tid) = versions.get(&c.workflow_id) else {
                            continue;
                        };
                        if *tid == self.binding.template_id {
                            continue;
                        }
                        if !known.contains_key(tid) {
                            let b = match self.store.template_by_id(*tid).await {
                                Ok(row) => binding_in(&row.spec, *tid, &self.binding).map(Arc::new),
                                Err(e) => {
                                    out.insert(
                                        c.id,
                                        Err(format!("reading its template version: {e}")),
                                    );
                                    continue;
                                }
                            };
                            known.insert(*tid, b);
                        }
                        if let Some(Some(b)) = known.get(tid) {
                            version_of.insert(c.id, Arc::clone(b));
                        }
                    }
                }
                Err(e) => {
                    for c in claimed {
                        out.insert(c.id, Err(format!("reading its template version: {e}")));
                    }
                    return out;
                }
            }
        }
        // Deployed functions: the version each workflow pinned (or the fixed one).
        let mut pins: HashMap<(String, i64), Result<FunctionPin, String>> = HashMap::new();
        let mut by_name: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for c in claimed {
            let f = version_of
                .get(&c.id)
                .map_or(&self.binding.function, |b| &b.function);
            if let Runner::Deployed {
                name,
                version: None,
                ..
            } = &f.runner
            {
                by_name.entry(name.clone()).or_default().push(c.workflow_id);
            }
        }
        for (name, wids) in by_name {
            match self.store.function_pins(&wids, &name).await {
                Ok(found) => {
                    for w in wids {
                        let pin = found.get(&w).cloned().ok_or_else(|| {
                            format!(
                                "deployed function {name} is not deployed (workdo functions deploy {name} PATH)"
                            )
                        });
                        pins.insert((name.clone(), w), pin);
                    }
                }
                Err(e) => {
                    for w in wids {
                        pins.insert(
                            (name.clone(), w),
                            Err(format!("reading function {name}'s pin: {e}")),
                        );
                    }
                }
            }
        }
        for c in claimed {
            if out.contains_key(&c.id) {
                continue;
            }
            let own = version_of.remove(&c.id);
            let f = own
                .as_ref()
                .map_or_else(|| self.binding.function.clone(), |b| b.function.clone());
            let r = self.concrete(c, f, &mut pins).await.map(|mut r| {
                r.binding = own;
                r
            });
            out.insert(c.id, r);
        }
        out
    }

    async fn concrete(
        &self,
        c: &Claimed,
        f: FunctionSpec,
        pins: &mut HashMap<(String, i64), Result<FunctionPin, String>>,
    ) -> Result<Resolved, String> {
        let Runner::Deployed {
            name,
            version,
            warm,
        } = &f.runner
        else {
            let invoker = self.invoker(&f).await?;
            return Ok(Resolved {
                binding: None,
                invoker,
                function: f,
                deployed: None,
            });
        };
        let pin = match version {
            Some(v) => {
                let key = (name.clone(), *v);
                let known = self.fixed_pins.lock().await.get(&key).cloned();
                match known {
                    Some(p) => p,
                    None => {
                        let p = self
                            .store
                            .function_fixed(name, *v as i32)
                            .await
                            .map_err(|e| e.to_string())?;
                        self.fixed_pins.lock().await.insert(key, p.clone());
                        p
                    }
                }
            }
            None => pins
                .get(&(name.clone(), c.workflow_id))
                .cloned()
                .unwrap_or_else(|| Err(format!("deployed function {name} has no pin")))?,
        };
        let path = self.cache.path(&self.store, &pin).await?;
        let argv = vec![path.display().to_string()];
        let runner = match warm {
            Some(w) => Runner::Warm {
                argv,
                pool: w.pool,
                pipeline: w.pipeline,
            },
            None => Runner::Exec { argv },
        };
        let function = FunctionSpec { runner, ..f };
        let invoker = self.invoker(&function).await?;
        Ok(Resolved {
            binding: None,
            invoker,
            function,
            deployed: Some(pin),
        })
    }

    /// The invoker of `f`: the worker's own when it is the same definition, else one made once.
    async fn invoker(&self, f: &FunctionSpec) -> Result<Arc<Invoker>, String> {
        if let Some(own) = &self.own
            && *f == self.binding.function
        {
            return Ok(Arc::clone(own));
        }
        let key = format!("{:?}|{:?}", f.runner, f.env);
        let mut others = self.others.lock().await;
        if let Some(i) = others.get(&key) {
            return Ok(Arc::clone(i));
        }
        let i = Arc::new(Invoker::new(f, &self.env).map_err(|e| e.to_string())?);
        others.insert(key, Arc::clone(&i));
        Ok(i)
    }

    /// Stop every process the worker's functions keep.
    pub(super) async fn shutdown(&self) {
        if let Some(own) = &self.own {
            own.shutdown().await;
        }
        for i in self.others.lock().await.values() {
            i.shutdown().await;
        }
    }
}

/// `binding`'s step as template version `spec` (its id `template_id`) defines it: its
/// function, declared statuses, observer rules and generation — a step's own, a machine's
/// function action's, or a bricklet step's defined in the template. None when that version has
/// no such step (the worker's own definition then runs).
pub(super) fn binding_in(spec: &Template, template_id: i64, binding: &Binding) -> Option<Binding> {
    let mut b = binding.clone();
    b.template_id = template_id;
    if matches!(binding.kind, super::StepKind::MachineCall) {
        let name = binding.step.strip_prefix("call/")?;
        b.function = spec.machine.as_ref()?.functions.get(name)?.clone();
        return Some(b);
    }
    let step = match binding.step.split_once('/') {
        Some((bricklet, step)) => spec
            .bricklets
            .iter()
            .find(|x| x.name == bricklet)?
            .steps
            .iter()
            .find(|x| x.name == step)?,
        None => spec.step(&binding.step)?,
    };
    Some(b.defined_by(step))
}
