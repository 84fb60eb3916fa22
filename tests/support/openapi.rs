//! The check behind tests/api/openapi.rs: calls made through `Check::call` are held to the
//! `/openapi.json` operation that serves them (status listed, content type, body schema).

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::Value;

/// The operation of `doc` that serves `path` (most literal segments win: `skip-all` over
/// `{process}`), as (template, operation).
pub fn operation<'a>(doc: &'a Value, method: &Method, path: &str) -> Option<(String, &'a Value)> {
    let path = path.split('?').next().unwrap_or(path);
    let segs: Vec<&str> = path.split('/').collect();
    let mut best: Option<(usize, &String)> = None;
    for template in doc["paths"].as_object()?.keys() {
        let t: Vec<&str> = template.split('/').collect();
        if t.len() != segs.len() {
            continue;
        }
        let mut literal = 0;
        let fits = t.iter().zip(&segs).all(|(a, b)| {
            if a.starts_with('{') {
                true
            } else {
                literal += 1;
                a == b
            }
        });
        if fits && best.is_none_or(|(n, _)| literal > n) {
            best = Some((literal, template));
        }
    }
    let (_, template) = best?;
    let op = &doc["paths"][template][method.as_str().to_lowercase()];
    (!op.is_null()).then(|| (template.clone(), op))
}

pub struct Check {
    pub base: String,
    pub http: reqwest::Client,
    pub doc: Value,
    pub seen: BTreeSet<(String, String)>,
}

impl Check {
    /// Call, and hold the answer to the document; the answer's status and body.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&str, String)>,
    ) -> (u16, Value) {
        let mut r = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if !token.is_empty() {
            r = r.bearer_auth(token);
        }
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
        let text = resp.text().await.expect("body");
        let what = format!("{method} {path} answered {status}");
        let (template, op) = operation(&self.doc, &method, path)
            .unwrap_or_else(|| panic!("{what}: no operation in the document"));
        self.seen.insert((method.to_string(), template));
        let response = &op["responses"][status.to_string()];
        assert!(
            !response.is_null(),
            "{what}, which the document does not list (it lists {:?}): {text}",
            op["responses"]
                .as_object()
                .map(|o| o.keys().collect::<Vec<_>>())
        );
        let response = match response["$ref"].as_str() {
            Some(r) => &self.doc["components"]["responses"][r.rsplit('/').next().unwrap_or(r)],
            None => response,
        };
        let Some(content) = response["content"].as_object() else {
            assert!(
                text.is_empty(),
                "{what} with a body the document does not describe: {text}"
            );
            return (status, Value::Null);
        };
        let ct = ct.unwrap_or_else(|| panic!("{what} without a content type"));
        let media = content
            .get(&ct)
            .unwrap_or_else(|| panic!("{what} as {ct}; the document says {:?}", content.keys()));
        if ct != "application/json" {
            return (status, Value::String(text));
        }
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        let mut schema = media["schema"].clone();
        if let Some(o) = schema.as_object_mut() {
            o.insert("components".into(), self.doc["components"].clone());
        }
        let validator = jsonschema::draft202012::new(&schema)
            .unwrap_or_else(|e| panic!("{what}: the document's schema does not compile: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: the body does not fit the document: {errors:?}\n{body}"
        );
        (status, body)
    }
}

/// The workflow-service XML routes, called as its robots and clients call them (on objects
/// `d1` with its workflow, `d2` with one to delete, `d3` to create, update, skip and delete):
/// every answer checked against the document by `c`.
pub async fn workflow_service_routes(
    c: &mut Check,
    (admin, robot, viewer): (&str, &str, &str),
    (d1, d2, d3): (&str, &str, &str),
) {
    const WF: &str = "googleScannedBookWF";
    let (get, post, put, delete) = (Method::GET, Method::POST, Method::PUT, Method::DELETE);
    c.call(
        get.clone(),
        &format!("/objects/{d1}/workflows"),
        viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!("/objects/{d1}/workflows/"),
        viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!("/objects/{d1}/workflows/{WF}"),
        viewer,
        None,
    )
    .await;
    assert_eq!(
        c.call(
            post.clone(),
            &format!("/objects/{d3}/workflows/{WF}"),
            robot,
            None
        )
        .await
        .0,
        201
    );
    assert_eq!(
        c.call(
            post.clone(),
            &format!("/objects/{d3}/workflows/nopeWF"),
            robot,
            None
        )
        .await
        .0,
        400
    );
    let process = Some((
        "application/xml",
        r#"<process name="descriptive-metadata" status="completed" elapsed="1.5"/>"#.to_string(),
    ));
    assert_eq!(
        c.call(
            put.clone(),
            &format!("/objects/{d3}/workflows/{WF}/descriptive-metadata"),
            robot,
            process.clone()
        )
        .await
        .0,
        200
    );
    assert_eq!(
        c.call(
            put.clone(),
            &format!("/objects/{d3}/workflows/{WF}/descriptive-metadata?current-status=waiting"),
            robot,
            process
        )
        .await
        .0,
        409
    );
    c.call(
        get.clone(),
        &format!("/objects/{d1}/lifecycle"),
        viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!(
            "/workflow_queue?waiting={WF}:google-download&completed={WF}:descriptive-metadata"
        ),
        viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        &format!("/workflow_queue/lane_ids?step={WF}:google-download"),
        viewer,
        None,
    )
    .await;
    c.call(
        get.clone(),
        "/workflow_queue/all_queued?limit=10",
        viewer,
        None,
    )
    .await;
    c.call(get.clone(), "/workflow_templates", viewer, None)
        .await;
    c.call(
        get.clone(),
        &format!("/workflow_templates/{WF}"),
        viewer,
        None,
    )
    .await;
    // The initiate call as PUT, the same as POST: re-creates d3's workflow.
    assert_eq!(
        c.call(
            Method::PUT,
            &format!("/objects/{d3}/workflows/{WF}"),
            robot,
            None
        )
        .await
        .0,
        201
    );
    assert_eq!(
        c.call(
            post.clone(),
            &format!("/objects/{d3}/workflows/{WF}/skip-all"),
            robot,
            None
        )
        .await
        .0,
        204
    );
    assert_eq!(
        c.call(
            delete.clone(),
            &format!("/objects/{d3}/workflows/{WF}"),
            admin,
            None
        )
        .await
        .0,
        204
    );
    assert_eq!(
        c.call(
            delete.clone(),
            &format!("/objects/{d3}/workflows"),
            admin,
            None
        )
        .await
        .0,
        204
    );
    assert_eq!(
        c.call(
            delete.clone(),
            &format!("/objects/{d2}/workflows"),
            admin,
            None
        )
        .await
        .0,
        204
    );
}
