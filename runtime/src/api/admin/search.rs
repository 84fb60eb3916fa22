//! `/ui/search?q=…`: the search box every page carries. An object id goes straight to its
//! page; an id prefix (`bb123`, `druid:bb1`) lists the objects it starts; `key=value` lists the
//! objects whose property `key` reads `value`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::{failure, head, object_url, page, unusable, viewer};
use crate::api::AppState;

#[derive(Deserialize)]
pub(super) struct Search {
    q: Option<String>,
}

/// Objects one search lists at most.
const FOUND_MAX: i64 = 200;

/// The search box, as the header of every page shows it.
pub(super) fn form(q: &str) -> Markup {
    html! {
        form.search method="get" action="/ui/search" role="search" {
            input #q type="search" name="q" value=(q) placeholder="object id, id prefix or key=value" aria-label="search";
        }
    }
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
    if q.is_empty() {
        let body = html! {
            p { "Search by object id (it opens the object), an id's beginning (" code { "bb123" } ", " code { "druid:bb1" } "), or a property as " code { "key=value" } " (" code { "barcode=36105010362304" } ")." }
        };
        return page("Search", Some(&v), body).into_response();
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
                return Redirect::to(&object_url(&id)).into_response();
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
    let body = html! {
        p #found {
            @if more { "More than " }
            (found.len().min(FOUND_MAX as usize)) " objects "
            @match &property {
                Some((k, val)) => { "whose " b { (k) } " is " b { (val) } }
                None => { "whose id starts with " b { (q) } }
            }
            "."
        }
        @if !found.is_empty() {
            table #results {
                (head(&["object", "#workflows", "#active", "properties", "changed"]))
                tbody {
                    @for o in found.iter().take(FOUND_MAX as usize) {
                        tr {
                            td { a href=(object_url(&o.id)) { (o.id) } }
                            td.n { (o.workflows) }
                            td.n { (o.active_workflows) }
                            td { code { (o.properties.to_string().chars().take(160).collect::<String>()) } }
                            td { (o.updated_at.format("%Y-%m-%d %H:%M:%S")) }
                        }
                    }
                }
            }
        }
    };
    page(&format!("Search: {q}"), Some(&v), body).into_response()
}
