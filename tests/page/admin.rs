//! The admin page in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
//! which `.ci/run` installs), driven through WebDriver: sign in with a token, the grid's
//! counts, a facet's steps retried from the page, an object's page with its history and graph,
//! a viewer who cannot act, markup in an object id shown as text. Screenshots of each page go
//! to `target/admin-screenshots/`. No sleeps stand in for waits: each step waits for its element.

use crate::support;

use std::time::{Duration, Instant};

use fantoccini::Locator;
use support::browser::{browser, click, serve, shot, sign_in, wait_count, wait_text};
use support::{db, load};
use workdo::store::{Role, StartRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_see_counts_retry_errors_and_read_objects_in_a_browser() {
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "page.yaml",
        "name: pageWF\nsteps:\n  - name: scan\n  - name: shelve\n    prereqs: [scan]\n",
    )
    .await;
    let mut req = StartRequest::new("pageWF", &[]);
    req.objects = (0..5).map(|i| format!("obj:page{i}")).collect();
    req.objects.push("obj:<b>bold</b>".into());
    t.store.workflow_start(&req).await.expect("start");
    // Three scans in error, as a failing robot would leave them.
    for i in 0..3 {
        let mut set =
            workdo::store::SetRequest::new(&format!("obj:page{i}"), "pageWF", "scan", "error");
        set.error_message = Some("scanner jammed".into());
        t.store.step_set(&set).await.expect("error");
    }
    let base = serve(&t).await;
    let admin = t
        .store
        .token_create(Role::Admin, "ui", None)
        .await
        .expect("token")
        .1;
    let viewer = t
        .store
        .token_create(Role::Viewer, "ui", None)
        .await
        .expect("token")
        .1;
    let (c, _driver) = browser().await;

    sign_in(&c, &base, &admin).await;
    wait_count(&c, "pageWF:scan:error", "3").await;
    wait_count(&c, "pageWF:scan:ready", "3").await;
    wait_count(&c, "pageWF:shelve:waiting", "6").await;
    shot(&c, "overview").await;

    // The errors' list: choose them all and retry; the counts change.
    click(
        &c,
        Locator::Css("a[data-facet='pageWF:scan:error']"),
        "open the facet",
    )
    .await;
    c.wait()
        .for_element(Locator::Id("retry"))
        .await
        .expect("the list");
    shot(&c, "errors").await;
    let rows = c
        .find_all(Locator::Css("input[name=id]"))
        .await
        .expect("rows");
    assert_eq!(rows.len(), 3);
    assert!(c.source().await.expect("page").contains("scanner jammed"));
    click(&c, Locator::Id("all"), "choose all").await;
    c.execute("window.confirm = () => true;", vec![])
        .await
        .expect("no dialog");
    click(&c, Locator::Id("retry"), "retry").await;
    // Back on the list once the POST is done: it has none left in error.
    wait_text(&c, "0 steps of", "the retry did not come back").await;
    assert!(
        c.source().await.expect("page").contains("Retried 3 steps."),
        "the list says what was done"
    );
    c.goto(&format!("{base}/")).await.expect("overview");
    wait_count(&c, "pageWF:scan:ready", "6").await;
    assert!(
        c.find(Locator::Css("a[data-facet='pageWF:scan:error']"))
            .await
            .is_err(),
        "no error left"
    );

    // An object's page: its steps, history and graph; markup in an id is text.
    c.goto(&format!("{base}/ui/objects/obj:page0"))
        .await
        .expect("object");
    c.wait()
        .for_element(Locator::Id("history"))
        .await
        .expect("history");
    let page = c.source().await.expect("page");
    assert!(
        page.contains("retried") && page.contains("flowchart TD"),
        "history and graph"
    );
    shot(&c, "object").await;
    // Act where you look (issue 50): a failed step's own row retries it, and the page says so.
    let mut set = workdo::store::SetRequest::new("obj:page3", "pageWF", "scan", "exception");
    set.error_message = Some("lamp flickers".into());
    t.store.step_set(&set).await.expect("exception");
    c.goto(&format!("{base}/ui/objects/obj:page3"))
        .await
        .expect("object");
    click(
        &c,
        Locator::Css("td.acts button[value=retry]"),
        "retry on the step's row",
    )
    .await;
    wait_text(&c, "Retried 1 step.", "the row's retry did not come back").await;
    assert_eq!(
        support::step(t.pool(), "obj:page3", "scan").await.status,
        "ready"
    );
    assert!(
        c.find(Locator::Css("td.acts button[value=retry]"))
            .await
            .is_err(),
        "nothing left to retry on the page"
    );
    shot(&c, "object-row-actions").await;
    c.goto(&format!("{base}/ui/objects/obj:%3Cb%3Ebold%3C%2Fb%3E"))
        .await
        .expect("object");
    c.wait()
        .for_element(Locator::Id("history"))
        .await
        .expect("history");
    let title = c
        .find(Locator::Css("h1"))
        .await
        .expect("h1")
        .text()
        .await
        .expect("text");
    assert_eq!(title, "obj:<b>bold</b>", "shown as text");
    assert!(c.find(Locator::Css("h1 b")).await.is_err(), "not as markup");

    // The errors, templates and timings pages.
    let mut set = workdo::store::SetRequest::new("obj:page4", "pageWF", "scan", "error");
    set.error_message = Some("lamp failed".into());
    set.error_text = Some("at line 3 <script>alert(1)</script>".into());
    t.store.step_set(&set).await.expect("error");
    c.goto(&format!("{base}/ui/errors")).await.expect("errors");
    let table = c
        .wait()
        .for_element(Locator::Id("errors"))
        .await
        .expect("errors table");
    let text = table.text().await.expect("text");
    assert!(
        text.contains("pageWF:scan") && text.contains("lamp failed"),
        "{text}"
    );
    assert!(
        c.find(Locator::Css("#errors script")).await.is_err(),
        "text, not markup"
    );
    shot(&c, "errors-grouped").await;
    click(&c, Locator::Css("button.retry-group"), "retry the group").await;
    // The confirmation names the count, the step and the message (issue 50); accept it as a
    // person would.
    assert_eq!(
        c.get_alert_text().await.expect("a confirmation"),
        "Retry 1 step of pageWF:scan failed with “lamp failed”?"
    );
    c.accept_alert().await.expect("confirm");
    wait_text(
        &c,
        "0 steps in error, in 0 groups",
        "the group's retry did not come back",
    )
    .await;
    assert!(
        c.find(Locator::Css("button.retry-group")).await.is_err(),
        "the group was retried"
    );
    // Prioritize one ready step from its list.
    c.goto(&format!(
        "{base}/ui/steps?template=pageWF&step=scan&status=ready"
    ))
    .await
    .expect("ready list");
    c.wait()
        .for_element(Locator::Id("prioritize"))
        .await
        .expect("the list");
    let first = c.find(Locator::Css("input[name=id]")).await.expect("a row");
    let chosen: i64 = first
        .attr("value")
        .await
        .expect("value")
        .and_then(|v| v.parse().ok())
        .expect("a step id");
    first.click().await.expect("choose it");
    let priority = c.find(Locator::Id("priority")).await.expect("priority");
    priority.clear().await.expect("clear");
    priority.send_keys("77").await.expect("type");
    c.execute("window.confirm = () => true;", vec![])
        .await
        .expect("no dialog");
    click(&c, Locator::Id("prioritize"), "prioritize").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p: i32 = sqlx::query_scalar("select priority from workdo.steps where id = $1")
            .bind(chosen)
            .fetch_one(t.pool())
            .await
            .expect("priority");
        if p == 77 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the step's priority is {p}, not 77"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.goto(&format!("{base}/ui/templates"))
        .await
        .expect("templates");
    let templates = c
        .wait()
        .for_element(Locator::Id("templates"))
        .await
        .expect("templates");
    assert!(templates.text().await.expect("text").contains("pageWF"));
    c.goto(&format!("{base}/ui/timings?hours=1"))
        .await
        .expect("timings");
    c.wait()
        .for_element(Locator::Id("timings"))
        .await
        .expect("timings table");
    shot(&c, "timings").await;

    c.goto(&format!("{base}/ui/schedules"))
        .await
        .expect("schedules");
    c.wait()
        .for_element(Locator::Id("outbox"))
        .await
        .expect("the outbox");
    shot(&c, "schedules-alerts").await;

    // A viewer sees the list but no buttons, and a forged POST is refused.
    c.delete_all_cookies().await.expect("sign out");
    sign_in(&c, &base, &viewer).await;
    c.goto(&format!(
        "{base}/ui/steps?template=pageWF&step=scan&status=ready"
    ))
    .await
    .expect("list");
    c.wait()
        .for_element(Locator::Css("table"))
        .await
        .expect("the list");
    assert!(
        c.find(Locator::Id("retry")).await.is_err(),
        "a viewer has no retry button"
    );
    shot(&c, "viewer").await;
    let forged = reqwest::Client::new()
        .post(format!("{base}/ui/steps/act"))
        .header("cookie", format!("workdo_token={viewer}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("action=skip&id=1&csrf=whatever")
        .send()
        .await
        .expect("post");
    assert_eq!(forged.status().as_u16(), 403);
    c.close().await.expect("close the browser");
}
