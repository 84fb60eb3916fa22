//! Task injection (`workdo run TEMPLATE:STEP --object …`): run one step for chosen objects now,
//! ahead of the queue, through the same call ([`execute`]) and the same commit
//! ([`Store::results_commit`]) as the workers.

use std::time::Duration;

use std::sync::Arc;

use super::execute::execute;
use super::functions::StepFunctions;
use super::{Binding, Config, WorkerError};
use crate::invoke::Invoker;
use crate::store::{Claimed, StepResult, Store};

/// Claim `binding`'s step for `objects` (those whose step is ready or waiting only on its
/// start time), call its function for each, and commit the results. Objects whose step could
/// not be claimed are absent from the answer.
///
/// # Errors
/// The function cannot be prepared, or the database refuses.
pub async fn run_now(
    store: &Store,
    binding: &Binding,
    config: &Config,
    objects: &[String],
) -> Result<Vec<(Claimed, StepResult)>, WorkerError> {
    // Each step runs its own workflow's version and pins, as under a worker.
    let cache = Arc::new(super::open_function_cache(config));
    let functions = StepFunctions::new(
        store.clone(),
        cache,
        config.function_env(),
        Arc::new(binding.clone()),
    )
    .map_err(|e| WorkerError::Function(binding.key(), e))?;
    let timeout = Duration::from_secs_f64(binding.function.timeout_secs);
    let mut claimed = store
        .step_claim_objects(
            &binding.template,
            &binding.step,
            objects,
            &config.owner,
            timeout + config.lease_margin,
        )
        .await?;
    let mut inputs = store
        .step_inputs(&mut claimed, &binding.function.documents)
        .await?;
    let mut resolved = match functions.fixed() {
        Some(_) => Default::default(),
        None => functions.resolve(&claimed).await,
    };
    let mut results = Vec::new();
    for c in &claimed {
        let input = inputs.remove(&c.id).unwrap_or_default();
        let (invoker, timeout, deployed) = match (functions.fixed(), resolved.remove(&c.id)) {
            (_, Some(Ok(r))) => (
                r.invoker,
                Duration::from_secs_f64(r.function.timeout_secs),
                r.deployed,
            ),
            (Some(own), None) => (Arc::clone(own), timeout, None),
            (_, Some(Err(why))) => (Arc::new(Invoker::Fails(why)), timeout, None),
            (None, None) => (
                Arc::new(Invoker::Fails(
                    "no function was resolved for this step".into(),
                )),
                timeout,
                None,
            ),
        };
        results.push(
            execute(
                &invoker,
                binding,
                config,
                c,
                input,
                timeout,
                deployed.as_ref(),
            )
            .await,
        );
    }
    functions.shutdown().await;
    store
        .results_commit(&results, &format!("cli:run:{}", config.owner))
        .await?;
    Ok(claimed.into_iter().zip(results).collect())
}
