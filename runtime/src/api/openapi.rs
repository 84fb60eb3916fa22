//! `/openapi.json`: the OpenAPI 3.1 description of the JSON API and the WorkDo routes,
//! generated from each handler's `#[utoipa::path]` (its route, parameters and success
//! statuses) and from the types the handlers return, so it cannot drift from what is served.
//! The errors every authenticated route can answer (the bearer token's 401 and 403, a bad
//! request's 400, a missing thing's 404, a 500) are added to each operation here, by rule.
//! `tests/api/api.rs` checks that every served route is described and validates real answers
//! against this document.

use axum::Json;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, Response};
use utoipa::{Modify, OpenApi};

use super::{functions, json, machines, work, workdo};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "workdo",
        description = "A Postgres-native workflow runtime for object-centric work. JSON API under /api; the WorkDo workflow-service XML routes at their original paths. Create a token with `workdo tokens create --role admin|robot|viewer`."
    ),
    paths(
        health,
        ready,
        document,
        json::templates_list,
        json::template_load,
        json::template_show,
        json::object_create,
        json::objects_batch,
        json::object_show,
        json::object_update,
        json::object_lifecycle,
        json::object_events,
        work::workflows_start,
        work::workflow_show,
        work::workflow_delete,
        work::workflow_events,
        work::step_update,
        work::queue,
        work::queue_errors,
        work::queue_pause,
        work::queue_resume,
        work::paused,
        work::named_queue,
        work::facets,
        work::priority,
        work::retry,
        functions::deploy,
        functions::list,
        functions::show,
        functions::rollback,
        functions::delete,
        machines::by_id,
        machines::by_object,
        machines::suspend,
        machines::resume,
        workdo::workflows_of_object,
        workdo::workflows_of_object_slash,
        workdo::delete_all,
        workdo::workflow_of_object,
        workdo::create,
        workdo::initiate,
        workdo::delete_one,
        workdo::skip_all,
        workdo::update_process,
        workdo::lifecycle,
        workdo::queues::workflow_queue,
        workdo::queues::lane_ids,
        workdo::queues::all_queued,
        workdo::templates::template_names,
        workdo::templates::template_processes,
    ),
    components(schemas(super::ErrorBody)),
    modifiers(&Rules),
    security(("bearer" = []))
)]
struct Doc;

/// The bearer scheme, and the error answers every authenticated operation can give.
struct Rules;

impl Modify for Rules {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Create one with `workdo tokens create --role admin|robot|viewer`.",
                    ))
                    .build(),
            ),
        );
        let error = |what: &str| -> RefOr<Response> {
            RefOr::T(
                utoipa::openapi::ResponseBuilder::new()
                    .description(what)
                    .content(
                        "application/json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            if path == "/health" || path == "/ready" || path == "/openapi.json" {
                continue;
            }
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                for (code, what) in [
                    (
                        "400",
                        "The request was malformed: the body says what was wrong",
                    ),
                    ("401", "No token, or an unknown, revoked or expired one"),
                    ("403", "The token's role may not do this"),
                    ("404", "No such object, workflow, template or step"),
                    ("413", "The body is over the 1 MiB limit"),
                    ("500", "Internal error (logged)"),
                ] {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| error(what));
                }
            }
        }
    }
}

/// Liveness: `ok` while the process serves.
#[utoipa::path(get, path = "/health", tag = "meta", security(()), responses((status = 200, description = "ok", content_type = "text/plain", body = String)))]
pub(super) async fn health() -> &'static str {
    "ok"
}

/// Readiness: 200 `ready` when the database answers within a second, 503 otherwise (within
/// two), so a load balancer or orchestrator stops sending work to a process that cannot do it.
#[utoipa::path(get, path = "/ready", tag = "meta", security(()), responses((status = 200, description = "ready", content_type = "text/plain", body = String), (status = 503, description = "the database does not answer", content_type = "text/plain", body = String)))]
pub(super) async fn ready(
    axum::extract::State(s): axum::extract::State<super::AppState>,
) -> (axum::http::StatusCode, &'static str) {
    match tokio::time::timeout(std::time::Duration::from_secs(1), s.store.ping()).await {
        Ok(Ok(())) => (axum::http::StatusCode::OK, "ready"),
        _ => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the database does not answer",
        ),
    }
}

/// The document itself.
pub fn spec() -> Value {
    serde_json::to_value(Doc::openapi()).unwrap_or_default()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", security(()), responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub(super) async fn document() -> Json<Value> {
    Json(spec())
}
