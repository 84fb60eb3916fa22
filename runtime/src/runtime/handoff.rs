//! The hand-off to Sidekiq robots (`--sidekiq-redis URL`): the steps no workdo function runs are
//! pushed, as Sidekiq jobs, to the queues their robots read, once per readiness (the outbox row
//! the readiness made, `store/handoff.rs`), exactly as the workflow service's `QueueService`
//! pushes them: `SADD queues Q` and `LPUSH queue:Q JOB`, with JOB
//! `{"retry":true,"queue":Q,"class":C,"args":[DRUID],"jid":…,"created_at":…,"enqueued_at":…}`.
//!
//! Redis is reached through the `redis` crate: TCP, `rediss://` over TLS (rustls), or a Unix
//! socket, with an ACL user name, password and database from the URL. While Redis is down, rows
//! are retried with back-off and wait in the outbox (the admin page shows them).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::model::handoff::Rules;
use crate::store::{Store, StoreError};

/// Where jobs go and how they are named.
#[derive(Debug, Clone)]
pub struct HandoffConfig {
    /// `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS) or
    /// `unix:///path/to/socket[?db=N]`.
    pub redis_url: String,
    pub rules: Rules,
    /// A push still `queued` after this long is taken as lost in Redis and pushed again (the
    /// workflow service's sweeper: 12 hours).
    pub push_again_after: Duration,
}

/// The workflow service's sweeper's wait before it pushes a `queued` step again.
pub const PUSH_AGAIN_AFTER: Duration = Duration::from_secs(12 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error(
        "bad Redis URL {url:?}: {why} (give redis://[user:password@]host[:port][/db], rediss://… for TLS, or unix:///path[?db=N])"
    )]
    Url { url: String, why: String },
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// A Redis server to push to, from its URL: the `redis` crate's client (RESP, ACL user names,
/// `rediss://` TLS through rustls, Unix sockets), which opens connections on demand.
#[derive(Debug, Clone)]
pub struct RedisAddr(redis::Client);

impl RedisAddr {
    /// # Errors
    /// A URL of another form, or one the client cannot use, with the reason.
    pub fn parse(url: &str) -> Result<RedisAddr, RedisError> {
        let bad = |why: String| RedisError::Url {
            url: crate::store::db::redact(url),
            why,
        };
        if !["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return Err(bad("not a Redis URL".into()));
        }
        redis::Client::open(url)
            .map(RedisAddr)
            .map_err(|e| bad(e.to_string()))
    }
}

/// How long connecting to Redis may take.
const REDIS_CONNECT: Duration = Duration::from_secs(5);

/// How long Redis may take to answer a push.
const REDIS_ANSWER: Duration = Duration::from_secs(10);

/// One connection to Redis.
struct Redis(redis::aio::MultiplexedConnection);

impl Redis {
    /// Connect within [`REDIS_CONNECT`]; each answer within [`REDIS_ANSWER`] (the crate's
    /// defaults, 1 s and 0.5 s, failed pushes Redis still applied during a save's stall, and
    /// a TLS handshake across a WAN).
    async fn connect(addr: &RedisAddr) -> Result<Redis, RedisError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(REDIS_CONNECT))
            .set_response_timeout(Some(REDIS_ANSWER));
        Ok(Redis(
            addr.0
                .get_multiplexed_async_connection_with_config(&config)
                .await?,
        ))
    }

    /// `SADD queues Q` and `LPUSH queue:Q JOB`, pipelined, as `Sidekiq::Client.push` does.
    async fn push(&mut self, queue: &str, job: &str) -> Result<(), RedisError> {
        redis::pipe()
            .sadd("queues", queue)
            .ignore()
            .lpush(format!("queue:{queue}"), job)
            .ignore()
            .query_async::<()>(&mut self.0)
            .await?;
        Ok(())
    }
}

/// A Sidekiq job for `class` on `queue` with `druid`, as `Sidekiq::Client.push` writes it.
pub fn job(queue: &str, class: &str, druid: &str, jid: &str, now: f64) -> String {
    serde_json::json!({
        "retry": true,
        "queue": queue,
        "class": class,
        "args": [druid],
        "jid": jid,
        "created_at": now,
        "enqueued_at": now,
    })
    .to_string()
}

/// Push due outbox rows until `stop`, every `every` (or sooner after a full batch).
pub(super) async fn run(
    store: Store,
    config: HandoffConfig,
    every: Duration,
    stop: CancellationToken,
) {
    let addr = match RedisAddr::parse(&config.redis_url) {
        Ok(a) => a,
        Err(e) => {
            warn!(error = %e, "Sidekiq hand-off off");
            return;
        }
    };
    let mut conn: Option<Redis> = None;
    // Lost pushes are looked for at most every tenth of the wait (and at most every minute):
    // the look reads the handed-off steps that are ready now, not the outbox's history.
    let sweep_every = (config.push_again_after / 10).min(Duration::from_secs(60));
    let mut swept = tokio::time::Instant::now();
    loop {
        if !super::session::until_sound(&stop).await {
            return;
        }
        let mut full = match pass(&store, &config.rules, &addr, &mut conn, None).await {
            Ok(n) => n == BATCH,
            Err(e) => {
                warn!(error = %e, "Sidekiq hand-off pass failed");
                false
            }
        };
        if !full && swept.elapsed() >= sweep_every {
            swept = tokio::time::Instant::now();
            let after = Some(config.push_again_after);
            full = match pass(&store, &config.rules, &addr, &mut conn, after).await {
                Ok(n) => n == BATCH,
                Err(e) => {
                    warn!(error = %e, "Sidekiq hand-off sweep failed");
                    false
                }
            };
        }
        if full {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}

const BATCH: usize = 200;

/// Push up to [`BATCH`] due rows, each in a transaction of its own: its row locked, pushed,
/// marked and committed before the next is taken, so a runtime killed during a pass pushes again
/// at most the one row it was pushing (a pass in one transaction pushed all 200 of its rows
/// again after a crash). Returns how many rows were taken.
///
/// With `again_after`, the rows taken are instead pushes of steps still `queued` that long
/// after they were pushed: lost in Redis, pushed again (each recorded as an event).
async fn pass(
    store: &Store,
    rules: &Rules,
    addr: &RedisAddr,
    conn: &mut Option<Redis>,
    again_after: Option<Duration>,
) -> Result<usize, crate::store::StoreError> {
    let mut n = 0;
    while n < BATCH {
        let mut tx = store.handoff_begin().await?;
        let row = match again_after {
            None => tx.due(1).await?,
            Some(after) => tx.lost(1, after.as_secs_f64()).await?,
        };
        let Some(row) = row.into_iter().next() else {
            tx.commit().await?;
            break;
        };
        n += 1;
        let class = rules.class_name(&row.template, &row.step);
        let queue = rules.queue_name(&class, &row.template, &row.lane);
        let jid = hex::encode(rand::random::<[u8; 12]>());
        let now = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
        let body = job(&queue, &class, &row.object_id, &jid, now);
        let pushed = match conn {
            Some(c) => c.push(&queue, &body).await,
            None => match Redis::connect(addr).await {
                Ok(mut c) => {
                    let r = c.push(&queue, &body).await;
                    *conn = Some(c);
                    r
                }
                Err(e) => Err(e),
            },
        };
        match pushed {
            Ok(()) => {
                tx.pushed(row.id, &queue, &jid).await?;
                if again_after.is_some() {
                    tx.pushed_again(&row, &queue, &jid).await?;
                    warn!(object = %row.object_id, step = %format!("{}:{}", row.template, row.step),
                          %queue, %class, %jid, "still queued long after its push: pushed to Sidekiq again");
                } else {
                    info!(object = %row.object_id, step = %format!("{}:{}", row.template, row.step),
                          %queue, %class, %jid, "handed off to Sidekiq");
                }
            }
            Err(e) => {
                *conn = None;
                let delay = (0.5 * 2f64.powi(row.attempts.clamp(0, 6))).min(30.0);
                tx.failed(row.id, &e.to_string(), delay).await?;
                warn!(error = %e, object = %row.object_id, "Sidekiq push failed; will retry");
                tx.commit().await?;
                break;
            }
        }
        tx.commit().await?;
    }
    Ok(n)
}

/// The step-template steps no workdo function runs and no template keeps out of queues: what
/// the hand-off pushes.
pub(super) async fn handoff_steps(store: &Store) -> Result<Vec<(String, String)>, StoreError> {
    let mut steps = Vec::new();
    for t in store.template_list().await? {
        if t.spec.machine.is_some() {
            continue;
        }
        for st in &t.spec.steps {
            if !st.is_run() && !st.skip_queue {
                steps.push((t.name.clone(), st.name.clone()));
            }
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        for good in [
            "redis://:s3cret@cache.example.org:6380/2",
            "redis://robot:s3cret@127.0.0.1",
            "rediss://cache.example.org:6380/0",
            "unix:///run/redis.sock?db=3",
        ] {
            assert!(RedisAddr::parse(good).is_ok(), "{good}");
        }
        for bad in ["http://x", "redis://h:port", "unix://", "cache:6379"] {
            let e = RedisAddr::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with("bad Redis URL"), "{e}");
        }
        let e = RedisAddr::parse("http://u:hunter2@x")
            .expect_err("scheme")
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn jobs_are_what_sidekiq_client_push_writes() {
        let j: serde_json::Value = serde_json::from_str(&job(
            "accessionWF_default",
            "Robots::DorRepo::Accession::Stage",
            "druid:bb123cd4567",
            "0123456789abcdef01234567",
            1.5,
        ))
        .expect("JSON");
        assert_eq!(j["retry"], true);
        assert_eq!(j["args"], serde_json::json!(["druid:bb123cd4567"]));
        assert_eq!(j["class"], "Robots::DorRepo::Accession::Stage");
        assert_eq!(j["queue"], "accessionWF_default");
        assert_eq!(j["enqueued_at"], 1.5);
    }
}
