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
    /// The step's definition in each other template version met (a version never changes).
    versions: Mutex<HashMap<i64, Option<FunctionSpec>>>,
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
        // The definition each step's version has.
        let mut spec_of: HashMap<i64, FunctionSpec> = HashMap::new();
        if self.binding.other_versions {
            let wids: Vec<i64> = claimed.iter().map(|c| c.workflow_id).collect();
            match self.store.workflow_template_ids(&wids).await {
                Ok(versions) => {
                    let mut specs = self.versions.lock().await;
                    for c in claimed {
                        let Some(tid) = versions.get(&c.workflow_id) else {
                            continue;
                        };
                        if *tid == self.binding.template_id {
                            continue;
                        }
                        if !specs.contains_key(tid) {
                            let f = match self.store.template_by_id(*tid).await {
                                Ok(row) => function_in(&row.spec, &self.binding),
                                Err(e) => {
                                    out.insert(
                                        c.id,
                                        Err(format!("reading its template version: {e}")),
                                    );
                                    continue;
                                }
                            };
                            specs.insert(*tid, f);
                        }
                        if let Some(Some(f)) = specs.get(tid) {
                            spec_of.insert(c.id, f.clone());
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
            let f = spec_of.get(&c.id).unwrap_or(&self.binding.function);
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
            let f = spec_of
                .remove(&c.id)
                .unwrap_or_else(|| self.binding.function.clone());
            let r = self.concrete(c, f, &mut pins).await;
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
                invoker,
                function: f,
                deployed: None,
            });
        };
        let pin = match version {
            Some(v) => self
                .store
                .function_fixed(name, *v as i32)
                .await
                .map_err(|e| e.to_string())?,
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

/// The definition `binding`'s step has in template version `spec`: a step's own, a machine's
/// function action's, or a bricklet step's defined in the template. None when that version has
/// no such step with a function (the worker's own then runs).
pub(super) fn function_in(spec: &Template, binding: &Binding) -> Option<FunctionSpec> {
    if binding.machine_call {
        let name = binding.step.strip_prefix("call/")?;
        return spec.machine.as_ref()?.functions.get(name).cloned();
    }
    if let Some((bricklet, step)) = binding.step.split_once('/') {
        return spec
            .bricklets
            .iter()
            .find(|b| b.name == bricklet)?
            .steps
            .iter()
            .find(|s| s.name == step)?
            .function
            .clone();
    }
    let step = spec.step(&binding.step)?;
    match &step.function {
        Some(f) => Some(f.clone()),
        // An observer or generator without a function of its own: the runtime's no-op.
        None => Some(binding.function.clone()),
    }
}
