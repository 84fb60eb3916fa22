//! What an adversary found in the HTTP API, held: a request never waits for a second pooled
//! connection while it holds one; starts racing on a new object all succeed; the admin page
//! keeps the JSON API's roles for schedules and priority; a revoked token gets no stored answer
//! back; a paused step has no work under a queue name; a date Postgres cannot store is a 400.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{db, load};
use workdo::api::Access;
use workdo::store::{NamedQueue, Role, SetRequest, StartRequest, Store};

const TWO: &str = "name: twoWF\nsteps:\n  - name: first\n  - name: second\n    prereqs: [first]\n";

/// With one connection in the pool, a start and a status update both go through: each used
/// to take a second connection for its template while holding the first, so two requests on
/// `workdo serve`'s small pool waited on each other until the pool's timeout (503s).
#[tokio::test]
async fn a_start_and_an_update_need_no_second_connection() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    let one = workdo::store::db::connect(&t.url, 1).await.expect("pool");
    let store = Store::new(one);
    let started = store
        .workflow_start(&StartRequest::new("twoWF", &["obj:one-conn"]))
        .await
        .expect("a start through one connection");
    assert_eq!(started.len(), 1);
    let out = store
        .step_set(&SetRequest::new(
            "obj:one-conn",
            "twoWF",
            "first",
            "completed",
        ))
        .await
        .expect("an update through one connection");
    assert_eq!(out.next_steps, vec!["second".to_string()]);
}

/// Four starts of one template on an object nobody registered yet, at once: each one used to
/// insert the object, and all but the first failed on its primary key (500s).
#[tokio::test]
async fn starts_racing_on_a_new_object_all_succeed() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let store = t.store.clone();
        tasks.spawn(async move {
            store
                .workflow_start(&StartRequest::new("twoWF", &["obj:raced"]))
                .await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("every start succeeds");
    }
    let (objects, active): (i64, i64) = sqlx::query_as(
        "select (select count(*) from workdo.objects where id = 'obj:raced'),
                (select count(*) from workdo.workflows where object_id = 'obj:raced' and active)",
    )
    .fetch_one(t.pool())
    .await
    .expect("counts");
    assert_eq!((objects, active), (1, 1));
}

/// The page's CSRF token for a signed-in `token`.
async fn csrf(http: &reqwest::Client, base: &str, token: &str) -> String {
    let html = http
        .get(format!("{base}/ui/schedules"))
        .header("cookie", format!("workdo_token={token}"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    let token = support::api::csrf_in(&html);
    assert!(!token.is_empty(), "a form with a CSRF token");
    token
}

/// A robot signed in on the page could fire a schedule (which starts or signals past a
/// machine's access rules) and give steps a priority, both the admin's on the JSON API.
#[tokio::test]
async fn the_page_keeps_the_apis_roles_for_schedules_and_priority() {
    let a = support::api::api().await;
    let t = &a.t;
    load(&t.store, "two.yaml", TWO).await;
    let specs = workdo::model::schedule::parse_file(
        "s.yaml",
        "schedules:\n  - name: nightly\n    cron: \"0 0 3 * * *\"\n    start: twoWF\n    objects: { ids: [obj:fired] }\n",
    )
    .expect("schedules");
    t.store.schedules_put(&specs, "s.yaml").await.expect("put");
    t.store
        .workflow_start(&StartRequest::new("twoWF", &["obj:prio"]))
        .await
        .expect("start");
    let step: i64 = sqlx::query_scalar(
        "select id from workdo.steps where object_id = 'obj:prio' and name = 'first'",
    )
    .fetch_one(t.pool())
    .await
    .expect("step");
    let (base, robot, admin) = (a.base.clone(), a.robot.clone(), a.admin.clone());
    // The page answers a form with a redirect: seen, not followed.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let post = |token: String, path: &'static str, form: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}{path}"))
                .header("cookie", format!("workdo_token={token}"))
                .header("origin", &base)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .expect("post")
                .status()
        }
    };
    let started = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from workdo.workflows where object_id = 'obj:fired'",
        )
        .fetch_one(t.pool())
        .await
        .expect("count")
    };
    let priority = || async {
        sqlx::query_scalar::<_, i32>("select priority from workdo.steps where id = $1")
            .bind(step)
            .fetch_one(t.pool())
            .await
            .expect("priority")
    };

    let c = csrf(&http, &base, &robot).await;
    let fire = post(
        robot.clone(),
        "/ui/schedules/act",
        format!("csrf={c}&name=nightly&action=fire"),
    )
    .await;
    assert_eq!(fire, StatusCode::FORBIDDEN);
    assert_eq!(started().await, 0, "the robot's fire started nothing");
    let prio = format!("csrf={c}&action=prioritize&priority=99&id={step}&back=/ui/errors");
    assert_eq!(
        post(robot.clone(), "/ui/steps/act", prio).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(priority().await, 0);
    // The same forms signed in as an admin do what they say.
    let c = csrf(&http, &base, &admin).await;
    let fire = post(
        admin.clone(),
        "/ui/schedules/act",
        format!("csrf={c}&name=nightly&action=fire"),
    )
    .await;
    assert_eq!(fire, StatusCode::SEE_OTHER);
    assert_eq!(started().await, 1);
    let prio = format!("csrf={c}&action=prioritize&priority=99&id={step}&back=/ui/errors");
    assert_eq!(
        post(admin, "/ui/steps/act", prio).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(priority().await, 99);
}

/// A key's stored answer was given back before the token was checked: a revoked (or expired)
/// token still read what its earlier requests had answered.
#[tokio::test]
async fn a_revoked_token_gets_no_stored_answer_back() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    let base = support::serve_api(&t.store, Access::Tokens).await;
    let (id, token) = t
        .store
        .token_create(Role::Admin, "a", None)
        .await
        .expect("token");
    let start = || {
        reqwest::Client::new()
            .post(format!("{base}/api/workflows"))
            .bearer_auth(&token)
            .header("idempotency-key", "start-1")
            .json(&json!({"template": "twoWF", "objects": ["obj:kept"]}))
            .send()
    };
    assert_eq!(start().await.expect("first").status(), StatusCode::CREATED);
    let again = start().await.expect("again");
    assert_eq!(again.status(), StatusCode::CREATED);
    assert!(again.headers().get("idempotency-replayed").is_some());
    t.store.token_revoke(id).await.expect("revoke");
    let after = start().await.expect("after");
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);
    assert!(after.headers().get("idempotency-replayed").is_none());
    let body: Value = after.json().await.expect("JSON error");
    assert!(!body.to_string().contains("workflow_id"), "{body}");
}

/// A paused step kept handing out work under a queue name: `/workflow_queue?queue=` (and the
/// runtime's named-queue workers, which read the same list) while `?waiting=` answered none.
#[tokio::test]
async fn a_paused_step_has_no_work_under_a_queue_name() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    t.store
        .workflow_start(&StartRequest::new("twoWF", &["obj:q1", "obj:q2"]))
        .await
        .expect("start");
    t.store
        .queue_define(&NamedQueue {
            name: "firsts".into(),
            template: "twoWF".into(),
            step: "first".into(),
            completed: Vec::new(),
            properties: json!({}),
            lane: None,
        })
        .await
        .expect("define");
    assert_eq!(
        t.store
            .queue_named_waiting("firsts", 10)
            .await
            .expect("list")
            .len(),
        2
    );
    t.store
        .step_pause("twoWF", "first", "test", None)
        .await
        .expect("pause");
    assert!(
        t.store
            .queue_named_waiting("firsts", 10)
            .await
            .expect("list")
            .is_empty()
    );
    let base = support::serve_api(&t.store, Access::Open).await;
    let xml = reqwest::get(format!("{base}/workflow_queue?queue=firsts"))
        .await
        .expect("queue")
        .text()
        .await
        .expect("xml");
    assert!(xml.contains("count=\"0\""), "{xml}");
}

/// A date Postgres cannot store (before 4713 BC) is the caller's mistake, not a 500.
#[tokio::test]
async fn a_start_date_out_of_range_is_a_bad_request() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    let base = support::serve_api(&t.store, Access::Open).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/api/workflows"))
        .json(&json!({"template": "twoWF", "objects": ["obj:old"], "start_at": "-4714-11-23T00:00:00Z"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("JSON error");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot be stored")),
        "{body}"
    );
}

/// A NUL in a start's context is refused by name, not with Postgres's "unsupported Unicode
/// escape sequence", and nothing is started.
#[tokio::test]
async fn a_nul_in_a_starts_context_is_refused_by_name() {
    let t = db().await;
    load(&t.store, "two.yaml", TWO).await;
    let mut req = StartRequest::new("twoWF", &["obj:nul"]);
    req.context = json!({"notes": {"a": "x\u{0}y"}});
    let err = t.store.workflow_start(&req).await.expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("notes.a") && text.contains("NUL"), "{text}");
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(n, 0);
}
