//! Idempotency keys: a start or a signal repeated with its key, over the API and through the
//! CLI, is applied once and answered as the first time.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{db, load};
use workdo::api::Access;
use workdo::store::Role;

const DOOR: &str = "name: doorWF\nkind: machine\ninitial: Closed\nstates:\n  Closed:\n    on: { open: Open, knock: Closed }\n  Open:\n    on: { close: Closed }\n";

async fn serve(store: workdo::store::Store, access: Access) -> String {
    support::serve_api(&store, access).await
}

/// A signal or a start sent twice with one Idempotency-Key is applied once; the repeat gets
/// the first answer, marked as replayed; the key on another request is refused.
#[tokio::test]
async fn a_request_repeated_with_its_idempotency_key_is_applied_once() {
    let t = db().await;
    load(&t.store, "door.yaml", DOOR).await;
    let base = serve(t.store.clone(), Access::Tokens).await;
    let robot = t
        .store
        .token_create(Role::Robot, "r", None)
        .await
        .expect("token")
        .1;
    let http = reqwest::Client::new();
    let start = |key: &str, objects: Value| {
        http.post(format!("{base}/api/workflows"))
            .bearer_auth(&robot)
            .header("Idempotency-Key", key)
            .json(&json!({"template": "doorWF", "objects": objects}))
            .send()
    };
    let first = start("start-1", json!(["obj:door"])).await.expect("start");
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body: Value = first.json().await.expect("JSON");
    let again = start("start-1", json!(["obj:door"])).await.expect("again");
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(
        again
            .headers()
            .get("idempotency-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(again.json::<Value>().await.expect("JSON"), first_body);
    let other = start("start-1", json!(["obj:other"])).await.expect("other");
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let jobs: i64 = sqlx::query_scalar("select count(*) from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(jobs, 1, "the repeat started another workflow");

    // A signal: `knock` loops on Closed; sent five times with one key, taken once.
    let job = first_body[0]["workflow_id"].as_i64().expect("job id");
    for _ in 0..5 {
        let r = http
            .post(format!("{base}/api/workflows/{job}/signals"))
            .bearer_auth(&robot)
            .header("Idempotency-Key", "knock-1")
            .json(&json!({"signal": "knock"}))
            .send()
            .await
            .expect("signal");
        assert_eq!(r.status(), StatusCode::OK);
    }
    let taken: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where workflow_id = $1 and detail->>'signal' = 'knock' and kind = 'signal_received'",
    )
    .bind(job)
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!(taken, 1, "one key, one transition");
    // The key is per caller: another token's same key is its own.
    let admin = t
        .store
        .token_create(Role::Admin, "a", None)
        .await
        .expect("token")
        .1;
    let r = http
        .post(format!("{base}/api/workflows/{job}/signals"))
        .bearer_auth(&admin)
        .header("Idempotency-Key", "knock-1")
        .json(&json!({"signal": "knock"}))
        .send()
        .await
        .expect("signal");
    assert!(r.headers().get("idempotency-replayed").is_none());
    // A key that is not visible ASCII is refused before anything runs.
    let r = http
        .post(format!("{base}/api/workflows/{job}/signals"))
        .bearer_auth(&robot)
        .header("Idempotency-Key", "has space")
        .json(&json!({"signal": "knock"}))
        .send()
        .await
        .expect("signal");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

/// The same through the CLI: `workdo start --idempotency-key` and `workdo signal
/// --idempotency-key` apply once and print the first answer on a repeat.
#[tokio::test]
async fn the_cli_applies_a_start_and_a_signal_once_per_key() {
    let t = db().await;
    load(&t.store, "door.yaml", DOOR).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let start = ["start", "doorWF", "obj:cli", "--idempotency-key", "s-1"];
    let first = run(&start);
    assert!(first.starts_with("started doorWF on obj:cli"), "{first}");
    let again = run(&start);
    assert!(
        again.contains("already applied under idempotency key s-1"),
        "{again}"
    );
    let signal = [
        "signal",
        "obj:cli",
        "doorWF",
        "knock",
        "--idempotency-key",
        "k-1",
    ];
    run(&signal);
    run(&signal);
    run(&signal);
    let (workflows, knocks): (i64, i64) = sqlx::query_as(
        "select (select count(*) from workdo.workflows),
                (select count(*) from workdo.events where kind = 'signal_received' and detail->>'signal' = 'knock')",
    )
    .fetch_one(t.pool())
    .await
    .expect("counts");
    assert_eq!((workflows, knocks), (1, 1));
}

/// The key's request is what it means (issue 47 item 23): the same JSON with other whitespace is
/// the same request; the same bytes as another Content-Type are another; a 404 is not kept, so
/// the repeat after the object exists is answered as things are then. And malformed requests
/// are 400s, not conflicts: a `current-status` that is no status, a signal over its size.
#[tokio::test]
async fn keys_match_requests_by_meaning_and_keep_only_lasting_answers() {
    let t = db().await;
    load(&t.store, "door.yaml", DOOR).await;
    let base = serve(t.store.clone(), Access::Tokens).await;
    let robot = t
        .store
        .token_create(Role::Robot, "r", None)
        .await
        .expect("token")
        .1;
    let http = reqwest::Client::new();
    let send = |key: &str, kind: &str, body: &str| {
        http.post(format!("{base}/api/workflows"))
            .bearer_auth(&robot)
            .header("Idempotency-Key", key)
            .header("content-type", kind)
            .body(body.to_string())
            .send()
    };
    let json_type = "application/json";
    let one = r#"{"template":"doorWF","objects":["obj:ws"]}"#;
    let spaced = "{ \"template\" : \"doorWF\",\n  \"objects\" : [ \"obj:ws\" ] }";
    assert_eq!(
        send("k1", json_type, one).await.expect("first").status(),
        StatusCode::CREATED
    );
    let again = send("k1", json_type, spaced).await.expect("again");
    assert_eq!(
        again.status(),
        StatusCode::CREATED,
        "whitespace made it another request"
    );
    assert!(again.headers().get("idempotency-replayed").is_some());
    let other_type = send("k1", "text/plain", one).await.expect("other type");
    assert_eq!(other_type.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // A signal to a job that does not exist yet: 404, not kept; once the job exists, the same
    // key and request are sent for real.
    let signal = |key: &str| {
        http.post(format!(
            "{base}/api/objects/obj:later/workflows/doorWF/signals"
        ))
        .bearer_auth(&robot)
        .header("Idempotency-Key", key)
        .json(&json!({"signal": "open"}))
        .send()
    };
    assert_eq!(
        signal("k2").await.expect("signal").status(),
        StatusCode::NOT_FOUND
    );
    t.store
        .workflow_start(&workdo::store::StartRequest::new("doorWF", &["obj:later"]))
        .await
        .expect("start");
    let now = signal("k2").await.expect("signal again");
    assert_eq!(now.status(), StatusCode::OK);
    assert!(now.headers().get("idempotency-replayed").is_none());
    // Over the size a signal's data may have: a malformed request.
    let big = "x".repeat(70 * 1024);
    let r = http
        .post(format!(
            "{base}/api/objects/obj:later/workflows/doorWF/signals"
        ))
        .bearer_auth(&robot)
        .json(&json!({"signal": "close", "data": {"big": big}}))
        .send()
        .await
        .expect("big signal");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}
