//! Dynamic dispatch against a real Postgres and a real runtime: the paper's example composed
//! exactly as its Fig. 3(d), re-observation after a document change, concurrent observers, both
//! shipped examples under `workdo up`, an observer's own function, and kill -9 while generators
//! compose. (When things go wrong: tests/dispatch/dispatch_failures.rs.)

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use support::{TestDb, config, db, generated_names, load, put_document, start, wait_until};
use tokio_util::sync::CancellationToken;
use workdo::runtime;
use workdo::store::{StartRequest, StepFilter};

const LECTURE: &str = include_str!("../fixtures/documents/lecture.xml");

async fn load_file(t: &TestDb, path: &str) {
    let file = support::workflows_dir().join(path);
    let loaded = workdo::cli::files::parse_file(&file).expect("a valid template");
    t.store.template_save(&loaded).await.expect("saved");
}

/// (step, prerequisites) of an object's steps whose names start with `prefix`.
async fn steps_with_prereqs(t: &TestDb, object: &str) -> Vec<(String, Vec<String>)> {
    sqlx::query_as(
        "select name, prereqs from workdo.steps where object_id = $1 and active order by name",
    )
    .bind(object)
    .fetch_all(t.pool())
    .await
    .expect("steps")
}

/// The edges among generated steps and into the template's steps: (from, to).
async fn edges(t: &TestDb, object: &str) -> BTreeSet<(String, String)> {
    steps_with_prereqs(t, object)
        .await
        .into_iter()
        .flat_map(|(s, ps)| ps.into_iter().map(move |p| (p, s.clone())))
        .collect()
}

fn e(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[tokio::test]
async fn the_papers_example_composes_figure_3d_and_runs_to_the_end() {
    let t = db().await;
    load_file(&t, "lectureWF.yaml").await;
    let druid = "druid:bb123cd4567";
    put_document(&t, druid, "lecture", LECTURE).await;
    t.store
        .workflow_start(&StartRequest::new("lectureWF", &[druid]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 60).await;
    rt.stop().await;
    let fe = |b: &str| format!("feature-extraction/{b}");
    let expected: BTreeSet<(String, String)> = [
        e("get-docs", "feature-extraction"),
        e("feature-extraction", "publish"),
        // Fig. 3(d): b1 twice in sequence before b2; b3 before both b4; both b4 before b5.
        e(&fe("b1#1/key-frames"), &fe("b1#2/key-frames")),
        e(&fe("b1#2/key-frames"), &fe("b2#1/color-histogram")),
        e(&fe("b3#1/subtitles"), &fe("b4#1/keywords")),
        e(&fe("b3#1/subtitles"), &fe("b4#2/keywords")),
        e(&fe("b4#1/keywords"), &fe("b5#1/stemming")),
        e(&fe("b4#2/keywords"), &fe("b5#1/stemming")),
        // publish waits for the subnet's last steps.
        e(&fe("b2#1/color-histogram"), "publish"),
        e(&fe("b5#1/stemming"), "publish"),
        e(&fe("b6#1/image-features"), "publish"),
        e(&fe("b6#2/image-features"), "publish"),
    ]
    .into_iter()
    .collect();
    assert_eq!(edges(&t, druid).await, expected);
    // Generated steps say where they came from; the subnet was composed once, and publish
    // finished after every step of it.
    let generated: Value = sqlx::query_scalar(
        "select generated from workdo.steps where name = 'feature-extraction/b4#2/keywords'",
    )
    .fetch_one(t.pool())
    .await
    .expect("generated");
    assert_eq!(
        generated,
        json!({"generator": "feature-extraction", "bricklet": "b4", "instance": 2,
               "fragment": "<media doctype=\"video\" src=\"lecture2.mp4\"/>"})
    );
    let composed: Vec<Value> = sqlx::query_scalar(
        "select detail from workdo.events where kind = 'composed' and object_id = $1",
    )
    .bind(druid)
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert_eq!(composed.len(), 1);
    assert_eq!(
        composed[0]["actset"],
        json!({"b1": 2, "b2": 2, "b3": 2, "b4": 2, "b5": 2, "b6": 2})
    );
    let late: bool = sqlx::query_scalar(
        "select (select finished_at from workdo.steps where name = 'publish')
                >= (select max(finished_at) from workdo.steps where generated is not null)",
    )
    .fetch_one(t.pool())
    .await
    .expect("order");
    assert!(late, "publish finished before its subnet");
    let observed: Value = sqlx::query_scalar(
        "select detail from workdo.events where kind = 'observed' and object_id = $1",
    )
    .bind(druid)
    .fetch_one(t.pool())
    .await
    .expect("observed event");
    assert_eq!(
        observed["matched"],
        json!([
            {"rule": 1, "op": "add", "generator": "feature-extraction", "bricklets": ["b6"], "fragments": 2},
            {"rule": 2, "op": "add", "generator": "feature-extraction",
             "bricklets": ["b1", "b2", "b3", "b4", "b5"], "fragments": 2}
        ])
    );
}

/// Files of several kinds; images may be withdrawn, and a recording that goes away has its audio
/// work undone (its compensation, seed 001's `undo`).
const CONTENT_WF: &str = include_str!("../fixtures/contentWF.yaml");

#[tokio::test]
async fn a_second_observation_of_a_changed_document_changes_the_subnet() {
    let t = db().await;
    load(&t.store, "content.yaml", CONTENT_WF).await;
    let obj = "obj:c1";
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/><file kind='image'/><file kind='audio' n='1'/><file kind='audio' n='2'/></content>",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &[obj]))
        .await
        .expect("start");
    // Only the observer runs: the generator waits, ready, uncomposed.
    let only = runtime::bindings(&t.store, &["contentWF:look".to_string()])
        .await
        .expect("bindings");
    let token = CancellationToken::new();
    let mut cfg = config();
    cfg.only = Some(vec!["contentWF:look".to_string()]);
    let handle = tokio::spawn(runtime::run(t.store.clone(), cfg, only, token.clone()));
    wait_until(
        t.pool(),
        "select status = 'ready' from workdo.steps where name = 'gen'",
        30,
    )
    .await;
    token.cancel();
    handle.await.expect("task").expect("runtime");
    let actset: Value =
        sqlx::query_scalar("select dispatch -> 'actsets' -> 'gen' from workdo.workflows")
            .fetch_one(t.pool())
            .await
            .expect("actset");
    assert_eq!(
        actset,
        json!({"img": 2, "audio": 2}),
        "nothing removed yet: no undo"
    );
    // The document changes: one image withdrawn, one recording gone. The observer runs again
    // (retried by hand), and the generator composes from what it sees now.
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image' withdrawn='yes'/><file kind='image'/><file kind='audio' n='2'/></content>",
    )
    .await;
    let again = t
        .store
        .steps_again(
            &StepFilter {
                step: Some("look".into()),
                ..StepFilter::default()
            },
            "test",
        )
        .await
        .expect("retry");
    assert_eq!(again, 1);
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    // delete removed img; undo added the removed recording's compensation, after audio.
    assert_eq!(
        generated_names(&t, obj).await,
        vec!["gen/audio#1/run", "gen/audio-purge#1/run"]
    );
    // The timings count generated steps under their bricklet step, as the overview does.
    let timed: Vec<String> = t
        .store
        .timings(1.0)
        .await
        .expect("timings")
        .into_iter()
        .filter(|r| r.template == "contentWF")
        .map(|r| r.step)
        .collect();
    assert!(
        timed.contains(&"gen/audio/run".to_string()) && timed.iter().all(|n| !n.contains('#')),
        "{timed:?}"
    );
    assert!(
        edges(&t, obj)
            .await
            .contains(&e("gen/audio#1/run", "gen/audio-purge#1/run"))
    );
    let observations: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where kind = 'observed' and object_id = $1",
    )
    .bind(obj)
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(observations, 2);
}

#[tokio::test]
async fn observers_running_side_by_side_on_one_workflow_both_count() {
    let t = db().await;
    load(
        &t.store,
        "two.yaml",
        "name: twoWF\nsteps:\n  - name: images\n    observe: { document: d, rules: [{ match: '//image', op: add, generator: gen, bricklets: [img] }] }\n  - name: sounds\n    observe: { document: d, rules: [{ match: '//sound', op: add, generator: gen, bricklets: [snd] }] }\n  - name: gen\n    prereqs: [images, sounds]\n    generate: { refset: [img, snd], rules: [{ parallel: img }, { parallel: snd }] }\nbricklets:\n  - { name: img, steps: [{ name: run, function: { builtin: noop } }] }\n  - { name: snd, steps: [{ name: run, function: { builtin: noop } }] }\n",
    )
    .await;
    let objects: Vec<String> = (0..40).map(|i| format!("obj:two{i}")).collect();
    for o in &objects {
        put_document(&t, o, "d", "<d><image/><image/><sound/></d>").await;
    }
    let mut req = StartRequest::new("twoWF", &[]);
    req.objects = objects.clone();
    t.store.workflow_start(&req).await.expect("start");
    let mut cfg = config();
    cfg.completers = 4;
    let rt = start(&t.store, cfg).await;
    support::all_completed(t.pool(), 60).await;
    rt.stop().await;
    let wrong: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows
          where dispatch -> 'composed' -> 'gen' -> 'actset' <> '{\"img\": 2, \"snd\": 1}'::jsonb",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(wrong, 0);
    let generated: i64 =
        sqlx::query_scalar("select count(*) from workdo.steps where generated is not null")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(generated, 40 * 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_generators_compose_inserts_each_subnet_once() {
    use rand::RngExt;
    let t = db().await;
    // The paper's example, with the attempt limit out of reach: a kill mid-call uses an attempt,
    // as any crash does; this test is about subnets inserted once, not attempts.
    let source = std::fs::read_to_string(support::workflows_dir().join("lectureWF.yaml"))
        .expect("lectureWF.yaml")
        .replacen("steps:\n", "error-limit: 1000\nsteps:\n", 1)
        .replace("{ builtin: noop }", "{ builtin: noop, timeout: 2s }");
    load(&t.store, "lectureWF.yaml", &source).await;
    let objects: Vec<String> = (0..60).map(|i| format!("obj:lecture{i}")).collect();
    for o in &objects {
        put_document(&t, o, "lecture", LECTURE).await;
    }
    let mut req = StartRequest::new("lectureWF", &[]);
    req.objects = objects.clone();
    t.store.workflow_start(&req).await.expect("start");
    let args = [
        "--lease-margin",
        "1s",
        "--poll-interval",
        "200ms",
        "--grace",
        "1s",
    ];
    let mut rng = rand::rng();
    for _ in 0..8 {
        let mut child = support::spawn_up(&t.url, &args);
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..500))).await;
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
    }
    let mut child = support::spawn_up(&t.url, &args);
    let pool = t.pool().clone();
    let done = async {
        loop {
            let left: i64 = sqlx::query_scalar(
                "select count(*) from workdo.workflows where status <> 'completed'",
            )
            .fetch_one(&pool)
            .await
            .expect("count");
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(120), done).await;
    child.kill().expect("kill");
    child.wait().expect("reaped");
    if finished.is_err() {
        let left: Vec<(String, String, i32, i32)> = sqlx::query_as(
            "select name, status, pending, attempts from workdo.steps
              where status not in ('completed', 'skipped') order by name limit 30",
        )
        .fetch_all(t.pool())
        .await
        .expect("left");
        panic!("workflows did not finish; unfinished steps: {left:?}");
    }
    let per_workflow: Vec<(i64, i64, i64)> = sqlx::query_as(
        "select w.id,
                (select count(*) from workdo.steps s where s.workflow_id = w.id and s.generated is not null),
                (select count(*) from workdo.events e where e.workflow_id = w.id and e.kind = 'composed')
           from workdo.workflows w",
    )
    .fetch_all(t.pool())
    .await
    .expect("counts");
    assert_eq!(per_workflow.len(), 60);
    for (id, steps, composed) in per_workflow {
        assert_eq!((steps, composed), (9, 1), "workflow {id}");
    }
    let twice: i64 = sqlx::query_scalar(
        "select count(*) from (select 1 from workdo.events where kind = 'completed'
                                 group by workflow_id, step having count(*) > 1) x",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(twice, 0, "a step completed twice");
    // The kills did land in the middle of work: leased steps were given back.
    let given_back: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where kind in ('lease_expired', 'released')",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert!(given_back > 0, "no kill interrupted any work");
}

#[tokio::test]
async fn both_shipped_examples_run_end_to_end_under_workdo_up() {
    let t = db().await;
    let root = support::workflows_dir().join("..");
    let workdo = env!("CARGO_BIN_EXE_workdo");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(workdo)
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .current_dir(&root)
            .output()
            .expect("workdo");
        assert!(
            out.status.success(),
            "workdo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let loaded = cli(&[
        "templates",
        "load",
        "workflows/bricklets",
        "workflows/digitalObjectWF.yaml",
        "workflows/lectureWF.yaml",
    ]);
    assert!(
        loaded.contains("loaded bricklet image-metadata"),
        "{loaded}"
    );
    let druid = "druid:bc123df4567";
    cli(&[
        "objects",
        "add",
        druid,
        "--document",
        "contentMetadata=tests/fixtures/documents/contentMetadata.xml",
    ]);
    cli(&["start", "digitalObjectWF", druid]);
    // The paper's example under the same runtime.
    cli(&[
        "objects",
        "add",
        "druid:bb123cd4567",
        "--document",
        "lecture=tests/fixtures/documents/lecture.xml",
    ]);
    cli(&["start", "lectureWF", "druid:bb123cd4567"]);
    let mut up = support::spawn_up(&t.url, &["--poll-interval", "200ms"]);
    support::all_completed(t.pool(), 60).await;
    up.kill().expect("stop");
    up.wait().expect("reaped");
    // One extractor per file, side by side, all before derivatives, then shelving.
    let fe = |b: &str, n: u32| format!("extract-metadata/{b}-metadata#{n}/extract");
    let mut expected: BTreeSet<(String, String)> = [
        e("inspect-content", "extract-metadata"),
        e("extract-metadata", "derivatives"),
        e("derivatives", "shelve"),
    ]
    .into_iter()
    .collect();
    for (b, n) in [("image", 3), ("pdf", 1), ("audio", 2)] {
        for i in 1..=n {
            expected.insert((fe(b, i), "derivatives".to_string()));
        }
    }
    assert_eq!(edges(&t, druid).await, expected);
    assert_eq!(
        generated_names(&t, "druid:bb123cd4567").await.len(),
        9,
        "the lecture's subnet"
    );
    let notes: Vec<String> = sqlx::query_scalar(
        "select note from workdo.steps where generated is not null and object_id = 'druid:bc123df4567' order by name",
    )
    .fetch_all(t.pool())
    .await
    .expect("notes");
    assert_eq!(
        notes,
        vec![
            "audio metadata of file 1",
            "audio metadata of file 2",
            "image metadata of file 1",
            "image metadata of file 2",
            "image metadata of file 3",
            "pdf metadata of file 1"
        ]
    );
    let graph = cli(&["graph", druid, "digitalObjectWF"]);
    assert!(graph.starts_with("flowchart TD"), "{graph}");
    assert!(
        graph.contains("subgraph extract-metadata-subnet"),
        "{graph}"
    );
    let dot = cli(&["graph", druid, "digitalObjectWF", "--format", "dot"]);
    assert!(dot.starts_with("digraph workflow {"), "{dot}");
    assert_eq!(
        dot.matches(" -> ").count(),
        graph.matches("-->").count() + graph.matches("-.->").count()
    );
}

#[tokio::test]
async fn an_observers_function_runs_first_and_its_document_is_the_one_observed() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The function rewrites the document (as a characterisation tool would): the rules see
    // its version, not the one the object had.
    let f = support::function_script(
        dir.path(),
        "characterise.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"object\":{\"documents\":{\"content\":\"<content><file kind=\\\"audio\\\"/><file kind=\\\"audio\\\"/></content>\"}}}'\n",
    );
    let source = CONTENT_WF.replacen(
        "  - name: look\n    observe:",
        &format!("  - name: look\n    function: {{ exec: {f} }}\n    observe:"),
        1,
    );
    load(&t.store, "content.yaml", &source).await;
    put_document(
        &t,
        "obj:fn",
        "content",
        "<content><file kind='image'/></content>",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &["obj:fn"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    assert_eq!(
        generated_names(&t, "obj:fn").await,
        vec!["gen/audio#1/run", "gen/audio#2/run"]
    );
    // The function's document was stored with its result.
    let stored: String = sqlx::query_scalar(
        "select content from workdo.documents where object_id = 'obj:fn' and name = 'content'",
    )
    .fetch_one(t.pool())
    .await
    .expect("document");
    assert!(stored.contains("audio"), "{stored}");
}
