//! What stands between a request and the database: readiness and 503s while the database is
//! unreachable, the admin page's and the API's refusal of other sites, token scopes, and
//! request sizes.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{db, load};
use workdo::api::Access;
use workdo::store::{Role, StartRequest};

const DOOR: &str = "name: doorWF\nkind: machine\ninitial: Closed\nstates:\n  Closed:\n    on: { open: Open, knock: Closed }\n  Open:\n    on: { close: Closed }\n";

async fn serve(store: workdo::store::Store, access: Access) -> String {
    support::serve_api(&store, access).await
}

/// `/health` says the process lives; `/ready` says whether the database answers, and API
/// requests answer 503 with Retry-After within seconds when it does not (not 500 after 30 s).
#[tokio::test]
async fn ready_and_503_while_the_database_is_unreachable() {
    workdo::install_crypto();
    // A server whose database address answers nothing: a pool pointed at a closed port.
    let dead = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect_lazy("postgres://workdo@127.0.0.1:1/none")
        .expect("lazy pool");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(workdo::api::serve_on(
        workdo::store::Store::new(dead),
        listener,
        Access::Open,
        stop.clone(),
    ));
    let http = reqwest::Client::new();
    let began = std::time::Instant::now();
    let health = http
        .get(format!("{base}/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), StatusCode::OK);
    let ready = http
        .get(format!("{base}/ready"))
        .send()
        .await
        .expect("ready");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(began.elapsed() < std::time::Duration::from_secs(2));
    let began = std::time::Instant::now();
    let r = http
        .get(format!("{base}/api/templates"))
        .send()
        .await
        .expect("templates");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"2"[..])
    );
    let body: Value = r.json().await.expect("JSON error");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("not answering"))
    );
    assert!(
        began.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        began.elapsed()
    );
    stop.cancel();
}

/// The admin page under `--open`: a POST from another site is refused by its Origin (or
/// Referer) before anything is done, the CSRF token is the process's own random secret (not a
/// constant anyone can compute), every answer forbids framing and inline script, and a `back`
/// address with a control character is a 400.
#[tokio::test]
async fn the_page_refuses_other_sites_and_cannot_be_framed() {
    let t = db().await;
    load(&t.store, "door.yaml", DOOR).await;
    t.store
        .workflow_start(&StartRequest::new("doorWF", &["obj:csrf"]))
        .await
        .expect("start");
    let base = serve(t.store.clone(), Access::Open).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let page = http.get(format!("{base}/")).send().await.expect("page");
    let h = page.headers().clone();
    assert_eq!(
        h.get("x-frame-options").map(|v| v.as_bytes()),
        Some(&b"DENY"[..])
    );
    let csp = h
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let html = page.text().await.expect("html");
    assert!(
        !html.contains("<script>") && !html.contains("<style>"),
        "inline script or style"
    );
    assert!(
        !html.contains(" onclick=") && !html.contains(" onsubmit="),
        "inline handlers"
    );
    // Under `--open` the header has no sign-out form: the token comes from a step row's form.
    let object = http
        .get(format!("{base}/ui/objects/obj:csrf"))
        .send()
        .await
        .expect("object page")
        .text()
        .await
        .expect("html");
    let csrf = support::api::csrf_in(&object);
    let constant = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"workdo-csrf:open"))
    };
    assert!(!csrf.is_empty());
    assert_ne!(csrf, constant, "the CSRF token is the old constant");
    for script in ["/ui/app.js", "/ui/app.css"] {
        let r = http
            .get(format!("{base}{script}"))
            .send()
            .await
            .expect("static");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("cache-control").is_some());
    }

    let step: i64 = sqlx::query_scalar("select id from workdo.steps limit 1")
        .fetch_optional(t.pool())
        .await
        .expect("step")
        .unwrap_or(0);
    let form = |back: &str| {
        format!(
            "csrf={csrf}&action=skip&id={step}&back={}",
            back.replace('\n', "%0A").replace('\r', "%0D")
        )
    };
    let post = |origin: Option<&str>, referer: Option<&str>, body: String| {
        let mut r = http
            .post(format!("{base}/ui/steps/act"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(x) = referer {
            r = r.header("referer", x);
        }
        r.send()
    };
    let evil = post(Some("http://evil.example"), None, form("/ui/errors"))
        .await
        .expect("post");
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let evil = post(None, Some("http://evil.example/page"), form("/ui/errors"))
        .await
        .expect("post");
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let signin = http
        .post(format!("{base}/signin"))
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=x")
        .send()
        .await
        .expect("signin");
    assert_eq!(signin.status(), StatusCode::FORBIDDEN);
    let bad_back = post(Some(&base), None, form("/ui/errors\r\nSet-Cookie: x=1"))
        .await
        .expect("post");
    assert_eq!(bad_back.status(), StatusCode::BAD_REQUEST);
    let same = post(Some(&base), None, form("/ui/errors"))
        .await
        .expect("post");
    assert_eq!(same.status(), StatusCode::SEE_OTHER);
}

/// What an adversary found, held: another site cannot drive the API under `--open` (a browser's
/// cross-site POST carries its Origin; a rebound DNS name is not a loopback Host); one token is
/// one idempotency scope however it is sent; a job-scoped token cannot read; a negative limit
/// and a context over 64 KiB are refused by name.
#[tokio::test]
async fn other_sites_scopes_and_sizes() {
    let t = db().await;
    load(&t.store, "door.yaml", DOOR).await;
    let open = serve(t.store.clone(), Access::Open).await;
    let http = reqwest::Client::new();
    let evil = http
        .post(format!("{open}/api/templates?format=yaml"))
        .header("origin", "http://evil.example")
        .header("content-type", "text/plain")
        .body("name: pwnWF\nsteps:\n  - { name: a, function: { exec: [id] } }\n")
        .send()
        .await
        .expect("post");
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let rebound = http
        .post(format!("{open}/api/workflows"))
        .header("host", "rebound.evil.example:7070")
        .json(&json!({"template": "doorWF", "objects": ["obj:x"]}))
        .send()
        .await
        .expect("post");
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.templates where name = 'pwnWF'")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(n, 0);

    let base = serve(t.store.clone(), Access::Tokens).await;
    let robot = t
        .store
        .token_create(Role::Robot, "r", None)
        .await
        .expect("token")
        .1;
    let start = |auth: reqwest::RequestBuilder| {
        auth.header("Idempotency-Key", "one-key")
            .json(&json!({"template": "doorWF", "objects": ["obj:scope"]}))
            .send()
    };
    let first = start(
        http.post(format!("{base}/api/workflows"))
            .bearer_auth(&robot),
    )
    .await
    .expect("bearer");
    assert_eq!(first.status(), StatusCode::CREATED);
    for (user, t2) in [("robot", &robot), ("someone-else", &robot)] {
        let again = start(
            http.post(format!("{base}/api/workflows"))
                .basic_auth(user, Some(t2)),
        )
        .await
        .expect("basic");
        assert_eq!(
            again
                .headers()
                .get("idempotency-replayed")
                .map(|v| v.as_bytes()),
            Some(&b"true"[..]),
            "the same token sent as Basic is the same caller"
        );
    }
    let workflows: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where object_id = 'obj:scope' and kind = 'workflow_started'",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(workflows, 1);

    let job: i64 =
        sqlx::query_scalar("select id from workdo.workflows where object_id = 'obj:scope'")
            .fetch_one(t.pool())
            .await
            .expect("job");
    let scoped = t
        .store
        .token_create_scoped(job, &["open".to_string()], "door", None)
        .await
        .expect("scoped")
        .1;
    let read = http
        .get(format!("{base}/api/templates/signals"))
        .bearer_auth(&scoped)
        .send()
        .await
        .expect("get");
    assert_eq!(read.status(), StatusCode::FORBIDDEN);

    let negative = http
        .get(format!("{base}/workflow_queue/all_queued?limit=-1"))
        .bearer_auth(&robot)
        .send()
        .await
        .expect("get");
    assert_eq!(negative.status(), StatusCode::BAD_REQUEST);
    let big = http
        .post(format!("{base}/api/workflows"))
        .bearer_auth(&robot)
        .json(&json!({"template": "doorWF", "objects": ["obj:big"], "context": {"x": "y".repeat(70_000)}}))
        .send()
        .await
        .expect("post");
    assert_eq!(big.status(), StatusCode::BAD_REQUEST);
    let said: Value = big.json().await.expect("JSON");
    assert!(
        said["error"].as_str().is_some_and(|e| e.contains("64 KiB")),
        "{said}"
    );
}

/// A write that meets a row lock held elsewhere (an operator's open transaction) waits at most
/// `REQUEST_LOCK_TIMEOUT`, then answers 503 with Retry-After; nothing it did is kept, and the
/// same request succeeds once the lock is gone (issue 45).
#[tokio::test]
async fn an_api_write_blocked_on_a_held_row_lock_answers_503() {
    let t = db().await;
    load(&t.store, "google.xml", support::GOOGLE_XML).await;
    let (wf, druid) = ("googleScannedBookWF", "druid:bb123cd4567");
    t.store
        .workflow_start(&StartRequest::new(wf, &[druid]))
        .await
        .expect("start");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(workdo::api::serve_on(
        t.store.clone(),
        listener,
        Access::Open,
        stop.clone(),
    ));
    let step = "descriptive-metadata";
    let status = || {
        sqlx::query_scalar::<_, String>("select status from workdo.steps where name = $1")
            .bind(step)
            .fetch_one(t.pool())
    };
    let before = status().await.expect("status");
    let mut holder = t.pool().begin().await.expect("begin");
    sqlx::query("select 1 from workdo.steps where name = $1 for update")
        .bind(step)
        .execute(&mut *holder)
        .await
        .expect("hold the step's row");
    let http = reqwest::Client::new();
    let put = || {
        http.put(format!("{base}/objects/{druid}/workflows/{wf}/{step}"))
            .body(format!(r#"<process name="{step}" status="completed"/>"#))
            .send()
    };
    let began = std::time::Instant::now();
    let r = put().await.expect("put");
    let waited = began.elapsed();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"2"[..])
    );
    let body = r.text().await.expect("body");
    assert!(body.contains("did not answer in time"), "{body}");
    assert!(
        waited >= workdo::store::db::REQUEST_LOCK_TIMEOUT
            && waited < workdo::store::db::REQUEST_LOCK_TIMEOUT * 4,
        "answered after {waited:?}"
    );
    holder.rollback().await.expect("release");
    assert_eq!(status().await.expect("status"), before, "nothing was done");
    let r = put().await.expect("put again");
    assert!(
        r.status().is_success(),
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_eq!(status().await.expect("status"), "completed");
    stop.cancel();
}
