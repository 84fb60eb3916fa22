//! `workdo up`, `worker`, `serve` and `run`: the runtime's commands.

use std::io::Write;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;

use super::args::{RuntimeArgs, UpArgs};

use crate::output::emit;
use crate::runtime::{self, alerts::AlertConfig, inject};
use crate::store::Store;
use crate::{api, demo};

fn runtime_config(args: &RuntimeArgs, demo: bool) -> Result<runtime::Config> {
    if args.lease < std::time::Duration::from_secs(3) {
        bail!(
            "--lease {:?} is too short: leases are renewed every third of it, and one that lapses while its call runs lets another runtime run the step again; give at least 3s",
            args.lease
        );
    }
    let mut config = runtime::Config {
        poll_interval: args.poll_interval,
        lease_margin: args.lease_margin,
        lease: args.lease,
        grace: args.grace,
        env: runtime::parse_env(&args.env)?,
        pass_env: args.pass_env.clone(),
        completers: args.completers as usize,
        commit_batch: args.commit_batch as usize,
        commit_within: args.commit_within,
        function_cache: args.function_cache.clone(),
        ..Default::default()
    };
    config.backoff.base = args.retry_base.unwrap_or(if demo {
        std::time::Duration::from_millis(100)
    } else {
        std::time::Duration::from_secs(1)
    });
    config.backoff.max = args.retry_max;
    config.alerts = AlertConfig::load(args.config.as_deref())?;
    config.schedules = !args.no_schedules;
    if let Some(url) = &args.sidekiq_redis {
        runtime::handoff::RedisAddr::parse(url)?;
        let rules = match &args.sidekiq_rules {
            Some(path) => {
                let text = super::files::read_text(path)?;
                crate::model::handoff::Rules::parse(&path.display().to_string(), &text)
                    .map_err(anyhow::Error::msg)?
            }
            None => crate::model::handoff::Rules::default(),
        };
        config.handoff = Some(runtime::handoff::HandoffConfig {
            redis_url: url.clone(),
            rules,
            push_again_after: args.sidekiq_push_again_after,
        });
    }
    Ok(config)
}

/// Cancelled on SIGTERM or Ctrl-C.
fn shutdown_on_signal() -> Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let t = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down: no new claims; calls in flight may finish");
        t.cancel();
    });
    Ok(token)
}

async fn run_until_signal(
    store: Store,
    config: runtime::Config,
    bindings: Vec<runtime::Binding>,
) -> Result<()> {
    if bindings.is_empty() {
        eprintln!(
            "workdo: no step of the loaded templates has a function; running maintenance only"
        );
    }
    let token = shutdown_on_signal()?;
    runtime::run(store, config, bindings, token).await?;
    Ok(())
}

/// A running API: its task and the address it listens on.
type Served = (
    tokio::task::JoinHandle<Result<(), api::ServeError>>,
    std::net::SocketAddr,
    api::Access,
);

/// The API (and the admin page) in the background, stopped by `token`. The demo serves it
/// unless told not to: on --listen when given, else on 127.0.0.1:7070 or, when that is taken,
/// any free loopback port; without tokens unless --listen was given (loopback only, so the
/// person trying it can open the page at once).
async fn spawn_api(
    store: &Store,
    args: &UpArgs,
    token: &CancellationToken,
) -> Result<Option<Served>> {
    if args.no_api {
        return Ok(None);
    }
    let demo_default = args.demo.is_some() && args.api.listen.is_none();
    let (listen, access) = if demo_default {
        (args.api.address(), api::Access::Open)
    } else {
        (args.api.address(), args.api.access())
    };
    if access == api::Access::Open && !listen.ip().is_loopback() {
        return Err(api::ServeError::OpenNotLoopback(listen).into());
    }
    // Bind now so that a taken port is an error before any work starts.
    let listener = match std::net::TcpListener::bind(listen) {
        Ok(l) => l,
        Err(_) if demo_default => std::net::TcpListener::bind((listen.ip(), 0))
            .map_err(|e| api::ServeError::Bind(listen, e))?,
        Err(e) => return Err(api::ServeError::Bind(listen, e).into()),
    };
    let bound = listener.local_addr()?;
    let task = tokio::spawn(api::serve_on(
        store.clone(),
        listener,
        access,
        token.clone(),
    ));
    Ok(Some((task, bound, access)))
}

/// The pool a `workdo worker` for `steps` steps needs: a connection per step (each claims on
/// its own), one per completer, and three for the maintenance, machine and alert loops; at most
/// `up`'s 16.
pub fn worker_connections(steps: usize, completers: u32) -> u32 {
    (u32::try_from(steps).unwrap_or(u32::MAX))
        .saturating_add(completers)
        .saturating_add(3)
        .min(16)
}

/// The connections one `workdo up` may hold: its pool (`--max-connections`), the API's own pool
/// (half that, at least two) when it serves the API, the listener's one connection, and with a
/// URL of several hosts the watcher's that follows the writable one (`followed`).
pub fn connection_budget(max_connections: u32, api: bool, followed: bool) -> u32 {
    let api_pool = if api { (max_connections / 2).max(2) } else { 0 };
    max_connections + api_pool + 1 + u32::from(followed)
}

/// A warning when the server cannot hold `budget` more connections: `max_connections` less the
/// superuser reserve less those open now.
pub fn budget_warning(budget: u32, max: i64, reserved: i64, open: i64) -> Option<String> {
    let room = max - reserved - open;
    (i64::from(budget) > room).then(|| {
        format!(
            "workdo: this process may open up to {budget} database connections, but the server has room for {} more (max_connections {max}, {reserved} reserved for superusers, {open} open): raise max_connections or give each process a smaller --max-connections (docs/operations.md, Connections)",
            room.max(0)
        )
    })
}

/// A warning when PgBouncer's pool (`default_pool_size` server connections for each user and
/// database) is smaller than what this process may hold.
pub fn pooler_warning(budget: u32, pool: i64) -> Option<String> {
    (i64::from(budget) > pool).then(|| {
        format!(
            "workdo: this process may hold up to {budget} database connections, but PgBouncer pools {pool} server connections for this user and database (default_pool_size): in session mode the rest wait for one; set default_pool_size to at least the sum of every workdo process's connections, or give each a smaller --max-connections (docs/operations.md, Poolers)"
        )
    })
}

pub(super) async fn up(
    store: &Store,
    args: UpArgs,
    data_dir: &std::path::Path,
    (database, private, followed): (&str, bool, bool),
    out: &mut impl Write,
) -> Result<()> {
    let Some(n) = args.demo else {
        let bindings = runtime::bindings(store, &[]).await?;
        let config = runtime_config(&args.runtime, false)?;
        let token = shutdown_on_signal()?;
        let server = spawn_api(store, &args, &token).await?;
        let templates = store.template_list().await?.len();
        if let Ok((max, reserved, open)) = store.connection_room().await
            && let Some(w) = budget_warning(
                connection_budget(
                    args.runtime.max_connections.unwrap_or(16),
                    server.is_some(),
                    followed,
                ),
                max,
                reserved,
                open,
            )
        {
            eprintln!("{w}");
        }
        // Through PgBouncer in session mode each client connection holds a server connection
        // of the pool: a budget over the pool's size waits for them (issue 47: two processes
        // on a pool of 20 took 11 times as long as on 40).
        if let Some(pool) = store.pooler_pool_size().await
            && let Some(w) = pooler_warning(
                connection_budget(
                    args.runtime.max_connections.unwrap_or(16),
                    server.is_some(),
                    followed,
                ),
                pool,
            )
        {
            eprintln!("{w}");
        }
        writeln!(
            out,
            "workdo up: database {database}; {templates} templates; {} workers; API {}",
            bindings.len(),
            match &server {
                Some((_, at, _)) => format!("http://{at}"),
                None => "off".into(),
            }
        )?;
        out.flush()?;
        if bindings.is_empty() {
            eprintln!(
                "workdo: no step of the loaded templates has a function; running maintenance only"
            );
        }
        runtime::run(store.clone(), config, bindings, token).await?;
        if let Some((s, _, _)) = server {
            s.await??;
        }
        return Ok(());
    };
    let mut config = runtime_config(&args.runtime, true)?;
    let workspace = args
        .workspace
        .clone()
        .unwrap_or_else(|| data_dir.join("demo-workspace"));
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create the demo workspace {}", workspace.display()))?;
    let workspace = workspace.canonicalize()?;
    config
        .env
        .entry("WORKDO_WORKSPACE".into())
        .or_insert_with(|| workspace.display().to_string());
    // The demo templates, loaded as `templates load` would, their functions deployed first.
    let files = super::files::find_files(&args.templates)
        .with_context(|| format!("cannot read {}", args.templates.display()))?;
    for f in files {
        let loaded = deployed_demo(store, super::files::parse_file(&f)?).await?;
        store.template_save(&loaded).await?;
    }
    let bindings = runtime::bindings(store, &[]).await?;
    let run: u32 = rand::random::<u32>() % 1_000_000;
    let started = std::time::Instant::now();
    demo::seed(store, run, n).await?;
    writeln!(
        out,
        "demo run {run}: {n} books, workspace {}",
        workspace.display()
    )?;
    let token = CancellationToken::new();
    let server = spawn_api(store, &args, &token).await?;
    if let Some((_, at, access)) = &server {
        writeln!(
            out,
            "admin page: http://{at}/{}",
            if *access == api::Access::Open {
                " (no sign-in: loopback only)"
            } else {
                " (sign in with a token: workdo tokens create --role viewer)"
            }
        )?;
        out.flush()?;
    }
    let runtime = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    let signals = shutdown_on_signal()?;
    let draw = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let finished = tokio::select! {
        watched = demo::watch(store, run, draw) => { watched?; true }
        () = signals.cancelled() => false,
    };
    let serve_on = finished && (args.serve || std::io::IsTerminal::is_terminal(&std::io::stdin()));
    match &server {
        Some((_, at, _)) if serve_on => {
            demo::summary(store, run, started, out).await?;
            writeln!(
                out,
                "\nthe admin page keeps serving at http://{at}/ (and the runtime keeps running) until Ctrl-C\n\
                 next: workdo status · workdo queue googleScannedBookWF:google-download --errors · workdo show OBJECT · workdo up --demo 50 for another run"
            )?;
            if private {
                writeln!(
                    out,
                    "the private database in {} keeps running after Ctrl-C; stop it with: workdo db stop",
                    data_dir.display()
                )?;
            }
            out.flush()?;
            signals.cancelled().await;
            token.cancel();
            runtime.await??;
            if let Some((s, _, _)) = server {
                s.await??;
            }
        }
        _ => {
            token.cancel();
            runtime.await??;
            let served = server.is_some();
            if let Some((s, _, _)) = server {
                s.await??;
            }
            demo::summary(store, run, started, out).await?;
            if served {
                // Without a terminal (or after Ctrl-C) the page stops with the demo: say so,
                // and how to keep it.
                writeln!(
                    out,
                    "the admin page stopped with the demo; `workdo up --demo --serve` keeps it serving, or `workdo serve --open` serves it alone"
                )?;
            }
            if private {
                writeln!(
                    out,
                    "the private database in {} keeps running; stop it with: workdo db stop",
                    data_dir.display()
                )?;
            }
        }
    }
    Ok(())
}

/// `workdo run`: claim the step of these objects now and run it through the worker's path.
pub(super) async fn run_now(
    store: &Store,
    step: &str,
    objects: &[String],
    args: &RuntimeArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let bindings = runtime::bindings(store, &[step.to_string()]).await?;
    let Some(binding) = bindings.into_iter().next() else {
        bail!("{step} has no function to run");
    };
    let config = runtime_config(args, false)?;
    let done = inject::run_now(store, &binding, &config, objects).await?;
    let mut report = Vec::new();
    for o in objects {
        let line = match done.iter().find(|(c, _)| &c.object_id == o) {
            Some((_, r)) => serde_json::json!({"object": o, "status": r.change.status.as_str(),
                "message": r.change.error_message, "note": r.change.note}),
            None => {
                let why = store.why(o, &binding.template, &binding.step).await;
                let reason = match why {
                    Ok(w) => w.reasons.join("; "),
                    Err(e) => e.to_string(),
                };
                serde_json::json!({"object": o, "status": "not run", "message": reason})
            }
        };
        report.push(line);
    }
    emit(out, json, &report, |o| {
        for r in &report {
            writeln!(
                o,
                "{} {}{}",
                r["object"].as_str().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default(),
                r["message"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    })?;
    let not_run = report.iter().filter(|r| r["status"] == "not run").count();
    if not_run > 0 {
        bail!("{not_run} of {} objects were not run", report.len());
    }
    Ok(())
}

/// `workdo serve`: the HTTP API only (and the folding of step counts and the hot tables'
/// vacuums, which a runtime's maintenance would otherwise do: robots update steps through it).
pub(super) async fn serve(store: Store, args: &super::args::ApiArgs) -> Result<()> {
    let stop = shutdown_on_signal()?;
    let folding = tokio::spawn(runtime::fold_step_counts(
        store.clone(),
        std::time::Duration::from_secs(1),
        stop.clone(),
    ));
    let vacuums = tokio::spawn(runtime::vacuum_hot_tables(
        store.clone(),
        std::time::Duration::from_secs(1),
        runtime::VACUUM_DEAD,
        stop.clone(),
    ));
    // A session found shared is checked again and cleared here too, as in `up`.
    let session = tokio::spawn(runtime::session::watch(store.clone(), stop.clone()));
    let served = api::serve(store, args.address(), args.access(), stop.clone()).await;
    stop.cancel();
    let _ = folding.await;
    let _ = vacuums.await;
    let _ = session.await;
    served?;
    Ok(())
}

/// `workdo worker TEMPLATE:STEP …`: workers for just these steps.
pub(super) async fn worker(
    store: Store,
    steps: &[String],
    queue: Option<&str>,
    args: &RuntimeArgs,
) -> Result<()> {
    let (steps, named) = match queue {
        Some(name) => {
            let q = store.queue_named(name).await?;
            (vec![format!("{}:{}", q.template, q.step)], Some(q))
        }
        None => (steps.to_vec(), None),
    };
    let bindings = runtime::with_queue(runtime::bindings(&store, &steps).await?, named.as_ref());
    let mut config = runtime_config(args, false)?;
    config.only = Some(steps);
    config.queue = named;
    run_until_signal(store, config, bindings).await
}

/// A demo template whose steps run programs shipped next to the `workdo` executable (the demo's
/// function binaries), with those programs deployed (`workdo functions deploy NAME PATH`) and
/// the template naming them `deployed:` instead: the first run a newcomer sees runs deployed
/// functions, fetched into the cache as any worker host would. Deploying the same binary again
/// makes no new version.
async fn deployed_demo(
    store: &Store,
    loaded: crate::model::template::Loaded,
) -> Result<crate::model::template::Loaded> {
    use crate::model::template::{Format, Runner};
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(std::path::Path::to_path_buf))
    else {
        return Ok(loaded);
    };
    let mut names: Vec<String> = Vec::new();
    for f in loaded.template.functions() {
        if let Runner::Exec { argv } | Runner::Warm { argv, .. } = &f.runner
            && argv.len() == 1
            && !argv[0].contains('/')
            && dir.join(&argv[0]).is_file()
            && !names.contains(&argv[0])
        {
            names.push(argv[0].clone());
        }
    }
    if names.is_empty() {
        return Ok(loaded);
    }
    for name in &names {
        let bytes = std::fs::read(dir.join(name))
            .with_context(|| format!("reading the demo function {name}"))?;
        let art = crate::store::functions::NewArtifact {
            bytes: &bytes,
            archive: false,
            entry: None,
            note: Some("the demo's function, deployed by up --demo"),
            max: crate::artifact::DEFAULT_MAX_BYTES,
        };
        store.function_deploy(name, &art, "demo").await?;
    }
    let mut source = String::with_capacity(loaded.source.len());
    for line in loaded.source.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let mut out = line.to_string();
        for name in &names {
            match loaded.format {
                Format::Xml => {
                    out = out
                        .replace(&format!("exec=\"{name}\""), &format!("deployed=\"{name}\""))
                        .replace(
                            &format!("warm=\"{name}\""),
                            &format!("deployed=\"{name}\" mode=\"warm\""),
                        );
                }
                Format::Yaml => {
                    if line.trim() == format!("exec: {name}") {
                        out = format!("{indent}deployed: {name}");
                    } else if line.trim() == format!("warm: {name}") {
                        out = format!("{indent}deployed: {name}\n{indent}mode: warm");
                    }
                }
            }
        }
        source.push_str(&out);
        source.push('\n');
    }
    Ok(crate::model::template::parse(
        &loaded.origin,
        loaded.format,
        &source,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_pool_is_sized_from_its_steps() {
        assert_eq!(worker_connections(1, 2), 6);
        assert_eq!(worker_connections(3, 4), 10);
        assert_eq!(
            worker_connections(40, 2),
            16,
            "never more than up's default"
        );
    }

    #[test]
    fn the_connection_budget_and_its_warning() {
        assert_eq!(connection_budget(16, true, false), 16 + 8 + 1);
        assert_eq!(connection_budget(2, true, false), 2 + 2 + 1);
        assert_eq!(connection_budget(16, false, false), 17);
        assert_eq!(
            connection_budget(16, true, true),
            16 + 8 + 1 + 1,
            "the failover watcher"
        );
        assert_eq!(budget_warning(25, 100, 3, 50), None);
        let w = budget_warning(25, 100, 3, 80).expect("no room");
        assert!(
            w.contains("up to 25") && w.contains("room for 17 more"),
            "{w}"
        );
    }
}
