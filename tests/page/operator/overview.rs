//! The page as an operator meets it: the demo keeps serving it until Ctrl-C, the overview
//! tells queued from not queued, and a mistyped filter or a bad address is said, never "none".

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_keeps_serving_its_page_until_ctrl_c() {
    use std::io::BufRead as _;
    workdo::install_crypto();
    let t = db().await;
    let data = tempfile::tempdir().expect("dir");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args([
            "up",
            "--demo",
            "3",
            "--serve",
            "--listen",
            "127.0.0.1:0",
            "--open",
            "--workspace",
        ])
        .arg(data.path())
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "error")
        .current_dir(support::workflows_dir().join(".."))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let stdout = demo.stdout.take().expect("stdout");
    let lines = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let done = l.contains("next: workdo status");
            seen.push(l);
            if done {
                break;
            }
        }
        seen
    })
    .await
    .expect("join");
    let said = lines.join("\n");
    let at = lines
        .iter()
        .find_map(|l| l.split("keeps serving at ").nth(1))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("the demo says where it keeps serving:\n{said}"))
        .to_string();
    assert!(said.contains("next: workdo status"), "{said}");
    // The demo is over, and the page still answers.
    let page = reqwest::get(&at).await.expect("the page after the demo");
    assert_eq!(page.status(), 200, "{at}");
    // Ctrl-C stops it cleanly.
    let pid = demo.id().to_string();
    let killed = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || demo.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_overview_tells_queued_from_not_queued_and_outside_work() {
    workdo::install_crypto();
    let t = db().await;
    support::load(
        &t.store,
        "sq.xml",
        r#"<workflow-def id="sqWF" repository="dor"><process name="logged" skip-queue="true" sequence="1"/></workflow-def>"#,
    )
    .await;
    load(
        &t.store,
        "h.yaml",
        "name: handWF\nsteps:\n  - { name: inspect }\n",
    )
    .await;
    for template in ["sqWF", "handWF"] {
        t.store
            .workflow_start(&StartRequest::new(template, &["obj:o1"]))
            .await
            .expect("start");
    }
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let page = reqwest::get(format!("{base}/"))
        .await
        .expect("overview")
        .text()
        .await
        .expect("body");
    let row = |step: &str| {
        page.split("<tr>")
            .find(|r| r.contains(&format!("<span class=\"name\">{step}</span>")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row("logged").contains("not queued"), "{}", row("logged"));
    assert!(row("inspect").contains("(outside)"), "{}", row("inspect"));
}

/// Issue 50 item 1: a mistyped filter is named, with the name meant, never answered with an
/// empty table that reads as "none"; the filter fields offer the known names.
#[tokio::test]
async fn a_mistyped_filter_is_named_not_shown_as_none() {
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "a.yaml",
        "name: accessionWF\nsteps:\n  - { name: shelve, lifecycle: accessioned }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &["obj:o1"]))
        .await
        .expect("start");
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let page = |q: &'static str| {
        let url = format!("{base}/?{q}");
        async move {
            reqwest::get(url)
                .await
                .expect("overview")
                .text()
                .await
                .expect("body")
        }
    };
    for (q, said) in [
        ("status=eror", "no status eror — did you mean error?"),
        (
            "template=accesionWF",
            "no template accesionWF — did you mean accessionWF?",
        ),
        ("step=shelv", "no step shelv — did you mean shelve?"),
        (
            "milestone=acessioned",
            "no milestone acessioned — did you mean accessioned?",
        ),
        ("status=zzzzzzzz", "no status zzzzzzzz"),
    ] {
        let body = page(q).await;
        assert!(body.contains(said), "{q}: {body}");
        assert!(body.contains("data-unknown"), "{q}");
    }
    // Known names are not flagged, and are offered in the fields.
    let body = page("template=accessionWF&step=shelve&status=ready").await;
    assert!(!body.contains("data-unknown"), "{body}");
    assert!(
        body.contains(r#"list="known-template""#)
            && body.contains(r#"<datalist id="known-step"><option value="shelve">"#),
        "{body}"
    );
    // Issue 50 item 7: every loaded template is listed, one with nothing unfinished said so.
    load(
        &t.store,
        "idle.yaml",
        "name: idleWF\nsteps:\n  - { name: rest }\n",
    )
    .await;
    let body = page("").await;
    assert!(
        body.contains(r#"data-idle="idleWF""#) && body.contains("no unfinished work"),
        "{body}"
    );
    // Issue 50 item 2: a bad address is a 400 page naming the parameter, not framework text
    // or a 409; a page past the end says so.
    for (path, said) in [
        (
            "/ui/steps?template=accessionWF&step=shelve&status=ready&page=x",
            "the parameter page takes a whole number from 1",
        ),
        ("/?property=barcode", "is not key=value"),
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.expect("page");
        assert_eq!(r.status(), reqwest::StatusCode::BAD_REQUEST, "{path}");
        let body = r.text().await.expect("body");
        assert!(
            body.contains(said) && !body.contains("deserialize"),
            "{path}: {body}"
        );
    }
    let body = reqwest::get(format!(
        "{base}/ui/steps?template=accessionWF&step=shelve&status=ready&page=41"
    ))
    .await
    .expect("page")
    .text()
    .await
    .expect("body");
    assert!(
        body.contains("There is no page 41: these steps fill 1 page now."),
        "{body}"
    );

    // Issue 50 item 2: one status across every template.
    let body = reqwest::get(format!("{base}/ui/steps?status=ready"))
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        body.contains("1 step of <b>every template</b> in <b>ready</b>")
            && body.contains("accessionWF:shelve"),
        "{body}"
    );

    // Issue 50 item 4: "all matching" sits at the top, above the page's own actions, and its
    // question names every filter the steps are chosen by, the property's included.
    sqlx::query(
        "update workdo.objects set properties = '{\"collection\": \"walk4\"}' where id = 'obj:o1'",
    )
    .execute(t.pool())
    .await
    .expect("property");
    let body = reqwest::get(format!(
        "{base}/ui/steps?template=accessionWF&step=shelve&status=ready&property=collection%3Dwalk4"
    ))
    .await
    .expect("page")
    .text()
    .await
    .expect("body");
    let question = body
        .split("id=\"all-skip\"")
        .nth(1)
        .and_then(|r| r.split("data-confirm=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap_or_default();
    assert_eq!(
        question, "Skip all 1 step of accessionWF:shelve in ready where collection = walk4?",
        "{body}"
    );
    let (all, own) = (body.find("id=\"all-skip\""), body.find("id=\"act\""));
    assert!(all.is_some() && own.is_some() && all < own, "{body}");
}
