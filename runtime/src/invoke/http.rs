//! `http`: POST the event to a URL, the result in the answer's body.

use std::time::Duration;

use super::{Event, InvokeError, Outcome, parse_result, tail};

pub(super) async fn call(
    client: &reqwest::Client,
    url: &str,
    event: &Event,
    timeout: Duration,
) -> Result<Outcome, InvokeError> {
    let mut req = client.post(url).timeout(timeout).json(event);
    if let Some(tp) = &event.traceparent {
        req = req.header("traceparent", tp);
    }
    let resp = req.send().await.map_err(|e| {
        let what = if e.is_timeout() {
            format!("POST {url} timed out after {:.1}s", timeout.as_secs_f64())
        } else {
            format!("POST {url} failed: {e}")
        };
        InvokeError::new(what, String::new())
    })?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| {
        InvokeError::new(
            format!("reading the answer of {url} failed: {e}"),
            String::new(),
        )
    })?;
    if !status.is_success() {
        return Err(InvokeError::new(
            format!("POST {url} answered HTTP {status}"),
            tail(&body),
        ));
    }
    parse_result(&body).map_err(|m| InvokeError::new(format!("{url} {m}"), String::new()))
}
