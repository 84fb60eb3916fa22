//! The workflow service's own client (dor-workflow-client 7.8) and robots built on lyber-core
//! 7.7, as they are on the wire: each request below is what a client method sends — path
//! (trailing slash included), query keys sorted with `:` escaped, GETs with an empty
//! form-encoded body, XML bodies with their declaration, credentials in the URL (Basic) — and
//! each answer is held to what the real service answers (its request specs and controllers).

mod robots;
use crate::support;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::db;
use workdo::api::Access;
use workdo::store::Role;

const D1: &str = "druid:bb123cd4567";
const D2: &str = "druid:cc234df5678";
const NONE: &str = "druid:dd345fg6789";

/// The client as it talks: Faraday with the token in the URL's userinfo (Basic), its user agent,
/// and an empty body on every request but DELETE.
struct Client {
    base: String,
    http: reqwest::Client,
    token: String,
}

impl Client {
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> (StatusCode, String) {
        let mut r = self
            .http
            .request(method.clone(), format!("{}/{path}", self.base))
            .basic_auth("robot", Some(&self.token))
            .header("User-Agent", "dor-workflow-client 7.8.0")
            .header("Accept", "*/*");
        if method != Method::DELETE {
            r = r
                .header(
                    "Content-Type",
                    content_type.unwrap_or("application/x-www-form-urlencoded"),
                )
                .body(body.to_string());
        }
        let resp = r.send().await.expect("request");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        self.send(Method::GET, path, None, "").await
    }

    /// `update_status` / `update_error_status`: a PUT of Nokogiri's `<process …/>`.
    async fn put_process(&self, druid: &str, wf: &str, attrs: &str, query: &str) -> StatusCode {
        let name = attrs
            .split("name=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_string();
        let body = format!("<?xml version=\"1.0\"?>\n<process {attrs}/>\n");
        let (status, text) = self
            .send(
                Method::PUT,
                &format!("objects/{druid}/workflows/{wf}/{name}{query}"),
                Some("application/xml"),
                &body,
            )
            .await;
        if status == StatusCode::OK {
            // The client parses the answer as JSON.
            let v: Value = serde_json::from_str(&text).expect("a PUT answers JSON");
            assert!(v["next_steps"].is_array(), "{text}");
        }
        status
    }

    /// `workflow_status`: the status of the process's highest version, as the client reads it.
    async fn status(&self, druid: &str, wf: &str, process: &str) -> Option<String> {
        let (code, xml) = self.get(&format!("objects/{druid}/workflows/{wf}")).await;
        assert_eq!(code, StatusCode::OK, "{xml}");
        process_attr(&xml, process, "status")
    }
}

/// An attribute of the `<process name=…>` with the highest version in `xml`.
fn process_attr(xml: &str, process: &str, attr: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).expect("the answer is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("process") && n.attribute("name") == Some(process))
        .max_by_key(|n| {
            n.attribute("version")
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(0)
        })
        .and_then(|n| n.attribute(attr).map(str::to_string))
}

/// The text of each `<milestone>`.
fn milestones(xml: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).expect("XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("milestone"))
        .filter_map(|n| n.text().map(str::to_string))
        .collect()
}

async fn setup() -> (Client, support::TestDb) {
    workdo::install_crypto();
    let t = db().await;
    for f in ["accessionWF.xml", "registrationWF.xml"] {
        let path = support::workflows_dir()
            .join("../tests/fixtures/workflow-service")
            .join(f);
        let loaded = workdo::cli::files::parse_file(&path).expect("template");
        t.store.template_save(&loaded).await.expect("save");
    }
    // As the workflow service always runs: ready steps are handed off (issue 48).
    t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");
    let base = support::serve_api(&t.store, Access::Tokens).await;
    let token = t
        .store
        .token_create(Role::Admin, "client", None)
        .await
        .expect("token")
        .1;
    (
        Client {
            base,
            http: reqwest::Client::new(),
            token,
        },
        t,
    )
}

#[tokio::test]
async fn the_clients_calls_get_the_services_answers() {
    let (c, t) = setup().await;
    // An object with no workflows: empty documents, not 404 (lifecycle, milestones, status).
    let (code, body) = c.get(&format!("objects/{NONE}/lifecycle")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(milestones(&body).is_empty(), "{body}");
    let (code, body) = c.get(&format!("objects/{NONE}/workflows/")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, body) = c
        .get(&format!("objects/{NONE}/workflows/accessionWF"))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(process_attr(&body, "start-accession", "status"), None);

    // create_workflow_by_name(druid, 'registrationWF', version: 1): `registered` once, from
    // the step that sets it (not also for the object).
    let (code, body) = c
        .send(
            Method::POST,
            &format!("objects/{D1}/workflows/registrationWF?lane-id=default&version=1"),
            Some("application/json"),
            "",
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    // create_workflow_by_name(…, 'accessionWF', version: 1, context: {…})
    let context = json!({"requireOCR": true, "ocrLanguages": ["Russian"]});
    let (code, body) = c
        .send(
            Method::POST,
            &format!("objects/{D1}/workflows/accessionWF?lane-id=default&version=1"),
            Some("application/json"),
            &json!({"context": context}).to_string(),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");

    // workflow_status / process(...): a ready step reads `queued`; a skip-queue step `waiting`;
    // the context comes back as JSON text on each process.
    assert_eq!(
        c.status(D1, "accessionWF", "start-accession")
            .await
            .as_deref(),
        Some("queued")
    );
    assert_eq!(
        c.status(D1, "accessionWF", "stage").await.as_deref(),
        Some("waiting")
    );
    let (_, xml) = c.get(&format!("objects/{D1}/workflows/accessionWF")).await;
    assert_eq!(
        process_attr(&xml, "sdr-ingest-received", "status").as_deref(),
        Some("waiting"),
        "skip-queue steps are never queued"
    );
    let ctx: Value = serde_json::from_str(
        &process_attr(&xml, "start-accession", "context").expect("context attribute"),
    )
    .expect("JSON context");
    assert_eq!(ctx, context);
    // create_workflow_spec.rb:64-75, "with non hash context": a string is kept and read back
    // as JSON text (the service's `workflow_step.rb:105`, `context&.to_json`).
    let (code, body) = c
        .send(
            Method::POST,
            "objects/druid:dd111ff2222/workflows/accessionWF?version=1",
            Some("application/json"),
            &json!({"context": "not JSON"}).to_string(),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (_, xml2) = c
        .get("objects/druid:dd111ff2222/workflows/accessionWF")
        .await;
    assert_eq!(
        process_attr(&xml2, "start-accession", "context").as_deref(),
        Some("\"not JSON\""),
        "{xml2}"
    );
    assert!(xml2.contains(r#"context="&quot;not JSON&quot;""#), "{xml2}");
    for attr in [
        "laneId",
        "elapsed",
        "datetime",
        "version",
        "note",
        "lifecycle",
    ] {
        assert!(
            process_attr(&xml, "start-accession", attr).is_some(),
            "{attr} missing: {xml}"
        );
    }

    // workflows(pid): GET with the trailing slash; all_workflows without.
    for path in [
        format!("objects/{D1}/workflows/"),
        format!("objects/{D1}/workflows"),
    ] {
        let (code, xml) = c.get(&path).await;
        assert_eq!(code, StatusCode::OK, "{path}: {xml}");
        let doc = roxmltree::Document::parse(&xml).expect("XML");
        let ids: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("workflow"))
            .filter_map(|n| n.attribute("id"))
            .collect();
        assert_eq!(ids, ["accessionWF", "registrationWF"], "{path}");
    }

    // update_status with current_status: 'queued' (robots that check first), then again: 409.
    let started = r#"name="start-accession" status="started" elapsed="0""#;
    assert_eq!(
        c.put_process(D1, "accessionWF", started, "?current-status=queued")
            .await,
        StatusCode::OK
    );
    assert_eq!(
        c.put_process(D1, "accessionWF", started, "?current-status=queued")
            .await,
        StatusCode::CONFLICT
    );
    // update_status(status: 'queued') is accepted (the step goes back in its queue).
    assert_eq!(
        c.put_process(
            D1,
            "accessionWF",
            r#"name="start-accession" status="queued" elapsed="0""#,
            ""
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        c.status(D1, "accessionWF", "start-accession")
            .await
            .as_deref(),
        Some("queued")
    );
    assert_eq!(
        c.put_process(
            D1,
            "accessionWF",
            r#"name="start-accession" status="completed" elapsed="1.5" note="vm-1""#,
            ""
        )
        .await,
        StatusCode::OK
    );
    // update_error_status: errorMessage shows; objects_erroring_at_workstep('dor:accessionWF:stage').
    assert_eq!(
        c.put_process(
            D1,
            "accessionWF",
            r#"name="stage" status="error" errorMessage="no files in staging" errorText="vm-1""#,
            ""
        )
        .await,
        StatusCode::OK
    );
    let (_, xml) = c.get(&format!("objects/{D1}/workflows/accessionWF")).await;
    assert_eq!(
        process_attr(&xml, "stage", "errorMessage").as_deref(),
        Some("no files in staging")
    );
    for error in ["dor%3AaccessionWF%3Astage", "accessionWF%3Astage"] {
        let (code, xml) = c.get(&format!("workflow_queue?error={error}")).await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            xml.contains(&format!("<object id=\"{D1}\"/>")),
            "{error}: {xml}"
        );
    }
    // objects_for_workstep(['accessionWF:start-accession'], 'accessionWF:stage', 'default',
    // limit: 10), keys sorted as Faraday sends them; the step in error is not waiting. With
    // the hand-off, a step PUT back to `waiting` whose prerequisites are done is handed off
    // again at once (`queued`, not listed); robot-master's polling, which this call serves,
    // runs without it.
    t.store.handoff_set(None, "test").await.expect("hand-off");
    c.put_process(
        D1,
        "accessionWF",
        r#"name="stage" status="waiting" elapsed="0""#,
        "",
    )
    .await;
    let (code, xml) = c
        .get("workflow_queue?completed=accessionWF%3Astart-accession&lane-id=default&limit=10&waiting=accessionWF%3Astage")
        .await;
    assert_eq!(code, StatusCode::OK);
    assert!(xml.contains(D1), "{xml}");
    // lane_ids('accessionWF', 'stage')
    let (_, xml) = c
        .get("workflow_queue/lane_ids?step=accessionWF%3Astage")
        .await;
    assert!(xml.contains(r#"<lane id="default"/>"#), "{xml}");
    t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");

    // lifecycle: every milestone reached (registered once, submitted); with active-only and a
    // version, the milestone steps of that version while it is unfinished.
    let (_, xml) = c.get(&format!("objects/{D1}/lifecycle")).await;
    let reached = milestones(&xml);
    assert_eq!(
        reached.iter().filter(|m| *m == "registered").count(),
        1,
        "{xml}"
    );
    assert!(reached.contains(&"submitted".to_string()), "{xml}");
    let (_, xml) = c
        .get(&format!(
            "objects/{D1}/lifecycle?active-only=true&version=1"
        ))
        .await;
    let mut active = milestones(&xml);
    active.sort();
    assert_eq!(
        active,
        [
            "accessioned",
            "deposited",
            "published",
            "registered",
            "submitted"
        ],
        "{xml}"
    );
    let (_, xml) = c
        .get(&format!(
            "objects/{D1}/lifecycle?active-only=true&version=2"
        ))
        .await;
    assert!(milestones(&xml).is_empty(), "{xml}");

    // Templates: names, and processes with name and label.
    let (code, text) = c.get("workflow_templates").await;
    assert_eq!(code, StatusCode::OK);
    let names: Vec<String> = serde_json::from_str(&text).expect("JSON array");
    assert!(names.contains(&"accessionWF".to_string()));
    let (_, text) = c.get("workflow_templates/accessionWF").await;
    let t: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(t["processes"][0]["name"], "start-accession");
    assert_eq!(t["processes"][0]["label"], "Start Accessioning");
    let (code, _) = c.get("workflow_templates/nopeWF").await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // skip_all with a note; on an object without the workflow: 204 too.
    let skip = "<?xml version=\"1.0\"?>\n<process name=\"skip-all\" status=\"skipped\" note=\"not needed\"/>\n";
    for druid in [D1, NONE] {
        let (code, body) = c
            .send(
                Method::POST,
                &format!("objects/{druid}/workflows/accessionWF/skip-all"),
                Some("application/xml"),
                skip,
            )
            .await;
        assert_eq!(code, StatusCode::NO_CONTENT, "{druid}: {body}");
    }
    let (_, xml) = c.get(&format!("objects/{D1}/workflows/accessionWF")).await;
    assert_eq!(
        process_attr(&xml, "publish", "status").as_deref(),
        Some("skipped")
    );
    assert_eq!(
        process_attr(&xml, "publish", "note").as_deref(),
        Some("not needed")
    );

    // delete_workflow (the client's leading slash: the host root) and delete_all_workflows,
    // with nothing to delete: 204.
    let (code, _) = c
        .send(
            Method::DELETE,
            &format!("objects/{D2}/workflows/accessionWF?version=1"),
            None,
            "",
        )
        .await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = c
        .send(Method::DELETE, &format!("objects/{D2}/workflows"), None, "")
        .await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = c
        .send(
            Method::DELETE,
            &format!("objects/{D1}/workflows/accessionWF?version=1"),
            None,
            "",
        )
        .await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (_, xml) = c.get(&format!("objects/{D1}/workflows/accessionWF")).await;
    assert_eq!(process_attr(&xml, "publish", "status"), None, "{xml}");
}

/// A skipped step reaches its milestone (skipped counts as done, as in the service), and the
/// milestones of deleted workflows go with them.
#[tokio::test]
async fn skipped_steps_reach_milestones_and_deleted_workflows_take_theirs() {
    let (c, _t) = setup().await;
    let (code, _) = c
        .send(
            Method::POST,
            &format!("objects/{D2}/workflows/accessionWF?lane-id=default&version=1"),
            Some("application/json"),
            "",
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let skip =
        "<?xml version=\"1.0\"?>\n<process name=\"skip-all\" status=\"skipped\" note=\"n\"/>\n";
    let (code, _) = c
        .send(
            Method::POST,
            &format!("objects/{D2}/workflows/accessionWF/skip-all"),
            Some("application/xml"),
            skip,
        )
        .await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (_, xml) = c.get(&format!("objects/{D2}/lifecycle")).await;
    let mut m = milestones(&xml);
    m.sort();
    assert_eq!(
        m,
        ["accessioned", "deposited", "published", "submitted"],
        "{xml}"
    );
    let (code, _) = c
        .send(Method::DELETE, &format!("objects/{D2}/workflows"), None, "")
        .await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (_, xml) = c.get(&format!("objects/{D2}/lifecycle")).await;
    assert!(milestones(&xml).is_empty(), "{xml}");
}
