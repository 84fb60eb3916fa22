//! Step-to-step latency: one workflow of 40 sequential steps (Windmill's flow of 40 lightweight
//! tasks), each function trivial, timed from its start to its completion as the database
//! recorded them. Per-step overhead is the chain's time ÷ 40 less the function's own time, which
//! for a process per call is the matching floor: starting `/bin/true` for a static binary,
//! `python3 -c pass` for Python.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tokio_util::sync::CancellationToken;

use super::scenarios::load;
use super::{Row, row};
use crate::runtime;
use crate::store::{StartRequest, Store};

/// Steps in the chain.
pub(super) const STEPS: usize = 40;

/// The folder holding the SDKs (`functions/python`, `functions/ruby`): found from the current
/// directory or the executable's upwards, or `WORKDO_SDK_DIR`.
fn sdk_root() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WORKDO_SDK_DIR") {
        return Some(PathBuf::from(d));
    }
    let starts = [
        std::env::current_dir().ok(),
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf)),
    ];
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            if dir
                .join("functions/python/workdo_function/__init__.py")
                .is_file()
            {
                return Some(dir.join("functions"));
            }
        }
    }
    None
}

/// Milliseconds one start of `argv` takes (median of `n`), run as the exec runner runs one.
async fn start_ms(argv: &[String], n: usize) -> Result<f64> {
    // What a function's environment holds of the runtime's (PATH, HOME): a version manager's
    // shim on PATH is part of what starting `python3` costs.
    let env: std::collections::BTreeMap<String, String> = ["PATH", "HOME"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        let status = crate::invoke::command(argv, &env, "exec").status().await?;
        if !status.success() {
            bail!("bench check failed: {argv:?} exited with {status}");
        }
        v.push(began.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// One chain of `function` (a YAML flow mapping): seconds from start to completion.
async fn chain_once(store: &Store, name: &str, function: &str, run: usize) -> Result<f64> {
    let mut yaml = format!("name: {name}\nsteps:\n");
    for i in 0..STEPS {
        let prereq = if i == 0 {
            String::new()
        } else {
            format!(", prereqs: [s{:02}]", i - 1)
        };
        yaml.push_str(&format!(
            "  - {{ name: s{i:02}{prereq}, function: {function} }}\n"
        ));
    }
    load(store, &format!("{name}.yaml"), &yaml).await?;
    let bindings = runtime::bindings(store, &[])
        .await?
        .into_iter()
        .filter(|b| b.template == name)
        .collect();
    let config = runtime::Config {
        schedules: false,
        ..runtime::Config::default()
    };
    let token = CancellationToken::new();
    let handle = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    // A first chain warms up what the runtime starts on first use (warm processes, the
    // workers' prepared statements); the second is the one measured.
    let mut seconds = 0.0;
    for pass in ["warmup", "measured"] {
        let object = format!("chain:{name}-{run}-{pass}");
        store
            .workflow_start(&StartRequest::new(name, &[object.as_str()]))
            .await?;
        let began = Instant::now();
        while !store.bench_object_completed(&object).await? {
            if began.elapsed() > Duration::from_secs(600) {
                bail!("the {name} chain did not finish in 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seconds = store.bench_workflow_seconds(name).await?.unwrap_or(0.0);
    }
    token.cancel();
    handle.await??;
    store.bench_reset().await?;
    Ok(seconds)
}

/// The chain rows: the floors, then each function's chain time and per-step overhead.
pub(super) async fn rows(
    store: &Store,
    noop_exec: Option<&Path>,
    runs: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let true_argv = vec!["/bin/true".to_string()];
    let python_pass = vec!["python3".to_string(), "-c".into(), "pass".into()];
    let (mut true_ms, mut python_ms) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        true_ms.push(start_ms(&true_argv, 50).await?);
        python_ms.push(start_ms(&python_pass, 20).await.unwrap_or(f64::NAN));
    }
    let floor_true = row("chain floor: start /bin/true".into(), "ms", true_ms);
    let floor_py = row("chain floor: start python3 -c pass".into(), "ms", python_ms);
    let (ft, fp) = (floor_true.median, floor_py.median);
    rows.push(floor_true);
    rows.push(floor_py);

    let dir = std::env::temp_dir().join(format!(
        "workdo-bench-chain-{}",
        hex::encode(rand::random::<[u8; 6]>())
    ));
    std::fs::create_dir_all(&dir)?;
    let mut kinds: Vec<(String, String, f64)> =
        vec![("builtin noop".into(), "{ builtin: noop }".into(), 0.0)];
    if let Some(noop) = noop_exec {
        kinds.push((
            "static Rust exec (noop)".into(),
            format!("{{ exec: [\"{}\"] }}", noop.display()),
            ft,
        ));
    }
    if let Some(sdk) = sdk_root() {
        let py = dir.join("noop_sdk.py");
        std::fs::write(
            &py,
            format!(
                "import sys\nsys.path.insert(0, {:?})\nfrom workdo_function import step, completed\n\n@step\ndef run(event):\n    return completed()\n",
                sdk.join("python").display().to_string()
            ),
        )?;
        let rb = dir.join("noop_sdk.rb");
        std::fs::write(
            &rb,
            "require \"workdo/function\"\ninclude Workdo::Function::Results\nWorkdo::Function.step { |_event| completed }\n",
        )?;
        let py = py.display().to_string();
        let rb_lib = sdk.join("ruby/lib").display().to_string();
        kinds.push((
            "Python SDK exec".into(),
            format!("{{ exec: [python3, \"{py}\"] }}"),
            fp,
        ));
        kinds.push((
            "Python SDK warm".into(),
            format!("{{ warm: [python3, \"{py}\"], pool: 1 }}"),
            0.0,
        ));
        kinds.push((
            "Ruby SDK warm".into(),
            format!(
                "{{ warm: [ruby, -I, \"{rb_lib}\", \"{}\"], pool: 1 }}",
                rb.display()
            ),
            0.0,
        ));
    }
    for (i, (label, function, floor)) in kinds.into_iter().enumerate() {
        let mut per_step = Vec::new();
        let mut wall = Vec::new();
        for r in 0..runs {
            let s = chain_once(store, &format!("benchChain{i}WF"), &function, r).await?;
            wall.push(s * 1e3);
            per_step.push((s * 1e3 / STEPS as f64 - floor).max(0.0));
        }
        rows.push(row(format!("chain of {STEPS}, {label}: wall"), "ms", wall));
        rows.push(row(
            format!("chain of {STEPS}, {label}: overhead per step"),
            "ms",
            per_step,
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
