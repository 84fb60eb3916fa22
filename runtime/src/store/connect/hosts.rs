//! Several servers in one URL, as libpq takes them, and following the writable one.
//!
//! `postgres://u@db1:5432,db2:5432/workdo?target_session_attrs=read-write` names a primary and
//! its standbys in order. workdo always writes, so with more than one host (or with
//! `target_session_attrs=read-write|primary`) it uses the first host that accepts a connection
//! *and* is not in recovery. A pool on such a URL is followed by a task ([`follow`]) that checks
//! once a second that its server is still reachable and writable; when it is not (the primary
//! died, or came back as a standby) it goes round the hosts again until one is writable and
//! points the pool's new connections there. Connections already open to the old server fail on
//! their next use and are dropped by the pool; every new connection is checked to be writable
//! before the pool hands it out.
//!
//! A URL with one host and no `target_session_attrs` is passed to sqlx unchanged (including
//! `?host=/socket/dir`).

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use tracing::{info, warn};

use crate::store::connect::errors::{DbError, reason};
use crate::store::connect::redact::redact;

/// How long one host may take to accept a connection before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a followed pool's server is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The servers a URL names, in the order to try them.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// One set of options per host, each a complete single-host URL's.
    pub options: Vec<PgConnectOptions>,
    /// `host:port` of each, for messages.
    pub labels: Vec<String>,
    /// Only a server that is not in recovery will do.
    pub writable: bool,
}

impl Hosts {
    /// Parse `url`: libpq's `host1:port1,host2:port2` list in the authority, and its
    /// `target_session_attrs` (`any`, `read-write` or `primary`; workdo writes, so the read-only
    /// choices are refused).
    ///
    /// # Errors
    /// A malformed URL, a host list with an empty entry, or a `target_session_attrs` workdo
    /// cannot use — each named.
    pub fn parse(url: &str) -> Result<Hosts, DbError> {
        let invalid = |what: String| DbError::BadUrl(format!("{what} in {}", redact(url)));
        if !url.contains("://") {
            return Err(DbError::BadUrl(format!(
                "{} is not a URL: give postgres://USER@HOST:PORT/DATABASE (libpq's key-value \
                 strings, host=… dbname=…, are not read)",
                redact(url)
            )));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut attrs: Option<String> = None;
        // sqlx has no use for it and logs an unknown parameter with its value: refused here,
        // before the URL reaches sqlx, so the key's password is never written anywhere.
        if query.is_some_and(|q| {
            q.split('&').any(|kv| {
                kv.split('=')
                    .next()
                    .is_some_and(|k| k.eq_ignore_ascii_case("sslpassword"))
            })
        }) {
            return Err(invalid(
                "sslpassword is not supported (an encrypted client key cannot be opened); give \
                 an unencrypted sslkey readable by this user only"
                    .into(),
            ));
        }
        let kept: Vec<&str> = query
            .map(|q| {
                q.split('&')
                    .filter(|kv| match kv.split_once('=') {
                        Some(("target_session_attrs", v)) => {
                            attrs = Some(v.to_string());
                            false
                        }
                        _ => true,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let writable = match attrs.as_deref() {
            None | Some("any") => false,
            Some("read-write" | "primary") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "target_session_attrs={other} cannot be used: workdo writes, so it needs \
                     read-write (or primary, or any)"
                )));
            }
        };
        let scheme_end = base.find("://").map_or(0, |i| i + 3);
        let after = &base[scheme_end..];
        let authority_end = after.find('/').unwrap_or(after.len());
        let authority = &after[..authority_end];
        let path = &after[authority_end..];
        let (userinfo, hostlist) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let hosts: Vec<&str> = hostlist.split(',').collect();
        if hosts.len() > 1 && hosts.iter().any(|h| h.trim().is_empty()) {
            return Err(invalid(format!(
                "an empty host in the host list \"{hostlist}\""
            )));
        }
        let mut options = Vec::new();
        let mut labels = Vec::new();
        for host in &hosts {
            let single = format!("{}{userinfo}{host}{path}{query}", &base[..scheme_end]);
            let mut opts = PgConnectOptions::from_str(&single)
                .map_err(|e| invalid(format!("host \"{host}\": {e}")))?;
            // An IPv6 address keeps its brackets through sqlx's parser, and no lookup knows it.
            let bare = opts
                .get_host()
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .map(str::to_string);
            if let Some(ip) = bare {
                opts = opts.host(&ip);
            }
            labels.push(format!("{}:{}", opts.get_host(), opts.get_port()));
            options.push(opts);
        }
        Ok(Hosts {
            options,
            labels,
            writable: writable || hosts.len() > 1,
        })
    }

    /// More than one server, or a writable one required: the pool must be followed.
    pub fn followed(&self) -> bool {
        self.writable
    }

    /// Try every host in order; the first that accepts a connection (and is writable, when
    /// that is required) is the one, with that connection.
    ///
    /// # Errors
    /// No host would do; the error says why each was passed over.
    pub async fn pick(&self, url: &str) -> Result<(usize, PgConnection), DbError> {
        let mut why = Vec::new();
        for (i, opts) in self.options.iter().enumerate() {
            let label = &self.labels[i];
            match tokio::time::timeout(CONNECT_TIMEOUT, opts.connect()).await {
                Ok(Ok(mut conn)) => {
                    if !self.writable {
                        return Ok((i, conn));
                    }
                    match read_only(&mut conn).await {
                        Ok(false) => return Ok((i, conn)),
                        Ok(true) => why.push(format!("{label} is read-only (in recovery)")),
                        Err(e) => why.push(format!("{label}: {e}")),
                    }
                    let _ = conn.close().await;
                }
                Ok(Err(e)) => why.push(format!("{label}: {}", reason(&e))),
                Err(_) => why.push(format!(
                    "{label}: no answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )),
            }
        }
        let cause = if self.options.len() == 1 {
            why.pop().unwrap_or_default()
        } else {
            format!("no writable server among them: {}", why.join("; "))
        };
        Err(DbError::NoServer {
            url: redact(url),
            why: cause,
        })
    }
}

/// A pool's options: recognisable as workdo's in `pg_stat_activity`; statements slower than a
/// second logged at debug, not as warnings with their whole SQL on an operator's terminal (a
/// bulk skip of 10,000 steps is slow by design).
pub(crate) fn session(opts: PgConnectOptions) -> PgConnectOptions {
    opts.application_name("workdo")
        .log_slow_statements(log::LevelFilter::Debug, Duration::from_secs(1))
}

/// Is the server behind `conn` in recovery, or read-only by default? (The simple protocol: no
/// prepared statement, so it works through any pooler.)
pub(crate) async fn read_only(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    sqlx::raw_sql(
        "select pg_is_in_recovery() or current_setting('default_transaction_read_only') = 'on'",
    )
    .fetch_one(conn)
    .await?
    .try_get::<bool, _>(0)
}

/// Follow the writable server for `pool` until it is closed: check `conn`'s server every second;
/// when it is gone or read-only, go round `hosts` until one is writable and point the pool's new
/// connections at it.
pub(crate) async fn follow(
    pool: PgPool,
    hosts: Hosts,
    url: String,
    mut current: usize,
    mut conn: PgConnection,
) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        if pool.is_closed() {
            let _ = conn.close().await;
            return;
        }
        let fine = matches!(
            tokio::time::timeout(CONNECT_TIMEOUT, read_only(&mut conn)).await,
            Ok(Ok(false))
        );
        if fine {
            continue;
        }
        let lost = Instant::now();
        warn!(server = %hosts.labels[current], "the writable server is gone or read-only; looking for another");
        // Said at once and then every ten seconds, not at every round (four a second).
        let mut said = None::<Instant>;
        loop {
            if pool.is_closed() {
                return;
            }
            match hosts.pick(&url).await {
                Ok((i, c)) => {
                    conn = c;
                    if i != current {
                        pool.set_connect_options(session(hosts.options[i].clone()));
                    }
                    info!(
                        server = %hosts.labels[i],
                        was = %hosts.labels[current],
                        after_ms = lost.elapsed().as_millis() as u64,
                        "writing to this server now"
                    );
                    current = i;
                    break;
                }
                Err(e) => {
                    if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        warn!(
                            error = %e,
                            waited_s = lost.elapsed().as_secs(),
                            "no writable server yet; trying again every 250 ms"
                        );
                        said = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Hosts;

    #[test]
    fn one_host_is_passed_on_as_it_is() {
        let h = Hosts::parse("postgres://u:p@db1:5433/w?sslmode=disable").expect("parses");
        assert_eq!(h.labels, ["db1:5433"]);
        assert!(!h.followed());
        assert_eq!(h.options[0].get_database(), Some("w"));
    }

    #[test]
    fn a_host_list_is_tried_in_order_and_must_be_writable() {
        let h = Hosts::parse("postgres://u:p@db1:5432,db2:6000,db3/w?target_session_attrs=any")
            .expect("parses");
        assert_eq!(h.labels, ["db1:5432", "db2:6000", "db3:5432"]);
        assert!(
            h.followed(),
            "more than one host: only a writable one will do"
        );
        for o in &h.options {
            assert_eq!(o.get_database(), Some("w"));
            assert_eq!(o.get_username(), "u");
        }
    }

    #[test]
    fn ipv6_hosts_lose_their_brackets() {
        let h = Hosts::parse("postgres://u@[::1]:15432,[fd00::2]/w").expect("parses");
        assert_eq!(h.options[0].get_host(), "::1");
        assert_eq!(h.options[0].get_port(), 15432);
        assert_eq!(h.options[1].get_host(), "fd00::2");
    }

    #[test]
    fn target_session_attrs_read_write_follows_one_host() {
        let h = Hosts::parse("postgres://u@db1/w?target_session_attrs=read-write&sslmode=prefer")
            .expect("parses");
        assert!(h.followed());
        let h = Hosts::parse("postgres://u@db1/w?target_session_attrs=primary").expect("parses");
        assert!(h.followed());
    }

    #[test]
    fn read_only_choices_and_empty_hosts_are_named() {
        let e = Hosts::parse("postgres://u:secret@a,b/w?target_session_attrs=standby")
            .expect_err("standby refused")
            .to_string();
        assert!(
            e.contains("target_session_attrs=standby") && !e.contains("secret"),
            "{e}"
        );
        let e = Hosts::parse("postgres://u@a,,b/w")
            .expect_err("empty host")
            .to_string();
        assert!(e.contains("empty host") && e.contains("a,,b"), "{e}");
        let e = Hosts::parse("postgres://u@a:1,b:notaport/w")
            .expect_err("bad port")
            .to_string();
        assert!(e.contains("b:notaport"), "{e}");
    }
}
