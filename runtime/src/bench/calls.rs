//! Function calls alone, no database: warm processes, and a process per call (exec) measured
//! against what starting the most trivial process costs on this machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};

use super::scenarios::call_rate;
use super::{Row, row};
use crate::model::template;

/// The small no-op function binary for the exec figures: `given`, which must exist, or else
/// the SDK's `noop` next to the workdo executable `exe` (where `cargo build --release` leaves
/// it), if it is there.
pub(super) fn exec_function(exe: &Path, given: Option<&Path>) -> Result<Option<PathBuf>> {
    if let Some(path) = given {
        if !path.is_file() {
            bail!("--exec-function {}: no such file", path.display());
        }
        return Ok(Some(path.to_path_buf()));
    }
    Ok(exe
        .parent()
        .map(|dir| dir.join("noop"))
        .filter(|p| p.is_file()))
}

/// Starts of `/bin/true` per second, `parallel` at a time, spawned as the exec runner spawns a
/// function ([`crate::invoke::command`]): the floor under any function that is a process per
/// call.
async fn process_starts(n: usize, parallel: usize) -> Result<f64> {
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| anyhow::anyhow!("no /bin/true to measure a process start against"))?;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..parallel {
        let next = std::sync::Arc::clone(&next);
        tasks.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let argv = [program.to_string()];
                let status = crate::invoke::command(&argv, &Default::default(), "exec")
                    .status()
                    .await?;
                if !status.success() {
                    bail!("bench check failed: {program} exited with {status}");
                }
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(n as f64 / began.elapsed().as_secs_f64())
}

/// The function call rows: warm (ratios ÷ the first), then `true` started as a process and the
/// exec calls (ratios ÷ the start of `true`).
pub(super) async fn rows(
    exe: &Path,
    small: Option<&Path>,
    quick: bool,
    runs: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let argv = vec![exe.display().to_string(), "__noop-function".to_string()];
    let warm = |pipeline: u32, concurrency: u32| template::FunctionSpec {
        runner: template::Runner::Warm {
            argv: argv.clone(),
            pool: 2,
            pipeline,
        },
        timeout_secs: 60.0,
        concurrency,
        env: Default::default(),
        documents: Vec::new(),
    };
    let exec = |argv: Vec<String>| template::FunctionSpec {
        runner: template::Runner::Exec { argv },
        concurrency: 2,
        ..warm(1, 2)
    };
    let (n_warm, n_exec) = if quick { (200, 20) } else { (20_000, 400) };
    let mut base = None;
    for (label, spec) in [
        ("warm, pool 2, one call at a time each", warm(1, 8)),
        ("warm, pool 2, 16 calls pipelined each", warm(16, 32)),
    ] {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(call_rate(&spec, n_warm).await?);
        }
        let mut r = row(format!("function calls, {label}"), "calls/s", v);
        match base {
            None => base = Some(r.median),
            Some(b) => r.ratio = Some(r.median / f64::max(b, 1e-9)),
        }
        rows.push(r);
    }
    let mut execs = Vec::new();
    if let Some(small) = small {
        let label = "exec, 2 at a time, noop binary (the SDK's, 0.7 MB)";
        execs.push((label, exec(vec![small.display().to_string()])));
    }
    execs.push(("exec, 2 at a time, the workdo binary", exec(argv.clone())));
    // The floor and the exec calls alternate, so that each ratio compares one stretch of time.
    let mut floor = Vec::new();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); execs.len()];
    for _ in 0..runs {
        floor.push(process_starts(n_exec, 2).await?);
        for ((_, spec), v) in execs.iter().zip(rates.iter_mut()) {
            v.push(call_rate(spec, n_exec).await?);
        }
    }
    let floor = row(
        "process start and exit (/bin/true), 2 at a time".into(),
        "starts/s",
        floor,
    );
    let f = floor.median;
    rows.push(floor);
    for ((label, _), v) in execs.into_iter().zip(rates) {
        let mut r = row(format!("function calls, {label}"), "calls/s", v);
        r.ratio = Some(r.median / f.max(1e-9));
        rows.push(r);
    }
    Ok(())
}
