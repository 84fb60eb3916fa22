//! Claims: ready steps leased to a worker by template step (`workdo.claim`) or by the bricklet
//! step generated steps run (`workdo.claim_queue`), or chosen steps leased now for task
//! injection (`workdo.lease`).

use crate::store::steps::apply::Claimed;
use crate::store::{Result, Store};

impl Store {
    /// Claim up to `limit` ready steps of `template:step` (optionally of one lane): highest
    /// priority first, then longest ready; each gets an attempt and a lease until `lease`.
    pub async fn step_claim(
        &self,
        template: &str,
        step: &str,
        lane: Option<&str>,
        limit: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<Claimed>> {
        let sql = "select * from workdo.claim(p_template => $1, p_step => $2, p_lane => $3,
                                              p_limit => $4, p_owner => $5, p_lease_secs => $6,
                                              p_async => $7)";
        self.claim_by(sql, &[template, step], lane, limit, owner, lease)
            .await
    }

    /// Claim generated steps by the bricklet step they run (`queue`), as [`Store::step_claim`]
    /// does template steps (`workdo.claim_queue`).
    pub async fn step_claim_queue(
        &self,
        queue: &str,
        lane: Option<&str>,
        limit: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<Claimed>> {
        let sql = "select * from workdo.claim_queue(p_queue => $1, p_lane => $2, p_limit => $3,
                                                    p_owner => $4, p_lease_secs => $5, p_async => $6)";
        self.claim_by(sql, &[queue], lane, limit, owner, lease)
            .await
    }

    /// One claim: `sql` calls a claim function with the queue's `keys`, then the lane, the limit,
    /// the owner, the lease's length and `async_claims`. The function (migrations/engine/
    /// 10_claim.sql) plans the claim once per session; a statement of its own, so with
    /// `async_claims` it commits without waiting for the WAL flush (ARCHITECTURE.md "Decisions").
    async fn claim_by(
        &self,
        sql: &'static str,
        keys: &[&str],
        lane: Option<&str>,
        limit: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<Claimed>> {
        let mut query = sqlx::query_as(sql);
        for key in keys {
            query = query.bind(*key);
        }
        Ok(query
            .bind(lane)
            .bind(limit)
            .bind(owner)
            .bind(lease.as_secs_f64())
            .bind(self.async_claims)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Task injection: claim `template:step` of these objects now, ahead of the queue — when
    /// ready, scheduled, retrying or in error (not waiting for prerequisites, running or done).
    pub async fn step_claim_objects(
        &self,
        template: &str,
        step: &str,
        objects: &[String],
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<Claimed>> {
        // workdo.lease (migrations/engine) leases them, as workdo.claim does the queue's head.
        let claimed: Vec<Claimed> = sqlx::query_as(
            "select * from workdo.lease(p_ids => array(
                select s.id from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
                 where w.template = $1 and s.name = $2 and w.object_id = any($3) and s.active
                   and s.status in ('ready', 'scheduled', 'retrying', 'error', 'exception')
                   -- a step in error or retrying may wait for prerequisites a recomposition
                   -- gave it since it ran (store/dispatch/recompose.rs)
                   and s.pending = 0
                 limit $4
                   for update of s skip locked), p_owner => $5, p_lease_secs => $6)",
        )
        .bind(template)
        .bind(step)
        .bind(objects)
        .bind(objects.len() as i64)
        .bind(owner)
        .bind(lease.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        Ok(claimed)
    }
}
