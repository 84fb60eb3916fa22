//! The demo function binaries speak workdo/1: an event on stdin, a result on stdout.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn event(step: &str, properties: Value, attempt: i32) -> Value {
    json!({
        "protocol": "workdo/1", "step_id": 1, "workflow_id": 1, "object": "druid:bb123cd4567",
        "template": "googleScannedBookWF", "step": step, "version": 1, "lane": "default",
        "attempt": attempt, "max_attempts": 5, "properties": properties, "documents": {},
        "context": {}, "deadline": "2030-01-01T00:00:00Z"
    })
}

fn call(bin: &str, workspace: &std::path::Path, e: &Value) -> Value {
    let mut child = Command::new(bin)
        .env("WORKDO_WORKSPACE", workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(e.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("a JSON result")
}

#[test]
fn the_book_pipeline_works_on_real_files() {
    let ws = tempfile::tempdir().expect("workspace");
    let props = json!({"title": "Walden & <Co>", "author": "Thoreau", "catkey": "1", "barcode": "361", "pages": 3, "slow_scan": true});
    let r = call(
        env!("CARGO_BIN_EXE_descriptive-metadata"),
        ws.path(),
        &event("descriptive-metadata", props.clone(), 1),
    );
    assert_eq!(r["status"], "completed");
    assert!(
        r["object"]["documents"]["descMetadata"]
            .as_str()
            .is_some_and(|m| m.contains("Walden &amp; &lt;Co&gt;"))
    );
    // A slow scan is not ready the first time, then it is.
    let r = call(
        env!("CARGO_BIN_EXE_google-download"),
        ws.path(),
        &event("google-download", props.clone(), 1),
    );
    assert_eq!(
        (r["status"].as_str(), r["note"].as_str()),
        (Some("defer"), Some("scan not ready yet"))
    );
    let r = call(
        env!("CARGO_BIN_EXE_google-download"),
        ws.path(),
        &event("google-download", props.clone(), 1),
    );
    assert_eq!(r["status"], "completed");
    let r = call(
        env!("CARGO_BIN_EXE_process-content"),
        ws.path(),
        &event("process-content", props, 1),
    );
    assert_eq!(r["status"], "completed");
    assert_eq!(r["object"]["properties"]["page_count"], 3);
    assert_eq!(
        r["spans"].as_array().map(Vec::len),
        Some(3),
        "a checksum span per page"
    );
    let missing = call(
        env!("CARGO_BIN_EXE_google-download"),
        ws.path(),
        &event(
            "google-download",
            json!({"barcode": "999", "barcode_missing": true}),
            2,
        ),
    );
    assert_eq!(
        (missing["status"].as_str(), missing["retryable"].as_bool()),
        (Some("error"), Some(true))
    );
    assert_eq!(missing["message"], "Item for barcode 999 not found");
    let garbage = {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shelve"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"not json")
            .expect("write");
        serde_json::from_slice::<Value>(&child.wait_with_output().expect("wait").stdout)
            .expect("json")
    };
    assert_eq!(garbage["status"], "error");
    assert!(
        garbage["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the event is not valid JSON for workdo/1"))
    );
}
