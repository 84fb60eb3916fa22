//! Bulk work from files: `objects add --from FILE` (CSV with an `id` column, or JSON lines with
//! properties and documents) and `start TEMPLATE --from FILE` (ids a line, or the same files),
//! in one command each instead of one per object; a bad row is named by file and line.

use crate::support;

use std::process::Command;

use serde_json::{Value, json};
use support::db;

#[tokio::test]
async fn objects_and_starts_come_from_files() {
    let t = db().await;
    support::load(
        &t.store,
        "b.yaml",
        "name: bulkWF\nsteps:\n  - { name: a }\n",
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let csv = dir.path().join("objects.csv");
    std::fs::write(
        &csv,
        "id,barcode,collection\nbb111bb1111,36105010362304123456,maps\n# a comment\ndruid:bb222bb2222,36105,\n",
    )
    .expect("csv");
    let (ok, stdout, stderr) = workdo(&["objects", "add", "--from", &csv.display().to_string()]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("2 objects registered, 0 updated"),
        "{stdout}"
    );
    let props: Value =
        sqlx::query_scalar("select properties from workdo.objects where id = 'druid:bb111bb1111'")
            .fetch_one(t.pool())
            .await
            .expect("object");
    assert_eq!(
        props,
        json!({"barcode": "36105010362304123456", "collection": "maps"})
    );

    let lines = dir.path().join("objects.jsonl");
    std::fs::write(
        &lines,
        "{\"id\": \"druid:bb333bb3333\", \"properties\": {\"year\": 1854}, \"documents\": {\"desc\": \"<mods/>\"}}\n{\"id\": \"druid:bb111bb1111\", \"properties\": {\"rush\": true}}\n",
    )
    .expect("jsonl");
    let (ok, stdout, stderr) = workdo(&["objects", "add", "--from", &lines.display().to_string()]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("1 objects registered, 1 updated"),
        "{stdout}"
    );
    let doc: String = sqlx::query_scalar(
        "select content from workdo.documents where object_id = 'druid:bb333bb3333' and name = 'desc'",
    )
    .fetch_one(t.pool())
    .await
    .expect("document");
    assert_eq!(doc, "<mods/>");

    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, "# to start\nbb111bb1111\n\ndruid:bb333bb3333\n").expect("ids");
    let (ok, _, stderr) = workdo(&[
        "start",
        "bulkWF",
        "druid:bb222bb2222",
        "--from",
        &ids.display().to_string(),
    ]);
    assert!(ok, "{stderr}");
    let started: i64 =
        sqlx::query_scalar("select count(*) from workdo.workflows where template = 'bulkWF'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(started, 3);

    // A bad row is named by file and line, and nothing after it is applied.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": \"druid:bb444bb4444\"}\n{not json}\n").expect("bad");
    let (ok, _, stderr) = workdo(&["objects", "add", "--from", &bad.display().to_string()]);
    assert!(
        !ok && stderr.contains("bad.jsonl:2: not a JSON object"),
        "{stderr}"
    );
    let bad_csv = dir.path().join("bad.csv");
    std::fs::write(&bad_csv, "barcode\n123\n").expect("bad csv");
    let (ok, _, stderr) = workdo(&["objects", "add", "--from", &bad_csv.display().to_string()]);
    assert!(
        !ok && stderr.contains("bad.csv:1") && stderr.contains("\"id\" column"),
        "{stderr}"
    );
}

/// A CSV as spreadsheets write it: a byte-order mark, quoted cells holding commas, doubled
/// quotes and a line break; the id column quoted too. Each cell is one property.
#[tokio::test]
async fn a_csv_is_read_with_its_quoting_and_bom() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("people.csv");
    std::fs::write(
        &csv,
        "\u{feff}\"id\",author,title\nbb444bb4444,\"Smith, John\",\"The \"\"Real\"\" Map\nof Iowa\"\n",
    )
    .expect("csv");
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["objects", "add", "--from"])
        .arg(&csv)
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "error")
        .output()
        .expect("workdo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let props: Value =
        sqlx::query_scalar("select properties from workdo.objects where id = 'druid:bb444bb4444'")
            .fetch_one(t.pool())
            .await
            .expect("object");
    assert_eq!(
        props,
        json!({"author": "Smith, John", "title": "The \"Real\" Map\nof Iowa"})
    );
}
