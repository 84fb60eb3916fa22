//! Deployed functions: what a deploy costs, a worker's first fetch of a new version, and a
//! call through the cache against the same file called from its own path.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::scenarios::call_rate;
use super::{Row, row};
use crate::model::template;
use crate::runtime::function_cache::FunctionCache;
use crate::store::Store;
use crate::store::functions::NewArtifact;

/// Rows for the function `exe` (the noop binary, else the workdo executable): deploy (each run
/// a new version: the bytes with a byte appended, which an ELF file ignores), the first fetch
/// of that version into an empty cache, a cached lookup, and exec calls from the cache against
/// calls of the original file.
pub(super) async fn rows(
    store: &Store,
    exe: &Path,
    quick: bool,
    runs: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let bytes = std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    let size_mb = bytes.len() as f64 / (1 << 20) as f64;
    let cache_dir = tempfile_dir()?;
    let (mut deploys, mut fetches, mut lookups) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for i in 0..runs {
        let mut b = bytes.clone();
        b.extend_from_slice(format!("\n{}-{i}", rand::random::<u64>()).as_bytes());
        let began = Instant::now();
        let d = store
            .function_deploy(
                "bench-noop",
                &NewArtifact {
                    bytes: &b,
                    archive: false,
                    entry: None,
                    note: None,
                    max: crate::artifact::DEFAULT_MAX_BYTES,
                },
                "bench",
            )
            .await?;
        deploys.push(began.elapsed().as_secs_f64() * 1e3);
        let pin = store.function_fixed("bench-noop", d.version).await?;
        let cache = FunctionCache::new(cache_dir.join(format!("run-{i}")), u64::MAX);
        let began = Instant::now();
        let path = cache.path(store, &pin).await.map_err(anyhow::Error::msg)?;
        fetches.push(began.elapsed().as_secs_f64() * 1e3);
        let n = if quick { 1_000 } else { 100_000 };
        let began = Instant::now();
        for _ in 0..n {
            cache.path(store, &pin).await.map_err(anyhow::Error::msg)?;
        }
        lookups.push(began.elapsed().as_secs_f64() * 1e6 / n as f64);
        last = Some(path);
    }
    rows.push(row(
        format!("deployed function: deploy a {size_mb:.1} MB file (a new version)"),
        "ms",
        deploys,
    ));
    rows.push(row(
        "deployed function: a worker's first fetch of a version (read, check, write)".into(),
        "ms",
        fetches,
    ));
    rows.push(row(
        "deployed function: a cached version's lookup per call".into(),
        "µs",
        lookups,
    ));
    // Calls of the cached copy against calls of the original file, alternated.
    if let Some(cached) = last
        && exe.file_name().is_some_and(|n| n == "noop")
    {
        let exec = |path: &Path| template::FunctionSpec {
            runner: template::Runner::Exec {
                argv: vec![path.display().to_string()],
            },
            timeout_secs: 60.0,
            concurrency: 2,
            env: Default::default(),
            documents: Vec::new(),
        };
        let n = if quick { 20 } else { 400 };
        let (mut direct, mut from_cache) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            direct.push(call_rate(&exec(exe), n).await?);
            from_cache.push(call_rate(&exec(&cached), n).await?);
        }
        let d = row(
            "deployed function: exec calls of the noop file, 2 at a time".into(),
            "calls/s",
            direct,
        );
        let mut c = row(
            "deployed function: exec calls of its cached copy, 2 at a time".into(),
            "calls/s",
            from_cache,
        );
        c.ratio = Some(c.median / d.median.max(1e-9));
        rows.push(d);
        rows.push(c);
    }
    let _ = std::fs::remove_dir_all(&cache_dir);
    Ok(())
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "workdo-bench-cache-{}",
        hex::encode(rand::random::<[u8; 6]>())
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
