//! Leases of steps being run: renewed while their calls run, given back when a claim's answer
//! was lost.

use uuid::Uuid;

use crate::model::status::Status;
use crate::store::steps::apply::Change;
use crate::store::{Result, Store};

impl Store {
    /// Renew the leases `held` (step, lease token, how long) of a runtime that is still running
    /// their calls: each lasts at least `how long` from now. A step whose lease was lost or whose
    /// result is already committed is left alone. Returns how many were renewed.
    pub async fn steps_renew_leases(&self, held: &[(i64, Uuid, f64)]) -> Result<u64> {
        let ids: Vec<i64> = held.iter().map(|h| h.0).collect();
        let tokens: Vec<Uuid> = held.iter().map(|h| h.1).collect();
        let secs: Vec<f64> = held.iter().map(|h| h.2).collect();
        // The rows locked first, in id order, the order every commit locks steps in
        // (`workdo.apply` takes its batch in id order, compositions lock `order by id`).
        // The update alone locked them in whatever order its plan read them (the list's, or
        // the lease index's), and deadlocked with the completers committing those same steps
        // (retried, nothing lost, the commit done twice).
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "select 1 from workdo.steps
              where id = any($1) and lease_token = any($2) and status = 'started'
              order by id for update",
        )
        .bind(&ids)
        .bind(&tokens)
        .execute(&mut *tx)
        .await?;
        let done = sqlx::query(
            "update workdo.steps s
                set lease_expires_at = greatest(s.lease_expires_at,
                                                now() + make_interval(secs => h.secs))
               from unnest($1::bigint[], $2::uuid[], $3::float8[]) as h(id, token, secs)
              where s.id = h.id and s.lease_token = h.token and s.status = 'started'",
        )
        .bind(&ids)
        .bind(&tokens)
        .bind(&secs)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    /// Give back the steps leased to `owner` that it is not running (`keep`): a claim whose
    /// answer was lost with the connection committed all the same, and nobody would run those
    /// steps until their leases expired. They go back to the queue with their attempts, through
    /// the one status path, each with a `released` event. Returns how many.
    pub async fn steps_return_leases(&self, owner: &str, keep: &[i64]) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let orphans: Vec<(i64, Uuid)> = sqlx::query_as(
            "select id, lease_token from workdo.steps
              where lease_owner = $1 and status = 'started' and lease_token is not null
                and not (id = any($2))
                for update skip locked",
        )
        .bind(owner)
        .bind(keep)
        .fetch_all(&mut *tx)
        .await?;
        let changes: Vec<Change> = orphans
            .iter()
            .map(|(id, token)| {
                let mut c = Change::new(*id, Status::Waiting, "released");
                c.attempts_delta = -1;
                c.lease = Some(*token);
                c.detail = serde_json::json!({
                    "worker": owner,
                    "reason": "the claim's answer was lost with the connection; given back uncalled",
                });
                c
            })
            .collect();
        let n = Self::steps_apply(&mut tx, &changes, owner)
            .await?
            .changed
            .len();
        tx.commit().await?;
        Ok(n)
    }
}
