//! Helpers for the HTTP API tests: a server on a loopback port with an admin, a robot and a
//! viewer token, and requests as the tests make them.

use reqwest::StatusCode;
use serde_json::Value;
use workdo::api::{Access, AppState, app};
use workdo::store::Role;

use super::{GOOGLE_XML, TestDb, db, load};

pub const WF: &str = "googleScannedBookWF";
pub const DRUID: &str = "druid:bb123cd4567";

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub admin: String,
    pub robot: String,
    pub viewer: String,
    pub t: TestDb,
}

pub async fn api() -> Api {
    api_with(Access::Tokens).await
}

pub async fn api_with(access: Access) -> Api {
    workdo::install_crypto();
    let t = db().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = AppState {
        store: t.store.clone(),
        access,
    };
    tokio::spawn(async move { axum::serve(listener, app(state)).await });
    let token = |role| {
        let store = t.store.clone();
        async move {
            store
                .token_create(role, "test", None)
                .await
                .expect("token")
                .1
        }
    };
    Api {
        base,
        http: reqwest::Client::new(),
        admin: token(Role::Admin).await,
        robot: token(Role::Robot).await,
        viewer: token(Role::Viewer).await,
        t,
    }
}

impl Api {
    pub fn req(&self, method: reqwest::Method, path: &str, token: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        if token.is_empty() {
            r
        } else {
            r.bearer_auth(token)
        }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<(&str, String)>,
    ) -> (StatusCode, String) {
        let mut r = self.req(method, path, token);
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        self.call(reqwest::Method::GET, path, &self.viewer, None)
            .await
    }

    pub async fn put_xml(&self, path: &str, xml: &str) -> (StatusCode, String) {
        self.call(
            reqwest::Method::PUT,
            path,
            &self.robot,
            Some(("application/xml", xml.to_string())),
        )
        .await
    }

    pub async fn post_json(&self, path: &str, token: &str, body: Value) -> (StatusCode, String) {
        self.call(
            reqwest::Method::POST,
            path,
            token,
            Some(("application/json", body.to_string())),
        )
        .await
    }
}

pub fn err(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(String::from))
        .unwrap_or_default()
}

pub async fn with_google(a: &Api) {
    load(&a.t.store, "google.xml", GOOGLE_XML).await;
}

/// The CSRF token of the admin page's forms in `html` (empty when it has none).
pub fn csrf_in(html: &str) -> String {
    html.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_default()
        .to_string()
}
