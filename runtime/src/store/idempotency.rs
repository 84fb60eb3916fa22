//! Idempotency keys: a request that carries one is applied once. The first request with a key
//! claims it (its answer not yet known); when it has been answered, the answer is kept for 24
//! hours, and a repeat gets that answer back and changes nothing. A key is kept per caller
//! (`scope`) and for one request (`fingerprint`): the same key on another request is refused.

use super::{Result, Store};

/// How long a key's answer is kept.
pub const IDEMPOTENCY_HOURS: i32 = 24;

/// The most keys kept per caller (a token): the newest.
pub const KEYS_PER_CALLER: i64 = 10_000;

/// What a claim of a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is new (or its earlier use expired): go ahead, then [`Store::idempotency_finish`].
    New,
    /// Answered before: this is the answer.
    Answered {
        status: i32,
        content_type: Option<String>,
        body: Vec<u8>,
    },
    /// A request with this key is being answered (or its process stopped before answering, so
    /// whether it was applied is not known).
    Running,
    /// The key was used for a different request.
    OtherRequest,
}

/// A key's fingerprint, and its answer once there is one (status, content type, body).
type KeyRow = (String, Option<i32>, Option<String>, Option<Vec<u8>>);

impl Store {
    /// Claim `key` in `scope` for the request `fingerprint` describes.
    ///
    /// # Errors
    /// The database refuses.
    pub async fn idempotency_claim(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Claim> {
        let claimed: Option<i32> = sqlx::query_scalar(
            "insert into workdo.idempotency (scope, key, fingerprint) values ($1, $2, $3)
             on conflict (scope, key) do update
                set fingerprint = excluded.fingerprint, status = null, content_type = null,
                    body = null, created_at = now()
              where idempotency.created_at < now() - make_interval(hours => $4)
             returning 1",
        )
        .bind(scope)
        .bind(key)
        .bind(fingerprint)
        .bind(IDEMPOTENCY_HOURS)
        .fetch_optional(&self.pool)
        .await?;
        if claimed.is_some() {
            // At most KEYS_PER_CALLER answers are kept per caller: a client that makes a key
            // per request keeps the newest, not a day of them. Trimmed one in a hundred claims,
            // past the bound by a hundred at most.
            if rand::random::<u8>() < 3 {
                sqlx::query(
                    "delete from workdo.idempotency where scope = $1 and key in (
                        select key from workdo.idempotency where scope = $1
                         order by created_at desc offset $2)",
                )
                .bind(scope)
                .bind(KEYS_PER_CALLER)
                .execute(&self.pool)
                .await?;
            }
            return Ok(Claim::New);
        }
        let row: Option<KeyRow> = sqlx::query_as(
            "select fingerprint, status, content_type, body from workdo.idempotency
              where scope = $1 and key = $2",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            // Expired and deleted between the two statements: claim again.
            None => Box::pin(self.idempotency_claim(scope, key, fingerprint)).await?,
            Some((f, _, _, _)) if f != fingerprint => Claim::OtherRequest,
            Some((_, None, _, _)) => Claim::Running,
            Some((_, Some(status), content_type, body)) => Claim::Answered {
                status,
                content_type,
                body: body.unwrap_or_default(),
            },
        })
    }

    /// Keep the answer to the request that claimed `key`.
    ///
    /// # Errors
    /// The database refuses.
    pub async fn idempotency_finish(
        &self,
        scope: &str,
        key: &str,
        status: i32,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<()> {
        sqlx::query(
            "update workdo.idempotency set status = $3, content_type = $4, body = $5
              where scope = $1 and key = $2",
        )
        .bind(scope)
        .bind(key)
        .bind(status)
        .bind(content_type)
        .bind(body)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Give `key` up: the request that claimed it did nothing, so a repeat may run.
    ///
    /// # Errors
    /// The database refuses.
    pub async fn idempotency_release(&self, scope: &str, key: &str) -> Result<()> {
        sqlx::query(
            "delete from workdo.idempotency where scope = $1 and key = $2 and status is null",
        )
        .bind(scope)
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forget keys older than [`IDEMPOTENCY_HOURS`]. Returns how many.
    ///
    /// # Errors
    /// The database refuses.
    pub async fn idempotency_expire(&self) -> Result<u64> {
        Ok(sqlx::query(
            "delete from workdo.idempotency
              where created_at < now() - make_interval(hours => $1)",
        )
        .bind(IDEMPOTENCY_HOURS)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}
