//! The admin page at a library's scale, in headless Chromium: a facet of 10,000 steps says
//! 10,000 and pages to the last of them; "all matching" acts on all 10,000 (not the page shown)
//! after a confirmation naming the number; the search box on every page finds an object by id,
//! by prefix and by property; a queue paused on the overview stops its workers' claims.

use crate::support;

use fantoccini::Locator;
use support::browser::{admin_session, click, shot, wait_text};
use support::{db, load};
use workdo::store::StartRequest;

const STEPS: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_steps_page_and_act_as_one() {
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "many.yaml",
        "name: manyWF\nsteps:\n  - name: scan\n  - name: shelve\n    prereqs: [scan]\n",
    )
    .await;
    let mut req = StartRequest::new("manyWF", &[]);
    req.objects = (0..STEPS).map(|i| format!("obj:item{i:05}")).collect();
    t.store.workflow_start(&req).await.expect("start");
    sqlx::query(
        "update workdo.objects set properties = jsonb_build_object('barcode', '36105' || substr(id, 9))
          where id in ('obj:item00042', 'obj:item00043')",
    )
    .execute(t.pool())
    .await
    .expect("properties");
    let (c, _driver, base) = admin_session(&t).await;

    // The true count, and paging to the 10,000th step.
    c.goto(&format!(
        "{base}/ui/steps?template=manyWF&step=scan&status=ready"
    ))
    .await
    .expect("open the facet");
    let total = c
        .find(Locator::Id("summary"))
        .await
        .expect("the count")
        .text()
        .await
        .expect("text");
    assert!(
        total.starts_with("10,000 steps of manyWF:scan in ready"),
        "{total}"
    );
    assert_eq!(
        c.find_all(Locator::Css("#rows tbody tr"))
            .await
            .expect("rows")
            .len(),
        500
    );
    shot(&c, "steps-page-1").await;
    let mut pages = 1;
    while let Ok(next) = c.find(Locator::Id("page-next")).await {
        next.click().await.expect("older →");
        pages += 1;
        wait_text(&c, &format!("page {pages} of 20"), "the next page").await;
    }
    assert_eq!(pages, 20);
    let summary = c
        .find(Locator::Id("summary"))
        .await
        .expect("summary")
        .text()
        .await
        .expect("text");
    assert!(summary.contains("showing 9,501–10,000"), "{summary}");
    shot(&c, "steps-page-20").await;

    // Skip all 10,000 from the last page: the confirmation names 10,000; all of them move.
    let question = c
        .find(Locator::Id("all-skip"))
        .await
        .expect("skip all form")
        .attr("data-confirm")
        .await
        .expect("attr")
        .unwrap_or_default();
    assert!(question.contains("Skip all 10,000 steps"), "{question}");
    click(&c, Locator::Css("#all-skip button"), "Skip all matching").await;
    c.accept_alert().await.expect("confirm");
    wait_text(&c, "all that matched", "the action's report").await;
    let skipped: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where template = 'manyWF' and name = 'scan' and status = 'skipped'",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(
        skipped, STEPS as i64,
        "every matching step, not the 500 shown"
    );
    shot(&c, "steps-skipped-all").await;

    // Search: an exact id opens the object, a prefix lists, key=value finds by property.
    let search = |q: &str| {
        format!(
            "{base}/ui/search?q={}",
            serde_urlencoded::to_string([("v", q)])
                .expect("q")
                .trim_start_matches("v=")
        )
    };
    c.goto(&format!("{base}/")).await.expect("overview");
    let field = c.find(Locator::Id("q")).await.expect("the search box");
    field.send_keys("obj:item00007\n").await.expect("type");
    wait_text(&c, "<h1>obj:item00007</h1>", "the object's page").await;
    c.goto(&search("obj:item0001")).await.expect("prefix");
    let found = c
        .find_all(Locator::Css("#results tbody tr"))
        .await
        .expect("results");
    assert_eq!(found.len(), 10, "obj:item00010 … obj:item00019");
    shot(&c, "search-prefix").await;
    // A search past one page says how many in all and pages them, to the last (issue 50).
    c.goto(&search("obj:item")).await.expect("prefix");
    wait_text(
        &c,
        "10,000 objects whose id starts with",
        "the search's total",
    )
    .await;
    click(&c, Locator::LinkText("50"), "the last page").await;
    wait_text(&c, "showing 9,801–10,000", "the last page").await;
    let found = c
        .find_all(Locator::Css("#results tbody tr"))
        .await
        .expect("results");
    assert_eq!(found.len(), 200);
    c.goto(&search("barcode=3610500043"))
        .await
        .expect("property");
    let found = c
        .find(Locator::Id("results"))
        .await
        .expect("results")
        .text()
        .await
        .expect("text");
    assert!(
        found.contains("obj:item00043") && !found.contains("obj:item00042"),
        "{found}"
    );

    // Pause shelve from the overview: claims take nothing until it is resumed.
    c.goto(&format!("{base}/")).await.expect("overview");
    click(
        &c,
        Locator::Css("form[action='/ui/pause']:has(input[name=step][value=shelve]) button"),
        "Pause shelve",
    )
    .await;
    wait_text(&c, "data-paused=\"manyWF:shelve\"", "the paused badge").await;
    shot(&c, "overview-paused").await;
    let claim = || {
        t.store.step_claim(
            "manyWF",
            "shelve",
            None,
            5,
            "test",
            std::time::Duration::from_secs(60),
        )
    };
    assert!(
        claim().await.expect("claim").is_empty(),
        "paused: nothing claimed"
    );
    click(
        &c,
        Locator::Css("form[action='/ui/pause']:has(input[name=step][value=shelve]) button"),
        "Resume shelve",
    )
    .await;
    support::wait_for("the resume to land", 30, || async {
        !t.store
            .step_paused("manyWF", "shelve")
            .await
            .expect("paused?")
    })
    .await;
    assert_eq!(
        claim().await.expect("claim").len(),
        5,
        "resumed: claims again"
    );
}
