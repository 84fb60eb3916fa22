//! The HTTP API through real HTTP against a real Postgres: every route, its successes and its
//! failures, tokens and roles.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{GOOGLE_XML, TestDb, db, load};
use workdo::api::{Access, AppState, app};
use workdo::store::Role;

const WF: &str = "googleScannedBookWF";
const DRUID: &str = "druid:bb123cd4567";

struct Api {
    base: String,
    http: reqwest::Client,
    admin: String,
    robot: String,
    viewer: String,
    t: TestDb,
}

async fn api() -> Api {
    api_with(Access::Tokens).await
}

async fn api_with(access: Access) -> Api {
    workdo::install_crypto();
    let t = db().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = AppState {
        store: t.store.clone(),
        access,
    };
    tokio::spawn(async move { axum::serve(listener, app(state)).await });
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
    Api {
        base,
        http: reqwest::Client::new(),
        admin: token(Role::Admin).await,
        robot: token(Role::Robot).await,
        viewer: token(Role::Viewer).await,
        t,
    }
}

impl Api {
    fn req(&self, method: reqwest::Method, path: &str, token: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        if token.is_empty() {
            r
        } else {
            r.bearer_auth(token)
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<(&str, String)>,
    ) -> (StatusCode, String) {
        let mut r = self.req(method, path, token);
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        self.call(reqwest::Method::GET, path, &self.viewer, None)
            .await
    }

    async fn put_xml(&self, path: &str, xml: &str) -> (StatusCode, String) {
        self.call(
            reqwest::Method::PUT,
            path,
            &self.robot,
            Some(("application/xml", xml.to_string())),
        )
        .await
    }

    async fn post_json(&self, path: &str, token: &str, body: Value) -> (StatusCode, String) {
        self.call(
            reqwest::Method::POST,
            path,
            token,
            Some(("application/json", body.to_string())),
        )
        .await
    }
}

fn err(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(String::from))
        .unwrap_or_default()
}

async fn with_google(a: &Api) {
    load(&a.t.store, "google.xml", GOOGLE_XML).await;
}

#[tokio::test]
async fn tokens_and_roles_decide_access() {
    let a = api().await;
    with_google(&a).await;
    let create = format!("/objects/{DRUID}/workflows/{WF}");
    // No token, a bad header, an unknown token: 401.
    assert_eq!(
        a.call(reqwest::Method::POST, &create, "", None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        a.call(reqwest::Method::GET, "/workflow_templates", "", None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let bad = a
        .http
        .get(format!("{}/workflow_templates", a.base))
        .header("authorization", "Basic xyz")
        .send()
        .await
        .expect("send");
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        a.call(
            reqwest::Method::GET,
            "/workflow_templates",
            "wdo_forged",
            None
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
    // Viewer reads but may not write; robot writes but may not delete; admin may.
    assert_eq!(a.get("/workflow_templates").await.0, StatusCode::OK);
    let (s, body) = a
        .call(reqwest::Method::POST, &create, &a.viewer, None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        err(&body),
        "this needs the robot role; the token has viewer"
    );
    assert_eq!(
        a.call(reqwest::Method::POST, &create, &a.robot, None)
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        a.call(reqwest::Method::DELETE, &create, &a.robot, None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        a.call(reqwest::Method::DELETE, &create, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    // Expired and revoked tokens stop working.
    let past = chrono::Utc::now() - chrono::Duration::seconds(1);
    let (_, expired) =
        a.t.store
            .token_create(Role::Admin, "old", Some(past))
            .await
            .expect("token");
    assert_eq!(
        a.call(reqwest::Method::GET, "/workflow_templates", &expired, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let (id, revoked) =
        a.t.store
            .token_create(Role::Admin, "gone", None)
            .await
            .expect("token");
    assert_eq!(
        a.call(reqwest::Method::GET, "/workflow_templates", &revoked, None)
            .await
            .0,
        StatusCode::OK
    );
    a.t.store.token_revoke(id).await.expect("revoke");
    assert_eq!(
        a.call(reqwest::Method::GET, "/workflow_templates", &revoked, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    // Health and the API description need no token.
    assert_eq!(
        a.call(reqwest::Method::GET, "/health", "", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        a.call(reqwest::Method::GET, "/openapi.json", "", None)
            .await
            .0,
        StatusCode::OK
    );
    // Tokens are stored hashed: the secret is nowhere in the table.
    let leaked: bool =
        sqlx::query_scalar("select exists (select 1 from workdo.tokens where sha256 = $1)")
            .bind(&a.admin)
            .fetch_one(a.t.pool())
            .await
            .expect("query");
    assert!(!leaked);
}

#[tokio::test]
async fn open_mode_is_admin_but_only_on_loopback() {
    let a = api_with(Access::Open).await;
    with_google(&a).await;
    let (s, _) = a
        .call(
            reqwest::Method::POST,
            &format!("/objects/{DRUID}/workflows/{WF}"),
            "",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let refused = workdo::api::serve(
        a.t.store.clone(),
        "0.0.0.0:0".parse().expect("addr"),
        Access::Open,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    let msg = refused.expect_err("refused").to_string();
    assert!(msg.contains("only allowed on a loopback address"), "{msg}");
}

#[tokio::test]
async fn xml_create_show_and_recreate() {
    let a = api().await;
    with_google(&a).await;
    let path = format!("/objects/{DRUID}/workflows/{WF}?version=2&lane-id=fast");
    let (s, _) = a
        .post_json(&path, &a.robot, json!({"context": {"batch": 9}}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        body.starts_with(&format!(
            r#"<workflow repository="dor" objectId="{DRUID}" id="{WF}">"#
        )),
        "{body}"
    );
    assert_eq!(body.matches("<process ").count(), 9);
    assert!(
        body.contains(r#"laneId="fast""#) && body.contains(r#"version="2""#),
        "{body}"
    );
    assert!(
        body.contains(r#"status="completed" name="register-object""#),
        "{body}"
    );
    assert!(
        body.contains(r#"status="queued" name="descriptive-metadata""#),
        "ready shows as queued, as the workflow service says it: {body}"
    );
    assert!(body.contains(r#"lifecycle="inprocess""#));
    // Re-POST replaces, never duplicates.
    assert_eq!(
        a.post_json(&path, &a.robot, json!({})).await.0,
        StatusCode::CREATED
    );
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows")).await;
    assert!(body.starts_with(&format!(r#"<workflows objectId="{DRUID}">"#)));
    assert_eq!(body.matches("<process ").count(), 9);
    // Unknown template: 400 and nothing created.
    let (s, body) = a
        .post_json(
            "/objects/druid:cc111dd2222/workflows/noSuchWF",
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(err(&body), r#"unknown workflow template "noSuchWF""#);
    assert!(
        !a.t.store
            .object_exists("druid:cc111dd2222")
            .await
            .expect("query")
    );
    // Malformed JSON, a non-object context, a bad druid, a bad version: 400.
    let raw = a
        .call(
            reqwest::Method::POST,
            &format!("/objects/{DRUID}/workflows/{WF}"),
            &a.robot,
            Some(("application/json", "{nope".into())),
        )
        .await;
    assert_eq!(raw.0, StatusCode::BAD_REQUEST);
    assert!(err(&raw.1).starts_with("invalid JSON body:"), "{}", raw.1);
    assert_eq!(
        a.post_json(
            &format!("/objects/{DRUID}/workflows/{WF}"),
            &a.robot,
            json!({"context": 3})
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
    let (s, body) = a
        .post_json(
            &format!("/objects/not-a-druid/workflows/{WF}"),
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        err(&body).starts_with("invalid object id \"not-a-druid\""),
        "{body}"
    );
    let (s, body) = a
        .post_json(
            &format!("/objects/{DRUID}/workflows/{WF}?version=two"),
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        err(&body),
        r#"query parameter version="two" is not a number"#
    );
}

#[tokio::test]
async fn xml_update_process_successes_and_failures() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let url = |p: &str| format!("/objects/{DRUID}/workflows/{WF}/{p}");
    // Unknown step: 404.
    let (s, body) = a
        .put_xml(
            &url("no-such-step"),
            r#"<process name="no-such-step" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    // Body name differs from the URL: 400 naming both.
    let (s, body) = a
        .put_xml(
            &url("descriptive-metadata"),
            r#"<process name="shelve" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        err(&body),
        r#"the body names process "shelve" but the URL names "descriptive-metadata""#
    );
    // Status precondition fails: 409 naming both, nothing changes.
    let (s, body) = a
        .put_xml(
            &format!("{}?current-status=started", url("descriptive-metadata")),
            r#"<process name="descriptive-metadata" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(
        err(&body).contains(r#"is "queued", not "started""#),
        "{body}"
    );
    // Malformed XML, a wrong root, an invalid status, a bad elapsed: 400.
    for (xml, expect) in [
        ("<process name=", "malformed XML body"),
        (
            r#"<step name="descriptive-metadata" status="completed"/>"#,
            "root element is <step>",
        ),
        (
            r#"<process name="descriptive-metadata" status="done!"/>"#,
            "invalid status",
        ),
        (
            r#"<process name="descriptive-metadata" status="completed" elapsed="fast"/>"#,
            "elapsed=",
        ),
    ] {
        let (s, body) = a.put_xml(&url("descriptive-metadata"), xml).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{xml}");
        assert!(err(&body).contains(expect), "{body}");
    }
    // An error, then completion: attempts counted, the message cleared, lifecycle kept.
    let (s, _) = a
        .put_xml(&url("descriptive-metadata"), r#"<process name="descriptive-metadata" status="error" errorMessage="catalogue down" errorText="503"/>"#)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert!(
        body.contains(r#"attempts="1" "#) && body.contains(r#"errorMessage="catalogue down""#),
        "{body}"
    );
    let (s, body) = a
        .put_xml(
            &format!("{}?current-status=error", url("descriptive-metadata")),
            r#"<process name="descriptive-metadata" status="completed" elapsed="1.5" lifecycle="described" note="ok"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let next: Value = serde_json::from_str(&body).expect("json");
    let mut steps: Vec<String> = serde_json::from_value(next["next_steps"].clone()).expect("list");
    steps.sort();
    assert_eq!(steps, vec!["google-convert", "google-download"]);
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert!(!body.contains("errorMessage"), "cleared: {body}");
    assert!(
        body.contains(r#"lifecycle="described" laneId="default" elapsed="1.500""#),
        "{body}"
    );
    // Oversized body: 413.
    let huge = format!(
        r#"<process name="shelve" status="completed" note="{}"/>"#,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        a.put_xml(&url("shelve"), &huge).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn concurrent_puts_with_a_precondition_let_exactly_one_win() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let url = format!(
        "{}/objects/{DRUID}/workflows/{WF}/descriptive-metadata?current-status=waiting",
        a.base
    );
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let req = a
            .http
            .put(&url)
            .bearer_auth(&a.robot)
            .body(r#"<process name="descriptive-metadata" status="started"/>"#);
        tasks.push(tokio::spawn(
            async move { req.send().await.map(|r| r.status()) },
        ));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.expect("task").expect("response"));
    }
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::OK).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::CONFLICT).count(),
        11,
        "{codes:?}"
    );
}

#[tokio::test]
async fn xml_skip_all_delete_lifecycle_and_templates() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let (s, body) = a.get(&format!("/objects/{DRUID}/lifecycle")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        body.starts_with(&format!(
            r#"<lifecycle objectId="{DRUID}"><milestone date=""#
        )),
        "{body}"
    );
    assert!(
        !body.contains(">registered</milestone>") && body.contains(">inprocess</milestone>"),
        "{body}"
    );
    // An object the service has never seen has an empty lifecycle, as the service answers.
    let (code, body) = a.get("/objects/druid:zz999zz9999/lifecycle").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        body,
        r#"<lifecycle objectId="druid:zz999zz9999"></lifecycle>"#
    );

    let skip = format!("/objects/{DRUID}/workflows/{WF}/skip-all");
    assert_eq!(
        a.call(reqwest::Method::POST, &skip, &a.robot, None).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert_eq!(body.matches(r#"status="skipped""#).count(), 8);
    assert_eq!(
        a.call(
            reqwest::Method::POST,
            &format!("/objects/{DRUID}/workflows/noWF/skip-all"),
            &a.robot,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT,
        "nothing to skip is not an error, as the service answers"
    );
    load(
        &a.t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - name: work\n",
    )
    .await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/oneWF"),
        &a.robot,
        json!({}),
    )
    .await;
    let one = format!("/objects/{DRUID}/workflows/oneWF");
    assert_eq!(
        a.call(reqwest::Method::DELETE, &one, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    // Deleting again: nothing to delete, 204, as the service answers.
    assert_eq!(
        a.call(reqwest::Method::DELETE, &one, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let all = format!("/objects/{DRUID}/workflows");
    assert_eq!(
        a.call(reqwest::Method::DELETE, &all, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let (_, body) = a.get(&all).await;
    assert_eq!(
        body,
        format!(r#"<workflows objectId="{DRUID}"></workflows>"#)
    );

    let (_, names) = a.get("/workflow_templates").await;
    assert_eq!(
        serde_json::from_str::<Value>(&names).expect("json"),
        json!([WF, "oneWF"])
    );
    let (_, t) = a.get(&format!("/workflow_templates/{WF}")).await;
    let t: Value = serde_json::from_str(&t).expect("json");
    assert_eq!(
        t["processes"][0],
        json!({"name": "register-object", "label": ""})
    );
    assert_eq!(
        t["processes"][4],
        json!({"name": "process-content", "label": "", "prerequisite": ["google-convert", "google-download"]})
    );
    assert_eq!(
        a.get("/workflow_templates/noWF").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn xml_queues() {
    let a = api().await;
    with_google(&a).await;
    for (druid, lane) in [
        ("druid:bb111cc2222", "default"),
        ("druid:bb333cc4444", "fast"),
        ("druid:bb555cc6666", "default"),
    ] {
        a.post_json(
            &format!("/objects/{druid}/workflows/{WF}?lane-id={lane}"),
            &a.robot,
            json!({}),
        )
        .await;
    }
    for druid in ["druid:bb111cc2222", "druid:bb333cc4444"] {
        a.put_xml(
            &format!("/objects/{druid}/workflows/{WF}/descriptive-metadata"),
            r#"<process name="descriptive-metadata" status="completed"/>"#,
        )
        .await;
    }
    let a = &a;
    let q = |query: String| {
        let path = format!("/workflow_queue?{query}");
        async move { a.get(&path).await }
    };
    let (s, body) = q(format!("waiting={WF}:google-download&completed={WF}:descriptive-metadata&completed={WF}:register-object")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(body.starts_with(r#"<objects count="2">"#), "{body}");
    assert!(
        body.contains(r#"<object id="druid:bb111cc2222"/>"#)
            && body.contains(r#"<object id="druid:bb333cc4444"/>"#)
    );
    let (_, body) = q(format!(
        "waiting={WF}:google-download&completed={WF}:descriptive-metadata&lane-id=fast"
    ))
    .await;
    assert_eq!(
        body,
        r#"<objects count="1"><object id="druid:bb333cc4444"/></objects>"#
    );
    let (_, body) = q(format!(
        "waiting={WF}:google-download&completed={WF}:descriptive-metadata&limit=1"
    ))
    .await;
    assert!(body.starts_with(r#"<objects count="1">"#));
    a.put_xml(
        &format!("/objects/druid:bb555cc6666/workflows/{WF}/descriptive-metadata"),
        r#"<process name="descriptive-metadata" status="error" errorMessage="x"/>"#,
    )
    .await;
    let (_, body) = q(format!("error={WF}:descriptive-metadata")).await;
    assert_eq!(
        body,
        r#"<objects count="1"><object id="druid:bb555cc6666"/></objects>"#
    );
    assert_eq!(q("waiting=nocolon".into()).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(q(String::new()).await.0, StatusCode::BAD_REQUEST);
    let (_, body) = a
        .get(&format!(
            "/workflow_queue/lane_ids?step={WF}:google-convert"
        ))
        .await;
    assert_eq!(
        body,
        r#"<lanes><lane id="default"/><lane id="fast"/></lanes>"#
    );
    let (_, body) = a.get("/workflow_queue/all_queued").await;
    assert!(body.starts_with(r#"<workflows count="4">"#), "{body}");
}

#[tokio::test]
async fn json_api_routes() {
    let a = api().await;
    // Templates: load (with line-numbered errors), list, show.
    let (s, body) = a
        .call(
            reqwest::Method::POST,
            "/api/templates?format=yaml&origin=one.yaml",
            &a.admin,
            Some((
                "text/plain",
                "name: oneWF\nsteps:\n  - name: work\n  - name: after\n    prereqs: [work]\n"
                    .into(),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, body) = a
        .call(
            reqwest::Method::POST,
            "/api/templates?origin=bad.yaml",
            &a.admin,
            Some((
                "application/yaml",
                "name: badWF\nsteps:\n  - name: a\n    prereqs: [zz]\n".into(),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        err(&body).starts_with("bad.yaml:4: prereq: unknown prerequisite \"zz\""),
        "{body}"
    );
    assert_eq!(
        a.call(
            reqwest::Method::POST,
            "/api/templates?format=yaml",
            &a.robot,
            Some(("text/plain", "x".into()))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    let (_, list) = a.get("/api/templates").await;
    assert_eq!(
        serde_json::from_str::<Value>(&list).expect("json")[0]["name"],
        "oneWF"
    );
    assert_eq!(a.get("/api/templates/oneWF").await.0, StatusCode::OK);
    assert_eq!(a.get("/api/templates/none").await.0, StatusCode::NOT_FOUND);
    // Objects.
    let (s, _) = a.post_json("/api/objects", &a.robot, json!({"id": "obj:1", "properties": {"title": "Walden"}, "documents": {"mods": "<mods/>"}})).await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(
        a.post_json("/api/objects", &a.robot, json!({"properties": {}}))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        a.post_json("/api/objects", &a.robot, json!({"id": "has space"}))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    let (s, body) = a
        .call(
            reqwest::Method::PATCH,
            "/api/objects/obj:1",
            &a.robot,
            Some((
                "application/json",
                json!({"properties": {"year": 1854}}).to_string(),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["properties"],
        json!({"title": "Walden", "year": 1854})
    );
    assert_eq!(
        a.call(
            reqwest::Method::PATCH,
            "/api/objects/obj:none",
            &a.robot,
            Some(("application/json", "{}".into()))
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        a.get("/api/objects/obj:none").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(a.get("/api/objects/none").await.0, StatusCode::BAD_REQUEST);
    // Workflows: start many, show, events, delete.
    let (s, body) = a
        .post_json(
            "/api/workflows",
            &a.robot,
            json!({"template": "oneWF", "objects": ["obj:1", "obj:2"], "priority": 5}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let started: Value = serde_json::from_str(&body).expect("json");
    let wf = started[0]["workflow_id"].as_i64().expect("id");
    assert_eq!(
        a.post_json(
            "/api/workflows",
            &a.robot,
            json!({"template": "oneWF", "objects": []})
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        a.post_json(
            "/api/workflows",
            &a.robot,
            json!({"template": "nope", "objects": ["obj:1"]})
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        a.post_json(
            "/api/workflows",
            &a.robot,
            json!({"template": "oneWF", "objects": ["obj:1"], "colour": 1})
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
    let (_, body) = a.get(&format!("/api/workflows/{wf}")).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["steps"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        a.get("/api/workflows/999999").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(a.get("/api/workflows/abc").await.0, StatusCode::BAD_REQUEST);
    // Steps: update with a precondition.
    let step = "/api/steps/obj:1/oneWF/work";
    let (s, body) = a
        .call(
            reqwest::Method::PUT,
            step,
            &a.robot,
            Some((
                "application/json",
                json!({"status": "completed", "current_status": "started"}).to_string(),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{body}");
    let (s, body) = a
        .call(
            reqwest::Method::PUT,
            step,
            &a.robot,
            Some((
                "application/json",
                json!({"status": "completed", "current_status": "ready", "note": "done"})
                    .to_string(),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["next_steps"],
        json!(["after"])
    );
    assert_eq!(
        a.call(
            reqwest::Method::PUT,
            "/api/steps/obj:1/oneWF/nope",
            &a.robot,
            Some((
                "application/json",
                json!({"status": "completed"}).to_string()
            ))
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    // Queues, errors, facets, lifecycle, events with paging, priority.
    let (_, q) = a.get("/api/queues/oneWF/work").await;
    assert_eq!(
        serde_json::from_str::<Value>(&q)
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let (_, q) = a.get("/api/queues/oneWF/after?completed=oneWF:work").await;
    assert_eq!(
        serde_json::from_str::<Value>(&q).expect("json")[0]["object_id"],
        "obj:1"
    );
    a.call(
        reqwest::Method::PUT,
        "/api/steps/obj:2/oneWF/work",
        &a.robot,
        Some((
            "application/json",
            json!({"status": "error", "message": "boom"}).to_string(),
        )),
    )
    .await;
    let (_, e) = a.get("/api/queues/oneWF/work/errors").await;
    assert_eq!(
        serde_json::from_str::<Value>(&e).expect("json")[0]["error_message"],
        "boom"
    );
    let (_, f) = a.get("/api/facets?template=oneWF").await;
    assert_eq!(
        serde_json::from_str::<Value>(&f)
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    // Milestones come from the steps that declare them (as in the workflow service): none
    // is made up for a new object.
    let (_, l) = a.get("/api/objects/obj:1/lifecycle").await;
    let l: Value = serde_json::from_str(&l).expect("json");
    assert!(
        l.as_array()
            .is_some_and(|m| m.iter().all(|x| x["name"] != "registered")),
        "{l}"
    );
    let (_, p1) = a.get("/api/objects/obj:1/events?limit=2").await;
    let p1: Value = serde_json::from_str(&p1).expect("json");
    assert_eq!(p1["events"].as_array().map(Vec::len), Some(2));
    let (_, p2) = a
        .get(&format!(
            "/api/objects/obj:1/events?limit=100&after={}",
            p1["next_after"]
        ))
        .await;
    let p2: Value = serde_json::from_str(&p2).expect("json");
    assert!(p2["events"][0]["id"].as_i64() > p1["next_after"].as_i64());
    assert_eq!(
        a.get("/api/objects/obj:1/events?after=x").await.0,
        StatusCode::BAD_REQUEST
    );
    let (_, we) = a.get(&format!("/api/workflows/{wf}/events")).await;
    assert!(
        serde_json::from_str::<Value>(&we).expect("json")["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    let (s, body) = a
        .post_json(
            "/api/priority",
            &a.admin,
            json!({"priority": 9, "workflow": wf}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["steps"],
        1
    );
    assert_eq!(
        a.post_json("/api/priority", &a.admin, json!({"priority": 9}))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        a.post_json(
            "/api/priority",
            &a.robot,
            json!({"priority": 9, "object": "obj:1"})
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        a.call(
            reqwest::Method::DELETE,
            &format!("/api/workflows/{wf}"),
            &a.admin,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        a.get(&format!("/api/workflows/{wf}")).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let a = api().await;
    let (_, doc) = a.get("/openapi.json").await;
    let doc: Value = serde_json::from_str(&doc).expect("json");
    let described: std::collections::BTreeSet<String> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .cloned()
        .collect();
    // Every `.route("…"` in the API's source must be described.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let mut served = std::collections::BTreeSet::new();
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    let mut dirs = vec![dir];
    while let Some(d) = dirs.pop() {
        for f in std::fs::read_dir(&d).expect("api dir") {
            let path = f.expect("entry").path();
            // The admin page's HTML routes (src/api/admin/) are pages, not the API
            // (tests/admin.rs drives them).
            if path.is_dir() {
                if !path.ends_with("admin") {
                    dirs.push(path);
                }
            } else {
                files.push(path);
            }
        }
    }
    for path in files {
        let src = std::fs::read_to_string(&path).expect("source");
        for part in src.split(".route(").skip(1) {
            let path = part.trim_start().trim_start_matches('\n').trim_start();
            if let Some(rest) = path.strip_prefix('"')
                && let Some(end) = rest.find('"')
            {
                served.insert(rest[..end].to_string());
            }
        }
    }
    assert!(served.len() > 20, "{served:?}");
    let missing: Vec<&String> = served.difference(&described).collect();
    assert!(
        missing.is_empty(),
        "routes missing from /openapi.json: {missing:?}"
    );
}

/// A robot written only against the WorkDo XML routes drives the shipped workflows to the end:
/// create the workflow, poll /workflow_queue for each step, PUT started then completed.
#[tokio::test]
async fn an_xml_only_robot_drives_the_demo_workflows_to_the_end() {
    let a = api().await;
    for f in workdo::cli::files::find_files(&support::workflows_dir()).expect("workflows") {
        a.t.store
            .template_save(&workdo::cli::files::parse_file(&f).expect("template"))
            .await
            .expect("save");
    }
    let druids = ["druid:bc123df4567", "druid:bc123df4568"];
    for d in druids {
        assert_eq!(
            a.post_json(&format!("/objects/{d}/workflows/{WF}"), &a.robot, json!({}))
                .await
                .0,
            StatusCode::CREATED
        );
    }
    let mut done = 0;
    for workflow in [WF, "accessionWF"] {
        let (_, t) = a.get(&format!("/workflow_templates/{workflow}")).await;
        let t: Value = serde_json::from_str(&t).expect("json");
        let processes = t["processes"].as_array().expect("processes").clone();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let mut progressed = false;
            for p in &processes {
                let name = p["name"].as_str().expect("name");
                let mut query = format!("/workflow_queue?waiting={workflow}:{name}");
                for pre in p["prerequisite"].as_array().into_iter().flatten() {
                    query.push_str(&format!(
                        "&completed={workflow}:{}",
                        pre.as_str().expect("name")
                    ));
                }
                let (_, objects) = a.get(&query).await;
                let doc = roxmltree::Document::parse(&objects).expect("objects XML");
                for o in doc.descendants().filter(|n| n.has_tag_name("object")) {
                    let d = o.attribute("id").expect("id");
                    let url = format!("/objects/{d}/workflows/{workflow}/{name}");
                    let (s, _) = a
                        .put_xml(
                            &format!("{url}?current-status=waiting"),
                            &format!(r#"<process name="{name}" status="started"/>"#),
                        )
                        .await;
                    assert_eq!(s, StatusCode::OK);
                    let (s, _) = a
                        .put_xml(
                            &format!("{url}?current-status=started"),
                            &format!(
                                r#"<process name="{name}" status="completed" elapsed="0.1"/>"#
                            ),
                        )
                        .await;
                    assert_eq!(s, StatusCode::OK);
                    done += 1;
                    progressed = true;
                    if workflow == WF && name == "cleanup" {
                        // googleScannedBookWF's last step hands over to accessioning.
                        a.post_json(
                            &format!("/objects/{d}/workflows/accessionWF"),
                            &a.robot,
                            json!({}),
                        )
                        .await;
                    }
                }
            }
            if !progressed {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "robot made no progress"
            );
        }
    }
    assert_eq!(
        done,
        2 * (8 + 3),
        "every non-bootstrap step of both workflows, for both objects"
    );
    for d in druids {
        let (_, body) = a.get(&format!("/objects/{d}/workflows")).await;
        let steps = body.matches("<process ").count();
        assert_eq!(
            body.matches(r#"status="completed""#).count(),
            steps,
            "{body}"
        );
        let (_, lc) = a.get(&format!("/objects/{d}/lifecycle")).await;
        assert!(lc.contains(">accessioned</milestone>"), "{lc}");
    }
}

#[tokio::test]
async fn nul_characters_are_refused_naming_where_they_are() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        "/api/objects",
        &a.admin,
        json!({"id": DRUID, "properties": {}}),
    )
    .await;
    let put = |path: &'static str| {
        a.call(
            reqwest::Method::PUT,
            path,
            &a.robot,
            Some((
                "application/xml",
                "<process name=\"x\" status=\"completed\"/>".into(),
            )),
        )
    };
    let cases: Vec<((StatusCode, String), &str)> = vec![
        (a.get("/api/objects/a%00b").await, "path segment 3"),
        (
            put("/objects/druid:bb123cd4567/workflows/googleScannedBookWF/a%00b").await,
            "path segment 5",
        ),
        (
            a.get("/workflow_queue?error=a%00b:h1&workflow=googleScannedBookWF")
                .await,
            "query parameter \"error\"",
        ),
        (
            a.post_json(
                "/api/objects",
                &a.admin,
                json!({"id": "druid:cc123cd4567", "properties": {"a": "x\u{0}y"}}),
            )
            .await,
            "body field \"properties.a\"",
        ),
        (
            a.post_json("/api/retry", &a.robot, json!({"template": "a\u{0}b"}))
                .await,
            "body field \"template\"",
        ),
    ];
    for ((status, body), field) in cases {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {body}");
        let e = err(&body);
        assert!(
            e.contains(field) && e.contains("NUL"),
            "{field} not named in {e:?}"
        );
    }
    // Nothing was written: the object with the NUL property does not exist.
    let (status, _) = a.get("/api/objects/druid:cc123cd4567").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_frameworks_own_errors_have_json_bodies() {
    let a = api().await;
    let (status, body) = a.get("/no/such/route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(err(&body).contains("no such route"), "{body}");
    let (status, body) = a
        .call(
            reqwest::Method::POST,
            "/api/objects",
            &a.admin,
            Some(("application/json", "x".repeat(2 * 1024 * 1024))),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(err(&body).contains("over the limit"), "{body}");
}
