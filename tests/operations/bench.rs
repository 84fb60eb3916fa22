//! `workdo bench --quick`: the bench's own correctness (every step it ran completed exactly once,
//! every yardstick job processed); no timing is asserted.

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_bench_runs_every_scenario_and_checks_itself() {
    use clap::Parser;
    let t = support::db().await;
    // In a test, the running executable is the test binary: name the real workdo.
    let cli = workdo::cli::Cli::try_parse_from([
        "workdo",
        "--database-url",
        &t.url,
        "--json",
        "bench",
        "--quick",
        "--runs",
        "1",
        "--noop-function",
        env!("CARGO_BIN_EXE_workdo"),
    ])
    .expect("arguments");
    let mut out = Vec::new();
    workdo::cli::run(cli, &mut out)
        .await
        .expect("bench runs and its checks pass");
    let rows: serde_json::Value = serde_json::from_slice(&out).expect("JSON table");
    let names: Vec<&str> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for expected in [
        "yardstick: SQL queue, batch 100, 4 conns",
        "claim+complete: 1-step workflows, batch 1, 2 conns",
        "DAG (9 steps), in-process functions: steps",
        "DAG (9 steps), warm functions: steps",
        "DAG (9 steps), exec functions (workdo binary): steps",
        "start: in one call (9-step workflows)",
        "wake latency, low load: p99",
        "wake latency, under the in-process DAG load: p99",
        "claim latency with 10000 waiting steps (p50)",
        "function calls, warm, pool 2, one call at a time each",
        "function calls, warm, pool 2, 16 calls pipelined each",
        "process start and exit (/bin/true), 2 at a time",
        "function calls, exec, 2 at a time, the workdo binary",
        "claim+complete, 2 steps then 10 side by side, ordinary steps",
        "claim+complete, the same composed at run time (observer, generator, 10 generated)",
        "start and run, composed at run time (10 of 12 step rows written by the generator)",
        "claim+complete, the same composed at run time, the bricklet's step with the ten steps' 1,000 slots",
        "start and run, composed at run time, the bricklet's step with the ten steps' 1,000 slots",
        "machine signals, one job, one after another",
        "alarm firing delay: p99",
        "archive: 2000 finished workflows, 8000 events, batches of 1000",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // The SDK's small `noop` function binary is measured when it was built beside workdo (as
    // `cargo build` and `cargo test --workspace` leave it).
    let beside = std::path::Path::new(env!("CARGO_BIN_EXE_workdo")).with_file_name("noop");
    for small in [
        "DAG (9 steps), exec functions (noop binary): steps",
        "function calls, exec, 2 at a time, noop binary (the SDK's, 0.7 MB)",
    ] {
        assert_eq!(names.contains(&small), beside.is_file(), "{small}");
    }
    for r in rows.as_array().expect("rows") {
        assert!(r["median"].as_f64().is_some_and(|m| m > 0.0), "{r}");
        assert!(
            r["min"].as_f64() <= r["median"].as_f64() && r["median"].as_f64() <= r["max"].as_f64()
        );
    }
    let ratio = rows
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["name"] == "claim+complete: 1-step workflows, batch 100, 2 conns")
        .expect("row");
    assert!(
        ratio["ratio"].as_f64().is_some(),
        "ours is compared with the yardstick"
    );
}
