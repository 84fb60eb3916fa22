//! Who may call what, for every route the server has: each operation of `/openapi.json` (which
//! the server generates from its handlers) is called with no token, an expired token, a token
//! scoped to one job, and viewer, robot and admin tokens, and the answer must be what the
//! operation's rule in [`RULES`] says. An operation without a rule fails the test, and so does a
//! route in the router's source that the document does not describe: a route cannot be added
//! without deciding who may call it.

use crate::support;

use std::collections::BTreeSet;

use reqwest::Method;
use support::{GOOGLE_XML, db, load};
use workdo::api::Access;
use workdo::store::{Role, StartRequest};

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    /// Anyone, without a token.
    Public,
    /// Any valid unscoped token (viewer and up).
    Viewer,
    Robot,
    Admin,
    /// A machine job's signal: robots and admins by the machine's default access, or a token
    /// scoped to that job and signal.
    Signal,
}

/// Each operation as (method, path template, path called, rule). `{job}` is the machine job's
/// id and `{wf}` the step workflow's, filled in when the test runs.
const RULES: &[(&str, &str, &str, Need)] = &[
    ("GET", "/health", "/health", Need::Public),
    ("GET", "/ready", "/ready", Need::Public),
    ("GET", "/openapi.json", "/openapi.json", Need::Public),
    ("GET", "/api/templates", "/api/templates", Need::Viewer),
    ("POST", "/api/templates", "/api/templates", Need::Admin),
    (
        "GET",
        "/api/templates/{name}",
        "/api/templates/googleScannedBookWF",
        Need::Viewer,
    ),
    ("POST", "/api/objects", "/api/objects", Need::Robot),
    (
        "GET",
        "/api/objects/{id}",
        "/api/objects/druid:bb123cd4567",
        Need::Viewer,
    ),
    (
        "PATCH",
        "/api/objects/{id}",
        "/api/objects/druid:bb123cd4567",
        Need::Robot,
    ),
    (
        "GET",
        "/api/objects/{id}/lifecycle",
        "/api/objects/druid:bb123cd4567/lifecycle",
        Need::Viewer,
    ),
    (
        "GET",
        "/api/objects/{id}/events",
        "/api/objects/druid:bb123cd4567/events",
        Need::Viewer,
    ),
    ("POST", "/api/workflows", "/api/workflows", Need::Robot),
    (
        "GET",
        "/api/workflows/{id}",
        "/api/workflows/{wf}",
        Need::Viewer,
    ),
    (
        "DELETE",
        "/api/workflows/{id}",
        "/api/workflows/{wf}",
        Need::Admin,
    ),
    (
        "GET",
        "/api/workflows/{id}/events",
        "/api/workflows/{wf}/events",
        Need::Viewer,
    ),
    (
        "POST",
        "/api/workflows/{id}/signals",
        "/api/workflows/{job}/signals",
        Need::Signal,
    ),
    (
        "POST",
        "/api/workflows/{id}/suspend",
        "/api/workflows/{job}/suspend",
        Need::Admin,
    ),
    (
        "POST",
        "/api/workflows/{id}/resume",
        "/api/workflows/{job}/resume",
        Need::Admin,
    ),
    (
        "POST",
        "/api/objects/{object}/workflows/{template}/signals",
        "/api/objects/druid:cc111dd2222/workflows/authM/signals",
        Need::Signal,
    ),
    (
        "PUT",
        "/api/steps/{object}/{template}/{step}",
        "/api/steps/druid:bb123cd4567/googleScannedBookWF/descriptive-metadata",
        Need::Robot,
    ),
    (
        "GET",
        "/api/queues/{template}/{step}",
        "/api/queues/googleScannedBookWF/shelve",
        Need::Viewer,
    ),
    (
        "GET",
        "/api/queues/{template}/{step}/errors",
        "/api/queues/googleScannedBookWF/shelve/errors",
        Need::Viewer,
    ),
    (
        "GET",
        "/api/queues/{name}",
        "/api/queues/no-such-queue",
        Need::Viewer,
    ),
    ("GET", "/api/facets", "/api/facets", Need::Viewer),
    ("POST", "/api/priority", "/api/priority", Need::Admin),
    ("POST", "/api/retry", "/api/retry", Need::Robot),
    ("GET", "/api/functions", "/api/functions", Need::Viewer),
    (
        "GET",
        "/api/functions/{name}",
        "/api/functions/no-such-function",
        Need::Viewer,
    ),
    (
        "PUT",
        "/api/functions/{name}",
        "/api/functions/authz-probe",
        Need::Admin,
    ),
    (
        "DELETE",
        "/api/functions/{name}",
        "/api/functions/no-such-function",
        Need::Admin,
    ),
    (
        "POST",
        "/api/functions/{name}/rollback",
        "/api/functions/no-such-function/rollback",
        Need::Admin,
    ),
    ("GET", "/api/paused", "/api/paused", Need::Viewer),
    (
        "POST",
        "/api/queues/{template}/{step}/pause",
        "/api/queues/googleScannedBookWF/shelve/pause",
        Need::Robot,
    ),
    (
        "POST",
        "/api/queues/{template}/{step}/resume",
        "/api/queues/googleScannedBookWF/shelve/resume",
        Need::Robot,
    ),
    (
        "POST",
        "/api/objects/batch",
        "/api/objects/batch",
        Need::Robot,
    ),
    (
        "GET",
        "/objects/{druid}/workflows",
        "/objects/druid:bb123cd4567/workflows",
        Need::Viewer,
    ),
    (
        "GET",
        "/objects/{druid}/workflows/",
        "/objects/druid:bb123cd4567/workflows/",
        Need::Viewer,
    ),
    (
        "DELETE",
        "/objects/{druid}/workflows",
        "/objects/druid:bb123cd4567/workflows",
        Need::Admin,
    ),
    (
        "GET",
        "/objects/{druid}/workflows/{workflow}",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF",
        Need::Viewer,
    ),
    (
        "POST",
        "/objects/{druid}/workflows/{workflow}",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF",
        Need::Robot,
    ),
    (
        "PUT",
        "/objects/{druid}/workflows/{workflow}",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF",
        Need::Robot,
    ),
    (
        "DELETE",
        "/objects/{druid}/workflows/{workflow}",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF",
        Need::Admin,
    ),
    (
        "POST",
        "/objects/{druid}/workflows/{workflow}/skip-all",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF/skip-all",
        Need::Robot,
    ),
    (
        "PUT",
        "/objects/{druid}/workflows/{workflow}/{process}",
        "/objects/druid:bb123cd4567/workflows/googleScannedBookWF/shelve",
        Need::Robot,
    ),
    (
        "GET",
        "/objects/{druid}/lifecycle",
        "/objects/druid:bb123cd4567/lifecycle",
        Need::Viewer,
    ),
    (
        "GET",
        "/workflow_queue",
        "/workflow_queue?waiting=googleScannedBookWF:shelve",
        Need::Viewer,
    ),
    (
        "GET",
        "/workflow_queue/lane_ids",
        "/workflow_queue/lane_ids?step=googleScannedBookWF:shelve",
        Need::Viewer,
    ),
    (
        "GET",
        "/workflow_queue/all_queued",
        "/workflow_queue/all_queued",
        Need::Viewer,
    ),
    (
        "GET",
        "/workflow_templates",
        "/workflow_templates",
        Need::Viewer,
    ),
    (
        "GET",
        "/workflow_templates/{name}",
        "/workflow_templates/googleScannedBookWF",
        Need::Viewer,
    ),
];

/// The admin page's routes: signed in by cookie, never by bearer token; without a session a
/// GET is sent to the sign-in page and a POST refused. The static files are public.
const PAGE_ROUTES: &[&str] = &[
    "/",
    "/signin",
    "/signout",
    "/ui/steps",
    "/ui/steps/act",
    "/ui/objects/{id}",
    "/ui/objects/{id}/signal",
    "/ui/objects/{id}/suspend",
    "/ui/errors",
    "/ui/templates",
    "/ui/timings",
    "/ui/schedules",
    "/ui/schedules/act",
    "/ui/functions",
    "/ui/functions/rollback",
    "/ui/search",
    "/ui/pause",
    "/ui/workflows/{id}",
    "/ui/archive/{id}",
    "/ui/app.css",
    "/ui/app.js",
];

/// Every `.route("PATH", …)` in the API's source, as written.
fn routes_in_source() -> BTreeSet<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let mut files = vec![dir.clone()];
    let mut found = BTreeSet::new();
    while let Some(d) = files.pop() {
        for entry in std::fs::read_dir(&d).expect("src/api").flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                let compact: String = text.split_whitespace().collect();
                for piece in compact.split(".route(\"").skip(1) {
                    if let Some((route, _)) = piece.split_once('"') {
                        found.insert(route.to_string());
                    }
                }
            }
        }
    }
    found
}

const MACHINE: &str = "name: authM\nkind: machine\ninitial: Closed\naccess: { start: [admin] }\nstates:\n  Closed:\n    on: { open: Open }\n  Open:\n    on: { close: Closed }\n";

#[tokio::test]
async fn every_route_answers_each_kind_of_token_as_its_rule_says() {
    workdo::install_crypto();
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    load(&t.store, "authM.yaml", MACHINE).await;
    for id in ["druid:bb123cd4567", "druid:cc111dd2222"] {
        t.store
            .object_put(id, &Default::default(), &Default::default(), "test")
            .await
            .expect("object");
    }
    let wf = t
        .store
        .workflow_start(&StartRequest::new(
            "googleScannedBookWF",
            &["druid:bb123cd4567"],
        ))
        .await
        .expect("start")[0]
        .workflow_id;
    let mut req = StartRequest::new("authM", &["druid:cc111dd2222"]);
    req.actor = "test".into();
    let job = t.store.workflow_start(&req).await.expect("machine")[0].workflow_id;

    let base = support::serve_api(&t.store, Access::Tokens).await;

    let token = |role| {
        let store = t.store.clone();
        async move {
            store
                .token_create(role, "test", None)
                .await
                .expect("token")
                .1
        }
    };
    let past = chrono::Utc::now() - chrono::Duration::seconds(1);
    let expired = t
        .store
        .token_create(Role::Admin, "old", Some(past))
        .await
        .expect("token")
        .1;
    let scoped = t
        .store
        .token_create_scoped(
            job,
            &["open".to_string(), "close".to_string()],
            "door",
            None,
        )
        .await
        .expect("scoped")
        .1;
    let (viewer, robot, admin) = (
        token(Role::Viewer).await,
        token(Role::Robot).await,
        token(Role::Admin).await,
    );

    // The rules cover exactly the operations the server describes, and the server describes
    // every route its source has (the page's routes aside).
    let http = reqwest::Client::new();
    let doc: serde_json::Value = http
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .expect("document")
        .json()
        .await
        .expect("JSON");
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "delete", "patch"] {
            if !item[method].is_null() {
                described.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let ruled: BTreeSet<(String, String)> = RULES
        .iter()
        .map(|(m, p, _, _)| (m.to_string(), p.to_string()))
        .collect();
    let unruled: Vec<_> = described.difference(&ruled).collect();
    assert!(
        unruled.is_empty(),
        "operations without an access rule: {unruled:?}"
    );
    let gone: Vec<_> = ruled.difference(&described).collect();
    assert!(
        gone.is_empty(),
        "rules for operations the server lacks: {gone:?}"
    );
    let paths: BTreeSet<String> = described.iter().map(|(_, p)| p.clone()).collect();
    let undescribed: Vec<String> = routes_in_source()
        .into_iter()
        .filter(|r| !paths.contains(r) && !PAGE_ROUTES.contains(&r.as_str()))
        .collect();
    assert!(
        undescribed.is_empty(),
        "routes neither in /openapi.json nor among the page's: {undescribed:?}"
    );

    // Each operation with each kind of token. Bodies are empty or `{}`: the access decision
    // comes before the body is read, so an allowed call answers anything but 401 or 403.
    let kinds: [(&str, &str); 6] = [
        ("no token", ""),
        ("expired", &expired),
        ("scoped", &scoped),
        ("viewer", &viewer),
        ("robot", &robot),
        ("admin", &admin),
    ];
    let mut wrong = Vec::new();
    for (kind, tok) in kinds {
        for (method, template, path, need) in RULES {
            let path = path
                .replace("{wf}", &wf.to_string())
                .replace("{job}", &job.to_string());
            let mut r = http.request(
                Method::from_bytes(method.as_bytes()).expect("method"),
                format!("{base}{path}"),
            );
            if !tok.is_empty() {
                r = r.bearer_auth(tok);
            }
            if *method != "GET" && *method != "DELETE" {
                let body = if *need == Need::Signal {
                    r#"{"signal":"open"}"#
                } else {
                    "{}"
                };
                r = r.header("content-type", "application/json").body(body);
            }
            let status = r.send().await.expect("request").status().as_u16();
            let expected: &[u16] = match (kind, need) {
                (_, Need::Public) => &[200],
                ("no token" | "expired", _) => &[401],
                ("scoped", Need::Signal) => &[],
                ("scoped", _) => &[403],
                ("viewer", Need::Viewer) => &[],
                ("viewer", _) => &[403],
                ("robot", Need::Admin) => &[403],
                _ => &[],
            };
            let ok = if expected.is_empty() {
                status != 401 && status != 403
            } else {
                expected.contains(&status)
            };
            if !ok {
                wrong.push(format!(
                    "{kind}: {method} {template} answered {status}, expected {}",
                    if expected.is_empty() {
                        "neither 401 nor 403".to_string()
                    } else {
                        format!("{expected:?}")
                    }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A machine that says who may start it is held to that on every route that starts workflows:
/// the workflow-service XML route as well as the JSON one (the XML route once let a robot start
/// a machine only admins may start).
#[tokio::test]
async fn a_machines_start_rule_holds_on_the_json_and_the_xml_routes() {
    workdo::install_crypto();
    let t = db().await;
    load(&t.store, "authM.yaml", MACHINE).await;
    let base = support::serve_api(&t.store, Access::Tokens).await;
    let robot = t
        .store
        .token_create(Role::Robot, "r", None)
        .await
        .expect("token")
        .1;
    let admin = t
        .store
        .token_create(Role::Admin, "a", None)
        .await
        .expect("token")
        .1;
    let http = reqwest::Client::new();
    let xml = |tok: &str| {
        http.post(format!("{base}/objects/druid:bp004cd4567/workflows/authM"))
            .bearer_auth(tok.to_string())
            .send()
    };
    let json = |tok: &str| {
        http.post(format!("{base}/api/workflows"))
            .bearer_auth(tok.to_string())
            .json(&serde_json::json!({"template": "authM", "objects": ["druid:bp004cd4567"]}))
            .send()
    };
    assert_eq!(xml(&robot).await.expect("xml").status().as_u16(), 403);
    assert_eq!(json(&robot).await.expect("json").status().as_u16(), 403);
    let jobs: i64 = sqlx::query_scalar("select count(*) from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(jobs, 0, "a refused start started something");
    assert_eq!(xml(&admin).await.expect("xml").status().as_u16(), 201);
}
