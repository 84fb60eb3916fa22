//! Template versions: every loaded source kept, keyed by its SHA-256, the current one per name,
//! and the parsed description cached by id and hash.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::template::{Loaded, Template};
use crate::store::{Result, Store, StoreError};

/// A stored template version.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TemplateRow {
    pub id: i64,
    pub name: String,
    /// `steps` (a workflow template) or `bricklet`.
    pub kind: String,
    pub sha256: String,
    pub format: String,
    pub origin: Option<String>,
    pub loaded_at: DateTime<Utc>,
    pub is_current: bool,
    pub versions: i64,
    /// The parsed template: steps, or a machine's states, as the source declares them.
    #[schema(value_type = Object)]
    pub spec: Template,
}

#[derive(sqlx::FromRow)]
struct RawRow {
    id: i64,
    name: String,
    kind: String,
    sha256: String,
    format: String,
    origin: Option<String>,
    loaded_at: DateTime<Utc>,
    is_current: bool,
    versions: i64,
    spec: serde_json::Value,
}

impl TryFrom<RawRow> for TemplateRow {
    type Error = StoreError;
    fn try_from(r: RawRow) -> Result<Self> {
        let spec = serde_json::from_value(r.spec)
            .map_err(|e| StoreError::CorruptTemplate(format!("{} {}", r.name, r.sha256), e))?;
        Ok(TemplateRow {
            id: r.id,
            name: r.name,
            kind: r.kind,
            sha256: r.sha256,
            format: r.format,
            origin: r.origin,
            loaded_at: r.loaded_at,
            is_current: r.is_current,
            versions: r.versions,
            spec,
        })
    }
}

/// Template versions parsed once, by id and SHA-256. A saved version's description never
/// changes (a new description is a new row; only `is_current` moves), and the callers name the
/// SHA-256 they read with the version's id, so an id that comes to name another description
/// (a schema recreated under a running process, a database restored) is a miss, not a stale
/// hit. Machine signals and dispatching commits read their job's version on every call: a
/// query and a parse each time before this (issue 32).
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecCache(Arc<std::sync::RwLock<HashMap<i64, Versioned>>>);

/// A parsed description with the SHA-256 it was saved under.
type Versioned = (String, Arc<Template>);

impl SpecCache {
    /// Entries kept before the cache starts afresh (versions in use are few; this bounds a
    /// process that meets many).
    const MOST: usize = 4096;

    fn get(&self, id: i64, sha256: &str) -> Option<Arc<Template>> {
        let map = self.0.read().ok()?;
        let (sha, spec) = map.get(&id)?;
        (sha == sha256).then(|| Arc::clone(spec))
    }

    fn put(&self, id: i64, sha256: String, spec: Arc<Template>) {
        if let Ok(mut map) = self.0.write() {
            if map.len() >= Self::MOST {
                map.clear();
            }
            map.insert(id, (sha256, spec));
        }
    }
}

const SELECT: &str =
    "select t.id, t.name, t.kind, t.sha256, t.format, t.origin, t.loaded_at, t.is_current,
        (select count(*) from workdo.templates v where v.name = t.name) as versions, t.spec
   from workdo.templates t";

/// What saving a template did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// A version never loaded before, now current.
    New,
    /// The current version already: nothing changed.
    Unchanged,
    /// An earlier version, first loaded at `loaded_at`, is current again.
    MadeCurrent { loaded_at: DateTime<Utc> },
}

impl Saved {
    /// `new`, `unchanged` or `made current`.
    pub fn as_str(self) -> &'static str {
        match self {
            Saved::New => "new",
            Saved::Unchanged => "unchanged",
            Saved::MadeCurrent { .. } => "made current",
        }
    }
}

/// Version `id` becomes the current one of `name` (the one current before stops being it;
/// the caller holds the name's advisory lock).
pub(crate) async fn make_current(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    name: &str,
    id: i64,
) -> Result<()> {
    sqlx::query("update workdo.templates set is_current = false where name = $1 and is_current")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    sqlx::query("update workdo.templates set is_current = true where id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    notify_templates(tx, name).await
}

/// Channel on which a template's new current version is announced (payload: its name), so that
/// running runtimes start and stop workers to match within a moment.
pub const TEMPLATES_CHANNEL: &str = "workdo_templates";

async fn notify_templates(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    name: &str,
) -> Result<()> {
    sqlx::query("select pg_notify($1, $2)")
        .bind(TEMPLATES_CHANNEL)
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Serialise loads and switches of one name so exactly one version stays current.
pub(crate) async fn lock_name(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    name: &str,
) -> Result<()> {
    sqlx::query("select pg_advisory_xact_lock(hashtext('workdo.template:' || $1))")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Store {
    /// Store a loaded template and make it the current version of its name. Loading the same
    /// source again changes nothing but makes that version current again.
    ///
    /// Returns the version's id and what happened to it.
    pub async fn template_save(&self, loaded: &Loaded) -> Result<(i64, Saved)> {
        let mut tx = self.pool.begin().await?;
        let saved = save_in(&mut tx, loaded).await?;
        schedules_in(&mut tx, loaded).await?;
        tx.commit().await?;
        Ok(saved)
    }

    /// Every one of `all` in one transaction, their inline schedules with them: all are saved
    /// or none (a load of a folder where one file's name is already a machine, or names a
    /// bricklet not loaded, saved the files before it). The error names the file (its origin).
    ///
    /// # Errors
    /// The first file the database refuses, with why; nothing is saved then.
    pub async fn templates_save_all(
        &self,
        all: &[Loaded],
    ) -> std::result::Result<Vec<(i64, Saved)>, (String, StoreError)> {
        let whole = |e: sqlx::Error| (String::from("(the load)"), StoreError::from(e));
        let mut tx = self.pool.begin().await.map_err(whole)?;
        let mut out = Vec::with_capacity(all.len());
        for loaded in all {
            let saved = save_in(&mut tx, loaded).await;
            out.push(saved.map_err(|e| (loaded.origin.clone(), e))?);
        }
        // After every template: a schedule may start one a later file loads.
        for loaded in all {
            let put = schedules_in(&mut tx, loaded).await;
            put.map_err(|e| (loaded.origin.clone(), e))?;
        }
        tx.commit().await.map_err(whole)?;
        Ok(out)
    }

    /// The current version of a template.
    pub async fn template_current(&self, name: &str) -> Result<TemplateRow> {
        Self::template_current_in(&self.pool, name).await
    }

    /// [`Store::template_current`] read through `db`: a caller holding a transaction passes its
    /// connection, so that it never waits for a second one from the pool.
    pub(crate) async fn template_current_in<'e>(
        db: impl sqlx::PgExecutor<'e>,
        name: &str,
    ) -> Result<TemplateRow> {
        let sql = format!("{SELECT} where t.name = $1 and t.is_current and t.kind <> 'bricklet'");
        let row: Option<RawRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(db)
            .await?;
        row.ok_or_else(|| StoreError::UnknownTemplate(name.to_string()))?
            .try_into()
    }

    /// A template version by id (the one a workflow is locked to).
    pub async fn template_by_id(&self, id: i64) -> Result<TemplateRow> {
        let sql = format!("{SELECT} where t.id = $1");
        let row: Option<RawRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.ok_or_else(|| StoreError::UnknownTemplate(format!("#{id}")))?
            .try_into()
    }

    /// The description of template version `id` whose SHA-256 the caller read as `sha256`,
    /// parsed; from the cache after the first time, else read through `db` (a caller holding a
    /// transaction passes its connection, so that it never waits for a second from the pool).
    ///
    /// # Errors
    /// [`StoreError::UnknownTemplate`] when there is no such version.
    pub(crate) async fn spec_by_id<'e>(
        &self,
        db: impl sqlx::PgExecutor<'e>,
        id: i64,
        sha256: &str,
    ) -> Result<Arc<Template>> {
        if let Some(spec) = self.specs.get(id, sha256) {
            return Ok(spec);
        }
        let row: Option<(String, String, serde_json::Value)> =
            sqlx::query_as("select name, sha256, spec from workdo.templates where id = $1")
                .bind(id)
                .fetch_optional(db)
                .await?;
        let (name, sha256, spec) =
            row.ok_or_else(|| StoreError::UnknownTemplate(format!("#{id}")))?;
        let spec: Template = serde_json::from_value(spec)
            .map_err(|e| StoreError::CorruptTemplate(format!("{name} {sha256}"), e))?;
        let spec = Arc::new(spec);
        self.specs.put(id, sha256, Arc::clone(&spec));
        Ok(spec)
    }

    /// The current version of a bricklet file (`kind: bricklet`).
    pub async fn bricklet_current(&self, name: &str) -> Result<Option<TemplateRow>> {
        let sql = format!("{SELECT} where t.name = $1 and t.is_current and t.kind = 'bricklet'");
        let row: Option<RawRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(TryInto::try_into).transpose()
    }

    /// Current versions of all bricklet files, by name.
    pub async fn bricklet_list(&self) -> Result<Vec<TemplateRow>> {
        let sql = format!("{SELECT} where t.is_current and t.kind = 'bricklet' order by t.name");
        let rows: Vec<RawRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Current versions of all templates, by name.
    pub async fn template_list(&self) -> Result<Vec<TemplateRow>> {
        let sql = format!("{SELECT} where t.is_current and t.kind <> 'bricklet' order by t.name");
        let rows: Vec<RawRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}

/// A loaded file's inline schedules, in the caller's transaction.
async fn schedules_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    loaded: &Loaded,
) -> Result<()> {
    if loaded.template.schedules.is_empty() {
        return Ok(());
    }
    crate::store::schedules::schedules_put_in(tx, &loaded.template.schedules, &loaded.origin)
        .await
        .map_err(|e| StoreError::Schedule(e.to_string()))
}

/// [`Store::template_save`]'s writes, in the caller's transaction.
/// Refuse a template naming a deployed function (or a fixed version of one) that nobody
/// deployed, with the line that names it: its steps would only ever fail.
async fn undeployed(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, loaded: &Loaded) -> Result<()> {
    for (name, version) in loaded.template.deployed_functions() {
        let found: bool = sqlx::query_scalar(
            "select case when $2::int is null
                         then exists (select 1 from workdo.function_current where name = $1)
                         else exists (select 1 from workdo.functions where name = $1 and version = $2)
                    end",
        )
        .bind(&name)
        .bind(version.map(|v| v as i32))
        .fetch_one(&mut **tx)
        .await?;
        if found {
            continue;
        }
        let named = match version {
            Some(v) => format!("{name}@{v}"),
            None => name.clone(),
        };
        let line = loaded
            .source
            .lines()
            .position(|l| l.contains("deployed") && l.contains(name.as_str()))
            .map(|i| format!("line {}: ", i + 1))
            .unwrap_or_default();
        return Err(StoreError::BadArtifact(format!(
            "{line}deployed: no function {named:?} is deployed (workdo functions deploy {name} PATH, \
             then load this again)"
        )));
    }
    Ok(())
}

async fn save_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    loaded: &Loaded,
) -> Result<(i64, Saved)> {
    let spec = serde_json::to_value(&loaded.template)
        .map_err(|e| StoreError::CorruptTemplate(loaded.template.name.clone(), e))?;
    lock_name(tx, &loaded.template.name).await?;
    undeployed(tx, loaded).await?;
    // A name is a template or a bricklet, never both.
    let other: Option<String> = sqlx::query_scalar(
        "select kind from workdo.templates where name = $1 and is_current and kind <> $2",
    )
    .bind(&loaded.template.name)
    .bind(loaded.kind.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(kind) = other {
        return Err(StoreError::Invalid {
            field: "name",
            value: loaded.template.name.clone(),
            reason: match (kind.as_str(), loaded.kind) {
                ("bricklet", _) => {
                    "is a bricklet already: a template and a bricklet cannot share a name"
                }
                (_, crate::model::template::Kind::Bricklet) => {
                    "is a template already: a template and a bricklet cannot share a name"
                }
                ("machine", _) => {
                    "is a state machine already: a name keeps its kind (steps or machine) in every version"
                }
                _ => {
                    "is a template of steps already: a name keeps its kind (steps or machine) in every version"
                }
            },
        });
    }
    // Every refset bricklet not defined in the template must be a loaded bricklet file.
    let inline: Vec<&str> = loaded
        .template
        .bricklets
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    let wanted: Vec<String> = loaded
        .template
        .steps
        .iter()
        .filter_map(|s| s.generate.as_ref())
        .flat_map(|g| g.refset.iter())
        .filter(|b| !inline.contains(&b.as_str()))
        .cloned()
        .collect();
    if !wanted.is_empty() {
        let found: Vec<String> = sqlx::query_scalar(
            "select name from workdo.templates
                  where name = any($1) and kind = 'bricklet' and is_current",
        )
        .bind(&wanted)
        .fetch_all(&mut **tx)
        .await?;
        let missing: Vec<&String> = wanted.iter().filter(|w| !found.contains(w)).collect();
        if !missing.is_empty() {
            return Err(StoreError::UnknownBricklets {
                template: loaded.template.name.clone(),
                names: missing.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    let existing: Option<(i64, bool, DateTime<Utc>)> = sqlx::query_as(
        "select id, is_current, loaded_at from workdo.templates where name = $1 and sha256 = $2",
    )
    .bind(&loaded.template.name)
    .bind(&loaded.sha256)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some((id, true, _)) = existing {
        return Ok((id, Saved::Unchanged));
    }
    let (id, created) = match existing {
        Some((id, _, loaded_at)) => {
            make_current(tx, &loaded.template.name, id).await?;
            (id, Saved::MadeCurrent { loaded_at })
        }
        None => {
            sqlx::query(
                "update workdo.templates set is_current = false where name = $1 and is_current",
            )
            .bind(&loaded.template.name)
            .execute(&mut **tx)
            .await?;
            let id: i64 = sqlx::query_scalar(
                "insert into workdo.templates (name, sha256, kind, format, origin, source, spec)
                     values ($1, $2, $7, $3, $4, $5, $6) returning id",
            )
            .bind(&loaded.template.name)
            .bind(&loaded.sha256)
            .bind(loaded.format.as_str())
            .bind(&loaded.origin)
            .bind(&loaded.source)
            .bind(&spec)
            .bind(loaded.kind.as_str())
            .fetch_one(&mut **tx)
            .await?;
            (id, Saved::New)
        }
    };
    notify_templates(tx, &loaded.template.name).await?;
    Ok((id, created))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::template::{Format, parse};

    /// An id that comes to name another description (a schema recreated under a running
    /// process, a database restored) is a miss: the caller names the SHA-256 it read.
    #[test]
    fn a_cached_version_is_found_only_under_its_sha256() {
        let spec = |to: &str| {
            let source = format!(
                "name: cacheWF\nkind: machine\ninitial: A\nstates:\n  A:\n    on: {{ go: {to} }}\n  {to}: {{}}\n"
            );
            parse("cache.yaml", Format::Yaml, &source)
                .expect("a template")
                .template
        };
        let cache = SpecCache::default();
        cache.put(1, "sha-b".into(), Arc::new(spec("B")));
        assert!(cache.get(1, "sha-b").is_some());
        assert!(
            cache.get(1, "sha-z").is_none(),
            "another description under id 1"
        );
        assert!(cache.get(2, "sha-b").is_none());
        cache.put(1, "sha-z".into(), Arc::new(spec("Z")));
        let found = cache.get(1, "sha-z").expect("the new one");
        assert!(found.machine.is_some());
        assert!(cache.get(1, "sha-b").is_none(), "replaced");
    }
}
