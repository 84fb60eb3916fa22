//! The WorkDo workflow-service routes, XML in and out as existing robots and clients expect.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use super::bodies::NextSteps;
use super::{ApiError, ApiResult, AppState, Caller, int_param, param, query_pairs};
use crate::model::status::Status;
use crate::store::{Role, SetRequest, StartRequest, Store, StoreError, WorkflowView};

pub(super) mod queues;
mod render;
pub(super) mod templates;
use queues::{all_queued, lane_ids, workflow_queue};
use templates::{template_names, template_processes};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/objects/{druid}/workflows",
            get(workflows_of_object).delete(delete_all),
        )
        // What the client's `workflows(pid)` sends.
        .route(
            "/objects/{druid}/workflows/",
            get(workflows_of_object_slash),
        )
        .route(
            "/objects/{druid}/workflows/{workflow}",
            get(workflow_of_object)
                .post(create)
                .put(initiate)
                .delete(delete_one),
        )
        .route(
            "/objects/{druid}/workflows/{workflow}/skip-all",
            post(skip_all),
        )
        .route(
            "/objects/{druid}/workflows/{workflow}/{process}",
            put(update_process),
        )
        .route("/objects/{druid}/lifecycle", get(lifecycle))
        .route("/workflow_queue", get(workflow_queue))
        .route("/workflow_queue/lane_ids", get(lane_ids))
        .route("/workflow_queue/all_queued", get(all_queued))
        .route("/workflow_templates", get(template_names))
        .route("/workflow_templates/{name}", get(template_processes))
}

use render::{Specs, Tag, close, workflow_xml, xml};

/// An object id in its one spelling ([`crate::model::object_id`]: the same rule as the CLI's and
/// the JSON API's, so `bb123cd4567` is `druid:bb123cd4567`); anything else is a 400.
fn druid(text: &str) -> ApiResult<String> {
    crate::model::object_id::normalize(text).map_err(ApiError::bad_request)
}

/// The templates `views` run on, for which steps skip queues.
async fn specs_of(store: &Store, views: &[WorkflowView]) -> ApiResult<Specs> {
    let mut specs = Specs {
        templates: Default::default(),
        handoff: store.handoff_enabled().await?,
    };
    for v in views {
        if let std::collections::hash_map::Entry::Vacant(slot) =
            specs.templates.entry(v.workflow.template_id)
        {
            slot.insert(store.template_by_id(v.workflow.template_id).await?.spec);
        }
    }
    Ok(specs)
}

/// The same list, at the address with a trailing slash that `workflows(pid)` uses.
#[utoipa::path(get, path = "/objects/{druid}/workflows/", tag = "workflow service", params(("druid" = String, Path)), responses((status = 200, description = "<workflows> of the object, as without the slash", content_type = "application/xml", body = String)))]
pub(super) async fn workflows_of_object_slash(
    state: State<AppState>,
    c: Caller,
    d: Path<String>,
) -> ApiResult<Response> {
    workflows_of_object(state, c, d).await
}

/// The workflow service's `<workflows>` document of an object.
#[utoipa::path(get, path = "/objects/{druid}/workflows", tag = "workflow service", params(("druid" = String, Path)), responses((status = 200, description = "<workflows> of the object", content_type = "application/xml", body = String)))]
pub(super) async fn workflows_of_object(
    State(s): State<AppState>,
    _c: Caller,
    Path(d): Path<String>,
) -> ApiResult<Response> {
    let object = druid(&d)?;
    let views = match s.store.object_workflows(&object, None).await {
        Ok(v) => v,
        Err(StoreError::UnknownObject(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let specs = specs_of(&s.store, &views).await?;
    let mut out = String::new();
    let end = Tag::open(&mut out, "workflows")
        .attr("objectId", &object)
        .start();
    // By name, as the service lists them.
    let mut names: Vec<&str> = views.iter().map(|v| v.workflow.template.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let of: Vec<&WorkflowView> = views
            .iter()
            .filter(|v| v.workflow.template == name)
            .collect();
        workflow_xml(&mut out, &object, name, &of, &specs);
    }
    close(&mut out, end);
    Ok(xml(out))
}

/// The workflow service's `<workflow>` document of one of an object's workflows.
#[utoipa::path(get, path = "/objects/{druid}/workflows/{workflow}", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path)), responses((status = 200, description = "<workflow>", content_type = "application/xml", body = String)))]
pub(super) async fn workflow_of_object(
    State(s): State<AppState>,
    _c: Caller,
    Path((d, workflow)): Path<(String, String)>,
) -> ApiResult<Response> {
    // An id that is no druid has no workflow: the service answers an empty one, 200
    // (single_workflow_for_object_spec.rb:59), not an error.
    let Ok(object) = druid(&d) else {
        let mut out = String::new();
        workflow_xml(&mut out, &d, &workflow, &[], &Specs::default());
        return Ok(xml(out));
    };
    let views = match s.store.object_workflows(&object, Some(&workflow)).await {
        Ok(v) => v,
        Err(StoreError::UnknownObject(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let specs = specs_of(&s.store, &views).await?;
    let mut out = String::new();
    workflow_xml(
        &mut out,
        &object,
        &workflow,
        &views.iter().collect::<Vec<_>>(),
        &specs,
    );
    Ok(xml(out))
}

/// The initiate call as WorkDo's paper has it: `PUT` on the workflow, the same as `POST`.
#[utoipa::path(put, path = "/objects/{druid}/workflows/{workflow}", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path), ("version" = Option<i32>, Query, description = "object version"), ("lane-id" = Option<String>, Query, description = "lane")), responses((status = 201, description = "Created (a re-PUT replaces the steps)")))]
pub(super) async fn initiate(
    s: State<AppState>,
    c: Caller,
    p: Path<(String, String)>,
    q: RawQuery,
    body: Bytes,
) -> ApiResult<Response> {
    create(s, c, p, q, body).await
}

/// Create (or re-create) the workflow's steps. `?version=N&lane-id=L`, optional JSON body
/// `{"context": {…}}`. An unknown template is a 400 and creates nothing.
#[utoipa::path(post, path = "/objects/{druid}/workflows/{workflow}", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path), ("version" = Option<i32>, Query, description = "object version"), ("lane-id" = Option<String>, Query, description = "lane")), responses((status = 201, description = "Created (a re-POST replaces the steps)")))]
pub(super) async fn create(
    State(s): State<AppState>,
    c: Caller,
    Path((d, workflow)): Path<(String, String)>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> ApiResult<Response> {
    super::access::decide(
        &s,
        &c,
        super::access::Act::Start {
            template: &workflow,
        },
    )
    .await?;
    let object = druid(&d)?;
    let pairs = query_pairs(q.as_deref())?;
    // As the service does: a context replaces the one there was; `""` (or `{}`) clears it; no
    // context (no body, or null) keeps what the workflow had, when it is created again.
    let given = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let v: Value = super::json_body(&body)?;
        match v.get("context") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) if t.is_empty() => Some(json!({})),
            // A string is kept as it is, and read back as JSON text (create_workflow_spec.rb:
            // "with non hash context").
            Some(ctx) if ctx.is_object() || ctx.is_string() => Some(ctx.clone()),
            Some(_) => {
                return Err(ApiError::bad_request(
                    "`context` must be a JSON object or a string (\"\" clears it)",
                ));
            }
        }
    };
    let context = match given {
        Some(c) => c,
        None => match s.store.object_workflows(&object, Some(&workflow)).await {
            Ok(views) => views
                .last()
                .map(|v| v.workflow.context.clone())
                .unwrap_or_else(|| json!({})),
            Err(StoreError::UnknownObject(_)) => json!({}),
            Err(e) => return Err(e.into()),
        },
    };
    let mut req = StartRequest::new(&workflow, &[&object]);
    req.version = int_param(&pairs, "version")?;
    if let Some(lane) = param(&pairs, "lane-id") {
        req.lane = lane.to_string();
    }
    req.context = context;
    req.actor = format!("api:{}", c.0.as_str());
    match s.store.workflow_start(&req).await {
        Ok(_) => Ok(StatusCode::CREATED.into_response()),
        Err(StoreError::UnknownTemplate(t)) => Err(ApiError::bad_request(format!(
            "unknown workflow template {t:?}"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The WorkDo update call. Body: `<process name=… status=… elapsed=… lifecycle=… note=…
/// errorMessage=… errorText=…/>`; optional `?current-status=S` precondition.
#[utoipa::path(put, path = "/objects/{druid}/workflows/{workflow}/{process}", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path), ("process" = String, Path), ("current-status" = Option<String>, Query, description = "precondition; 409 on mismatch"), ("version" = Option<i32>, Query, description = "object version")), request_body(content = String, content_type = "application/xml", description = "<process name= status= elapsed= lifecycle= note= errorMessage= errorText=/>"), responses((status = 200, description = "The steps that became ready", body = NextSteps), (status = 409, description = "current-status did not match; nothing changed (the service's sentence, text/plain)", body = String, content_type = "text/plain")))]
pub(super) async fn update_process(
    State(s): State<AppState>,
    c: Caller,
    Path((d, workflow, process)): Path<(String, String, String)>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> ApiResult<Response> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let object = druid(&d)?;
    let pairs = query_pairs(q.as_deref())?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    let doc = roxmltree::Document::parse(text)
        .map_err(|e| ApiError::bad_request(format!("malformed XML body: {e}")))?;
    let root = doc.root_element();
    if root.tag_name().name() != "process" {
        return Err(ApiError::bad_request(format!(
            "the body's root element is <{}>, expected <process>",
            root.tag_name().name()
        )));
    }
    let name = root.attribute("name").unwrap_or(&process);
    if name != process {
        // The service's own sentence, as plain text (update_step_spec.rb:192).
        return Ok(plain(
            StatusCode::BAD_REQUEST,
            format!("Process name in body ({name}) does not match process name in URI ({process})"),
        ));
    }
    let status = root
        .attribute("status")
        .ok_or_else(|| ApiError::bad_request("the <process> element has no status attribute"))?;
    let handoff = s.store.handoff_enabled().await?;

    if Status::parse(status).is_none() {
        return Err(ApiError::bad_request(format!("invalid status {status:?}")));
    }
    let elapsed = match root
        .attribute("elapsed")
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        None => None,
        Some(e) => Some(
            e.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("elapsed={e:?} is not a number of seconds"))
                })?,
        ),
    };
    let nonempty = |a: &str| {
        root.attribute(a)
            .map(str::to_string)
            .filter(|v| !v.is_empty())
    };
    let req = SetRequest {
        object,
        template: workflow,
        step: process,
        status: status.to_string(),
        note: nonempty("note"),
        error_message: nonempty("errorMessage"),
        error_text: nonempty("errorText"),
        lifecycle: nonempty("lifecycle"),
        elapsed,
        current_status: param(&pairs, "current-status").map(str::to_string),
        service_words: Some(handoff),
        version: int_param(&pairs, "version")?,
        actor: format!("api:{}", c.0.as_str()),
    };
    let outcome = match s.store.step_set(&req).await {
        Ok(o) => o,
        // Said in the service's words (a ready step is `queued` here).
        Err(StoreError::StatusMismatch {
            step,
            expected,
            status,
            ..
        }) => {
            let skip_queue = s
                .store
                .template_current(&req.template)
                .await
                .ok()
                .and_then(|t| t.spec.step(&req.step).map(|st| st.skip_queue))
                .unwrap_or(false);
            let _ = step;
            // The service's own sentence, as plain text (update_step_spec.rb:186).
            return Ok(plain(
                StatusCode::CONFLICT,
                format!(
                    "Status in params ({expected}) does not match current status ({})",
                    render::wire_status(&status, skip_queue, handoff)
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Json(NextSteps {
        next_steps: outcome.next_steps,
    })
    .into_response())
}

/// An answer in the service's plain sentences, where its clients read them as text.
fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        axum::Extension(super::input::OwnBody),
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Skip every unfinished step of an object's workflow (the workflow service's skip-all).
#[utoipa::path(post, path = "/objects/{druid}/workflows/{workflow}/skip-all", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path)), responses((status = 204, description = "Every unfinished step skipped, in one transaction")))]
pub(super) async fn skip_all(
    State(s): State<AppState>,
    c: Caller,
    Path((d, workflow)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let object = druid(&d)?;
    // The note of the body's `<process name="skip-all" status="skipped" note="…"/>`, if any.
    let note = std::str::from_utf8(&body)
        .ok()
        .and_then(|t| roxmltree::Document::parse(t).ok())
        .and_then(|doc| doc.root_element().attribute("note").map(str::to_string))
        .filter(|n| !n.is_empty());
    // An object without that workflow — even one no template is named — has nothing to skip:
    // 204, as the service answers (its client relies on it).
    match s
        .store
        .workflow_skip_all(
            &object,
            &workflow,
            note.as_deref(),
            &format!("api:{}", c.0.as_str()),
        )
        .await
    {
        Ok(_) | Err(StoreError::UnknownTemplate(_)) => Ok(StatusCode::NO_CONTENT),
        Err(e) => Err(e.into()),
    }
}

/// Delete one of an object's workflows (the workflow service's route).
#[utoipa::path(delete, path = "/objects/{druid}/workflows/{workflow}", tag = "workflow service", params(("druid" = String, Path), ("workflow" = String, Path), ("version" = Option<i32>, Query, description = "object version")), responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_one(
    State(s): State<AppState>,
    c: Caller,
    Path((d, workflow)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<StatusCode> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Admin)).await?;
    let object = druid(&d)?;
    let pairs = query_pairs(q.as_deref())?;
    let n = s
        .store
        .workflow_delete(
            &object,
            Some(&workflow),
            int_param(&pairs, "version")?,
            &format!("api:{}", c.0.as_str()),
        )
        .await?;
    // Nothing to delete is not an error: 204, as the service answers.
    let _ = n;
    Ok(StatusCode::NO_CONTENT)
}

/// Delete an object's workflows of a template, every version (the workflow service's route).
#[utoipa::path(delete, path = "/objects/{druid}/workflows", tag = "workflow service", params(("druid" = String, Path)), responses((status = 204, description = "Every workflow of the object deleted")))]
pub(super) async fn delete_all(
    State(s): State<AppState>,
    c: Caller,
    Path(d): Path<String>,
) -> ApiResult<StatusCode> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Admin)).await?;
    let object = druid(&d)?;
    let n = s
        .store
        .workflow_delete(&object, None, None, &format!("api:{}", c.0.as_str()))
        .await?;
    let _ = n;
    Ok(StatusCode::NO_CONTENT)
}

/// Milestones, as the service answers: every milestone reached, of every version; or, with
/// `active-only` (any value) and `version=N`, the milestone steps of version N while it is
/// unfinished (none once it is done). An object with no workflows has an empty lifecycle.
#[utoipa::path(get, path = "/objects/{druid}/lifecycle", tag = "workflow service", params(("druid" = String, Path), ("active-only" = Option<String>, Query, description = "only the milestones of `version` while it is unfinished"), ("version" = Option<i32>, Query, description = "object version, with active-only")), responses((status = 200, description = "<lifecycle> milestones", content_type = "application/xml", body = String)))]
pub(super) async fn lifecycle(
    State(s): State<AppState>,
    _c: Caller,
    Path(d): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let object = druid(&d)?;
    let pairs = query_pairs(q.as_deref())?;
    let milestones = if param(&pairs, "active-only").is_some() {
        match int_param::<i32>(&pairs, "version")? {
            Some(v) => s.store.milestones_active(&object, v).await?,
            // The service matches `version IS NULL` here: nothing.
            None => Vec::new(),
        }
    } else {
        s.store.milestones_of_steps(&object).await?
    };
    let mut out = String::new();
    let end = Tag::open(&mut out, "lifecycle")
        .attr("objectId", &object)
        .start();
    for m in milestones {
        Tag::open(&mut out, "milestone")
            .attr("date", render::service_time(&m.at))
            .attr("version", m.version)
            .text(&m.name);
    }
    close(&mut out, end);
    Ok(xml(out))
}

#[cfg(test)]
mod tests {
    #[test]
    fn druids() {
        assert_eq!(
            super::druid("bb123cd4567").ok().as_deref(),
            Some("druid:bb123cd4567")
        );
        assert!(super::druid("druid:bb123cd4567").is_ok());
        assert!(super::druid("druid:ap111ap1111").is_ok());
        assert!(super::druid("druid:xyz").is_err());
        assert!(super::druid("druid:bb123cd456").is_err());
        assert!(super::druid("../etc").is_err());
    }

    #[test]
    fn escapes() {
        let mut out = String::new();
        super::Tag::open(&mut out, "m").text(r#"<a href="x">&'"#);
        assert_eq!(out, "<m>&lt;a href=&quot;x&quot;&gt;&amp;&apos;</m>");
    }
}
