//! Regressions of the trust round: idempotency keys, readiness and 503s while the database is
//! unreachable, the admin page's CSRF and Origin checks and headers, and inputs that once loaded
//! when they should have been refused (an unknown builtin, a BOM, a `<workflow>` root, an unknown
//! template in a schedule, a bad alert address, an endless token expiry).

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{db, load};
use workdo::api::Access;
use workdo::store::{Role, StartRequest};

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
    let csrf = html
        .split("name=csrf value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_default()
        .to_string();
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

/// Inputs that once loaded and broke something later are refused when loaded, naming what is
/// wrong: an unknown builtin (it stopped every runtime), a `<workflow>` root; a BOM is accepted.
#[test]
fn templates_are_refused_or_accepted_as_they_should_be() {
    use workdo::model::template::{Format, parse};
    let e = parse(
        "rm.yaml",
        Format::Yaml,
        "name: rmWF\nsteps:\n  - name: a\n    function: { builtin: rm-rf }\n",
    )
    .expect_err("an unknown builtin");
    let said = e.to_string();
    assert!(
        said.contains("rm.yaml:3: builtin: no builtin function \"rm-rf\""),
        "{said}"
    );
    let e = parse(
        "rm.xml",
        Format::Xml,
        r#"<workflow-def id="rmWF"><process name="a"><function builtin="rm-rf"/></process></workflow-def>"#,
    )
    .expect_err("an unknown builtin in XML");
    assert!(e.to_string().contains("no builtin function"), "{e}");
    let e = parse(
        "w.xml",
        Format::Xml,
        r#"<workflow id="accessionWF" objectId="druid:bb123cd4567"><process name="a"/></workflow>"#,
    )
    .expect_err("a <workflow> document is not a template");
    assert!(e.to_string().contains("expected <workflow-def>"), "{e}");
    let bom = parse(
        "bom.yaml",
        Format::Yaml,
        "\u{feff}name: bomWF\nsteps:\n  - name: a\n",
    )
    .expect("a BOM is not part of the text");
    assert_eq!(bom.template.name, "bomWF");
    let e = parse(
        "mail.yaml",
        Format::Yaml,
        "name: mailWF\nalerts: { to: [not an address] }\nsteps:\n  - name: a\n",
    )
    .expect_err("a bad alert address");
    assert!(e.to_string().contains("not a mail address"), "{e}");
}

/// A stored template this binary cannot run (a builtin it lacks, as a newer binary might have
/// stored) does not stop the runtime: its step waits, every other step runs.
#[tokio::test]
async fn a_template_this_binary_cannot_run_does_not_stop_the_others() {
    let t = db().await;
    load(
        &t.store,
        "ok.yaml",
        "name: okWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    load(
        &t.store,
        "later.yaml",
        "name: laterWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    // As a newer binary would have stored it.
    sqlx::query(
        "update workdo.templates set spec = jsonb_set(spec, '{steps,0,function,runner,name}', '\"from-the-future\"') where name = 'laterWF'",
    )
    .execute(t.pool())
    .await
    .expect("a builtin this binary lacks");
    t.store
        .workflow_start(&StartRequest::new("okWF", &["obj:ok"]))
        .await
        .expect("start");
    t.store
        .workflow_start(&StartRequest::new("laterWF", &["obj:later"]))
        .await
        .expect("start");
    let mut up = support::spawn_up(&t.url, &[]);
    support::wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:ok'",
        60,
    )
    .await;
    assert!(up.try_wait().expect("wait").is_none(), "workdo up exited");
    let later: String =
        sqlx::query_scalar("select status from workdo.steps where object_id = 'obj:later'")
            .fetch_one(t.pool())
            .await
            .expect("status");
    assert_eq!(later, "ready");
    let _ = up.kill();
    let _ = up.wait();
    // The page says which step this binary cannot run, and why.
    let base = serve(t.store.clone(), Access::Open).await;
    let page = reqwest::get(format!("{base}/ui/templates"))
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(
        page.contains("cannot run step a: no builtin function &quot;from-the-future&quot;"),
        "{page}"
    );
}

/// A schedule naming a template that is not loaded is refused, and nothing of its file saved.
#[tokio::test]
async fn a_schedule_for_an_unknown_template_is_refused() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "schedules:\n  - name: nightly\n    cron: '0 0 3 * * *'\n    start: nopeWF\n    objects: { ids: [druid:bb123cd4567] }\n",
    )
    .expect("file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["schedules", "load"])
        .arg(&file)
        .env("DATABASE_URL", &t.url)
        .output()
        .expect("workdo");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("nopeWF") && said.contains("not a loaded template"),
        "{said}"
    );
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.schedules")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(n, 0);
}

/// `tokens create --expires 99999999d` is an error, not a panic.
#[tokio::test]
async fn an_endless_token_expiry_is_an_error() {
    let t = db().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args([
            "tokens",
            "create",
            "--role",
            "viewer",
            "--expires",
            "99999999d",
        ])
        .env("DATABASE_URL", &t.url)
        .output()
        .expect("workdo");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("at most 36500d") && !said.contains("panicked"),
        "{said}"
    );
}

/// A function's result starts workflows through the one start path: a machine started so gets
/// its initial state and takes signals; a bad lane, or the running workflow's own template on
/// its own object, is refused and recorded (the step still completes); an unparseable
/// `start_at` makes the result invalid instead of being dropped.
#[tokio::test]
async fn workflows_started_by_a_result_get_every_check_of_a_start() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    load(&t.store, "door.yaml", DOOR).await;
    let f = support::function_script(
        dir.path(),
        "starter.sh",
        "#!/bin/sh\nevent=$(cat)\ncase \"$event\" in\n  *'\"obj:machine\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\"}]}' ;;\n  *'\"obj:lane\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\",\"lane\":\"no lane at all!\"}]}' ;;\n  *'\"obj:self\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"starterWF\"}]}' ;;\n  *'\"obj:when\"'*) echo '{\"status\":\"completed\",\"start\":[{\"template\":\"doorWF\",\"start_at\":\"next tuesday\"}]}' ;;\nesac\n",
    );
    load(
        &t.store,
        "starter.yaml",
        &format!("name: starterWF\nsteps:\n  - name: a\n    error-limit: 1\n    function: {{ exec: {f} }}\n"),
    )
    .await;
    let mut req = StartRequest::new("starterWF", &[]);
    req.objects = ["obj:machine", "obj:lane", "obj:self", "obj:when"]
        .map(String::from)
        .into();
    t.store.workflow_start(&req).await.expect("start");
    let rt = support::start(&t.store, support::config()).await;
    support::wait_until(
        t.pool(),
        "select bool_and(status in ('completed', 'error')) from workdo.steps where template = 'starterWF'",
        60,
    )
    .await;
    rt.stop().await;
    // The machine started by a result is in its initial state and takes a signal.
    let job = t
        .store
        .machine_job("obj:machine", "doorWF")
        .await
        .expect("a machine job");
    let done = t
        .store
        .machine_signal(job, "open", &json!({}), "test")
        .await
        .expect("it takes signals");
    assert_eq!((done.from.as_str(), done.to.as_str()), ("Closed", "Open"));
    for (object, says) in [
        ("obj:lane", "lane"),
        ("obj:self", "cannot start its own template"),
    ] {
        let (status, reason): (String, Option<String>) = sqlx::query_as(
            "select (select status from workdo.steps where object_id = $1),
                    (select detail->>'reason' from workdo.events where object_id = $1 and kind = 'start_failed')",
        )
        .bind(object)
        .fetch_one(t.pool())
        .await
        .expect("row");
        assert_eq!(status, "completed", "{object}");
        assert!(
            reason.as_deref().is_some_and(|r| r.contains(says)),
            "{object}: {reason:?}"
        );
    }
    let workflows: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where object_id in ('obj:lane', 'obj:self')",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(workflows, 2, "only the starter workflows themselves");
    let (status, message): (String, Option<String>) = sqlx::query_as(
        "select status, error_message from workdo.steps where object_id = 'obj:when'",
    )
    .fetch_one(t.pool())
    .await
    .expect("row");
    assert_eq!(status, "error");
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("not an RFC 3339 time")),
        "{message:?}"
    );
}

/// Machines are bounded: a signal's data over 64 KiB is refused, a transition that would grow
/// the variables past 1 MiB rolls back saying so, and a start whose children fork children
/// stops at 100 jobs in one transaction instead of forking thousands.
#[tokio::test]
async fn machine_inputs_have_limits_that_say_so() {
    let t = db().await;
    load(
        &t.store,
        "grow.yaml",
        "name: growWF\nkind: machine\ninitial: Idle\nstates:\n  Idle:\n    on:\n      add: { to: Idle, actions: [ { set: { blob: \"${blob + signal.data.more}\" } } ] }\n",
    )
    .await;
    let mut req = StartRequest::new("growWF", &["obj:grow"]);
    req.context = json!({"blob": ""});
    let job = t.store.workflow_start(&req).await.expect("start")[0].workflow_id;
    let huge = json!({"more": "x".repeat(70 * 1024)});
    let e = t
        .store
        .machine_signal(job, "add", &huge, "test")
        .await
        .expect_err("data over 64 KiB");
    assert!(e.to_string().contains("over the limit of 65536"), "{e}");
    // 60 KiB a signal: the 18th would pass 1 MiB.
    let chunk = json!({"more": "y".repeat(60 * 1024)});
    let mut refused = None;
    for i in 0..20 {
        if let Err(e) = t.store.machine_signal(job, "add", &chunk, "test").await {
            refused = Some((i, e.to_string()));
            break;
        }
    }
    let (at, said) = refused.expect("the variables stopped growing");
    assert!(at >= 16, "refused too early, at {at}");
    assert!(said.contains("over the limit of 1048576"), "{said}");
    let size: i64 = sqlx::query_scalar(
        "select length((machine -> 'variables')::text)::bigint from workdo.workflows where id = $1",
    )
    .bind(job)
    .fetch_one(t.pool())
    .await
    .expect("size");
    assert!(size <= 1024 * 1024, "{size}");

    // One state forking 101 children: past the limit of 100 jobs in one transaction.
    load(&t.store, "leaf.yaml", "name: leafWF\nsteps:\n  - name: a\n").await;
    let forks: String = (0..101)
        .map(|i| format!("      - fork: {{ template: leafWF, object: \"obj:leaf{i}\" }}\n"))
        .collect();
    load(
        &t.store,
        "fan.yaml",
        &format!(
            "name: fanWF\nkind: machine\ninitial: Start\nstates:\n  Start:\n    enter:\n{forks}"
        ),
    )
    .await;
    let e = t
        .store
        .workflow_start(&StartRequest::new("fanWF", &["obj:fan"]))
        .await
        .expect_err("fans out past the limit");
    assert!(e.to_string().contains("more than 100 jobs forked"), "{e}");
    let jobs: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where template in ('fanWF', 'leafWF')",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(jobs, 0, "a refused start left jobs behind");
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
