//! `/openapi.json`: the OpenAPI 3.1 description of the JSON API and the WorkDo routes.
//! A test checks that every route the routers serve is described here.

use axum::Json;
use serde_json::{Value, json};

fn op(summary: &str, role: &str, extra: Value) -> Value {
    let mut o = json!({
        "summary": summary,
        "description": format!("Role: {role}."),
        "responses": {
            "200": {"description": "OK"},
            "400": {"$ref": "#/components/responses/Error"},
            "401": {"$ref": "#/components/responses/Error"},
            "403": {"$ref": "#/components/responses/Error"},
            "404": {"$ref": "#/components/responses/Error"}
        }
    });
    if let (Some(o), Some(e)) = (o.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    o
}

fn path_params(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"name": n, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect(),
    )
}

fn query(names: &[(&str, &str)]) -> Vec<Value> {
    names
        .iter()
        .map(|(n, d)| json!({"name": n, "in": "query", "required": false, "description": d, "schema": {"type": "string"}}))
        .collect()
}

fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

pub fn spec() -> Value {
    let obj = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let o = json!({"type": "object"});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "workdo",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A Postgres-native workflow runtime for object-centric work. JSON API under /api; the WorkDo workflow-service XML routes at their original paths."
        },
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "Create one with `workdo tokens create --role admin|robot|viewer`."}},
            "responses": {"Error": {"description": "What was wrong", "content": {"application/json": {"schema": obj(json!({"error": s}), &["error"])}}}}
        },
        "paths": {
            "/health": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI"}}}},
            "/api/templates": {
                "get": op("Current version of every template", "viewer", json!({})),
                "post": op("Load a template version; the body is its YAML or XML source", "admin", json!({
                    "parameters": query(&[("format", "yaml or xml (else from Content-Type)"), ("origin", "where it came from, for messages")]),
                    "requestBody": {"required": true, "content": {"application/yaml": {"schema": s}, "application/xml": {"schema": s}}}
                }))
            },
            "/api/templates/{name}": {"parameters": path_params(&["name"]), "get": op("A template's current version and steps", "viewer", json!({}))},
            "/api/objects": {"post": op("Register an object (or merge properties and replace documents)", "robot", json!({
                "requestBody": json_body(obj(json!({"id": s, "properties": o, "documents": o}), &["id"]))
            }))},
            "/api/objects/{id}": {
                "parameters": path_params(&["id"]),
                "get": op("An object: properties, documents, workflows with steps, milestones, recent events", "viewer", json!({})),
                "patch": op("Merge properties, replace documents", "robot", json!({"requestBody": json_body(obj(json!({"properties": o, "documents": o}), &[]))}))
            },
            "/api/objects/{id}/lifecycle": {"parameters": path_params(&["id"]), "get": op("Lifecycle milestones", "viewer", json!({}))},
            "/api/objects/{id}/events": {"parameters": path_params(&["id"]), "get": op("Events, oldest first, paged by event id", "viewer", json!({
                "parameters": query(&[("after", "event id to continue after (next_after of the last page)"), ("limit", "at most 1000")])
            }))},
            "/api/workflows": {"post": op("Start a template on one or many objects", "robot", json!({
                "requestBody": json_body(obj(json!({"template": s, "objects": {"type": "array", "items": s}, "version": i, "priority": i, "lane": s, "start_at": {"type": "string", "format": "date-time"}, "context": o}), &["template", "objects"]))
            }))},
            "/api/workflows/{id}": {
                "parameters": path_params(&["id"]),
                "get": op("A workflow and its steps", "viewer", json!({})),
                "delete": op("Delete a workflow and its steps", "admin", json!({}))
            },
            "/api/workflows/{id}/events": {"parameters": path_params(&["id"]), "get": op("A workflow's events, paged", "viewer", json!({
                "parameters": query(&[("after", "event id"), ("limit", "at most 1000")])
            }))},
            "/api/steps/{object}/{template}/{step}": {"parameters": path_params(&["object", "template", "step"]), "put": op("Set a step's status; current_status is a precondition (409 on mismatch, nothing changes)", "robot", json!({
                "requestBody": json_body(obj(json!({"status": s, "note": s, "message": s, "text": s, "lifecycle": s, "elapsed": {"type": "number"}, "current_status": s, "version": i}), &["status"])),
                "responses": {"200": {"description": "The step and next_steps, the steps that became ready"}, "409": {"$ref": "#/components/responses/Error"}}
            }))},
            "/api/queues/{template}/{step}": {"parameters": path_params(&["template", "step"]), "get": op("Objects waiting at the step whose `completed` steps are done", "viewer", json!({
                "parameters": query(&[("completed", "TEMPLATE:STEP, repeatable"), ("lane", "one lane"), ("limit", "default 100")])
            }))},
            "/api/queues/{template}/{step}/errors": {"parameters": path_params(&["template", "step"]), "get": op("Steps in error", "viewer", json!({"parameters": query(&[("limit", "default 100")])}))},
            "/api/facets": {"get": op("Template × step × status counts", "viewer", json!({"parameters": query(&[("template", "one template")])}))},
            "/api/priority": {"post": op("Set the priority of unfinished steps by object, workflow, template and/or step", "admin", json!({
                "requestBody": json_body(obj(json!({"priority": i, "object": s, "workflow": i, "template": s, "step": s}), &["priority"]))
            }))},
            "/api/retry": {"post": op("Put steps in error back in the queue, attempts reset (by object, template and/or step)", "robot", json!({
                "requestBody": json_body(obj(json!({"object": s, "template": s, "step": s}), &[]))
            }))},
            "/api/workflows/{id}/signals": {"parameters": path_params(&["id"]), "post": op("Send a signal to a state-machine job: its transition, then the signals it sent itself. Allowed by the machine's access for the token's role, or by a token scoped to the job and the signal; 403 when not allowed, 409 when not accepted in the job's state or rolled back by a failing action (nothing changes)", "robot", json!({
                "requestBody": json_body(obj(json!({"signal": s, "data": {"type": "object"}}), &["signal"])),
                "responses": {"200": {"description": "{workflow_id, signal, from, to, finished, followed}"}, "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}
            }))},
            "/api/objects/{object}/workflows/{template}/signals": {"parameters": path_params(&["object", "template"]), "post": op("Send a signal to the object's active job of a machine template (as /api/workflows/{id}/signals)", "robot", json!({
                "requestBody": json_body(obj(json!({"signal": s, "data": {"type": "object"}}), &["signal"])),
                "responses": {"200": {"description": "{workflow_id, signal, from, to, finished, followed}"}, "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}
            }))},
            "/objects/{druid}/workflows": {
                "parameters": path_params(&["druid"]),
                "get": op("WorkDo: <workflows> XML of the object", "viewer", json!({})),
                "delete": op("WorkDo: delete all the object's workflows", "admin", json!({}))
            },
            "/objects/{druid}/workflows/{workflow}": {
                "parameters": path_params(&["druid", "workflow"]),
                "get": op("WorkDo: <workflow> XML", "viewer", json!({})),
                "post": op("WorkDo: create the workflow's steps (re-POST replaces them); optional JSON body {\"context\": {…}}", "robot", json!({
                    "parameters": query(&[("version", "object version"), ("lane-id", "lane")]),
                    "responses": {"201": {"description": "Created"}, "400": {"$ref": "#/components/responses/Error"}}
                })),
                "delete": op("WorkDo: delete the workflow", "admin", json!({"parameters": query(&[("version", "object version")])}))
            },
            "/objects/{druid}/workflows/{workflow}/skip-all": {"parameters": path_params(&["druid", "workflow"]), "post": op("WorkDo: skip every unfinished step in one transaction", "robot", json!({}))},
            "/objects/{druid}/workflows/{workflow}/{process}": {"parameters": path_params(&["druid", "workflow", "process"]), "put": op("WorkDo: update a step; body <process name= status= elapsed= lifecycle= note= errorMessage= errorText=/>", "robot", json!({
                "parameters": query(&[("current-status", "precondition; 409 on mismatch"), ("version", "object version")]),
                "requestBody": {"required": true, "content": {"application/xml": {"schema": s}}},
                "responses": {"200": {"description": "{\"next_steps\": [...]}"}, "409": {"$ref": "#/components/responses/Error"}}
            }))},
            "/objects/{druid}/lifecycle": {"parameters": path_params(&["druid"]), "get": op("WorkDo: <lifecycle> XML", "viewer", json!({}))},
            "/workflow_queue": {"get": op("WorkDo: <objects> waiting at a step with prerequisites completed, or in error", "viewer", json!({
                "parameters": query(&[("waiting", "WF:STEP"), ("completed", "WF:STEP, repeatable"), ("error", "WF:STEP instead of waiting"), ("lane-id", "lane"), ("limit", "default 1000")])
            }))},
            "/workflow_queue/lane_ids": {"get": op("WorkDo: <lanes> with queued work for a step", "viewer", json!({"parameters": query(&[("step", "WF:STEP")])}))},
            "/workflow_queue/all_queued": {"get": op("WorkDo: every step in a queue now", "viewer", json!({"parameters": query(&[("limit", "default 1000")])}))},
            "/workflow_templates": {"get": op("WorkDo: template names (JSON)", "viewer", json!({}))},
            "/workflow_templates/{name}": {"parameters": path_params(&["name"]), "get": op("WorkDo: a template's processes with prerequisites (JSON)", "viewer", json!({}))}
        }
    })
}

pub async fn document() -> Json<Value> {
    Json(spec())
}
