//! `workdo tokens create|list|revoke`.

use std::io::Write;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};

use super::args::TokensCmd;
use crate::output::{emit, table};
use crate::store::{Role, Store};

pub(super) async fn run(
    store: &Store,
    cmd: TokensCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        TokensCmd::Create {
            role,
            workflow,
            signals,
            expires,
            name,
        } => {
            // A token no one could use is a mistake to say, not a token to print.
            if expires.is_some_and(|d| d.is_zero()) {
                anyhow::bail!(
                    "--expires 0s makes a token that has already expired; give a longer time"
                );
            }
            if workflow.is_some() && role.is_some() {
                anyhow::bail!(
                    "--role and --workflow: a token scoped to a job sends its --signals and nothing else, whatever its role; give one or the other"
                );
            }
            if workflow.is_some() && signals.iter().all(|s| s.trim().is_empty()) {
                anyhow::bail!("--signals names no signal: a scoped token could send none");
            }
            let expires_at = match expires {
                Some(d) => Some(
                    chrono::Duration::from_std(d)
                        .ok()
                        .and_then(|d| Utc::now().checked_add_signed(d))
                        .context("--expires is too long")?,
                ),
                None => None,
            };
            if let Some(w) = workflow {
                if store.machine_view(w).await?.is_none() {
                    anyhow::bail!("--workflow {w}: no such state-machine job");
                }
                let (id, token) = store
                    .token_create_scoped(w, &signals, &name, expires_at)
                    .await?;
                emit(
                    out,
                    json,
                    &serde_json::json!({"id": id, "workflow": w, "signals": signals,
                                        "token": token, "expires_at": expires_at}),
                    |o| writeln!(o, "{token}"),
                )?;
                return Ok(());
            }
            let role = role.unwrap_or_default();
            let role = Role::parse(&role)
                .with_context(|| format!("--role {role:?}: use admin, robot or viewer"))?;
            let (id, token) = store.token_create(role, &name, expires_at).await?;
            emit(
                out,
                json,
                &serde_json::json!({"id": id, "role": role, "token": token, "expires_at": expires_at}),
                |o| writeln!(o, "{token}"),
            )?;
        }
        TokensCmd::List => {
            let rows = store.token_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &["id", "name", "role", "created", "expires", "revoked"],
                    rows.iter().map(|r| {
                        let t = |d: Option<DateTime<Utc>>| {
                            d.map(|d| d.format("%Y-%m-%d %H:%M").to_string())
                                .unwrap_or_else(|| "-".into())
                        };
                        vec![
                            r.id.to_string(),
                            r.name.clone(),
                            r.role.clone(),
                            t(Some(r.created_at)),
                            t(r.expires_at),
                            t(r.revoked_at),
                        ]
                    }),
                )
            })?;
        }
        TokensCmd::Revoke { id } => {
            store.token_revoke(id).await?;
            emit(out, json, &serde_json::json!({"revoked": id}), |o| {
                writeln!(o, "token {id} revoked")
            })?;
        }
    }
    Ok(())
}
