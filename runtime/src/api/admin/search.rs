//! `/ui/search?q=…`: the search box every page carries. An object id goes straight to its
//! page; an id prefix (`bb123`, `druid:bb1`) lists the objects it starts; `key=value` lists the
//! objects whose property `key` reads `value`.

use std::fmt::Write as _;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{enc, esc, failure, page, unusable, viewer};
use crate::api::AppState;

#[derive(Deserialize)]
pub(super) struct Search {
    q: Option<String>,
}

/// Objects one search lists at most.
const FOUND_MAX: i64 = 200;

/// The search box, as the header of every page shows it.
pub(super) fn form(q: &str) -> String {
    format!(
        "<form method=get action=/ui/search role=search class=search><input type=search name=q id=q value=\"{}\" placeholder=\"object id, id prefix or key=value\" aria-label=search></form>",
        esc(q)
    )
}

pub(super) async fn search(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<Search>, QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let q = match q {
        Ok(Query(q)) => q.q.unwrap_or_default().trim().to_string(),
        Err(e) => return unusable(&e),
    };
    let mut body = String::new();
    if q.is_empty() {
        body.push_str("<p>Search by object id (it opens the object), an id's beginning (<code>bb123</code>, <code>druid:bb1</code>), or a property as <code>key=value</code> (<code>barcode=36105010362304</code>).</p>");
        return page("Search", Some(&v), &body).into_response();
    }
    let (prefixes, property) = match q.split_once('=') {
        Some((k, val)) if !k.trim().is_empty() => (
            Vec::new(),
            Some((k.trim().to_string(), val.trim().to_string())),
        ),
        _ => {
            // An exact id opens its page.
            if let Ok(id) = crate::model::object_id::normalize(&q)
                && let Ok(true) = s.store.object_exists(&id).await
            {
                return Redirect::to(&format!("/ui/objects/{}", enc(&id))).into_response();
            }
            let mut prefixes = vec![q.clone()];
            if !q.contains(':') {
                prefixes.push(format!("druid:{q}"));
            }
            (prefixes, None)
        }
    };
    let found = match s
        .store
        .objects_find(
            &prefixes,
            property.as_ref().map(|(k, v)| (k.as_str(), v.as_str())),
            FOUND_MAX + 1,
        )
        .await
    {
        Ok(f) => f,
        Err(e) => return failure(&e.to_string()),
    };
    let more = found.len() as i64 > FOUND_MAX;
    let what = match &property {
        Some((k, val)) => format!("whose <b>{}</b> is <b>{}</b>", esc(k), esc(val)),
        None => format!("whose id starts with <b>{}</b>", esc(&q)),
    };
    let _ = write!(
        body,
        "<p id=found>{}{} objects {what}.</p>",
        if more { "More than " } else { "" },
        found.len().min(FOUND_MAX as usize)
    );
    if found.is_empty() {
        return page(&format!("Search: {q}"), Some(&v), &body).into_response();
    }
    body.push_str("<table id=results><thead><tr><th scope=col>object</th><th scope=col class=n>workflows</th><th scope=col class=n>active</th><th scope=col>properties</th><th scope=col>changed</th></tr></thead><tbody>");
    for o in found.iter().take(FOUND_MAX as usize) {
        let props = o.properties.to_string();
        let props: String = props.chars().take(160).collect();
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/objects/{}\">{}</a></td><td class=n>{}</td><td class=n>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&enc(&o.id)),
            esc(&o.id),
            o.workflows,
            o.active_workflows,
            esc(&props),
            o.updated_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    body.push_str("</tbody></table>");
    page(&format!("Search: {q}"), Some(&v), &body).into_response()
}
