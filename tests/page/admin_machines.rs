//! The page's other views, in headless Chromium: a machine job with its variables, pending
//! alarm and parent/children; an object's history narrowed to one kind, a row a sentence; an
//! archived workflow opened from its object's page; a schedule disabled, enabled and fired
//! from the schedules page.

use crate::support;

use fantoccini::Locator;
use support::browser::{admin_session, click, shot, wait_text};
use support::{db, load};
use workdo::store::StartRequest;

const HALL: &str = "name: hallWF\nkind: machine\nvariables: { visits: 0 }\ninitial: Open\nstates:\n  Open:\n    enter:\n      - set: { visits: \"${visits + 1}\", desk: \"front\" }\n      - alarm: { signal: close, in: 2 hours }\n    on:\n      close: Closed\n  Closed: { final: true }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_history_archive_and_schedules_on_the_page() {
    workdo::install_crypto();
    let t = db().await;
    load(&t.store, "hall.yaml", HALL).await;
    load(
        &t.store,
        "tick.yaml",
        "name: tickWF\nsteps:\n  - name: tock\nschedules:\n  - name: nightly-tick\n    cron: \"0 3 * * *\"\n    objects: { ids: [obj:ticked] }\n    restart: true\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("hallWF", &["obj:hall"]))
        .await
        .expect("start the job");
    // A finished workflow, archived.
    t.store
        .workflow_start(&StartRequest::new("tickWF", &["obj:hall"]))
        .await
        .expect("start");
    t.store
        .step_set(&workdo::store::SetRequest::new(
            "obj:hall",
            "tickWF",
            "tock",
            "completed",
        ))
        .await
        .expect("complete");
    let archived = t
        .store
        .archive(
            chrono::Utc::now() + chrono::Duration::seconds(1),
            100,
            false,
        )
        .await
        .expect("archive");
    assert_eq!(archived.workflows, 1);

    // A composed subnet (lectureWF on its lecture document), and loanReviewWF's diagram.
    let loaded =
        workdo::cli::files::parse_file(&support::workflows_dir().join("loanReviewWF.yaml"))
            .expect("a shipped template");
    t.store.template_save(&loaded).await.expect("saved");
    let druid = "druid:bb123cd4567";
    support::lecture_composed(&t, druid).await;
    let (c, _driver, base) = admin_session(&t).await;

    // The job: its variables and the alarm it set on entering Open.
    c.goto(&format!("{base}/ui/objects/obj:hall"))
        .await
        .expect("object");
    let vars = c
        .find(Locator::Css("table.variables"))
        .await
        .expect("the job's variables")
        .text()
        .await
        .expect("text");
    assert!(
        vars.contains("visits") && vars.contains('1') && vars.contains("\"front\""),
        "{vars}"
    );
    let alarms = c
        .find(Locator::Css("ul.alarms"))
        .await
        .expect("the pending alarm")
        .text()
        .await
        .expect("text");
    assert!(
        alarms.contains("close") && alarms.contains("Open"),
        "{alarms}"
    );
    // Act where you look (issue 50): the running job is suspended and resumed from its page.
    click(&c, Locator::Css("button[value=suspend]"), "Suspend").await;
    wait_text(&c, "its signals wait until it is resumed", "the suspension").await;
    let suspended: bool = sqlx::query_scalar(
        "select coalesce((machine ->> 'suspended')::boolean, false) from workdo.workflows where object_id = 'obj:hall' and template = 'hallWF'",
    )
    .fetch_one(t.pool())
    .await
    .expect("suspended");
    assert!(suspended, "the job is suspended");
    click(&c, Locator::Css("button[value=resume]"), "Resume").await;
    wait_text(&c, "Resumed workflow", "the resumption").await;
    // The archived workflow is listed, and opens with its steps and history.
    click(&c, Locator::Css("#archived a"), "the archived workflow").await;
    wait_text(&c, "Archived workflow", "the archived workflow's page").await;
    let steps = c
        .find(Locator::Id("steps"))
        .await
        .expect("steps")
        .text()
        .await
        .expect("text");
    assert!(
        steps.contains("tock") && steps.contains("completed"),
        "{steps}"
    );
    shot(&c, "archived-workflow").await;

    // History narrowed to one kind; every row says what happened, no dangling colon.
    c.goto(&format!("{base}/ui/objects/obj:hall?kind=alarm_set"))
        .await
        .expect("history");
    let kinds: Vec<String> = {
        let mut out = Vec::new();
        for row in c
            .find_all(Locator::Css("#history tbody tr"))
            .await
            .expect("rows")
        {
            out.push(
                row.attr("data-kind")
                    .await
                    .expect("attr")
                    .unwrap_or_default(),
            );
        }
        out
    };
    assert_eq!(kinds, vec!["alarm_set".to_string()]);
    c.goto(&format!("{base}/ui/objects/obj:hall"))
        .await
        .expect("object");
    let history = c
        .find(Locator::Id("history"))
        .await
        .expect("history")
        .text()
        .await
        .expect("text");
    assert!(history.contains("started hallWF"), "{history}");
    assert!(!history.contains("hallWF: "), "a dangling colon: {history}");
    shot(&c, "machine-job").await;

    // The subnet drawn legibly: every label inside its box, instances told apart, the
    // generator's steps framed.
    c.goto(&format!("{base}/ui/objects/{druid}"))
        .await
        .expect("the lecture");
    let checked = support::browser::eval(
        &c,
        "const out = [];
         for (const svg of document.querySelectorAll('svg.graph')) {
           const seen = new Set();
           for (const g of svg.querySelectorAll('g.node')) {
             const r = g.querySelector('rect').getBBox();
             for (const t of g.querySelectorAll('text')) {
               const b = t.getBBox();
               if (b.x < r.x || b.x + b.width > r.x + r.width) out.push('spills: ' + t.textContent);
             }
             const label = g.querySelector('text').textContent;
             if (seen.has(label)) out.push('twice: ' + label);
             seen.add(label);
           }
         }
         out.push('subnets: ' + document.querySelectorAll('g.subnet').length);
         return out;",
    )
    .await;
    let checked: Vec<String> = serde_json::from_value(checked).expect("strings");
    assert_eq!(checked, vec!["subnets: 1".to_string()], "{checked:?}");
    support::browser::eval(
        &c,
        "document.querySelector('g.subnet').scrollIntoView(); return 0;",
    )
    .await;
    shot(&c, "subnet").await;
    c.goto(&format!("{base}/ui/templates"))
        .await
        .expect("templates");
    support::browser::eval(
        &c,
        "document.getElementById('template-loanReviewWF').scrollIntoView(); return 0;",
    )
    .await;
    shot(&c, "templates-loanReviewWF").await;
    let index = c
        .find(Locator::Id("template-index"))
        .await
        .expect("the templates index")
        .text()
        .await
        .expect("text");
    assert!(
        index.contains("loanReviewWF") && index.contains("machine") && index.contains("lectureWF"),
        "{index}"
    );

    // Schedules: disable, enable, fire now (it starts its workflow).
    c.goto(&format!("{base}/ui/schedules"))
        .await
        .expect("schedules");
    let row = "tr[data-schedule='nightly-tick']";
    click(
        &c,
        Locator::Css(&format!("{row} button[value=disable]")),
        "Disable",
    )
    .await;
    wait_text(&c, "value=\"enable\"", "disabled").await;
    assert!(!t.store.schedules_list().await.expect("list")[0].enabled);
    click(
        &c,
        Locator::Css(&format!("{row} button[value=enable]")),
        "Enable",
    )
    .await;
    wait_text(&c, "value=\"disable\"", "enabled").await;
    click(
        &c,
        Locator::Css(&format!("{row} button[value=fire]")),
        "Fire now",
    )
    .await;
    support::wait_for("the fired schedule's workflow", 30, || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from workdo.workflows where object_id = 'obj:ticked'",
        )
        .fetch_one(t.pool())
        .await
        .unwrap_or(0)
            == 1
    })
    .await;
    // The page says what the fire did (issue 50).
    wait_text(&c, "started its workflow on 1 object.", "the fire's report").await;
    let next = &t.store.schedules_list().await.expect("list")[0];
    assert!(
        next.next_fire_at > chrono::Utc::now(),
        "its next regular tick stays ahead"
    );
    shot(&c, "schedules").await;
}
