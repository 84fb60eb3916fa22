use serde_json::{Map, Value, json};

use super::{Effect, Job, Plan, Refusal, Signal, start, transition};
use crate::model::machine::Machine;
use crate::model::template::{Format, parse};

const DESK: &str = r#"name: deskWF
kind: machine
initial: Idle
variables: { n: 0 }
states:
  Idle:
    on:
      go: { to: Busy, actions: [ { set: { n: "${n + 1}" } }, { signal: ping } ] }
  Busy:
    enter:
      - alarm: { signal: timeout, in: 1h }
      - mail: { to: [desk@example.org], subject: "busy ${n}" }
    on:
      tick: { to: Busy, internal: true, actions: [ { set: { ticks: "${(ticks ?? 0) + 1}" } } ] }
      again: Busy
      ping: Busy
      stop: { to: Done, actions: [ { fail: { when: "has(signal.data.veto) && signal.data.veto", message: "vetoed by ${signal.actor}" } } ] }
      up: { to: Busy, actions: [ { signal-parent: done } ] }
  Done: { final: true }
"#;

fn machine() -> Machine {
    parse("desk.yaml", Format::Yaml, DESK)
        .expect("the machine parses")
        .template
        .machine
        .expect("a machine")
}

fn job<'a>(state: &'a str, variables: Value, context: &'a Value) -> Job<'a> {
    Job {
        id: 7,
        object: "druid:bb1",
        template: "deskWF",
        parent: None,
        context,
        state,
        variables: variables.as_object().cloned().unwrap_or_else(Map::new),
        finished: false,
        children_running: 0,
    }
}

fn plan(m: &Machine, j: &Job<'_>, name: &str, data: Value) -> Result<Plan, Refusal> {
    transition(
        m,
        j,
        Signal {
            name,
            actor: "ann",
            data: &data,
        },
        chrono::Utc::now(),
    )
}

/// Each effect's kind, and an event's kind after a colon.
fn shape(p: &Plan) -> Vec<String> {
    p.effects
        .iter()
        .map(|e| match e {
            Effect::Event { kind, .. } => format!("event:{kind}"),
            Effect::Signal {
                to: None, signal, ..
            } => format!("signal:{signal}"),
            Effect::Signal {
                to: Some(j),
                signal,
                ..
            } => format!("signal:{signal}>{j}"),
            Effect::Alarm { signal, state, .. } => format!("alarm:{signal}@{state}"),
            Effect::CancelAlarms { state } => format!("cancel-alarms:{state}"),
            Effect::Fork { template, .. } => format!("fork:{template}"),
            Effect::Mail { subject, .. } => format!("mail:{subject}"),
            Effect::Call { function, .. } => format!("call:{function}"),
            Effect::SignalChildren { signal } => format!("signal-children:{signal}"),
            Effect::CancelChildren => "cancel-children".into(),
        })
        .collect()
}

#[test]
fn a_transition_is_planned_in_order_with_the_variables_each_action_sees() {
    let m = machine();
    let ctx = json!({});
    let p = plan(&m, &job("Idle", json!({"n": 0}), &ctx), "go", json!({})).expect("a plan");
    assert_eq!(
        (p.from.as_str(), p.to.as_str(), p.finished),
        ("Idle", "Busy", false)
    );
    assert_eq!(p.variables.get("n"), Some(&json!(1)));
    assert_eq!(
        shape(&p),
        [
            "event:signal_received",
            "cancel-alarms:Idle",
            "event:action_fired",
            "signal:ping",
            "event:action_fired",
            "event:state_entered",
            "alarm:timeout@Busy",
            "event:alarm_set",
            "event:action_fired",
            // The mail sees n after the transition's set.
            "mail:busy 1",
            "event:action_fired",
        ]
    );
}

#[test]
fn an_internal_transition_neither_leaves_nor_enters() {
    let m = machine();
    let ctx = json!({});
    let j = job("Busy", json!({"n": 1}), &ctx);
    let p = plan(&m, &j, "tick", json!({})).expect("a plan");
    assert_eq!(p.to, "Busy");
    assert_eq!(
        shape(&p),
        ["event:signal_received", "event:action_fired"],
        "no exit, no entry: the alarm stays, the mail is not sent again"
    );
    assert_eq!(p.variables.get("ticks"), Some(&json!(1)));
    // Without `internal`, the same state is left and entered again.
    let p = plan(&m, &j, "again", json!({})).expect("a plan");
    assert!(shape(&p).contains(&"cancel-alarms:Busy".to_string()));
    assert!(shape(&p).contains(&"alarm:timeout@Busy".to_string()));
}

#[test]
fn refusals_and_rollbacks_say_why_and_plan_nothing() {
    let m = machine();
    let ctx = json!({});
    let j = job("Idle", json!({"n": 0}), &ctx);
    match plan(&m, &j, "stop", json!({})) {
        Err(Refusal::NotAccepted(why)) => {
            assert!(
                why.contains("\"stop\" is not accepted in Idle") && why.contains("go"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    let busy = job("Busy", json!({"n": 1}), &ctx);
    assert_eq!(
        plan(&m, &busy, "stop", json!({"veto": true})),
        Err(Refusal::Rollback("vetoed by ann".into()))
    );
    // The optional key is guarded: no veto, no rollback, and the final state completes.
    let p = plan(&m, &busy, "stop", json!({})).expect("a plan");
    assert!(p.finished);
    assert_eq!(
        shape(&p).last().map(String::as_str),
        Some("event:workflow_completed")
    );
    assert_eq!(
        plan(&m, &busy, "up", json!({})),
        Err(Refusal::Rollback(
            "signal-parent: this job has no parent".into()
        ))
    );
    let mut child = busy.clone();
    child.parent = Some(3);
    let p = plan(&m, &child, "up", json!({})).expect("a plan");
    assert!(shape(&p).contains(&"signal:done>3".to_string()));
    let mut done = busy.clone();
    done.finished = true;
    assert!(matches!(
        plan(&m, &done, "tick", json!({})),
        Err(Refusal::NotAccepted(_))
    ));
}

#[test]
fn a_start_enters_the_initial_state() {
    let m = machine();
    let ctx = json!({});
    let p = start(&m, &job("Idle", json!({"n": 0}), &ctx), chrono::Utc::now()).expect("a plan");
    assert_eq!((p.to.as_str(), p.finished), ("Idle", false));
    assert_eq!(shape(&p), ["event:job_started"]);
}

#[test]
fn a_transition_with_an_unknown_key_is_refused_naming_it() {
    let typo = DESK.replace("actions: [ { signal-parent", "actoins: [ { signal-parent");
    let e = parse("desk.yaml", Format::Yaml, &typo)
        .expect_err("actoins is refused")
        .to_string();
    assert!(e.contains("actoins") && e.contains("desk.yaml"), "{e}");
    let internal_elsewhere = DESK.replace("again: Busy", "again: { to: Done, internal: true }");
    let e = parse("desk.yaml", Format::Yaml, &internal_elsewhere)
        .expect_err("internal to another state")
        .to_string();
    assert!(e.contains("internal"), "{e}");
}
