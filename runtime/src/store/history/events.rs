//! What a write records besides its rows: events (the append-only log) and the NOTIFY that
//! wakes workers of steps that became ready. Both are collected while a transaction works
//! and written once, at its end.

use std::collections::BTreeSet;

use serde_json::Value;
use sqlx::PgConnection;

use crate::store::READY_CHANNEL;
use crate::store::Result;

/// One event to append. Only the object, kind and actor are always known; the rest is set
/// by name, so a call reads as what it records.
#[derive(Debug, Clone)]
pub(crate) struct NewEvent<'a> {
    object_id: &'a str,
    kind: &'a str,
    actor: &'a str,
    workflow_id: Option<i64>,
    template: Option<&'a str>,
    version: Option<i32>,
    step: Option<&'a str>,
    status: Option<&'a str>,
    attempt: Option<i32>,
    detail: Value,
}

impl<'a> NewEvent<'a> {
    pub(crate) fn new(object_id: &'a str, kind: &'a str, actor: &'a str) -> Self {
        NewEvent {
            object_id,
            kind,
            actor,
            workflow_id: None,
            template: None,
            version: None,
            step: None,
            status: None,
            attempt: None,
            detail: Value::Null,
        }
    }

    pub(crate) fn workflow(mut self, id: i64) -> Self {
        self.workflow_id = Some(id);
        self
    }

    pub(crate) fn template(mut self, name: &'a str) -> Self {
        self.template = Some(name);
        self
    }

    pub(crate) fn version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    pub(crate) fn step(mut self, name: &'a str) -> Self {
        self.step = Some(name);
        self
    }

    pub(crate) fn status(mut self, status: &'a str) -> Self {
        self.status = Some(status);
        self
    }

    pub(crate) fn detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }
}

/// Events to append, written with one statement.
#[derive(Default)]
pub(crate) struct EventBuf {
    object_id: Vec<String>,
    workflow_id: Vec<Option<i64>>,
    template: Vec<Option<String>>,
    version: Vec<Option<i32>>,
    step: Vec<Option<String>>,
    kind: Vec<String>,
    status: Vec<Option<String>>,
    attempt: Vec<Option<i32>>,
    actor: Vec<String>,
    detail: Vec<Value>,
}

impl EventBuf {
    pub(crate) fn push(&mut self, e: NewEvent<'_>) {
        self.object_id.push(e.object_id.to_string());
        self.workflow_id.push(e.workflow_id);
        self.template.push(e.template.map(String::from));
        self.version.push(e.version);
        self.step.push(e.step.map(String::from));
        self.kind.push(e.kind.to_string());
        self.status.push(e.status.map(String::from));
        self.attempt.push(e.attempt);
        self.actor.push(e.actor.to_string());
        self.detail.push(e.detail);
    }

    /// These events' ten arrays bound to `q`, in this order: object, workflow, template,
    /// version, step, kind, status, attempt, actor, detail — for a statement that writes
    /// them together with something else.
    pub(crate) fn bind_to<'q>(
        &'q self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        self.bind_rows(q).bind(&self.detail)
    }

    /// The nine arrays before the detail, as [`EventBuf::bind_to`] binds them.
    fn bind_rows<'q>(
        &'q self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(&self.object_id)
            .bind(&self.workflow_id)
            .bind(&self.template)
            .bind(&self.version)
            .bind(&self.step)
            .bind(&self.kind)
            .bind(&self.status)
            .bind(&self.attempt)
            .bind(&self.actor)
    }

    /// Append the events with one statement. When they carry few distinct details (a bulk
    /// start's 4,000 events carry two), each is sent, and parsed by the server, once, and rows
    /// name theirs by position: parsing 4,000 copies took as long as inserting them (9 ms of
    /// bind for 2,000 workflows, plus the client's serialising). Many distinct details go row by
    /// row: finding the n-th element of a JSON array walks it from its start, which made 20,000
    /// distinct ones quadratic (632 ms against 94).
    pub(crate) async fn flush(&mut self, conn: &mut PgConnection) -> Result<()> {
        /// The most distinct details sent once and found by position.
        const BY_POSITION: usize = 16;
        /// The insert, given the detail of a row (`d`, its tenth column) and that column's array.
        macro_rules! insert {
            ($detail:literal, $tenth:literal) => {
                concat!(
                    "insert into workdo.events
                        (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
                     select object_id, workflow_id, template, version, step, kind, status, attempt, actor,
                            nullif(", $detail, ", 'null'::jsonb)
                       from unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::text[],
                                   $7::text[], $8::int[], $9::text[], ", $tenth, ")
                            as t(object_id, workflow_id, template, version, step, kind, status, attempt, actor, d)"
                )
            };
        }
        if self.kind.is_empty() {
            return Ok(());
        }
        let (details, of) = distinct(&self.detail, BY_POSITION);
        if details.len() > BY_POSITION {
            self.bind_to(sqlx::query(insert!("d", "$10::jsonb[]")))
                .execute(&mut *conn)
                .await?;
        } else {
            self.bind_rows(sqlx::query(insert!("($10::jsonb[])[d]", "$11::int[]")))
                .bind(&details)
                .bind(&of)
                .execute(&mut *conn)
                .await?;
        }
        *self = EventBuf::default();
        Ok(())
    }
}

/// The distinct values of `all` and, for each of `all`, the 1-based position of its value among
/// them; it stops counting (and the caller sends every value) past `at_most` distinct ones. A
/// value is looked for among the last few distinct ones only (events of one kind come
/// together), so a repeat further back is sent again: correct, only less compact.
fn distinct(all: &[Value], at_most: usize) -> (Vec<&Value>, Vec<i32>) {
    const LOOK_BACK: usize = 4;
    let mut values: Vec<&Value> = Vec::new();
    let mut of = Vec::with_capacity(all.len());
    for v in all {
        let from = values.len().saturating_sub(LOOK_BACK);
        let found = values[from..]
            .iter()
            .position(|d| *d == v)
            .map(|i| from + i);
        let i = found.unwrap_or_else(|| {
            values.push(v);
            values.len() - 1
        });
        if values.len() > at_most {
            break;
        }
        of.push(i as i32 + 1);
    }
    (values, of)
}

/// The `template:step` keys of steps that became ready in a transaction: one NOTIFY per
/// distinct key, delivered when the transaction commits.
#[derive(Debug, Default)]
pub(crate) struct ReadyKeys(BTreeSet<String>);

impl ReadyKeys {
    pub(crate) fn add<'s>(&mut self, template: &str, steps: impl IntoIterator<Item = &'s String>) {
        for s in steps {
            self.0.insert(format!("{template}:{s}"));
        }
    }

    pub(crate) async fn notify(self, conn: &mut PgConnection) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = self.0.into_iter().collect();
        sqlx::query("select pg_notify($1, k) from unnest($2::text[]) as k")
            .bind(READY_CHANNEL)
            .bind(&keys)
            .execute(conn)
            .await?;
        Ok(())
    }
}

impl crate::store::Store {
    /// An object's events newest first: the latest `limit`, or those older than `before`;
    /// only of `kinds` when some are given (the object page's history).
    ///
    /// # Errors
    /// When the database cannot be read.
    pub async fn events_newest_first(
        &self,
        object: &str,
        before: Option<i64>,
        limit: i64,
        kinds: &[String],
    ) -> Result<Vec<crate::store::EventRow>> {
        Ok(sqlx::query_as(
            "select id, at, workflow_id, template, version, step, kind, status, attempt, actor, detail
               from workdo.events
              where object_id = $1
                and ($2::bigint is null or id < $2)
                and (cardinality($4::text[]) = 0 or kind = any($4))
              order by id desc
              limit $3",
        )
        .bind(object)
        .bind(before)
        .bind(limit.clamp(1, 1000))
        .bind(kinds)
        .fetch_all(&self.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::distinct;
    use serde_json::json;

    #[test]
    fn each_detail_is_sent_once_and_named_by_position() {
        let all = [
            json!({"a": 1}),
            json!({"a": 1}),
            json!(null),
            json!({"a": 1}),
            json!(null),
        ];
        let (values, of) = distinct(&all, 16);
        assert_eq!(values, [&json!({"a": 1}), &json!(null)]);
        assert_eq!(of, [1, 1, 2, 1, 2]);
        for (v, i) in all.iter().zip(&of) {
            assert_eq!(values[*i as usize - 1], v);
        }
    }

    #[test]
    fn a_repeat_beyond_the_look_back_is_sent_again() {
        let all: Vec<_> = (0..6).map(|i| json!(i)).chain([json!(0)]).collect();
        let (values, of) = distinct(&all, 16);
        assert_eq!(values.len(), 7);
        assert_eq!(of, [1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn past_the_most_distinct_it_stops_counting() {
        let all: Vec<_> = (0..40).map(|i| json!(i)).collect();
        let (values, _) = distinct(&all, 16);
        assert_eq!(
            values.len(),
            17,
            "one past the most: the caller sends every detail"
        );
    }
}
