//! Property test over every API route that takes a body: a valid body mutated at random (any
//! bytes, NUL and invalid UTF-8 included) or random bytes outright, sent over real HTTP to a
//! real server on a real Postgres. No request gets a 5xx, and every refusal of a JSON route is
//! the JSON `{"error": …}` docs/http-api.md promises, naming what was wrong.

use crate::support;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::{GOOGLE_XML, db, load};
use workdo::api::{Access, AppState, app};
use workdo::store::Role;

const DRUID: &str = "druid:bb123cd4567";
const WF: &str = "googleScannedBookWF";

/// Each route that takes a body, with a body it accepts.
fn routes() -> Vec<(&'static str, String, &'static str, String)> {
    let json = "application/json";
    let xml = "application/xml";
    vec![
        (
            "POST",
            "/api/templates".into(),
            "application/yaml",
            "name: fuzzWF\nsteps:\n  - name: a\n  - name: b\n    prereqs: [a]\n".into(),
        ),
        (
            "POST",
            "/api/objects".into(),
            json,
            r#"{"id":"obj:f","properties":{"title":"Walden"},"documents":{"mods":"<mods/>"}}"#
                .into(),
        ),
        (
            "PATCH",
            format!("/api/objects/{DRUID}"),
            json,
            r#"{"properties":{"year":1854}}"#.into(),
        ),
        (
            "POST",
            "/api/workflows".into(),
            json,
            format!(r#"{{"template":"{WF}","objects":["{DRUID}"],"priority":5}}"#),
        ),
        (
            "PUT",
            format!("/api/steps/{DRUID}/{WF}/descriptive-metadata"),
            json,
            r#"{"status":"error","message":"boom","current_status":"waiting"}"#.into(),
        ),
        (
            "POST",
            "/api/priority".into(),
            json,
            format!(r#"{{"priority":9,"object":"{DRUID}"}}"#),
        ),
        (
            "POST",
            "/api/retry".into(),
            json,
            format!(r#"{{"template":"{WF}","step":"descriptive-metadata"}}"#),
        ),
        (
            "POST",
            format!("/objects/{DRUID}/workflows/{WF}"),
            json,
            r#"{"context":{"batch":9}}"#.into(),
        ),
        (
            "POST",
            "/api/workflows/1/signals".into(),
            json,
            r#"{"signal":"bump","data":{"n":1}}"#.into(),
        ),
        (
            "POST",
            format!("/api/objects/{DRUID}/workflows/fuzzMachineWF/signals"),
            json,
            r#"{"signal":"bump","data":{"n":1}}"#.into(),
        ),
        (
            "PUT",
            format!("/objects/{DRUID}/workflows/{WF}/descriptive-metadata"),
            xml,
            r#"<process name="descriptive-metadata" status="error" errorMessage="catalogue down" errorText="503"/>"#.into(),
        ),
    ]
}

/// `base` with bytes `insert` put in at `at`, or `insert` alone when `replace` is set.
fn mutate(base: &[u8], at: usize, insert: &[u8], replace: bool) -> Vec<u8> {
    if replace {
        return insert.to_vec();
    }
    let at = at % (base.len() + 1);
    let mut out = base[..at].to_vec();
    out.extend_from_slice(insert);
    out.extend_from_slice(&base[at..]);
    out
}

#[test]
fn api_bodies_never_fail_the_server() {
    workdo::install_crypto();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let (base, admin, _t) = rt.block_on(async {
        let t = db().await;
        load(&t.store, "google.xml", GOOGLE_XML).await;
        // A machine job (workflow 1) for the signal routes.
        load(
            &t.store,
            "machine.yaml",
            "name: fuzzMachineWF\nkind: machine\nvariables: { count: 0 }\ninitial: Idle\nstates:\n  Idle:\n    on:\n      bump: { to: Idle, actions: [ { set: { count: \"${count + signal.data.n}\" } } ] }\n",
        )
        .await;
        t.store
            .workflow_start(&workdo::store::StartRequest::new("fuzzMachineWF", &[DRUID]))
            .await
            .expect("machine job");
        t.store
            .object_put(DRUID, &Default::default(), &Default::default(), "test")
            .await
            .expect("object");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let state = AppState {
            store: t.store.clone(),
            access: Access::Tokens,
        };
        tokio::spawn(async move { axum::serve(listener, app(state)).await });
        let admin = t
            .store
            .token_create(Role::Admin, "fuzz", None)
            .await
            .expect("token")
            .1;
        (base, admin, t)
    });
    let http = reqwest::Client::new();
    let routes = routes();
    let cases = std::env::var("WORKDO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0..routes.len(),
        any::<usize>(),
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..16),
            "\\PC{0,12}".prop_map(String::into_bytes),
            Just(b"\0".to_vec()),
            Just(b"\\u0000".to_vec()),
            Just(vec![0xff, 0xfe]),
            Just(b"\"".to_vec()),
            Just(b"}".to_vec()),
            Just(b"<".to_vec()),
            Just(b"99999999999999999999999".to_vec()),
        ],
        proptest::bool::weighted(0.1),
    );
    let result = runner.run(&strategy, |(route, at, insert, replace)| {
        let (method, path, content_type, body) = &routes[route];
        let body = mutate(body.as_bytes(), at, &insert, replace);
        let (status, text) = rt.block_on(async {
            let resp = http
                .request(
                    reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
                    format!("{base}{path}"),
                )
                .bearer_auth(&admin)
                .header("content-type", *content_type)
                .body(body.clone())
                .send()
                .await
                .expect("the server answers");
            let status = resp.status();
            (status, resp.text().await.unwrap_or_default())
        });
        let shown = String::from_utf8_lossy(&body).into_owned();
        if status.is_server_error() {
            return Err(TestCaseError::fail(format!(
                "{method} {path} with {shown:?}: {status} {text}"
            )));
        }
        if status.is_client_error() && path.starts_with("/api/") {
            let error = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_default();
            if error.is_empty() {
                return Err(TestCaseError::fail(format!(
                    "{method} {path} with {shown:?}: {status} without a JSON error: {text}"
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
