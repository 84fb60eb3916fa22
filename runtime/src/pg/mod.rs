//! The embedded default: a private Postgres cluster started from the installed server binaries.
//!
//! With no `DATABASE_URL`, the CLI (and the test suite) run `initdb` once into a data directory of
//! their own and start the server on a free loopback port; a later call finds it running (or starts
//! it again) and reuses it. Postgres refuses to run as root, so when we are root every server
//! command runs as the unprivileged `postgres` account through `runuser`, and the data directory is
//! handed to that account.
//!
//! The cluster authenticates every connection, over its socket and over loopback TCP alike, with
//! SCRAM and a password generated when the cluster is created, kept in `password` beside `pgdata/`
//! with owner-only permissions. Step functions run on the same host with a clean environment, so
//! they cannot log in with what they were given (docs/security.md). A cluster an older workdo made
//! with `trust` is moved to the password the first time it is ensured.

use std::fs::{self, OpenOptions};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod password;
use password::{make_password, mark_applied, read_password, trusts_anyone, write_private};

/// What can go wrong while finding, creating or starting the private cluster.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) were found on PATH or in /usr/lib/postgresql/*/bin; \
         install them (Debian/Ubuntu: `apt-get install postgresql`, Fedora: `dnf install postgresql-server`, \
         macOS: `brew install postgresql`) or set DATABASE_URL to a server you already run"
    )]
    NoBinaries,
    #[error(
        "running as root, but there is no unprivileged `postgres` account to run the server as \
         (Postgres refuses to run as root); create one (`useradd --system postgres`) or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error(
        "the `postgres` account cannot enter {0}; choose a --data-dir it can reach (for example under /tmp or /var/lib) or set DATABASE_URL"
    )]
    Unreachable(PathBuf),
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error(
        "the private cluster asks for a password, and {0} is gone: restore that file (its one \
         line is the postgres role's password), or set DATABASE_URL"
    )]
    PasswordGone(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PgError + '_ {
    move |source| PgError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a private cluster is configured.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Directory holding `pgdata/`, the server log and the lock file.
    pub dir: PathBuf,
    /// Trade durability for speed (`fsync=off`, `synchronous_commit=off`): for throwaway test
    /// clusters only, never for the CLI's default.
    pub ephemeral: bool,
}

/// A running private cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    bin_dir: PathBuf,
    run_as: Option<Account>,
    /// The `postgres` role's password (from [`PASSWORD_FILE`]), once [`Cluster::ensure`] read it.
    password: Option<String>,
}

/// The file beside `pgdata/` holding the generated password of the cluster's `postgres` role.
pub const PASSWORD_FILE: &str = "password";

/// Written once the password is applied (see [`Cluster::ensure`]).
const APPLIED_FILE: &str = "password.applied";

/// `pg_hba.conf` of a workdo cluster: no connection without the password, socket or TCP.
const HBA: &str = "# Written by workdo: every connection authenticates with SCRAM; the password of the\n\
# `postgres` role is in ../password (owner-only). Nothing is trusted, not even loopback.\n\
local   all           all                     scram-sha-256\n\
host    all           all     127.0.0.1/32    scram-sha-256\n\
host    all           all     ::1/128         scram-sha-256\n\
local   replication   all                     scram-sha-256\n\
host    replication   all     127.0.0.1/32    scram-sha-256\n\
host    replication   all     ::1/128         scram-sha-256\n";

#[derive(Debug, Clone)]
struct Account {
    name: String,
    uid: u32,
    gid: u32,
}

impl Cluster {
    /// Connection URL for `database` on this cluster, with the password when it has one.
    pub fn url(&self, database: &str) -> String {
        match &self.password {
            Some(pw) => format!(
                "postgres://postgres:{pw}@127.0.0.1:{}/{database}",
                self.port
            ),
            None => format!("postgres://postgres@127.0.0.1:{}/{database}", self.port),
        }
    }

    /// The directory of the server's Unix socket (the data directory, private to its owner).
    pub fn socket_dir(&self) -> PathBuf {
        self.pgdata()
    }

    fn pgdata(&self) -> PathBuf {
        self.dir.join("pgdata")
    }

    /// Start the cluster in `opts.dir`, creating it first if needed; if it already runs, reuse it.
    ///
    /// # Errors
    /// [`PgError::NoBinaries`] when no server is installed; otherwise the failing command's output.
    pub fn ensure(opts: &ClusterOptions) -> Result<Cluster, PgError> {
        let mut cluster = Cluster::open(&opts.dir)?;
        fs::create_dir_all(&cluster.dir).map_err(io_err(&cluster.dir))?;
        cluster.dir = cluster.dir.canonicalize().map_err(io_err(&opts.dir))?;
        let dir = cluster.dir.clone();
        // One launcher at a time per directory: concurrent CLI calls must not both initdb.
        let lock_path = dir.join("launch.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        lock.lock().map_err(io_err(&lock_path))?;

        if let Some(account) = &cluster.run_as {
            chown(&cluster.dir, account)?;
        }
        let fresh = !cluster.pgdata().join("PG_VERSION").exists();
        let password = match read_password(&dir)? {
            Some(pw) => pw,
            // A new cluster, or one an older workdo made trusting loopback: a password of its
            // own from now on (applied below, before the mark says so). One that asks for a
            // password whose file is gone cannot be opened by us, and is said so: a new
            // password would lock it for good.
            None if fresh || cluster.trusts_anyone()? => {
                let _ = fs::remove_file(dir.join(APPLIED_FILE));
                make_password(&dir)?
            }
            None => return Err(PgError::PasswordGone(dir.join(PASSWORD_FILE))),
        };
        if fresh {
            cluster.initdb(&password)?;
            mark_applied(&dir)?;
        }
        if let Some(port) = cluster.running_port() {
            cluster.port = port;
        } else {
            cluster.port = cluster.pick_port()?;
            cluster.start(opts.ephemeral)?;
        }
        if !dir.join(APPLIED_FILE).exists() {
            cluster.require_password(&password)?;
            mark_applied(&dir)?;
        }
        cluster.password = Some(password);
        drop(lock);
        Ok(cluster)
    }

    fn trusts_anyone(&self) -> Result<bool, PgError> {
        let hba = self.pgdata().join("pg_hba.conf");
        match fs::read_to_string(&hba) {
            Ok(text) => Ok(trusts_anyone(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&hba)(e)),
        }
    }

    /// Make a cluster an older workdo made, which trusted loopback, ask for `password`: the
    /// role gets it (psql over the socket, with the password in its environment, so this works
    /// whether the server still trusts or already asks), `pg_hba.conf` is replaced whole (a new
    /// file renamed over it) and the server reloads it. Only then is it marked done
    /// ([`APPLIED_FILE`]): a crash anywhere before runs it all again.
    fn require_password(&self, password: &str) -> Result<(), PgError> {
        let beside = self.bin_dir.join("psql");
        let psql = if beside.is_file() {
            beside
        } else {
            PathBuf::from("psql")
        };
        let socket = self.pgdata();
        let port = self.port.to_string();
        // The password travels on stdin and in psql's environment, never on a command line
        // others can read in `ps`.
        let out = self.run_with_input(
            &psql,
            &[
                "-X".as_ref(),
                "-q".as_ref(),
                "-w".as_ref(),
                "-v".as_ref(),
                "ON_ERROR_STOP=1".as_ref(),
                "-h".as_ref(),
                socket.as_os_str(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-d".as_ref(),
                "postgres".as_ref(),
            ],
            format!(
                "set password_encryption = 'scram-sha-256';\nalter role postgres password '{password}';\n"
            )
            .as_bytes(),
            password,
        )?;
        check("setting the cluster's password (psql)", &out)?;
        self.write_hba()?;
        let pgdata = self.pgdata();
        let out = self.run(
            "pg_ctl",
            &["reload".as_ref(), "-D".as_ref(), pgdata.as_os_str()],
        )?;
        check("pg_ctl reload", &out)
    }

    /// [`HBA`] as the data directory's `pg_hba.conf`: written whole under another name, given
    /// to the server's account, then renamed over the old one (never a torn file).
    fn write_hba(&self) -> Result<(), PgError> {
        let hba = self.pgdata().join("pg_hba.conf");
        let tmp = self.pgdata().join("pg_hba.conf.workdo-new");
        write_private(&tmp, HBA.as_bytes())?;
        if let Some(account) = &self.run_as {
            std::os::unix::fs::chown(&tmp, Some(account.uid), Some(account.gid))
                .map_err(io_err(&tmp))?;
        }
        fs::rename(&tmp, &hba).map_err(io_err(&hba))
    }

    /// The cluster in `dir`, started or not, without creating or starting anything.
    ///
    /// # Errors
    /// [`PgError::NoBinaries`] when no server is installed.
    pub fn open(dir: &Path) -> Result<Cluster, PgError> {
        let bin_dir = find_bin_dir().ok_or(PgError::NoBinaries)?;
        let run_as = if is_root() {
            Some(postgres_account().ok_or(PgError::NoPostgresUser)?)
        } else {
            None
        };
        // Absolute: commands run with the data directory as their working directory, where a
        // relative `pgdata` path would name a directory inside itself.
        let dir = std::path::absolute(dir).map_err(io_err(dir))?;
        let mut cluster = Cluster {
            dir,
            port: 0,
            bin_dir,
            run_as,
            password: None,
        };
        if let Some(port) = cluster.running_port() {
            cluster.port = port;
        }
        Ok(cluster)
    }

    /// Stop the server (fast shutdown). Stopping a stopped cluster is not an error.
    ///
    /// # Errors
    /// When `pg_ctl stop` fails on a running cluster.
    pub fn stop(&self) -> Result<(), PgError> {
        if self.running_port().is_none() {
            return Ok(());
        }
        let pgdata = self.pgdata();
        let out = self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "-D".as_ref(),
                pgdata.as_os_str(),
                "-m".as_ref(),
                "fast".as_ref(),
                "-w".as_ref(),
            ],
        )?;
        check("pg_ctl stop", &out)
    }

    /// A shell command line that stops this cluster; used by watchdogs that outlive us.
    pub fn stop_command(&self) -> String {
        let pg_ctl = self.bin_dir.join("pg_ctl");
        let base = format!(
            "{} stop -D '{}' -m immediate",
            pg_ctl.display(),
            self.pgdata().display()
        );
        match &self.run_as {
            Some(a) => format!("runuser -u {} -- {base}", a.name),
            None => base,
        }
    }

    fn initdb(&self, password: &str) -> Result<(), PgError> {
        let pgdata = self.pgdata();
        // initdb reads the password from a file the server's account can read; it is removed
        // as soon as initdb is done, and the cluster never trusts anyone, even while it starts.
        let pwfile = self.dir.join("initdb.pw");
        write_private(&pwfile, password.as_bytes())?;
        if let Some(account) = &self.run_as {
            std::os::unix::fs::chown(&pwfile, Some(account.uid), Some(account.gid))
                .map_err(io_err(&pwfile))?;
        }
        let out = self.run(
            "initdb",
            &[
                "-D".as_ref(),
                pgdata.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=scram-sha-256".as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        );
        let _ = fs::remove_file(&pwfile);
        check("initdb", &out?)?;
        self.write_hba()
    }

    fn start(&self, ephemeral: bool) -> Result<(), PgError> {
        let pgdata = self.pgdata();
        let log = self.dir.join("postgres.log");
        // wal_buffers: the default (1/32 of shared_buffers, 4 MB here) fills while a bulk start
        // writes its WAL, and each time it is full a backend writes WAL out itself
        // (pg_stat_wal.wal_buffers_full ~2,000 per bench run); 64 MB took that to 0 and bulk start
        // up 5-8% side by side (BENCHMARKS.md). Durability is unchanged.
        let mut server_opts = format!(
            "-p {} -k '{}' -c listen_addresses=127.0.0.1 -c max_connections=200 -c jit=off \
             -c wal_buffers=64MB",
            self.port,
            pgdata.display()
        );
        if ephemeral {
            server_opts.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        let out = self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "-D".as_ref(),
                pgdata.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "120".as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                server_opts.as_ref(),
            ],
        )?;
        check("pg_ctl start", &out).map_err(|e| match e {
            PgError::Command { what, detail } => {
                let tail = fs::read_to_string(&log)
                    .map(|s| s.lines().rev().take(5).collect::<Vec<_>>().join(" | "))
                    .unwrap_or_default();
                PgError::Command {
                    what,
                    detail: format!("{detail}; server log ({}): {tail}", log.display()),
                }
            }
            other => other,
        })
    }

    /// The port of a server running on this data directory, if one runs.
    fn running_port(&self) -> Option<u16> {
        let pid_file = fs::read_to_string(self.pgdata().join("postmaster.pid")).ok()?;
        let pid: i32 = pid_file.lines().next()?.trim().parse().ok()?;
        // A stale pid file after a crash or reboot names a dead (or foreign) process.
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).contains("postgres") {
            return None;
        }
        let port: u16 = pid_file.lines().nth(3)?.trim().parse().ok()?;
        // Started, but is it answering yet? pg_ctl -w already waited; a connect confirms.
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        Some(port)
    }

    /// Reuse the port of the last run when it is free, so URLs printed earlier stay valid.
    fn pick_port(&self) -> Result<u16, PgError> {
        let port_file = self.dir.join("port");
        if let Some(previous) = fs::read_to_string(&port_file)
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
            && TcpListener::bind(("127.0.0.1", previous)).is_ok()
        {
            return Ok(previous);
        }
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(io_err(&port_file))?;
        let port = listener.local_addr().map_err(io_err(&port_file))?.port();
        drop(listener);
        fs::write(&port_file, port.to_string()).map_err(io_err(&port_file))?;
        Ok(port)
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<Output, PgError> {
        let exe = self.bin_dir.join(program);
        self.command(&exe, args)
            .output()
            .map_err(|e| PgError::Command {
                what: format!("{} ({})", program, exe.display()),
                detail: e.to_string(),
            })
    }

    /// `exe` run as the server's account with `args` in the cluster's directory.
    fn command(&self, exe: &Path, args: &[&std::ffi::OsStr]) -> Command {
        let mut cmd = match &self.run_as {
            Some(account) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(&account.name).arg("--").arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.args(args).current_dir(&self.dir);
        cmd
    }

    /// [`Cluster::run`] of `exe` with `input` on its standard input.
    fn run_with_input(
        &self,
        exe: &Path,
        args: &[&std::ffi::OsStr],
        input: &[u8],
        password: &str,
    ) -> Result<Output, PgError> {
        use std::io::Write;
        use std::process::Stdio;
        let failed = |e: std::io::Error| PgError::Command {
            what: exe.display().to_string(),
            detail: e.to_string(),
        };
        let mut cmd = self.command(exe, args);
        // runuser keeps the environment it is given: the password reaches psql, not `ps`.
        cmd.env("PGPASSWORD", password);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(failed)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input).map_err(failed)?;
        }
        child.wait_with_output().map_err(failed)
    }
}

fn check(what: &str, out: &Output) -> Result<(), PgError> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    Err(PgError::Command {
        what: what.to_string(),
        detail: format!("{} {} {}", out.status, stderr.trim(), stdout.trim())
            .trim()
            .to_string(),
    })
}

/// The directory holding `initdb` and `pg_ctl`: `WORKDO_PG_BIN`, then PATH, then the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("WORKDO_PG_BIN").map(PathBuf::from) {
        return has_both(&dir).then_some(dir);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

fn is_root() -> bool {
    // Effective uid from /proc avoids a libc dependency for one call.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn postgres_account() -> Option<Account> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        if name != "postgres" {
            return None;
        }
        let _pw = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        Some(Account {
            name: name.to_string(),
            uid,
            gid,
        })
    })
}

fn chown(dir: &Path, account: &Account) -> Result<(), PgError> {
    std::os::unix::fs::chown(dir, Some(account.uid), Some(account.gid)).map_err(io_err(dir))?;
    // The account must be able to reach the directory through every parent.
    let probe = Command::new("runuser")
        .arg("-u")
        .arg(&account.name)
        .arg("--")
        .arg("test")
        .arg("-w")
        .arg(dir)
        .status()
        .map_err(io_err(dir))?;
    if probe.success() {
        Ok(())
    } else {
        Err(PgError::Unreachable(dir.to_path_buf()))
    }
}
