//! The workflow service's template routes: the names loaded, and one template's processes.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::bodies::{Process, Processes};
use crate::api::{ApiResult, AppState, Caller};

/// The names of the loaded templates, as the workflow service lists them.
#[utoipa::path(get, path = "/workflow_templates", tag = "workflow service", responses((status = 200, description = "Template names", body = Vec<String>)))]
pub(crate) async fn template_names(
    State(s): State<AppState>,
    _c: Caller,
) -> ApiResult<Json<Vec<String>>> {
    let names: Vec<String> = s
        .store
        .template_list()
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect();
    Ok(Json(names))
}

/// A template's processes, name and label, as the workflow service gives them
/// (`show_workflow_template_spec.rb`; workdo's own `/api/templates/{name}` has the rest).
#[utoipa::path(get, path = "/workflow_templates/{name}", tag = "workflow service", params(("name" = String, Path)), responses((status = 200, description = "The template's processes with their prerequisites", body = Processes)))]
pub(crate) async fn template_processes(
    State(s): State<AppState>,
    _c: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Processes>> {
    let t = s.store.template_current(&name).await?;
    let processes = t
        .spec
        .steps
        .iter()
        .map(|p| Process {
            name: p.name.clone(),
            label: p.label.clone().unwrap_or_default(),
        })
        .collect();
    Ok(Json(Processes { processes }))
}
