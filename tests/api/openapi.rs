//! `/openapi.json` against what the server answers: every route the test calls (all of them,
//! successes and failures) answers with a status the document lists for that operation, in
//! the content type it names, and a JSON body the document's schema accepts (validated as
//! JSON Schema 2020-12, as OpenAPI 3.1 defines it).

use crate::support;

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json};
use support::openapi::Check;
use support::{GOOGLE_XML, db};
use workdo::api::{Access, AppState, app};
use workdo::store::Role;

const WF: &str = "googleScannedBookWF";
const DOOR: &str = "name: doorWF\nkind: machine\ninitial: Closed\nstates:\n  Closed:\n    on: { open: Open }\n  Open:\n    on: { close: Closed }\n";

#[tokio::test]
async fn every_answer_matches_the_document() {
    workdo::install_crypto();
    let t = db().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = AppState {
        store: t.store.clone(),
        access: Access::Tokens,
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
    let (admin, robot, viewer) = (
        token(Role::Admin).await,
        token(Role::Robot).await,
        token(Role::Viewer).await,
    );
    let doc: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .expect("document")
        .json()
        .await
        .expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let mut c = Check {
        base,
        http: reqwest::Client::new(),
        doc,
        seen: BTreeSet::new(),
    };
    let (get, post, put, patch, delete) = (
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
    );
    let js = |v: Value| Some(("application/json", v.to_string()));
    let d1 = "druid:bb123cd4567";
    let d2 = "druid:bc234df5678";
    let d3 = "druid:cd345fg6789";

    c.call(get.clone(), "/health", "", None).await;
    c.call(get.clone(), "/ready", "", None).await;
    c.call(get.clone(), "/openapi.json", "", None).await;
    let xml = Some(("application/xml", GOOGLE_XML.to_string()));
    assert_eq!(
        c.call(
            post.clone(),
            "/api/templates?format=xml",
            &admin,
            xml.clone()
        )
        .await
        .0,
        201
    );
    assert_eq!(
        c.call(post.clone(), "/api/templates?format=xml", &admin, xml)
            .await
            .0,
        200
    );
    let door = Some(("application/yaml", DOOR.to_string()));
    assert_eq!(
        c.call(post.clone(), "/api/templates", &admin, door).await.0,
        201
    );
    assert_eq!(
        c.call(
            post.clone(),
            "/api/templates",
            &admin,
            Some(("text/plain", "x".into()))
        )
        .await
        .0,
        400
    );
    c.call(get.clone(), "/api/templates", &viewer, None).await;
    c.call(get.clone(), &format!("/api/templates/{WF}"), &viewer, None)
        .await;
    assert_eq!(
        c.call(get.clone(), "/api/templates/nopeWF", &viewer, None)
            .await
            .0,
        404
    );

    let obj = json!({"id": d1, "properties": {"barcode": "36105010362304123456"}, "documents": {"mods": "<mods/>"}});
    assert_eq!(
        c.call(post.clone(), "/api/objects", &robot, js(obj.clone()))
            .await
            .0,
        201
    );
    assert_eq!(
        c.call(post.clone(), "/api/objects", &robot, js(obj))
            .await
            .0,
        200
    );
    assert_eq!(
        c.call(
            post.clone(),
            "/api/objects",
            &robot,
            Some(("application/json", "{".into()))
        )
        .await
        .0,
        400
    );
    // Many at once, in one transaction; a bad entry is named and nothing is registered.
    let batch = json!({"objects": [{"id": d2, "properties": {"year": 1854}}, {"id": d1}]});
    let (status, body) = c
        .call(post.clone(), "/api/objects/batch", &robot, js(batch))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["registered"], 1, "{body}");
    assert_eq!(body["updated"], 1, "{body}");
    let bad = json!({"objects": [{"id": d3}, {"id": "not an id"}]});
    let (status, body) = c
        .call(post.clone(), "/api/objects/batch", &robot, js(bad))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("objects[1]")),
        "{body}"
    );
    let (status, _) = c
        .call(get.clone(), &format!("/api/objects/{d3}"), &viewer, None)
        .await;
    assert_eq!(status, 404, "the batch's first entry was not kept");
    // A number a double would change is refused, named, with the fix.
    let (status, body) = c
        .call(
            patch.clone(),
            &format!("/api/objects/{d1}"),
            &robot,
            Some((
                "application/json",
                r#"{"properties": {"barcode": 36105010362304123456}}"#.into(),
            )),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("36105010362304123456") && e.contains("as a string")),
        "{body}"
    );
    assert_eq!(
        c.call(post.clone(), "/api/objects", &viewer, js(json!({"id": d1})))
            .await
            .0,
        403
    );
    assert_eq!(
        c.call(post.clone(), "/api/objects", "", js(json!({"id": d1})))
            .await
            .0,
        401
    );
    let huge = "x".repeat(2 * 1024 * 1024);
    assert_eq!(
        c.call(
            post.clone(),
            "/api/objects",
            &robot,
            Some(("application/json", huge))
        )
        .await
        .0,
        413
    );
    c.call(
        patch.clone(),
        &format!("/api/objects/{d1}"),
        &robot,
        js(json!({"properties": {"rush": "yes"}})),
    )
    .await;
    c.call(get.clone(), &format!("/api/objects/{d1}"), &viewer, None)
        .await;
    assert_eq!(
        c.call(get.clone(), "/api/objects/druid:zz999zz9999", &viewer, None)
            .await
            .0,
        404
    );
    c.call(
        get.clone(),
        &format!("/api/objects/{d1}/lifecycle"),
        &viewer,
        None,
    )
    .await;

    let (status, started) = c
        .call(
            post.clone(),
            "/api/workflows",
            &robot,
            js(json!({"template": WF, "objects": [d1], "lane": "rush", "context": {"a": 1}})),
        )
        .await;
    assert_eq!(status, 201);
    let wf = started[0]["workflow_id"].as_i64().expect("a workflow id");
    c.call(get.clone(), &format!("/api/workflows/{wf}"), &viewer, None)
        .await;
    assert_eq!(
        c.call(get.clone(), "/api/workflows/nine", &viewer, None)
            .await
            .0,
        400
    );
    c.call(
        get.clone(),
        &format!("/api/workflows/{wf}/events?limit=5"),
        &viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!("/api/objects/{d1}/events?after=0&limit=3"),
        &viewer,
        None,
    )
    .await;
    let step = format!("/api/steps/{d1}/{WF}/descriptive-metadata");
    assert_eq!(
        c.call(
            put.clone(),
            &step,
            &robot,
            js(json!({"status": "completed", "note": "done"}))
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(
            put.clone(),
            &step,
            &robot,
            js(json!({"status": "started", "current_status": "waiting"}))
        )
        .await
        .0,
        409
    );
    let convert = format!("/api/steps/{d1}/{WF}/google-convert");
    c.call(
        put.clone(),
        &convert,
        &robot,
        js(json!({"status": "error", "message": "scanner jammed"})),
    )
    .await;
    c.call(
        get.clone(),
        &format!("/api/queues/{WF}/google-download?completed={WF}:descriptive-metadata&lane=rush"),
        &viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!("/api/queues/{WF}/google-convert/errors"),
        &viewer,
        None,
    )
    .await;
    assert_eq!(
        c.call(
            get.clone(),
            &format!("/api/queues/{WF}/nope"),
            &viewer,
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        c.call(get.clone(), "/api/queues/no-such-queue", &viewer, None)
            .await
            .0,
        404
    );
    c.call(get.clone(), "/api/facets", &viewer, None).await;
    c.call(
        get.clone(),
        &format!("/api/facets?template={WF}"),
        &viewer,
        None,
    )
    .await;
    c.call(
        post.clone(),
        "/api/priority",
        &admin,
        js(json!({"priority": 5, "object": d1})),
    )
    .await;
    assert_eq!(
        c.call(
            post.clone(),
            "/api/priority",
            &admin,
            js(json!({"priority": 5}))
        )
        .await
        .0,
        400
    );
    c.call(
        post.clone(),
        "/api/retry",
        &robot,
        js(json!({"template": WF})),
    )
    .await;
    // Pausing a queue: paused, listed, resumed; a misspelt step is a 404.
    let pause = format!("/api/queues/{WF}/google-download/pause");
    let (status, body) = c
        .call(
            post.clone(),
            &pause,
            &robot,
            js(json!({"reason": "vendor outage"})),
        )
        .await;
    assert_eq!((status, &body["changed"]), (200, &json!(true)), "{body}");
    let (_, listed) = c.call(get.clone(), "/api/paused", &viewer, None).await;
    assert_eq!(listed[0]["reason"], "vendor outage", "{listed}");
    let (status, _) = c
        .call(
            post.clone(),
            &format!("/api/queues/{WF}/nope/pause"),
            &robot,
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, body) = c
        .call(
            post.clone(),
            &format!("/api/queues/{WF}/google-download/resume"),
            &robot,
            None,
        )
        .await;
    assert_eq!((status, &body["paused"]), (200, &json!(false)), "{body}");

    // A machine's signals, by id and by object; one not accepted in its state.
    let (_, job) = c
        .call(
            post.clone(),
            "/api/workflows",
            &robot,
            js(json!({"template": "doorWF", "objects": [d2]})),
        )
        .await;
    let job = job[0]["workflow_id"].as_i64().expect("a job id");
    let signals = format!("/api/workflows/{job}/signals");
    assert_eq!(
        c.call(
            post.clone(),
            &signals,
            &robot,
            js(json!({"signal": "open"}))
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(
            post.clone(),
            &signals,
            &robot,
            js(json!({"signal": "open"}))
        )
        .await
        .0,
        409
    );
    assert_eq!(
        c.call(
            post.clone(),
            &format!("/api/objects/{d2}/workflows/doorWF/signals"),
            &robot,
            js(json!({"signal": "close", "data": {"by": "test"}}))
        )
        .await
        .0,
        200
    );
    // Suspended, a signal waits (answered with `queued`); resumed, it is taken.
    let (s, body) = c
        .call(
            post.clone(),
            &format!("/api/workflows/{job}/suspend"),
            &admin,
            None,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        c.call(
            post.clone(),
            &signals,
            &robot,
            js(json!({"signal": "open"}))
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(
            post.clone(),
            &format!("/api/workflows/{job}/resume"),
            &admin,
            None,
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(post.clone(), "/api/workflows/999999/resume", &admin, None,)
            .await
            .0,
        409
    );
    assert_eq!(
        c.call(
            post.clone(),
            "/api/workflows/999999/signals",
            &robot,
            js(json!({"signal": "open"}))
        )
        .await
        .0,
        404
    );

    // Deployed functions: a new version (201), the same bytes again (200), list, show,
    // rollback, and a delete refused while a workflow pins it is not needed here: deleted.
    let script = |n: u8| Some(("application/octet-stream", format!("#!/bin/sh\n# {n}\n")));
    let (s, body) = c
        .call(
            put.clone(),
            "/api/functions/docfn?note=first",
            &admin,
            script(1),
        )
        .await;
    assert_eq!((s, &body["version"]), (201, &json!(1)), "{body}");
    assert_eq!(
        c.call(put.clone(), "/api/functions/docfn", &admin, script(1))
            .await
            .0,
        200
    );
    assert_eq!(
        c.call(put.clone(), "/api/functions/docfn", &admin, script(2))
            .await
            .0,
        201
    );
    let (s, body) = c.call(get.clone(), "/api/functions", &viewer, None).await;
    assert_eq!((s, &body[0]["current"]), (200, &json!(2)), "{body}");
    let (s, body) = c
        .call(get.clone(), "/api/functions/docfn", &viewer, None)
        .await;
    assert_eq!(
        (s, &body["versions"][1]["note"]),
        (200, &json!("first")),
        "{body}"
    );
    assert_eq!(
        c.call(get.clone(), "/api/functions/nope", &viewer, None)
            .await
            .0,
        404
    );
    assert_eq!(
        c.call(
            post.clone(),
            "/api/functions/docfn/rollback",
            &admin,
            js(json!({"to": 1}))
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(delete.clone(), "/api/functions/docfn", &admin, None)
            .await
            .0,
        200
    );

    // The workflow-service routes.
    support::openapi::workflow_service_routes(&mut c, (&admin, &robot, &viewer), (d1, d2, d3))
        .await;
    assert_eq!(
        c.call(
            delete.clone(),
            &format!("/api/workflows/{wf}"),
            &admin,
            None
        )
        .await
        .0,
        204
    );

    // Every operation the document describes was called, and says in a line what it does.
    let mut described = BTreeSet::new();
    for (path, item) in c.doc["paths"].as_object().expect("paths") {
        for m in ["get", "put", "post", "delete", "patch"] {
            if let Some(op) = item.get(m) {
                assert!(
                    op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                    "{m} {path} has no summary"
                );
                described.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    let missed: Vec<_> = described.difference(&c.seen).collect();
    assert!(
        missed.is_empty(),
        "operations this test never called: {missed:?}"
    );
}
