//! Deployed functions (migrations/0022): artifacts by SHA-256, versions by name, the version
//! current for new workflows, and each workflow's pins.
//!
//! A workflow pins the current version of each deployed function its template names in the
//! transaction that starts it ([`Store::functions_pin_in`]); every step of it then runs that
//! version on every worker, whatever is deployed or rolled back later, until
//! `retry --current-functions` moves it ([`Store::functions_repin_in`]).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Postgres, Transaction};

use crate::artifact;
use crate::store::{Result, Store, StoreError};

/// One deployed version of a function.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FunctionVersion {
    pub name: String,
    pub version: i32,
    pub sha256: String,
    /// Bytes stored: the file, or the folder's tar archive.
    pub size: i64,
    /// A folder (an archive run through its `entry`), not one file.
    pub archive: bool,
    pub entry: Option<String>,
    pub note: Option<String>,
    pub deployed_by: String,
    pub deployed_at: DateTime<Utc>,
    /// The version new workflows pin.
    pub current: bool,
    /// Unfinished workflows pinning this version.
    pub pinned: i64,
}

/// A function with all its versions, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FunctionInfo {
    pub name: String,
    /// The current version.
    pub current: i32,
    pub versions: Vec<FunctionVersion>,
}

/// What a deploy did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Deployment {
    pub name: String,
    pub version: i32,
    pub sha256: String,
    /// A new version; false when these bytes were a version already (now current again, or
    /// current all along).
    pub new: bool,
    /// The version that was current before, if another.
    pub replaced: Option<i32>,
}

/// The bytes to deploy and how to run them.
#[derive(Debug, Clone, Copy)]
pub struct NewArtifact<'a> {
    pub bytes: &'a [u8],
    /// A tar archive of a folder, run through `entry`.
    pub archive: bool,
    pub entry: Option<&'a str>,
    pub note: Option<&'a str>,
    /// The largest artifact taken, in bytes.
    pub max: u64,
}

/// The function version a step runs: what a worker fetches and how it runs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FunctionPin {
    pub name: String,
    pub version: i32,
    pub sha256: String,
    pub archive: bool,
    pub entry: Option<String>,
}

/// A workflow's pin, for `show` and the object's page.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WorkflowPin {
    pub workflow_id: i64,
    pub name: String,
    pub version: i32,
    pub sha256: String,
}

/// The deployed function a step of a workflow runs, for `show` and the object's page.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StepFunction {
    pub step: String,
    pub name: String,
    /// None when the function is not deployed (any more).
    pub version: Option<i32>,
    pub sha256: Option<String>,
}

/// The longest note a deploy keeps.
const NOTE_MAX: usize = 500; // as its message says

/// Versions of one name with their pins; `$1` the name.
const VERSIONS: &str = "select f.name, f.version, f.sha256, a.size, a.archive, f.entry, f.note,
        f.deployed_by, f.deployed_at, coalesce(c.version = f.version, false) as current,
        (select count(*) from workdo.workflow_functions p
           join workdo.workflows w on w.id = p.workflow_id
          where p.name = f.name and p.version = f.version and w.status = 'active') as pinned
   from workdo.functions f
   join workdo.function_artifacts a on a.sha256 = f.sha256
   left join workdo.function_current c on c.name = f.name";

async fn lock_name(tx: &mut Transaction<'_, Postgres>, name: &str) -> Result<()> {
    sqlx::query("select pg_advisory_xact_lock(hashtext('workdo.function:' || $1))")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn event(
    tx: &mut Transaction<'_, Postgres>,
    kind: &str,
    actor: &str,
    detail: serde_json::Value,
) -> Result<()> {
    sqlx::query("insert into workdo.events (kind, actor, detail) values ($1, $2, $3)")
        .bind(kind)
        .bind(actor)
        .bind(detail)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn bad(message: String) -> StoreError {
    StoreError::BadArtifact(message)
}

/// Refuse what cannot be stored or run, naming it.
fn check_new(name: &str, art: &NewArtifact<'_>) -> Result<()> {
    if art.entry.is_some_and(|e| e.contains('\0')) {
        return Err(bad("the entry holds a NUL character".into()));
    }
    crate::model::spec::check_function_name(name).map_err(bad)?;
    let size = art.bytes.len() as u64;
    if size > art.max {
        return Err(bad(format!(
            "function {name} is {size} bytes, over the limit of {} bytes",
            art.max
        )));
    }
    if size == 0 {
        return Err(bad(format!("function {name} is empty: nothing to run")));
    }
    if let Some(note) = art.note
        && (note.chars().count() > NOTE_MAX || note.contains('\0'))
    {
        return Err(bad(
            "a deploy's note is at most 500 characters, with no NUL".into(),
        ));
    }
    match (art.archive, art.entry) {
        (true, Some(entry)) => {
            artifact::check_archive(art.bytes, entry).map_err(|e| bad(e.to_string()))
        }
        (true, None) => Err(bad(format!(
            "function {name} is a folder: say which file in it runs (--entry, ?entry=)"
        ))),
        (false, Some(_)) => Err(bad(
            "an entry is for a folder (a tar archive); one file runs as it is".into(),
        )),
        (false, None) => Ok(()),
    }
}

impl Store {
    /// Deploy `art` as `name`: a new version, current for workflows started from now on. Bytes
    /// (and entry) equal to a version already deployed make no new version: that one is made
    /// current again.
    ///
    /// # Errors
    /// [`StoreError::BadArtifact`] for a name, size, note or archive refused.
    pub async fn function_deploy(
        &self,
        name: &str,
        art: &NewArtifact<'_>,
        actor: &str,
    ) -> Result<Deployment> {
        check_new(name, art)?;
        let sha = artifact::sha256_hex(art.bytes);
        // `./main.py` and `main.py` are one entry.
        let entry: Option<String> = art
            .entry
            .map(|e| artifact::normal_path(e).display().to_string());
        let mut tx = self.pool.begin().await?;
        lock_name(&mut tx, name).await?;
        // The artifact's own lock: a delete of another name sharing these bytes removes them
        // only under it, so this insert and that delete never cross.
        lock_name(&mut tx, &format!("artifact:{sha}")).await?;
        let stored: Option<bool> =
            sqlx::query_scalar("select archive from workdo.function_artifacts where sha256 = $1")
                .bind(&sha)
                .fetch_optional(&mut *tx)
                .await?;
        if stored.is_some_and(|a| a != art.archive) {
            return Err(bad(format!(
                "these bytes are deployed already as {}: deploy them the same way",
                if art.archive {
                    "one file"
                } else {
                    "a folder's archive"
                }
            )));
        }
        sqlx::query(
            "insert into workdo.function_artifacts (sha256, archive, size, bytes)
             values ($1, $2, $3, $4) on conflict (sha256) do nothing",
        )
        .bind(&sha)
        .bind(art.archive)
        .bind(art.bytes.len() as i64)
        .bind(art.bytes)
        .execute(&mut *tx)
        .await?;
        let current: Option<i32> =
            sqlx::query_scalar("select version from workdo.function_current where name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        let same: Option<i32> = sqlx::query_scalar(
            "select version from workdo.functions
              where name = $1 and sha256 = $2 and entry is not distinct from $3
              order by version desc limit 1",
        )
        .bind(name)
        .bind(&sha)
        .bind(entry.as_deref())
        .fetch_optional(&mut *tx)
        .await?;
        let (version, new) = match same {
            Some(v) => (v, false),
            None => {
                let v: i32 = sqlx::query_scalar(
                    "insert into workdo.functions (name, version, sha256, entry, note, deployed_by)
                     select $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5
                       from workdo.functions where name = $1
                     returning version",
                )
                .bind(name)
                .bind(&sha)
                .bind(entry.as_deref())
                .bind(art.note)
                .bind(actor)
                .fetch_one(&mut *tx)
                .await?;
                (v, true)
            }
        };
        if current != Some(version) {
            sqlx::query(
                "insert into workdo.function_current (name, version) values ($1, $2)
                 on conflict (name) do update set version = excluded.version",
            )
            .bind(name)
            .bind(version)
            .execute(&mut *tx)
            .await?;
            event(
                &mut tx,
                "function_deployed",
                actor,
                serde_json::json!({"function": name, "version": version, "sha256": sha,
                                   "size": art.bytes.len(), "new": new, "replaced": current,
                                   "note": art.note}),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(Deployment {
            name: name.to_string(),
            version,
            sha256: sha,
            new,
            replaced: current.filter(|c| *c != version),
        })
    }

    /// Every deployed function with its versions, by name.
    pub async fn function_list(&self) -> Result<Vec<FunctionInfo>> {
        let rows: Vec<FunctionVersion> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{VERSIONS} order by f.name, f.version desc"
        )))
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<FunctionInfo> = Vec::new();
        for r in rows {
            match out.last_mut() {
                Some(f) if f.name == r.name => {
                    if r.current {
                        f.current = r.version;
                    }
                    f.versions.push(r);
                }
                _ => out.push(FunctionInfo {
                    name: r.name.clone(),
                    current: if r.current { r.version } else { 0 },
                    versions: vec![r],
                }),
            }
        }
        Ok(out)
    }

    /// One function with its versions, newest first.
    ///
    /// # Errors
    /// [`StoreError::UnknownFunction`] when nothing was deployed under `name`.
    pub async fn function_show(&self, name: &str) -> Result<FunctionInfo> {
        let versions: Vec<FunctionVersion> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{VERSIONS} where f.name = $1 order by f.version desc"
        )))
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        if versions.is_empty() {
            return Err(StoreError::UnknownFunction(name.to_string()));
        }
        let current = versions.iter().find(|v| v.current).map_or(0, |v| v.version);
        Ok(FunctionInfo {
            name: name.to_string(),
            current,
            versions,
        })
    }

    /// Make version `to` of `name` current again, for workflows started from now on. Returns
    /// the version current before.
    ///
    /// # Errors
    /// [`StoreError::UnknownFunction`] for a name or version never deployed.
    pub async fn function_rollback(&self, name: &str, to: i32, actor: &str) -> Result<i32> {
        let mut tx = self.pool.begin().await?;
        lock_name(&mut tx, name).await?;
        let exists: bool = sqlx::query_scalar(
            "select exists (select 1 from workdo.functions where name = $1 and version = $2)",
        )
        .bind(name)
        .bind(to)
        .fetch_one(&mut *tx)
        .await?;
        if !exists {
            return Err(StoreError::UnknownFunction(format!("{name} version {to}")));
        }
        let from: i32 = sqlx::query_scalar(
            "update workdo.function_current c set version = $2
               from (select version from workdo.function_current where name = $1) old
              where c.name = $1 returning old.version",
        )
        .bind(name)
        .bind(to)
        .fetch_one(&mut *tx)
        .await?;
        if from != to {
            event(
                &mut tx,
                "function_rolled_back",
                actor,
                serde_json::json!({"function": name, "from": from, "to": to}),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(from)
    }

    /// Delete every version of `name`, unless an unfinished workflow pins one or a current
    /// template names it. Returns how many versions went.
    ///
    /// # Errors
    /// [`StoreError::UnknownFunction`]; [`StoreError::FunctionInUse`] naming the workflows
    /// that pin it; [`StoreError::BadArtifact`] naming the templates that use it.
    pub async fn function_delete(&self, name: &str, actor: &str) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        lock_name(&mut tx, name).await?;
        let pinned: Vec<(i64, i64)> = sqlx::query_as(
            "select p.workflow_id, count(*) over () from workdo.workflow_functions p
               join workdo.workflows w on w.id = p.workflow_id
              where p.name = $1 and w.status = 'active'
              order by p.workflow_id limit 10",
        )
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        if let Some((_, total)) = pinned.first() {
            return Err(StoreError::FunctionInUse {
                name: name.to_string(),
                total: *total,
                workflows: pinned.iter().map(|p| p.0).collect(),
            });
        }
        // A current template, or any version that still has unfinished workflows (a step fixed
        // to `name@N` has no pin, and would fail for ever).
        let templates: Vec<String> = sqlx::query_scalar(
            "select distinct name from workdo.templates t
              where (is_current or exists (select 1 from workdo.workflows w
                                            where w.template_id = t.id and w.status = 'active'))
                and jsonb_path_exists(spec, '$.** ? (@.kind == \"deployed\" && @.name == $n)',
                                      jsonb_build_object('n', $1::text))
              order by name",
        )
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        if !templates.is_empty() {
            return Err(StoreError::FunctionConflict(format!(
                "function {name} is named by {} (its current version, or one with unfinished \
                 workflows): load a version that does not name it, and let those finish, first",
                templates.join(", ")
            )));
        }
        sqlx::query("delete from workdo.workflow_functions where name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from workdo.function_current where name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let gone: Vec<(i32, String)> = sqlx::query_as(
            "delete from workdo.functions where name = $1 returning version, sha256",
        )
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        if gone.is_empty() {
            return Err(StoreError::UnknownFunction(name.to_string()));
        }
        let hashes: Vec<&str> = gone.iter().map(|g| g.1.as_str()).collect();
        for h in &hashes {
            lock_name(&mut tx, &format!("artifact:{h}")).await?;
        }
        sqlx::query(
            "delete from workdo.function_artifacts a where a.sha256 = any($1)
                and not exists (select 1 from workdo.functions f where f.sha256 = a.sha256)",
        )
        .bind(&hashes)
        .execute(&mut *tx)
        .await?;
        let versions: Vec<i32> = gone.iter().map(|g| g.0).collect();
        event(
            &mut tx,
            "function_deleted",
            actor,
            serde_json::json!({"function": name, "versions": versions}),
        )
        .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    /// The stored bytes of `sha256`, and whether they are an archive.
    pub async fn function_artifact(&self, sha256: &str) -> Result<Option<(bool, Vec<u8>)>> {
        Ok(
            sqlx::query_as(
                "select archive, bytes from workdo.function_artifacts where sha256 = $1",
            )
            .bind(sha256)
            .fetch_optional(&self.pool)
            .await?,
        )
    }

    /// Version `version` of `name` (a step's fixed `deployed: name@N`).
    ///
    /// # Errors
    /// [`StoreError::UnknownFunction`] when it was never deployed (or was deleted).
    pub async fn function_fixed(&self, name: &str, version: i32) -> Result<FunctionPin> {
        sqlx::query_as(
            "select f.name, f.version, f.sha256, a.archive, f.entry from workdo.functions f
               join workdo.function_artifacts a on a.sha256 = f.sha256
              where f.name = $1 and f.version = $2",
        )
        .bind(name)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::UnknownFunction(format!("{name} version {version}")))
    }
}
