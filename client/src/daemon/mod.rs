//! The daemon's client, as the CLI uses it: one connection, on the daemon's Unix socket or
//! over its network listener's WebSocket (`ws://` / `wss://`, see [`Remote`]), with the same
//! calls on both: requests answered in order, `eval/event` notifications handed to a callback
//! while an `eval` runs, and the daemon's `tool/call` requests answered by the caller's tools.
//!
//! - [`remote`]: the URL, token, CA and session binding of a daemon on the network.
//! - `tls`: the certificates a `wss://` connection trusts.
//! - `transport`: messages as lines on the socket or text frames on the WebSocket.
//! - `start`: starting a daemon on first use.
//! - `retry`: an `eval` sent again, with its `request_id`, after a lost connection.
//! - `handshake`: telling a daemon of another protocol version (one left running across an
//!   upgrade) by name, rather than by the field or method it refused.

mod files;
mod handshake;
pub mod health;
pub mod remote;
mod retry;
mod start;
mod tls;
mod transport;

use crate::cell::{EvalRequest, EvalResult};
use crate::protocol::{method, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::UnixStream;
use transport::Transport;

pub use remote::{DaemonUrl, Remote, Token};
pub use start::log_path;

/// The daemon socket: `explicit`, else `$CELLVISOR_SOCKET`, else the config's
/// `daemon.socket`, else `daemon.sock` in the per-user runtime directory.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    if let Some(path) = std::env::var_os("CELLVISOR_SOCKET").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    if let Some(path) = configured {
        return path.to_path_buf();
    }
    cellvisor_ipc::socket::default_runtime_dir().join("daemon.sock")
}

/// What went wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at `path` (no daemon), or it refused us.
    #[error("cannot connect to the cellvisor daemon at {path}: {source}")]
    Connect {
        /// The socket tried.
        path: PathBuf,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// A daemon URL that is not `ws://HOST[:PORT][/PATH]` or `wss://...`.
    #[error("bad daemon URL `{url}`: {reason}; expected ws://HOST:PORT or wss://HOST:PORT")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No TCP connection to the daemon's host and port.
    #[error("cannot reach the cellvisor daemon at {address}: {reason}")]
    Unreachable {
        /// `host:port` (or the URL) tried.
        address: String,
        /// Why (refused, no route, timed out, no such host).
        reason: String,
    },
    /// The daemon answered the upgrade with 401: the token is wrong or missing.
    #[error("{}", unauthorized(url, token.as_deref()))]
    Unauthorized {
        /// The daemon's URL.
        url: String,
        /// Where the refused token came from; `None` when no token was sent.
        token: Option<String>,
    },
    /// The daemon answered the upgrade with another HTTP status (404, 503, ...).
    #[error(
        "the daemon at {url} refused the connection: {status}{}",
        body_suffix(body)
    )]
    Refused {
        /// The daemon's URL.
        url: String,
        /// The HTTP status.
        status: String,
        /// The daemon's reason, if it gave one.
        body: String,
    },
    /// TLS with the daemon failed (an untrusted certificate, a listener without TLS, ...).
    #[error("TLS with the daemon at {url} failed: {reason}")]
    Tls {
        /// The daemon's URL.
        url: String,
        /// What failed, and what usually fixes it.
        reason: String,
    },
    /// The CA file to trust (or the system's bundle) cannot be used.
    #[error("CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The token cannot be read or sent.
    #[error("token from {from}: {reason}")]
    Token {
        /// Where the token was to come from.
        from: String,
        /// What is wrong.
        reason: String,
    },
    /// The WebSocket upgrade failed for another reason (not a cellvisor daemon, ...).
    #[error("no WebSocket with the daemon at {url}: {reason}")]
    Handshake {
        /// The daemon's URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// Something accepted the connection but did not answer the health handshake in time
    /// (a hung or stopped daemon, or another program on the socket).
    #[error(
        "the cellvisor daemon at {path} accepted the connection but did not answer \
         `initialize` within {} s: {}",
        waited.as_secs_f64(),
        health::advice(path, *pid)
    )]
    Unresponsive {
        /// The socket (or URL) tried.
        path: PathBuf,
        /// How long the client waited for the answer.
        waited: std::time::Duration,
        /// The process that listens on the socket, when the kernel says.
        pid: Option<u32>,
    },
    /// A daemon could not be started, or did not start listening in time.
    #[error("cannot start a cellvisor daemon: {0}")]
    Start(String),
    /// Reading or writing the connection failed.
    #[error("lost the connection to the daemon: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon closed the connection before answering (it stopped, or crashed).
    #[error("the daemon closed the connection")]
    Closed,
    /// Nothing came on the WebSocket for `waited` while an answer was awaited, not even the
    /// pong to a ping: its daemon (or the node behind a router) is stopped or cut off.
    #[error(
        "nothing came from the daemon for {} s, not even the answer to a ping: it is \
         stopped or cut off",
        waited.as_secs_f64()
    )]
    Silent {
        /// How long the connection was silent.
        waited: Duration,
    },
    /// No answer to an `eval` by its deadline (its cells' timeouts plus a margin).
    #[error(
        "no answer to the eval within {} s (its cells' timeouts plus a margin)",
        waited.as_secs_f64()
    )]
    AnswerTimeout {
        /// How long the client waited.
        waited: Duration,
    },
    /// The daemon refused the call; its error says what was wrong and what is allowed.
    #[error("{}", .0.message)]
    Rpc(RpcError),
    /// The daemon speaks another protocol version than this client: both versions, and
    /// what to do (restart the daemon).
    #[error("{0}")]
    VersionMismatch(crate::protocol::VersionMismatch),
    /// The daemon answered something this client does not understand (a version mismatch).
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
}

fn unauthorized(url: &str, token: Option<&str>) -> String {
    match token {
        Some(source) => format!(
            "the daemon at {url} refused the token from {source} (401 Unauthorized): it is \
             not the daemon's token (its `daemon.token-file`)"
        ),
        None => format!(
            "the daemon at {url} requires a token (401 Unauthorized) and no token was given"
        ),
    }
}

fn body_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

/// A `tool/call` of the daemon's: a cell of the running `eval` calls one of its tools.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolCall {
    /// The id of the `eval` whose cell calls.
    #[serde(default)]
    pub request_id: Value,
    /// The tool's name, as the `eval` declared it.
    pub name: String,
    /// The arguments the cell passed.
    #[serde(default)]
    pub arguments: Value,
}

/// JSON-RPC's code for a host's own failure, used when a tool fails.
const TOOL_FAILED: i64 = -32000;

/// A connection to the daemon.
pub struct Client {
    transport: Transport,
    next_id: u64,
    /// How to connect again after a lost connection (none: the caller's own transport).
    reconnect: Option<retry::Reconnect>,
    /// How many times an `eval` is sent again after a lost connection.
    retries: u32,
    /// How long connecting again is tried after a loss.
    retry_within: Duration,
    /// A WebSocket silent this long while an answer is awaited is given up.
    silent_after: Option<Duration>,
}

pub use retry::{
    answer_deadline, ANSWER_MARGIN, DEFAULT_CELL_TIMEOUT, DEFAULT_RETRIES, DEFAULT_RETRY_WITHIN,
    DEFAULT_SILENT_AFTER,
};

impl Client {
    /// Connects to a daemon already listening at `path`, which must answer `initialize`
    /// within [`health::health_timeout`] (else [`ClientError::Unresponsive`]).
    pub async fn connect(path: &Path) -> Result<Client, ClientError> {
        Client::connect_within(path, health::health_timeout()?).await
    }

    /// [`Client::connect`] with the handshake's bound given.
    pub async fn connect_within(path: &Path, within: Duration) -> Result<Client, ClientError> {
        let connect = UnixStream::connect(path);
        let stream = match tokio::time::timeout(within, connect).await {
            Ok(connected) => connected.map_err(|source| ClientError::Connect {
                path: path.to_path_buf(),
                source,
            })?,
            Err(_) => {
                return Err(ClientError::Unresponsive {
                    path: path.to_path_buf(),
                    waited: within,
                    pid: None,
                })
            }
        };
        let pid = stream
            .peer_cred()
            .ok()
            .and_then(|cred| cred.pid())
            .and_then(|pid| u32::try_from(pid).ok());
        let (reader, writer) = stream.into_split();
        let mut client = Client::over(Transport::Unix {
            reader: BufReader::new(reader),
            writer,
        });
        client
            .handshake(within, || ClientError::Unresponsive {
                path: path.to_path_buf(),
                waited: within,
                pid,
            })
            .await?;
        client.reconnect = Some(retry::Reconnect::Unix {
            path: path.to_path_buf(),
            within,
        });
        Ok(client)
    }

    /// Connects to a daemon's network listener (its `/v1/rpc` WebSocket); nothing is ever
    /// started for a remote daemon. The connection and the daemon's first answer must come
    /// within [`health::health_timeout`].
    pub async fn connect_remote(remote: &Remote) -> Result<Client, ClientError> {
        Client::connect_remote_within(remote, health::health_timeout()?).await
    }

    /// [`Client::connect_remote`] with the bound on the connection and the first answer.
    pub async fn connect_remote_within(
        remote: &Remote,
        within: Duration,
    ) -> Result<Client, ClientError> {
        let unresponsive = || ClientError::Unresponsive {
            path: PathBuf::from(remote.url.to_string()),
            waited: within,
            pid: None,
        };
        let stream = tokio::time::timeout(within, remote.connect())
            .await
            .map_err(|_| unresponsive())??;
        let mut client = Client::over(Transport::WebSocket(Box::new(stream)));
        client.handshake(within, unresponsive).await?;
        client.reconnect = Some(retry::Reconnect::Remote(Box::new(remote.clone())));
        Ok(client)
    }

    /// The health handshake: `initialize` answered (a refusal counts: the daemon is alive
    /// and its next answer says why) within `within`, else `unresponsive()`.
    async fn handshake(
        &mut self,
        within: Duration,
        unresponsive: impl FnOnce() -> ClientError,
    ) -> Result<(), ClientError> {
        match tokio::time::timeout(within, self.call(method::INITIALIZE, json!({}))).await {
            Ok(Ok(_)) | Ok(Err(ClientError::Rpc(_))) => Ok(()),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(unresponsive()),
        }
    }

    fn over(transport: Transport) -> Client {
        Client {
            transport,
            next_id: 1,
            reconnect: None,
            retries: retry::DEFAULT_RETRIES,
            retry_within: retry::DEFAULT_RETRY_WITHIN,
            silent_after: Some(retry::DEFAULT_SILENT_AFTER),
        }
    }

    /// Calls `method` and waits for its result: notifications meanwhile go to `on_event`
    /// (the whole message), `tool/call` requests to `on_tool`, whose `Ok` is the tool's
    /// result and `Err` its failure (the cell's exception). A refusal of the call's method or
    /// params by a daemon of another protocol version is [`ClientError::VersionMismatch`].
    pub async fn call_with_tools(
        &mut self,
        method: &str,
        params: Value,
        on_event: impl FnMut(&Value),
        on_tool: impl FnMut(&ToolCall) -> Result<Value, String>,
    ) -> Result<Value, ClientError> {
        let answer = self.exchange(method, params, on_event, on_tool).await;
        match answer {
            Err(ClientError::Rpc(refusal)) if handshake::may_be_version_skew(method, &refusal) => {
                Err(self.explain_refusal(refusal).await)
            }
            other => other,
        }
    }

    /// One request and its answer, as [`Client::call_with_tools`] describes.
    async fn exchange(
        &mut self,
        method: &str,
        params: Value,
        mut on_event: impl FnMut(&Value),
        mut on_tool: impl FnMut(&ToolCall) -> Result<Value, String>,
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.transport.send(request.to_string()).await?;
        loop {
            let text = self.transport.recv(self.silent_after).await?;
            let message: Value = serde_json::from_str(&text)
                .map_err(|e| ClientError::Protocol(format!("{e}: {text}")))?;
            let is_request = message.get("method").and_then(Value::as_str);
            match (message.get("id"), is_request) {
                (Some(answer_id), None) if answer_id.as_u64() == Some(id) => {
                    if let Some(error) = message.get("error") {
                        let error: RpcError = serde_json::from_value(error.clone())
                            .map_err(|e| ClientError::Protocol(e.to_string()))?;
                        return Err(ClientError::Rpc(error));
                    }
                    return Ok(message.get("result").cloned().unwrap_or(Value::Null));
                }
                (Some(call_id), Some(method::TOOL_CALL)) => {
                    let answer = answer_tool_call(call_id, &message, &mut on_tool);
                    self.transport.send(answer.to_string()).await?;
                }
                (None, Some(_)) => on_event(&message),
                // An answer to nobody's request, or a request this client does not serve.
                _ => {}
            }
        }
    }

    /// Calls `method` and waits for its result; notifications meanwhile go to `on_event`,
    /// and any `tool/call` fails (this caller declared no tools).
    pub async fn call_with_events(
        &mut self,
        method: &str,
        params: Value,
        on_event: impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        self.call_with_tools(method, params, on_event, no_tools)
            .await
    }

    /// Calls `method` and waits for its result, ignoring notifications meanwhile.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.call_with_events(method, params, |_| {}).await
    }

    /// Returns once the daemon has closed the connection (after a `shutdown`, when it
    /// exits), discarding what it still sends.
    pub async fn closed(&mut self) {
        while self.transport.recv(None).await.is_ok() {}
    }

    /// Runs an `eval`, handing each progress event's params to `on_event`.
    pub async fn eval(
        &mut self,
        request: &EvalRequest,
        on_event: impl FnMut(&Value),
    ) -> Result<EvalResult, ClientError> {
        self.eval_with_tools(request, on_event, no_tools).await
    }

    /// Runs an `eval` whose `tools` the caller serves: each progress event's params go to
    /// `on_event`, each tool call to `on_tool` (see [`Client::call_with_tools`]).
    ///
    /// The request carries a `request_id` (a fresh one unless the caller set one). When the
    /// connection is lost or silent ([`Client::with_silent_after`]), when no answer came by
    /// its deadline ([`answer_deadline`], on a network connection), or when `LEASED_ELSEWHERE` says another node holds
    /// the session (after its `retry_after_ms`, at most 5 s), the client connects again
    /// (trying for [`Client::with_retry_within`]) and sends the same request with the same
    /// id, at most [`Client::with_retries`] times ([`DEFAULT_RETRIES`] by default): the
    /// daemon runs it once, so the retry gets the first run's answer.
    pub async fn eval_with_tools(
        &mut self,
        request: &EvalRequest,
        mut on_event: impl FnMut(&Value),
        mut on_tool: impl FnMut(&ToolCall) -> Result<Value, String>,
    ) -> Result<EvalResult, ClientError> {
        let params =
            serde_json::to_value(request).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let params = retry::with_request_id(params);
        // Over the network only: a router may lose an answer, while on the Unix socket a
        // lost daemon closes the connection and a cell may run as long as the daemon allows.
        let deadline = self
            .over_the_network()
            .then(|| retry::answer_deadline(&params));
        let mut attempt = 0;
        let result = loop {
            let call = self.call_with_tools(
                method::EVAL,
                params.clone(),
                |message| {
                    if let Some(params) = message.get("params") {
                        on_event(params);
                    }
                },
                &mut on_tool,
            );
            let answer = match deadline {
                Some(deadline) => tokio::time::timeout(deadline, call)
                    .await
                    .unwrap_or(Err(ClientError::AnswerTimeout { waited: deadline })),
                None => call.await,
            };
            match answer {
                Err(err) => match retry::wait_before_retry(&err, attempt + 1) {
                    Some(wait) if attempt < self.retries && self.reconnect.is_some() => {
                        attempt += 1;
                        tokio::time::sleep(wait).await;
                        self.reconnect_within(err).await?;
                    }
                    _ => return Err(err),
                },
                Ok(result) => break result,
            }
        };
        serde_json::from_value(result).map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

/// The tool handler of a caller that declared no tools.
fn no_tools(call: &ToolCall) -> Result<Value, String> {
    Err(format!(
        "this client serves no tools (the cell called `{}`)",
        call.name
    ))
}

/// The answer to the daemon's `tool/call` `message` (id `id`), from `on_tool`.
fn answer_tool_call(
    id: &Value,
    message: &Value,
    on_tool: &mut impl FnMut(&ToolCall) -> Result<Value, String>,
) -> Value {
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let outcome = match serde_json::from_value::<ToolCall>(params) {
        Ok(call) => on_tool(&call),
        Err(e) => Err(format!("a tool call this client cannot read: {e}")),
    };
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(message) => json!({
            "jsonrpc": "2.0", "id": id, "error": {"code": TOOL_FAILED, "message": message}
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_are_answered_with_the_result_or_the_failure() {
        let message = json!({"jsonrpc": "2.0", "id": "tool-1", "method": "tool/call",
            "params": {"request_id": 7, "name": "add", "arguments": {"a": 2, "b": 3}}});
        let mut add = |call: &ToolCall| {
            assert_eq!(call.request_id, json!(7));
            Ok(json!(
                call.arguments["a"].as_i64().unwrap() + call.arguments["b"].as_i64().unwrap()
            ))
        };
        let answer = answer_tool_call(&json!("tool-1"), &message, &mut add);
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": "tool-1", "result": 5})
        );
        let mut none = no_tools;
        let refused = answer_tool_call(&json!("tool-1"), &message, &mut none);
        assert_eq!(refused["error"]["code"], TOOL_FAILED);
        assert!(refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("serves no tools (the cell called `add`)"));
        let garbled = json!({"id": "tool-2", "method": "tool/call", "params": {"x": 1}});
        let unreadable = answer_tool_call(&json!("tool-2"), &garbled, &mut add);
        assert!(unreadable["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot read"));
    }
}
