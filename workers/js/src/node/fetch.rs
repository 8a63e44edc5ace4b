//! `fetch`'s network half: one HTTP exchange on its own thread (ureq), so the cell's event
//! loop keeps running timers and other calls meanwhile. The answer comes back like a host
//! tool's (`ToolOutcome`): JSON with the status, headers and the body in base64, or the
//! reason it failed.
//!
//! Proxies come from the worker's environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`), which the supervisor filters: they apply only when the configuration passes
//! them. Timeouts follow Node's: none overall (unless the request's signal is an
//! `AbortSignal.timeout()`), 300 s for the response head and body each.

use crate::runtime::ToolOutcome;
use base64::Engine as _;
use std::sync::mpsc::Sender;
use std::time::Duration;
use ureq::http;
use ureq::ResponseExt as _;

/// Node's `headersTimeout` and `bodyTimeout`.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);
/// Redirects followed before giving up, as in Node.
const MAX_REDIRECTS: u32 = 20;
/// The largest body read into memory.
const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// What `redirect` in the request's options asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirect {
    Follow,
    Manual,
    Error,
}

impl Redirect {
    pub(super) fn parse(mode: &str) -> Result<Self, String> {
        match mode {
            "follow" => Ok(Redirect::Follow),
            "manual" => Ok(Redirect::Manual),
            "error" => Ok(Redirect::Error),
            other => Err(format!(
                "fetch: redirect must be \"follow\", \"manual\" or \"error\", got {other:?}"
            )),
        }
    }
}

pub(super) struct FetchRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub redirect: Redirect,
    /// From an `AbortSignal.timeout()`: the whole exchange must end within it.
    pub timeout: Option<Duration>,
}

/// Starts the exchange on a thread, which sends its outcome to `answer`.
pub(super) fn start(request: FetchRequest, answer: Sender<ToolOutcome>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("cellvisor-fetch".into())
        .spawn(move || {
            let _ = answer.send(exchange(request));
        })
        .map(drop)
        .map_err(|err| format!("fetch failed: cannot start a thread: {err}"))
}

fn exchange(request: FetchRequest) -> ToolOutcome {
    let follow = request.redirect == Redirect::Follow;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(ureq::Proxy::try_from_env())
        .max_redirects(if follow { MAX_REDIRECTS } else { 0 })
        .max_redirects_will_error(follow)
        .save_redirect_history(true)
        .timeout_recv_response(Some(RESPONSE_TIMEOUT))
        .timeout_recv_body(Some(RESPONSE_TIMEOUT))
        .timeout_global(request.timeout)
        .user_agent("cellvisor-fetch")
        .build()
        .into();
    let mut builder = http::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str());
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let failed = |err: &dyn std::fmt::Display| format!("fetch failed: {err}");
    let sent = match request.body {
        Some(body) => builder.body(body).map_err(|err| failed(&err))?,
        None => builder.body(Vec::new()).map_err(|err| failed(&err))?,
    };
    let mut response = agent.run(sent).map_err(|err| failed(&err))?;
    let status = response.status();
    if request.redirect == Redirect::Error && status.is_redirection() {
        return Err(format!(
            "fetch failed: {} redirected ({status}) and the request says redirect: \"error\"",
            request.url
        ));
    }
    let final_url = response.get_uri().to_string();
    let redirected = response
        .get_redirect_history()
        .is_some_and(|history| history.len() > 1);
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|err| failed(&err))?;
    let head = serde_json::json!({
        "status": status.as_u16(),
        "statusText": status.canonical_reason().unwrap_or(""),
        "url": final_url,
        "redirected": redirected,
        "headers": headers,
        "body": base64::engine::general_purpose::STANDARD.encode(body),
    });
    Ok(head.to_string())
}
