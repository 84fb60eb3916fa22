//! The JSON API through real HTTP against a real Postgres: its routes, their successes and
//! failures, tokens and roles, NUL characters, and the framework's own errors as JSON.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::api::{DRUID, WF, api, api_with, err, with_google};
use workdo::api::Access;
use workdo::store::Role;

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
    // A new object is `registered` (seed 000's first milestone), once, in workdo's own view;
    // the workflow service's lifecycle keeps only what steps recorded (tests/workdo_vocabulary).
    let (_, l) = a.get("/api/objects/obj:1/lifecycle").await;
    let l: Value = serde_json::from_str(&l).expect("json");
    assert_eq!(
        l.as_array()
            .map(|m| m.iter().filter(|x| x["name"] == "registered").count()),
        Some(1),
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
            // (tests/page/admin.rs drives them).
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
