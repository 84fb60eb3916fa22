//! Deployed functions over HTTP: the API's deploy, list, rollback and delete (and the archives
//! it refuses), and the Functions page in a browser.

use super::*;

/// The API: an admin deploys a file and a folder; a viewer may not; archives that leave their
/// folder are refused; rollback and delete answer as the CLI does.
#[tokio::test]
async fn the_api_deploys_lists_rolls_back_and_refuses_bad_archives() {
    use reqwest::StatusCode;
    let a = support::api::api().await;
    let put = |token: &str, name: &str, kind: &str, q: &str, body: Vec<u8>| {
        a.http
            .put(format!("{}/api/functions/{name}{q}", a.base))
            .bearer_auth(token)
            .header("content-type", kind)
            .body(body)
            .send()
    };
    let file = b"#!/bin/sh\necho '{\"status\":\"completed\"}'\n".to_vec();
    let r = put(&a.viewer, "f", "application/octet-stream", "", file.clone())
        .await
        .expect("put");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = put(
        &a.admin,
        "f",
        "application/octet-stream",
        "?note=one",
        file.clone(),
    )
    .await
    .expect("put");
    assert_eq!(r.status(), StatusCode::CREATED);
    let d: Value = r.json().await.expect("json");
    assert_eq!(
        (d["version"].as_i64(), d["new"].as_bool()),
        (Some(1), Some(true))
    );
    let r = put(&a.admin, "f", "application/octet-stream", "", file.clone())
        .await
        .expect("put");
    assert_eq!(r.status(), StatusCode::OK, "the same bytes: no new version");
    let r = put(
        &a.admin,
        "f",
        "application/octet-stream",
        "",
        b"#!/bin/sh\n".to_vec(),
    )
    .await
    .expect("put");
    assert_eq!(r.status(), StatusCode::CREATED);
    // A folder's archive, and ones that leave it.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("main.py"), "print()\n").expect("write");
    let tar = workdo::artifact::pack_folder(dir.path(), "main.py", 1 << 20).expect("pack");
    let r = put(
        &a.admin,
        "g",
        "application/x-tar",
        "?entry=main.py",
        tar.clone(),
    )
    .await
    .expect("put");
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = put(&a.admin, "g", "application/x-tar", "", tar)
        .await
        .expect("put");
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "a folder needs its entry"
    );
    for evil in ["../x", "/etc/x"] {
        let h = tar_header(evil);
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(b"x");
        bytes.resize(1024, 0);
        bytes.extend_from_slice(&[0; 1024]);
        let r = put(&a.admin, "evil", "application/x-tar", "?entry=x", bytes)
            .await
            .expect("put");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{evil}");
        let body = r.text().await.expect("body");
        assert!(body.contains("refused"), "{evil}: {body}");
    }
    let list: Value = a
        .http
        .get(format!("{}/api/functions", a.base))
        .bearer_auth(&a.viewer)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let f = list
        .as_array()
        .expect("array")
        .iter()
        .find(|f| f["name"] == "f")
        .expect("f");
    assert_eq!(f["current"], 2);
    assert_eq!(f["versions"][1]["note"], "one");
    let r = a
        .http
        .post(format!("{}/api/functions/f/rollback", a.base))
        .bearer_auth(&a.admin)
        .json(&serde_json::json!({"to": 1}))
        .send()
        .await
        .expect("rollback");
    assert_eq!(r.status(), StatusCode::OK);
    let r = a
        .http
        .post(format!("{}/api/functions/f/rollback", a.base))
        .bearer_auth(&a.admin)
        .json(&serde_json::json!({"to": 9}))
        .send()
        .await
        .expect("rollback");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = a
        .http
        .delete(format!("{}/api/functions/g", a.base))
        .bearer_auth(&a.admin)
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), StatusCode::OK);
    let kinds: Vec<String> = sqlx::query_scalar(
        "select kind from workdo.events where kind like 'function_%' order by id",
    )
    .fetch_all(a.t.pool())
    .await
    .expect("events");
    assert_eq!(
        kinds,
        [
            "function_deployed",
            "function_deployed",
            "function_deployed",
            "function_rolled_back",
            "function_deleted"
        ]
    );
}

/// A ustar header naming `path` raw (the tar crate's builder refuses `..` and absolute paths).
fn tar_header(path: &str) -> tar::Header {
    let mut h = tar::Header::new_old();
    h.set_size(1);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    let old = h.as_old_mut();
    old.name[..path.len()].copy_from_slice(path.as_bytes());
    h.set_cksum();
    h
}

/// The Functions page in a browser: each version with its hash, pins and note, the current one
/// marked, and an admin's rollback, confirmed as a person would.
#[tokio::test]
async fn the_functions_page_lists_versions_and_rolls_back() {
    use fantoccini::Locator;
    use support::browser::{admin_session, click, shot, wait_text};
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = stamp_script(dir.path(), "p1.sh", "p1");
    let v2 = stamp_script(dir.path(), "p2.sh", "p2");
    deploy(&t, "pagefn", &v1).await;
    load(&t.store, "held.yaml", &HELD.replace("stamp", "pagefn")).await;
    let ids = objects(&t, "page", 3).await;
    start_on(&t, "heldWF", &ids).await;
    deploy(&t, "pagefn", &v2).await;
    let (c, _driver, base) = admin_session(&t).await;
    c.goto(&format!("{base}/ui/functions"))
        .await
        .expect("functions page");
    let section = c
        .wait()
        .for_element(Locator::Css("section[data-function='pagefn']"))
        .await
        .expect("the function's section");
    let text = section.text().await.expect("text");
    assert!(text.contains("current: version 2"), "{text}");
    let v1_row = c
        .find(Locator::Css("tr[data-version='1']"))
        .await
        .expect("version 1")
        .text()
        .await
        .expect("text");
    // Version 1 is pinned by the three workflows started on it.
    assert!(v1_row.contains(" 3 "), "{v1_row}");
    shot(&c, "functions").await;
    click(
        &c,
        Locator::Css("tr[data-version='1'] button"),
        "roll back to 1",
    )
    .await;
    assert!(
        c.get_alert_text()
            .await
            .expect("a confirmation")
            .contains("version 1 current"),
    );
    c.accept_alert().await.expect("confirm");
    wait_text(
        &c,
        "version 1 is current again (was 2)",
        "the rollback said nothing",
    )
    .await;
    let current: i32 =
        sqlx::query_scalar("select version from workdo.function_current where name = 'pagefn'")
            .fetch_one(t.pool())
            .await
            .expect("current");
    assert_eq!(current, 1);
    c.close().await.expect("close the browser");
}
