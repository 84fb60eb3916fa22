//! The admin page following the work in a real headless Chromium: counts and charts updated in
//! place, views narrowed by URL, graphs drawn, phone width and keyboard use; and `up --demo`
//! serving the page and saying where.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use support::browser::{
    browser, click, complete, eval, serve, shot, sign_in, wait_count, wait_text,
};
use support::{db, load};
use workdo::api::{Access, AppState, app};
use workdo::store::{Role, StartRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_the_work_narrows_by_url_and_draws_graphs() {
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "live.yaml",
        "name: liveWF\nsteps:\n  - name: scan\n    lifecycle: scanned\n  - name: shelve\n    prereqs: [scan]\n",
    )
    .await;
    load(
        &t.store,
        "door.yaml",
        "name: doorWF\nkind: machine\ninitial: Closed\nglobal:\n  lock: Locked\nstates:\n  Closed:\n    on: { open: Open }\n  Open:\n    on: { close: Closed }\n  Locked: { final: true }\n",
    )
    .await;
    let mut props = std::collections::BTreeMap::new();
    props.insert(
        "barcode".to_string(),
        serde_json::json!("36105010362304123456"),
    );
    t.store
        .object_put("obj:live0", &props, &Default::default(), "test")
        .await
        .expect("object");
    let mut docs = std::collections::BTreeMap::new();
    docs.insert(
        "mods".to_string(),
        "<mods xmlns=\"http://www.loc.gov/mods/v3\"><titleInfo><title>Moby &amp; Dick</title></titleInfo></mods>".to_string(),
    );
    t.store
        .object_put("obj:live1", &Default::default(), &docs, "test")
        .await
        .expect("object with a document");
    let mut req = StartRequest::new("liveWF", &["obj:live0", "obj:live1", "obj:live2"]);
    t.store.workflow_start(&req).await.expect("start");
    req.objects = vec!["obj:rush0".into(), "obj:rush1".into()];
    req.lane = "rush".into();
    t.store.workflow_start(&req).await.expect("start rush");
    let door = t
        .store
        .workflow_start(&StartRequest::new("doorWF", &["obj:live1"]))
        .await
        .expect("start the machine")[0]
        .workflow_id;
    let base = serve(&t).await;
    let admin = t
        .store
        .token_create(Role::Admin, "ui", None)
        .await
        .expect("token")
        .1;
    let (c, _driver) = browser().await;
    sign_in(&c, &base, &admin).await;
    wait_count(&c, "liveWF:scan:ready", "5").await;

    // Live: the counts and the chart change in place while the operator types a filter; the
    // page is not reloaded (a value set on `window` survives) and the field keeps its text.
    eval(&c, "window.kept = 'still here'; return null").await;
    let lane = c
        .find(Locator::Id("filter-lane"))
        .await
        .expect("lane field");
    lane.send_keys("ru").await.expect("type");
    complete(&t, "obj:live1", "scan").await;
    complete(&t, "obj:live2", "scan").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = eval(
            &c,
            "const a = document.querySelector(\"a[data-facet='liveWF:scan:ready']\"); return a && a.textContent",
        )
        .await;
        if shown == serde_json::json!("3") {
            break;
        }
        assert!(Instant::now() < deadline, "the count stayed at {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        eval(&c, "return window.kept").await,
        "still here",
        "no reload"
    );
    assert_eq!(
        lane.prop("value").await.expect("value").as_deref(),
        Some("ru")
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c
        .source()
        .await
        .unwrap_or_default()
        .contains("2 completed</span>")
    {
        assert!(Instant::now() < deadline, "the chart shows no completions");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bars = c
        .find_all(Locator::Css(
            "#throughput tr[data-template=liveWF] rect.bar-completed",
        ))
        .await
        .expect("bars");
    assert!(
        (1..=2).contains(&bars.len()),
        "both completions fall in one minute or two: {}",
        bars.len()
    );
    shot(&c, "live").await;

    // Narrowed by the URL: a lane, a milestone reached, a property (a barcode stays a string);
    // a count's link carries the filter into the list.
    for (query, ready) in [
        ("lane=rush", "2"),
        ("property=barcode%3D36105010362304123456", "1"),
        ("milestone=scanned", ""),
    ] {
        c.goto(&format!("{base}/?{query}")).await.expect("filtered");
        c.wait()
            .for_element(Locator::Id("facets"))
            .await
            .expect("the overview");
        let shown = eval(
            &c,
            "const a = document.querySelector(\"a[data-facet='liveWF:scan:ready']\"); return a ? a.textContent : ''",
        )
        .await;
        assert_eq!(shown, ready, "{query}");
    }
    c.goto(&format!("{base}/?template=liveWF&status=completed"))
        .await
        .expect("by status");
    c.wait()
        .for_element(Locator::Id("facets"))
        .await
        .expect("the overview");
    assert_eq!(
        c.find_all(Locator::Css("a[data-facet]"))
            .await
            .expect("links")
            .len(),
        1,
        "only scan has completed steps"
    );
    c.goto(&format!("{base}/?milestone=scanned"))
        .await
        .expect("by milestone");
    let shelve = c
        .find(Locator::Css("a[data-facet='liveWF:shelve:ready']"))
        .await
        .expect("the scanned objects' next step");
    assert_eq!(shelve.text().await.expect("text"), "2");
    shelve.click().await.expect("open");
    wait_text(&c, "reached <b>scanned</b>", "the list names its filter").await;
    assert_eq!(
        c.find_all(Locator::Css("input[name=id]"))
            .await
            .expect("rows")
            .len(),
        2
    );
    c.goto(&format!("{base}/?property=nonsense"))
        .await
        .expect("bad filter");
    wait_text(&c, "is not key=value", "a bad filter says why").await;
    c.goto(&format!("{base}/ui/steps?template=liveWF&step=scan"))
        .await
        .expect("a list without its status");
    wait_text(
        &c,
        "this address needs the parameter status",
        "a bad list address says why",
    )
    .await;
    c.goto(&format!("{base}/ui/objects/obj:nothere"))
        .await
        .expect("no such object");
    wait_text(&c, "obj:nothere", "an unknown object's page names it").await;
    assert!(
        c.find(Locator::Css("p.error")).await.is_ok(),
        "an error page, not JSON"
    );

    // Graphs drawn: a node per step with its status, the machine's states with the current
    // one marked and its global signal listed, the template's steps.
    c.goto(&format!("{base}/ui/objects/obj:live1"))
        .await
        .expect("object");
    c.wait()
        .for_element(Locator::Id("history"))
        .await
        .expect("history");
    let nodes = c
        .find_all(Locator::Css("svg[id^=workflow-] g.node"))
        .await
        .expect("nodes");
    assert_eq!(nodes.len(), 2);
    c.find(Locator::Css(
        "svg[id^=workflow-] g.node.completed[data-node=scan]",
    ))
    .await
    .expect("scan drawn as completed");
    c.find(Locator::Css(
        "svg[id^=workflow-] g.node.ready[data-node=shelve]",
    ))
    .await
    .expect("shelve drawn as ready");
    let states = c
        .find_all(Locator::Css(&format!("svg#machine-{door} g.node")))
        .await
        .expect("states");
    assert_eq!(states.len(), 3);
    c.find(Locator::Css(&format!(
        "svg#machine-{door} g.node.current[data-node=Closed]"
    )))
    .await
    .expect("the current state marked");
    assert!(
        c.source()
            .await
            .expect("page")
            .contains("from any state: <b>lock</b> → Locked")
    );
    shot(&c, "graphs").await;
    let doc = c
        .find(Locator::Css("pre.document"))
        .await
        .expect("the document")
        .text()
        .await
        .expect("text");
    assert!(
        doc.contains("\n  <titleInfo>\n    <title>Moby &amp; Dick</title>\n"),
        "the XML indented, escaped: {doc}"
    );
    sqlx::query(
        "insert into workdo.events (object_id, kind, actor, detail)
         select 'obj:live2', 'note', 'test', jsonb_build_object('n', g) from generate_series(1, 70) g",
    )
    .execute(t.pool())
    .await
    .expect("events");
    c.goto(&format!("{base}/ui/objects/obj:live2"))
        .await
        .expect("object");
    wait_text(
        &c,
        "The latest 50 events, newest first",
        "the history says it is the latest page",
    )
    .await;
    // Newest first (issue 50): "Older 50" goes on down to the object's first event, which
    // is its page's last row (the notes, written last, come first).
    click(&c, Locator::LinkText("Older 50"), "the older page").await;
    wait_text(&c, "Newest", "the older page links back").await;
    let mut kinds = Vec::new();
    for row in c
        .find_all(Locator::Css("#history tbody tr"))
        .await
        .expect("rows")
    {
        kinds.push(
            row.attr("data-kind")
                .await
                .expect("attr")
                .unwrap_or_default(),
        );
    }
    assert_eq!(kinds.first().map(String::as_str), Some("note"), "{kinds:?}");
    assert_ne!(kinds.last().map(String::as_str), Some("note"), "{kinds:?}");
    let older = kinds.len() as i64;
    let total: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where object_id = 'obj:live2'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(older, total - 50, "the older page holds the rest");
    click(&c, Locator::LinkText("Newest"), "back to the newest").await;
    click(
        &c,
        Locator::LinkText("From the beginning"),
        "the first page",
    )
    .await;
    wait_text(&c, "Next 50", "the first page links to the next").await;
    let first = c
        .find_all(Locator::Css("#history tbody tr"))
        .await
        .expect("rows")
        .len();
    assert_eq!(first, 50);
    click(&c, Locator::Css("a[rel=next]"), "the next page").await;
    c.wait()
        .for_element(Locator::LinkText("Latest"))
        .await
        .expect("the last page");
    let rest = c
        .find_all(Locator::Css("#history tbody tr"))
        .await
        .expect("rows")
        .len() as i64;
    assert_eq!(rest, total - 50, "the second page holds the rest");
    c.goto(&format!("{base}/ui/templates"))
        .await
        .expect("templates");
    let drawn = c
        .wait()
        .for_element(Locator::Css("svg#template-liveWF"))
        .await
        .expect("the template drawn");
    assert_eq!(
        drawn
            .find_all(Locator::Css("path.edge"))
            .await
            .expect("edges")
            .len(),
        1
    );

    // A phone: nothing wider than the screen but the tables, which scroll in their own box.
    c.set_window_size(390, 844).await.expect("resize");
    c.goto(&format!("{base}/")).await.expect("overview");
    c.wait()
        .for_element(Locator::Id("facets"))
        .await
        .expect("the overview");
    let wide = eval(
        &c,
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
    )
    .await;
    assert_eq!(wide, 0, "the page scrolls sideways on a phone");
    shot(&c, "phone").await;
    c.set_window_size(1280, 900).await.expect("resize");

    // The list follows the work too, keeping what the user ticked.
    c.goto(&format!(
        "{base}/ui/steps?template=liveWF&step=scan&status=ready"
    ))
    .await
    .expect("list");
    c.wait()
        .for_element(Locator::Id("retry"))
        .await
        .expect("the list");
    click(
        &c,
        Locator::Css("input[aria-label='choose obj:live0']"),
        "tick live0",
    )
    .await;
    complete(&t, "obj:rush1", "scan").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while eval(
        &c,
        "return document.querySelectorAll('input[name=id]').length",
    )
    .await
        != 2
    {
        assert!(
            Instant::now() < deadline,
            "the list did not follow the work"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        eval(
            &c,
            "return document.querySelector(\"input[aria-label='choose obj:live0']\").checked"
        )
        .await,
        true,
        "the tick survived the refresh"
    );
    wait_text(&c, "2 steps of", "the summary follows too").await;
    c.refresh().await.expect("reload");
    c.wait()
        .for_element(Locator::Id("retry"))
        .await
        .expect("the list");

    // The keyboard alone: Tab reaches "all", Space chooses every row, Tab reaches Retry,
    // Enter asks for the confirmation naming the count.
    let mut reached = false;
    for _ in 0..40 {
        c.active_element()
            .await
            .expect("focus")
            .send_keys("\u{E004}")
            .await
            .expect("tab");
        if eval(&c, "return document.activeElement.id").await == "all" {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab never reached the 'all' box");
    c.active_element()
        .await
        .expect("focus")
        .send_keys(" ")
        .await
        .expect("space");
    assert_eq!(
        eval(
            &c,
            "return document.querySelectorAll('input[name=id]:checked').length"
        )
        .await,
        2
    );
    let mut reached = false;
    for _ in 0..10 {
        c.active_element()
            .await
            .expect("focus")
            .send_keys("\u{E004}")
            .await
            .expect("tab");
        if eval(&c, "return document.activeElement.id").await == "retry" {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab never reached Retry");
    c.active_element()
        .await
        .expect("focus")
        .send_keys("\u{E007}")
        .await
        .expect("enter");
    assert_eq!(
        c.get_alert_text().await.expect("a confirmation"),
        "Retry 2 steps?"
    );
    c.dismiss_alert().await.expect("cancel");
    c.close().await.expect("close the browser");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_the_page_and_says_where() {
    use std::io::BufRead as _;
    let t = db().await;
    // Hold 7070 when it is free, so that the demo has to take another port.
    let held = std::net::TcpListener::bind("127.0.0.1:7070").ok();
    let data = tempfile::tempdir().expect("dir");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["up", "--demo", "20", "--workspace"])
        .arg(data.path())
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "error")
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let stdout = demo.stdout.take().expect("stdout");
    // The line comes before the runtime starts, so the page is up while the demo runs.
    let (line, lines) = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        let line = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.starts_with("admin page: "));
        (line, lines)
    })
    .await
    .expect("join");
    let line = line.expect("the demo names the admin page's address");
    let url = line
        .trim_start_matches("admin page: ")
        .split(' ')
        .next()
        .expect("an address")
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    if held.is_some() {
        assert!(!url.contains(":7070/"), "7070 was taken, yet: {line}");
    }
    let page = reqwest::get(&url).await.expect("the page answers");
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.expect("body").contains("id=\"facets\""));
    let rest: Vec<String> =
        tokio::task::spawn_blocking(move || lines.map_while(Result::ok).collect())
            .await
            .expect("join");
    let status = tokio::task::spawn_blocking(move || demo.wait())
        .await
        .expect("join")
        .expect("the demo ends");
    assert!(status.success(), "{rest:?}");
    drop(held);

    // After the run, the grid in a browser shows exactly the counts in the database.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = AppState {
        store: t.store.clone(),
        access: Access::Open,
    };
    tokio::spawn(async move { axum::serve(listener, app(state)).await });
    let expected: Vec<(String, String, String, i64)> = sqlx::query_as(
        "select template, name, status, count(*) from workdo.steps where active
          group by 1, 2, 3 order by 1, 2, 3",
    )
    .fetch_all(t.pool())
    .await
    .expect("counts");
    assert!(expected.len() > 10, "{expected:?}");
    let (c, _driver) = browser().await;
    c.goto(&format!("{base}/")).await.expect("the overview");
    c.wait()
        .for_element(Locator::Id("facets"))
        .await
        .expect("the grid");
    let mut shown = Vec::new();
    for link in c
        .find_all(Locator::Css("a[data-facet]"))
        .await
        .expect("links")
    {
        let facet = link
            .attr("data-facet")
            .await
            .expect("attr")
            .unwrap_or_default();
        // Counts are written as people read them (`20,192`).
        let n: i64 = link
            .text()
            .await
            .expect("text")
            .replace(',', "")
            .parse()
            .expect("a count");
        let mut parts = facet.splitn(3, ':');
        let (tpl, step, st) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        shown.push((tpl, step, st, n));
    }
    shown.sort();
    let columns = [
        "waiting",
        "scheduled",
        "ready",
        "started",
        "retrying",
        "error",
        "completed",
        "skipped",
    ];
    let mut expected: Vec<_> = expected
        .into_iter()
        .filter(|(_, _, st, _)| columns.contains(&st.as_str()))
        .collect();
    expected.sort();
    assert_eq!(shown, expected, "the grid after up --demo");
    shot(&c, "demo-overview").await;
    c.close().await.expect("close the browser");
}
