//! One call: a claimed step's event in, its function called under spans and metrics, the
//! outcome decided ([`decide`]) into the [`StepResult`] the one commit path records.

use std::time::Duration;

use chrono::Utc;

use super::{Binding, Config, StepKind};
use crate::invoke::Invoker;
use crate::model::outcome::InvokeError;
use crate::model::outcome::{Event, Outcome, PROTOCOL};
use crate::model::retry::Answer;
use crate::model::retry::{Decision, decide};
use crate::model::status::Status;
use crate::store::functions::FunctionPin;
use crate::store::{Change, Claimed, Dispatch, Effects, StepInputs, StepResult, WorkflowToStart};

/// Call the function for one claimed step and decide its result (nothing is written yet).
pub(crate) async fn execute(
    invoker: &Invoker,
    binding: &Binding,
    config: &Config,
    c: &Claimed,
    input: StepInputs,
    timeout: Duration,
    deployed: Option<&FunctionPin>,
) -> StepResult {
    // An observer's document, as the step found it (its function may replace it).
    let observed_document = binding
        .kind
        .observe()
        .and_then(|o| input.documents.get(&o.document).cloned());
    let mut event = event_of(c, input, timeout);
    // A step's spans exist for the traces exported over OTLP (and for a debug log): no log line
    // is written inside them, and at `info` without an exporter, making them (their fields
    // formatted for the log's span context on creation) was 7-12% of the runtime's profile
    // under the DAG (perf, BENCHMARKS.md stop 34).
    let traced = crate::telemetry::enabled() || tracing::enabled!(tracing::Level::DEBUG);
    let (step_span, invoke_span) = if traced {
        let step_span = tracing::info_span!(
            "step",
            otel.name = %format!("step {}:{}", c.template, c.name),
            workdo.object_id = %c.object_id,
            workdo.template = %c.template,
            workdo.step = %c.name,
            workdo.attempt = c.attempts,
            workdo.lane = %c.lane,
            workdo.status = tracing::field::Empty,
            workdo.function.name = tracing::field::Empty,
            workdo.function.version = tracing::field::Empty,
            workdo.function.sha256 = tracing::field::Empty,
        );
        if let Some(p) = deployed {
            step_span.record("workdo.function.name", p.name.as_str());
            step_span.record("workdo.function.version", p.version);
            step_span.record("workdo.function.sha256", p.sha256.as_str());
        }
        if let Some(tp) = &event.traceparent {
            crate::telemetry::set_parent(&step_span, tp);
        }
        let invoke_span = tracing::info_span!(
            parent: &step_span,
            "invoke",
            otel.name = %format!("invoke {}", c.name),
            otel.kind = "client",
            workdo.object_id = %c.object_id,
            workdo.template = %c.template,
            workdo.step = %c.name,
            workdo.attempt = c.attempts,
            workdo.runner = invoker.kind(),
        );
        // The function continues the trace from its invocation.
        if let Some(tp) = crate::telemetry::traceparent(&invoke_span) {
            event.traceparent = Some(tp);
        }
        (step_span, invoke_span)
    } else {
        (tracing::Span::none(), tracing::Span::none())
    };
    let began = std::time::Instant::now();
    let outcome = {
        use tracing::Instrument;
        invoker
            .invoke(&event, timeout)
            .instrument(invoke_span.clone())
            .await
    };
    let metrics = crate::telemetry::metrics();
    let labels = [
        opentelemetry::KeyValue::new("template", c.template.clone()),
        opentelemetry::KeyValue::new("step", c.name.clone()),
    ];
    metrics
        .invocation
        .record(began.elapsed().as_secs_f64(), &labels);
    if let Ok(o) = &outcome {
        crate::telemetry::function_spans(&invoke_span, &o.spans);
    }
    drop(invoke_span);
    // An observer's rules run on the document once its function has answered: a document the
    // function returned, else the one the step was given. A missing or malformed document
    // fails the step like a failed function (it is retried, and `workdo retry` after fixing
    // the document works).
    let mut observed = None;
    let outcome = match (outcome, binding.kind.observe()) {
        (Ok(o), Some(obs)) if Answer::parse(&o.status) == Answer::Completed => {
            let doc = o
                .object
                .as_ref()
                .and_then(|u| u.documents.get(&obs.document).cloned())
                .or_else(|| observed_document.clone());
            match doc {
                None => Err(InvokeError::new(
                    format!(
                        "observer {}: object {} has no document {:?}",
                        c.name, c.object_id, obs.document
                    ),
                    String::new(),
                )),
                Some(xml) => match observe_bounded(obs, xml).await {
                    Ok(matches) => {
                        observed = Some(matches);
                        Ok(o)
                    }
                    Err(e) => Err(InvokeError::new(
                        format!(
                            "observer {}: document {:?} of {} {e}",
                            c.name, obs.document, c.object_id
                        ),
                        String::new(),
                    )),
                },
            }
        }
        (outcome, _) => outcome,
    };
    let unit: f64 = rand::random();
    let decision = decide(
        outcome.as_ref(),
        c.attempts,
        c.max_attempts,
        &binding.declared,
        &config.backoff,
        Utc::now(),
        unit,
    );
    let status = decision.status();
    step_span.record("workdo.status", status.as_str());
    match &status {
        Status::Completed => metrics.completed.add(1, &labels),
        Status::Error => metrics.failed.add(1, &labels),
        Status::Retrying => metrics.retried.add(1, &labels),
        _ => {}
    }
    let answered = outcome.as_ref().ok().and_then(|o| o.signal.clone());
    let mut result = result_of(c, config, &decision, outcome);
    // The deployed version that ran, in the step's completed/failed event.
    if let (Some(p), Some(detail)) = (deployed, result.change.detail.as_object_mut()) {
        detail.insert(
            "function".into(),
            serde_json::json!({"name": p.name, "version": p.version, "sha256": p.sha256}),
        );
    }
    // Each failure is worth a line at `info`: an operator reading the log sees what broke.
    let message = result.change.error_message.as_deref().unwrap_or_default();
    match &status {
        Status::Error => tracing::info!(step = %format!("{}:{}", c.template, c.name),
            object = %c.object_id, attempts = c.attempts, limit = c.max_attempts,
            error = %message, "step failed; no attempts left: in error"),
        Status::Retrying => tracing::info!(step = %format!("{}:{}", c.template, c.name),
            object = %c.object_id, attempts = c.attempts, limit = c.max_attempts,
            error = %message, "step failed; will retry"),
        _ => {}
    }
    // A machine's function action: its end goes back to the job as a signal.
    if matches!(binding.kind, StepKind::MachineCall) {
        let data = crate::model::machine::call_end_data(
            &c.name,
            result.change.note.as_deref(),
            result.change.error_message.as_deref(),
        );
        match status {
            Status::Completed => {
                result.effects.signal =
                    Some((answered.unwrap_or_else(|| "done".to_string()), data));
            }
            Status::Error => result.effects.signal = Some(("error".to_string(), data)),
            _ => {}
        }
    }
    if matches!(status, Status::Completed) {
        if let Some(matches) = observed {
            result.effects.dispatch = Some(Dispatch::Observed {
                observer: c.name.clone(),
                matches,
            });
        } else if matches!(binding.kind, StepKind::Generator) {
            result.effects.dispatch = Some(Dispatch::Compose {
                generator: c.name.clone(),
            });
        }
    }
    result
}

/// What a completed outcome changes besides its step, as the store takes it.
fn effects_of(o: Outcome) -> Effects {
    let (properties, documents) = match o.object {
        Some(u) => (u.properties, u.documents),
        None => Default::default(),
    };
    Effects {
        properties,
        documents,
        context: o.context.unwrap_or_default(),
        dispatch: None,
        signal: None,
        start: o
            .start
            .into_iter()
            .map(|s| WorkflowToStart {
                template: s.template,
                context: s.context.unwrap_or_default(),
                priority: s.priority,
                lane: s.lane,
                start_at: s
                    .start_at
                    .as_deref()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc)),
            })
            .collect(),
    }
}

/// The event a function gets for claimed step `c`.
fn event_of(c: &Claimed, input: StepInputs, timeout: Duration) -> Event {
    Event {
        protocol: PROTOCOL.into(),
        step_id: c.id,
        workflow_id: c.workflow_id,
        object: c.object_id.clone(),
        template: c.template.clone(),
        step: c.name.clone(),
        version: c.version,
        lane: c.lane.clone(),
        attempt: c.attempts,
        max_attempts: c.max_attempts,
        properties: input.properties,
        documents: input.documents,
        context: input.context,
        traceparent: input.trace_context,
        deadline: (Utc::now() + chrono::Duration::from_std(timeout).unwrap_or_default())
            .to_rfc3339(),
        call: None,
        fragment: input.fragment,
    }
}

/// What committing `decision` for `c` writes: its change under the claim's lease, and the
/// outcome's side effects when the decision applies them.
fn result_of(
    c: &Claimed,
    config: &Config,
    decision: &Decision,
    outcome: Result<Outcome, InvokeError>,
) -> StepResult {
    let status = decision.status();
    let mut change = Change::new(c.id, status, decision.event());
    change.note = decision.note.clone();
    change.error_message = decision.failure().map(|f| f.message.clone());
    change.error_text = decision.failure().and_then(|f| f.text.clone());
    change.lifecycle = decision.lifecycle().map(String::from);
    change.elapsed = decision.elapsed;
    change.run_at = decision.run_at();
    change.attempts_delta = decision.attempts_delta();
    change.lease = Some(c.lease_token);
    change.detail = serde_json::json!({ "worker": config.owner, "attempt": c.attempts });
    let effects = match outcome {
        Ok(o) if decision.applies_effects() => effects_of(o),
        _ => Effects::default(),
    };
    StepResult {
        change,
        object_id: c.object_id.clone(),
        workflow_id: c.workflow_id,
        effects,
    }
}

type Observed = Result<Vec<crate::model::dispatch::RuleMatch>, String>;

/// What an evaluation evaluates: the rules, and the document's SHA-256.
type EvaluationKey = (String, [u8; 32]);

/// Evaluations running now, each with the channel its answer comes on.
static RUNNING: std::sync::LazyLock<
    std::sync::Mutex<
        std::collections::HashMap<EvaluationKey, tokio::sync::watch::Receiver<Option<Observed>>>,
    >,
> = std::sync::LazyLock::new(Default::default);

/// The answer channel of the evaluation of `key`: the one running, or a new one on a thread of
/// its own, which leaves [`RUNNING`] when it answers.
fn evaluation(
    key: EvaluationKey,
    obs: &crate::model::dispatch::Observe,
    xml: String,
) -> Result<tokio::sync::watch::Receiver<Option<Observed>>, String> {
    use std::sync::PoisonError;
    let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(rx) = running.get(&key) {
        return Ok(rx.clone());
    }
    let (tx, rx) = tokio::sync::watch::channel(None);
    running.insert(key.clone(), rx.clone());
    let (obs, mine) = (obs.clone(), key.clone());
    let spawned = std::thread::Builder::new()
        .name("workdo-observe".into())
        .spawn(move || {
            // A panic here would leave the entry behind, failing every later attempt on the
            // same document: it is an answer like any other.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::model::dispatch::observe(&obs, &xml)
            }))
            .unwrap_or_else(|_| Err("could not be observed: the evaluation panicked".into()));
            RUNNING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&mine);
            let _ = tx.send(Some(result));
        });
    if let Err(e) = spawned {
        running.remove(&key);
        return Err(format!("could not be observed: no thread: {e}"));
    }
    Ok(rx)
}

/// An observer's rules on `xml`, on a thread of its own (XPath evaluation cannot yield or be
/// stopped, and a thread of the runtime's blocking pool would keep the process from exiting
/// until an abandoned evaluation ended), waiting at most
/// [`OBSERVE_TIMEOUT`](crate::model::dispatch::OBSERVE_TIMEOUT) for the answer. The same rules
/// on the same document while an evaluation of them runs — the next attempt of an observer
/// whose evaluation was abandoned — wait for that evaluation instead of starting another: a
/// runaway rule keeps one thread busy however often it is retried, and takes nothing from
/// other observers.
async fn observe_bounded(obs: &crate::model::dispatch::Observe, xml: String) -> Observed {
    use crate::model::dispatch::OBSERVE_TIMEOUT;
    use sha2::Digest;
    let key = (
        format!("{:?}", obs.rules),
        sha2::Sha256::digest(xml.as_bytes()).into(),
    );
    let mut answer = evaluation(key, obs, xml)?;
    let waited = tokio::time::timeout(OBSERVE_TIMEOUT, answer.wait_for(Option::is_some)).await;
    match waited {
        Ok(Ok(done)) => done
            .clone()
            .unwrap_or_else(|| Err("could not be observed: no answer".into())),
        Ok(Err(_)) => Err("could not be observed: its evaluation stopped".into()),
        Err(_) => Err(format!(
            "took the rules longer than {} s; they were abandoned, and go on running until they end (an attempt on the same document waits for them): make the XPath cheaper",
            OBSERVE_TIMEOUT.as_secs()
        )),
    }
}
