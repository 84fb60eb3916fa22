//! The workflow service's queue routes: the objects waiting at a step (with prerequisites
//! completed), in error, or with a step completed; a step's lanes; every queued step.

use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::render::{Tag, close, xml};
use crate::api::{
    ApiError, ApiResult, AppState, Caller, int_param, param, query_pairs, split_step,
};

/// `?waiting=WF:STEP&completed=WF:STEP…[&lane-id=L][&limit=N]`, or `?error=WF:STEP`.
#[utoipa::path(get, path = "/workflow_queue", tag = "workflow service", params(("waiting" = Option<String>, Query, description = "WF:STEP"), ("completed" = Option<Vec<String>>, Query, description = "WF:STEP, repeatable"), ("error" = Option<String>, Query, description = "WF:STEP instead of waiting"), ("lane-id" = Option<String>, Query, description = "lane"), ("limit" = Option<i64>, Query, description = "default 1000")), responses((status = 200, description = "<objects> waiting at a step with its prerequisites completed, or in error", content_type = "application/xml", body = String)))]
pub(crate) async fn workflow_queue(
    State(s): State<AppState>,
    _c: Caller,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(q.as_deref())?;
    let limit = crate::api::limit_param(&pairs, 1000)?;
    let ids: Vec<String> = if let Some(name) = param(&pairs, "queue") {
        s.store
            .queue_named_waiting(name, limit)
            .await?
            .into_iter()
            .map(|r| r.object_id)
            .collect()
    } else if let Some(e) = param(&pairs, "error") {
        let (t, st) = split_step(e)?;
        // A misspelt queue is a 404 naming it: a robot polling it would idle for ever.
        s.store.step_known(&t, &st).await?;
        s.store
            .queue_errors(&t, &st, limit)
            .await?
            .into_iter()
            .map(|r| r.object_id)
            .collect()
    } else if let (None, Some(done)) = (param(&pairs, "waiting"), param(&pairs, "completed")) {
        // No `waiting`: the objects with a step completed (`?completed=STEP&workflow=WF`, the
        // service's count for stats reporters; `repository=` is accepted and means nothing).
        let (t, st) = match param(&pairs, "workflow") {
            Some(wf) if !done.contains(':') => (wf.to_string(), done.to_string()),
            _ => split_step(done)?,
        };
        s.store.objects_completed_at(&t, &st, limit).await?
    } else {
        let waiting = param(&pairs, "waiting").ok_or_else(|| {
            ApiError::bad_request(
                "give waiting=WF:STEP (or error=WF:STEP, or completed=STEP&workflow=WF)",
            )
        })?;
        let (t, st) = split_step(waiting)?;
        let completed = pairs
            .iter()
            .filter(|(k, _)| k == "completed")
            .map(|(_, v)| split_step(v))
            .collect::<ApiResult<Vec<_>>>()?;
        for (ct, cs) in std::iter::once((&t, &st)).chain(completed.iter().map(|(a, b)| (a, b))) {
            s.store.step_known(ct, cs).await?;
        }
        let properties = crate::api::work::property_params(&pairs)?;
        if s.store.step_paused(&t, &st).await? {
            return Ok(xml(r#"<objects count="0"></objects>"#.into())); // paused: robots wait
        }
        // With the hand-off in use a ready step is `queued` (handed to a robot queue) and the
        // service lists only steps still `waiting`; without it, ready steps read `waiting` and
        // are listed, for robots that poll.
        let ready_too = !ready_reads_queued(&s, &t, &st).await?;
        let lane = param(&pairs, "lane-id");
        s.store
            .queue_waiting_as((&t, &st), &completed, lane, &properties, limit, ready_too)
            .await?
            .into_iter()
            .map(|r| r.object_id)
            .collect()
    };
    let mut out = String::new();
    let end = Tag::open(&mut out, "objects")
        .attr("count", ids.len())
        .start();
    for id in &ids {
        Tag::open(&mut out, "object").attr("id", id).empty();
    }
    close(&mut out, end);
    Ok(xml(out))
}

/// Whether the ready steps of `template:step` read `queued` on the service's routes: the
/// hand-off is in use and the template does not keep the step out of queues.
async fn ready_reads_queued(s: &AppState, template: &str, step: &str) -> ApiResult<bool> {
    if !s.store.handoff_enabled().await? {
        return Ok(false);
    }
    let skip_queue = s
        .store
        .template_current(template)
        .await?
        .spec
        .step(step)
        .is_some_and(|st| st.skip_queue);
    Ok(!skip_queue)
}

/// The lanes of a step's waiting work (the workflow service's `lane_ids`).
#[utoipa::path(get, path = "/workflow_queue/lane_ids", tag = "workflow service", params(("step" = String, Query, description = "WF:STEP")), responses((status = 200, description = "<lanes> with queued work for the step", content_type = "application/xml", body = String)))]
pub(crate) async fn lane_ids(
    State(s): State<AppState>,
    _c: Caller,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(q.as_deref())?;
    let step = param(&pairs, "step").ok_or_else(|| ApiError::bad_request("give step=WF:STEP"))?;
    let (t, st) = split_step(step)?;
    let ready_too = !ready_reads_queued(&s, &t, &st).await?;
    let mut out = String::new();
    let end = Tag::open(&mut out, "lanes").start();
    for lane in s.store.queue_lanes(&t, &st, ready_too).await? {
        Tag::open(&mut out, "lane").attr("id", &lane).empty();
    }
    close(&mut out, end);
    Ok(xml(out))
}

/// Every step in a queue now, oldest first.
#[utoipa::path(get, path = "/workflow_queue/all_queued", tag = "workflow service", params(("limit" = Option<i64>, Query, description = "default 1000"), ("hours-ago" = Option<i64>, Query, description = "only steps queued more than N hours ago")), responses((status = 200, description = "Every step in a queue now (or for longer than hours-ago)", content_type = "application/xml", body = String)))]
pub(crate) async fn all_queued(
    State(s): State<AppState>,
    _c: Caller,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(q.as_deref())?;
    // `hours-ago=N`: only steps queued longer than N hours (the sweeper's question).
    let older_than = match int_param::<i64>(&pairs, "hours-ago")? {
        Some(h) => Some(
            chrono::Utc::now()
                - chrono::Duration::try_hours(h.max(0))
                    .ok_or_else(|| ApiError::bad_request(format!("hours-ago={h} is too large")))?,
        ),
        None => None,
    };
    let handoff = s.store.handoff_enabled().await?;
    let rows = s
        .store
        .queue_all_queued(older_than, crate::api::limit_param(&pairs, 1000)?, handoff)
        .await?;
    // The service's shape (`all_queued_spec.rb`): workflow, process, druid and lane.
    let mut out = String::new();
    let end = Tag::open(&mut out, "workflows").start();
    for r in &rows {
        Tag::open(&mut out, "workflow")
            .attr("name", &r.template)
            .attr("process", &r.name)
            .attr("druid", &r.object_id)
            .attr("laneId", &r.lane)
            .empty();
    }
    close(&mut out, end);
    Ok(xml(out))
}
