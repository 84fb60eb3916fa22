//! Observers and generators of many workflows committed in one group commit, as the completer
//! commits them: their records are read and written set-based (one statement for all), so this
//! checks that nothing of one workflow reaches another, that two generators of one workflow in
//! the same commit both wire their shared dependant, and that a generator whose lease is lost
//! composes nothing until its result comes back under the lease it holds.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::{TestDb, config, db, load, put_document, start};
use workdo::model::spec::Op;
use workdo::model::status::Status;
use workdo::store::{Claimed, Dispatch, Effects, StartRequest, StepResult};

const LEASE: Duration = Duration::from_secs(300);

/// An observer finds `a`s for generator `ga` and `b`s for `gb`; `after` waits for both.
const PAIR: &str = "name: pairWF\nsteps:\n  - name: look\n    observe: { document: d, rules: [{ match: '//a', op: add, generator: ga, bricklets: [x] }, { match: '//b', op: add, generator: gb, bricklets: [y] }] }\n  - { name: ga, prereqs: [look], generate: { refset: [x], rules: [{ parallel: x }] } }\n  - { name: gb, prereqs: [look], generate: { refset: [y], rules: [{ sequence: y }] } }\n  - { name: after, prereqs: [ga, gb], function: { builtin: noop } }\nbricklets:\n  - { name: x, steps: [{ name: run, function: { builtin: noop } }] }\n  - { name: y, steps: [{ name: run, function: { builtin: noop } }] }\n";

/// Object `i` has `i + 1` `a`s and one `b` (two for even `i`).
fn counts(i: usize) -> (usize, usize) {
    (i + 1, if i.is_multiple_of(2) { 2 } else { 1 })
}

fn result(c: &Claimed, dispatch: Dispatch) -> StepResult {
    let effects = Effects {
        dispatch: Some(dispatch),
        ..Default::default()
    };
    support::result_for(c, Status::Completed, "completed", effects)
}

fn observed(c: &Claimed, i: usize) -> StepResult {
    let (a, b) = counts(i);
    let matched = |n: usize, tag: &str| vec![Some(format!("<{tag} n=\"{i}\"/>")); n];
    let m = |rule: usize, generator: &str, bricklet: &str, n: usize, tag: &str| {
        workdo::model::dispatch::RuleMatch {
            rule,
            op: Op::Add,
            generator: generator.into(),
            bricklets: vec![bricklet.into()],
            fragments: u32::try_from(n).expect("small"),
            matched: matched(n, tag),
            present: None,
        }
    };
    result(
        c,
        Dispatch::Observed {
            observer: "look".into(),
            matches: vec![m(0, "ga", "x", a, "a"), m(1, "gb", "y", b, "b")],
        },
    )
}

async fn claim(t: &TestDb, step: &str, n: usize) -> Vec<Claimed> {
    let claimed = t
        .store
        .step_claim("pairWF", step, None, 100, "test", LEASE)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), n, "{step}");
    claimed
}

/// Run every workflow to its end under the runtime; `after` must not have started before any
/// generated step of its workflow finished.
async fn run_to_the_end(t: &TestDb) {
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 60).await;
    rt.stop().await;
    let early: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps a join workdo.steps g
            on g.workflow_id = a.workflow_id and g.generated is not null
         where a.name = 'after' and a.started_at < g.finished_at",
    )
    .fetch_one(t.pool())
    .await
    .expect("order");
    assert_eq!(early, 0, "`after` started before a generated step finished");
}

#[tokio::test]
async fn generators_of_many_workflows_compose_in_one_commit_each_into_its_own() {
    let t = db().await;
    load(&t.store, "pair.yaml", PAIR).await;
    const N: usize = 6;
    let objects: Vec<String> = (0..N).map(|i| format!("obj:pair{i}")).collect();
    for (i, o) in objects.iter().enumerate() {
        let (a, b) = counts(i);
        put_document(
            &t,
            o,
            "d",
            &format!("<d>{}{}</d>", "<a/>".repeat(a), "<b/>".repeat(b)),
        )
        .await;
    }
    let mut req = StartRequest::new("pairWF", &[]);
    req.objects = objects.clone();
    t.store.workflow_start(&req).await.expect("start");
    let index = |c: &Claimed| {
        objects
            .iter()
            .position(|o| *o == c.object_id)
            .expect("ours")
    };

    // Every observer's result in one commit.
    let looks = claim(&t, "look", N).await;
    let results: Vec<StepResult> = looks.iter().map(|c| observed(c, index(c))).collect();
    let applied = t
        .store
        .results_commit(&results, "test")
        .await
        .expect("commit");
    assert!(applied.lost.is_empty());

    // Both generators of every workflow in one commit; one workflow's `gb` names a lease it
    // does not hold (another step's).
    let ga = claim(&t, "ga", N).await;
    let gb = claim(&t, "gb", N).await;
    let compose = |c: &Claimed, g: &str| {
        result(
            c,
            Dispatch::Compose {
                generator: g.into(),
            },
        )
    };
    let mut results: Vec<StepResult> = ga.iter().map(|c| compose(c, "ga")).collect();
    results.extend(gb.iter().map(|c| compose(c, "gb")));
    let stale = results.len() - 1;
    results[stale].change.lease = Some(ga[0].lease_token);
    let applied = t
        .store
        .results_commit(&results, "test")
        .await
        .expect("commit");
    assert_eq!(
        applied.lost,
        vec![gb[N - 1].id],
        "only the stale lease is lost"
    );
    let late = index(&gb[N - 1]);

    for (i, o) in objects.iter().enumerate() {
        let (a, b) = counts(i);
        let names = support::generated_names(&t, o).await;
        let mut want: Vec<String> = (1..=a).map(|k| format!("ga/x#{k}/run")).collect();
        if i != late {
            want.extend((1..=b).map(|k| format!("gb/y#{k}/run")));
        }
        assert_eq!(
            names.iter().collect::<BTreeSet<_>>(),
            want.iter().collect::<BTreeSet<_>>(),
            "{o}"
        );
        // `after` waits for what is composed: every `x` (side by side) and the last `y`.
        let (pending, prereqs): (i32, Vec<String>) = sqlx::query_as(
            "select pending, prereqs from workdo.steps where object_id = $1 and name = 'after'",
        )
        .bind(o)
        .fetch_one(t.pool())
        .await
        .expect("after");
        let sinks = a + usize::from(i != late);
        let open = sinks + usize::from(i == late);
        assert_eq!(usize::try_from(pending).expect("count"), open, "{o}");
        assert_eq!(prereqs.len(), 2 + sinks, "{o}: {prereqs:?}");
        let fragment: String = sqlx::query_scalar(
            "select generated ->> 'fragment' from workdo.steps
              where object_id = $1 and name = 'ga/x#1/run'",
        )
        .bind(o)
        .fetch_one(t.pool())
        .await
        .expect("fragment");
        assert_eq!(fragment, format!("<a n=\"{i}\"/>"), "{o}");
        let (composed, unfinished): (i64, i32) = sqlx::query_as(
            "select (select count(*) from workdo.events
                      where object_id = $1 and kind = 'composed'),
                    (select unfinished from workdo.workflows where object_id = $1)",
        )
        .bind(o)
        .fetch_one(t.pool())
        .await
        .expect("counts");
        assert_eq!(composed, if i == late { 1 } else { 2 }, "{o}");
        let open_steps: i64 = sqlx::query_scalar(
            "select count(*) from workdo.steps
              where object_id = $1 and status not in ('completed', 'skipped')",
        )
        .bind(o)
        .fetch_one(t.pool())
        .await
        .expect("open");
        assert_eq!(i64::from(unfinished), open_steps, "{o}");
    }

    // The stale result comes back under its own lease: it composes then, once.
    let mut retry = compose(&gb[N - 1], "gb");
    retry.change.lease = Some(gb[N - 1].lease_token);
    let applied = t
        .store
        .results_commit(&[retry], "test")
        .await
        .expect("commit");
    assert!(applied.lost.is_empty());
    run_to_the_end(&t).await;
    let composed: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'composed'")
            .fetch_one(t.pool())
            .await
            .expect("composed");
    assert_eq!(composed, 2 * N as i64);
}

/// `look` activates one `x` per `a` for `ga`; `more`, beside `ga`, adds one per `b`.
const MORE: &str = "name: moreWF\nsteps:\n  - name: look\n    observe: { document: d, rules: [{ match: '//a', op: add, generator: ga, bricklets: [x] }] }\n  - name: more\n    prereqs: [look]\n    observe: { document: d, rules: [{ match: '//b', op: add, generator: ga, bricklets: [x] }] }\n  - { name: ga, prereqs: [look], generate: { refset: [x], rules: [{ parallel: x }] } }\n  - { name: after, prereqs: [ga, more], function: { builtin: noop } }\nbricklets:\n  - { name: x, steps: [{ name: run, function: { builtin: noop } }] }\n";

#[tokio::test]
async fn an_observer_committed_with_the_generator_it_feeds_recomposes_what_was_just_composed() {
    let t = db().await;
    load(&t.store, "more.yaml", MORE).await;
    let object = "obj:more";
    put_document(&t, object, "d", "<d><a/><a/><b/></d>").await;
    t.store
        .workflow_start(&StartRequest::new("moreWF", &[object]))
        .await
        .expect("start");
    let claim = |step: &'static str| {
        let store = t.store.clone();
        async move {
            let mut c = store
                .step_claim("moreWF", step, None, 10, "test", LEASE)
                .await
                .expect("claim");
            assert_eq!(c.len(), 1, "{step}");
            c.remove(0)
        }
    };
    let rule = |generator: &str, n: usize| workdo::model::dispatch::RuleMatch {
        rule: 0,
        op: Op::Add,
        generator: generator.into(),
        bricklets: vec!["x".into()],
        fragments: u32::try_from(n).expect("small"),
        matched: vec![None; n],
        present: None,
    };
    let look = claim("look").await;
    let observed = |c: &Claimed, n: usize| {
        result(
            c,
            Dispatch::Observed {
                observer: c.name.clone(),
                matches: vec![rule("ga", n)],
            },
        )
    };
    t.store
        .results_commit(&[observed(&look, 2)], "test")
        .await
        .expect("look");
    // The observer `more` and the generator in one commit, the observer's result first: the
    // generator composes from what `look` found, then `more`'s finding recomposes it.
    let (more, ga) = (claim("more").await, claim("ga").await);
    let generate = result(
        &ga,
        Dispatch::Compose {
            generator: "ga".into(),
        },
    );
    let applied = t
        .store
        .results_commit(&[observed(&more, 1), generate], "test")
        .await
        .expect("commit");
    assert!(applied.lost.is_empty());
    let names = support::generated_names(&t, object).await;
    assert_eq!(names, ["ga/x#1/run", "ga/x#2/run", "ga/x#3/run"]);
    let kinds: Vec<String> = sqlx::query_scalar(
        "select kind from workdo.events where object_id = $1 and kind in ('composed', 'recomposed')
          order by id",
    )
    .bind(object)
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert_eq!(kinds, ["composed", "recomposed"]);
    let (pending, prereqs): (i32, Vec<String>) = sqlx::query_as(
        "select pending, prereqs from workdo.steps where object_id = $1 and name = 'after'",
    )
    .bind(object)
    .fetch_one(t.pool())
    .await
    .expect("after");
    assert_eq!(pending, 3, "the three instances: {prereqs:?}");
    run_to_the_end(&t).await;
}
