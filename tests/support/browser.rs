//! Helpers for the admin page's browser tests: chromedriver and a headless Chromium session, the
//! API served in-process, screenshots, signing in, and waits on the page (no sleeps).

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use workdo::api::{Access, AppState, app};

use super::TestDb;

/// chromedriver on a free port, in a process group of its own: dropped (at the end of a test,
/// or while a failed one unwinds), the whole group is killed, the Chromium it started with it;
/// killing chromedriver alone left every browser of the run behind (about 650 MiB).
pub struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub async fn browser() -> (Client, Driver) {
    let exe = ["chromedriver", "/usr/bin/chromedriver"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromedriver is not installed: apt-get install -y chromium chromium-driver (.ci/run does)");
    // chromedriver binds the port it is given: a port found free a moment earlier may be taken
    // by then, so a driver that exits without listening is started again on another.
    let mut started = None;
    for _ in 0..5 {
        let port = free_port();
        let mut child = Command::new(exe)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        let listening = loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break true;
            }
            if child.try_wait().ok().flatten().is_some() || Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if listening {
            started = Some((port, child));
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let (port, child) = started.expect("chromedriver did not listen on any of five ports");
    let driver = Driver(child);
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                    "--disable-dev-shm-usage", "--window-size=1280,900"]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a browser session");
    (client, driver)
}

pub async fn serve(t: &TestDb) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = AppState {
        store: t.store.clone(),
        access: Access::Tokens,
    };
    tokio::spawn(async move { axum::serve(listener, app(state)).await });
    base
}

/// The page served for `t`, and a headless browser signed in to it with an admin token.
pub async fn admin_session(t: &TestDb) -> (Client, Driver, String) {
    let base = serve(t).await;
    let admin = t
        .store
        .token_create(workdo::store::Role::Admin, "ui", None)
        .await
        .expect("token")
        .1;
    let (c, driver) = browser().await;
    sign_in(&c, &base, &admin).await;
    (c, driver, base)
}

pub async fn shot(c: &Client, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/admin-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(dir.join(format!("{name}.png")), png);
    }
}

pub async fn sign_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/")).await.expect("open");
    let field = c
        .wait()
        .for_element(Locator::Id("token"))
        .await
        .expect("sign-in form");
    field.send_keys(token).await.expect("type the token");
    click(c, Locator::Id("signin"), "sign in").await;
    c.wait()
        .for_element(Locator::Id("facets"))
        .await
        .expect("the overview");
}

/// Click the element `at` (what: for messages).
pub async fn click(c: &Client, at: Locator<'_>, what: &str) {
    c.find(at)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {what}: {e}"));
}

/// Wait until the page's source contains `text` (a POST's redirect has landed).
pub async fn wait_text(c: &Client, text: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.source().await.unwrap_or_default().contains(text) {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the facet link `template:step:status`, once it shows `expected`.
pub async fn wait_count(c: &Client, facet: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = c
            .find(Locator::Css(&format!("a[data-facet='{facet}']")))
            .await
            .ok();
        let text = match found {
            Some(e) => e.text().await.unwrap_or_default(),
            None => String::new(),
        };
        if text == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{facet} shows {text:?}, not {expected:?}"
        );
        c.refresh().await.expect("reload");
        c.wait()
            .for_element(Locator::Id("facets"))
            .await
            .expect("the overview");
    }
}

/// Complete `object`'s `step` of liveWF as a robot would.
pub async fn complete(t: &TestDb, object: &str, step: &str) {
    t.store
        .step_set(&workdo::store::SetRequest::new(
            object,
            "liveWF",
            step,
            "completed",
        ))
        .await
        .expect("complete");
}

/// Run `js` (a `return` expression's body) in the page.
pub async fn eval(c: &Client, js: &str) -> serde_json::Value {
    c.execute(js, vec![]).await.expect("script")
}
