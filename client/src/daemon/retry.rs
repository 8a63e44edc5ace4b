//! An `eval` that survives a fleet's faults, as the Python and TypeScript clients' does
//! (docs/fleet.md, "The clients' retries"): the client names it with a fresh `request_id`
//! (unless the caller chose one), and when the connection is lost or silent before the
//! answer (a router restarted, a node went away or was stopped), when the answer is past its
//! deadline, or when `LEASED_ELSEWHERE` says another node holds the session, it connects
//! again the way it first did (for up to [`DEFAULT_RETRY_WITHIN`]) and sends the same
//! request with the same id, at most [`DEFAULT_RETRIES`] times. The daemon runs an id once:
//! a retry of a request that ran is answered with its first result, one that still runs
//! waits for it.

use super::{Client, ClientError, Remote};
use crate::protocol::code;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How many times an `eval` is sent again after a lost or silent connection, an answer past
/// its deadline or `LEASED_ELSEWHERE`, by default.
pub const DEFAULT_RETRIES: u32 = 3;

/// How long connecting again is tried after a loss, by default: a router answers 503 while
/// a dead or paused node's lease runs out.
pub const DEFAULT_RETRY_WITHIN: Duration = Duration::from_secs(30);

/// A WebSocket on which nothing came for this long while an answer was awaited (not even
/// the pong to the ping sent halfway) is given up, by default.
pub const DEFAULT_SILENT_AFTER: Duration = Duration::from_secs(10);

/// The daemon's default cell timeout (`cells.default-timeout`), assumed for a cell that
/// names none when the answer's deadline is derived.
pub const DEFAULT_CELL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an answer may take beyond its cells' timeouts (the save, its commit, a queue).
pub const ANSWER_MARGIN: Duration = Duration::from_secs(15);

/// The longest wait a `LEASED_ELSEWHERE` refusal's `retry_after_ms` is taken for.
const MAX_LEASE_WAIT: Duration = Duration::from_secs(5);

/// The longest backoff between attempts at an `eval` or at connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long to wait for an `eval`'s answer: each cell's timeout (its own, the request's,
/// else [`DEFAULT_CELL_TIMEOUT`]) plus [`ANSWER_MARGIN`]. Past it the answer is lost, and the
/// client sends the request again with its `request_id`.
pub fn answer_deadline(params: &Value) -> Duration {
    let seconds = |value: &Value| value.as_f64().filter(|s| s.is_finite() && *s > 0.0);
    let request = seconds(&params["timeout"]);
    let cells = params["cells"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let total: f64 = cells
        .iter()
        .map(|cell| {
            seconds(&cell["timeout"])
                .or(request)
                .unwrap_or(DEFAULT_CELL_TIMEOUT.as_secs_f64())
        })
        .sum();
    Duration::try_from_secs_f64(total).unwrap_or(Duration::MAX / 2) + ANSWER_MARGIN
}

/// How long to wait before sending an `eval` again after `err` (attempt `attempt`, from
/// 1), or `None` when it is not one to retry (a refusal, a bad answer): a
/// `LEASED_ELSEWHERE`'s `retry_after_ms` (at most 5 s; 100 ms when it names none), else
/// a backoff.
pub(super) fn wait_before_retry(err: &ClientError, attempt: u32) -> Option<Duration> {
    match err {
        ClientError::Rpc(refusal) if refusal.code == code::LEASED_ELSEWHERE => {
            let after = refusal
                .data
                .as_ref()
                .and_then(|data| data["retry_after_ms"].as_u64())
                .filter(|ms| *ms > 0)
                .unwrap_or(100);
            Some(Duration::from_millis(after).min(MAX_LEASE_WAIT))
        }
        err if lost(err) => Some(backoff(attempt).min(MAX_BACKOFF)),
        _ => None,
    }
}

/// The first wait before a retry; it doubles with each one.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// How the client connects again: as it first connected.
#[derive(Debug, Clone)]
pub(super) enum Reconnect {
    /// The daemon's Unix socket, with its handshake's bound.
    Unix { path: PathBuf, within: Duration },
    /// The daemon's network listener.
    Remote(Box<Remote>),
}

/// Whether `err` means the connection was lost before the answer (the request may have
/// reached the daemon, so only a retry with the same id is safe).
pub(super) fn lost(err: &ClientError) -> bool {
    matches!(
        err,
        ClientError::Closed
            | ClientError::Io(_)
            | ClientError::Connect { .. }
            | ClientError::Silent { .. }
            | ClientError::AnswerTimeout { .. }
    )
}

/// The wait before retry `attempt` (from 1).
pub(super) fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF * 2u32.saturating_pow(attempt.saturating_sub(1).min(6))
}

/// `params` of an `eval` with a `request_id`: the caller's, or a fresh one.
pub(super) fn with_request_id(mut params: Value) -> Value {
    if let Some(object) = params.as_object_mut() {
        object
            .entry("request_id")
            .or_insert_with(|| json!(crate::once::new_request_id()));
    }
    params
}

impl Client {
    /// Sends `eval`s again at most `retries` times after a lost or silent connection, an
    /// answer past its deadline or `LEASED_ELSEWHERE` (0: never).
    pub fn with_retries(mut self, retries: u32) -> Client {
        self.retries = retries;
        self
    }

    /// Tries connecting again for `within` after a loss before the loss is returned
    /// (default [`DEFAULT_RETRY_WITHIN`]).
    pub fn with_retry_within(mut self, within: Duration) -> Client {
        self.retry_within = within;
        self
    }

    /// Gives up a WebSocket on which nothing came for `after` while an answer was awaited,
    /// pinging it halfway (a live daemon answers pings while its cell runs): then
    /// [`ClientError::Silent`], and an `eval` is sent again. `None`: never. Default
    /// [`DEFAULT_SILENT_AFTER`].
    pub fn with_silent_after(mut self, after: Option<Duration>) -> Client {
        self.silent_after = after;
        self
    }

    /// Whether this client reached its daemon over the network (where a router sits).
    pub(super) fn over_the_network(&self) -> bool {
        matches!(self.reconnect, Some(Reconnect::Remote(_)))
    }

    /// Connects again as this client first connected, trying for its `retry_within` (a
    /// little longer between tries) over the network; past it, or for a client that cannot
    /// connect again, returns `lost`. On the Unix socket it tries once: no router sits there
    /// to bring the session back elsewhere, and a local daemon that went away is told at
    /// once rather than after `retry_within`.
    pub(super) async fn reconnect_within(&mut self, lost: ClientError) -> Result<(), ClientError> {
        if !self.over_the_network() {
            return match self.reconnect().await {
                Ok(true) => Ok(()),
                Ok(false) | Err(_) => Err(lost),
            };
        }
        let until = tokio::time::Instant::now() + self.retry_within;
        let mut tries = 0;
        loop {
            match self.reconnect().await {
                Ok(true) => return Ok(()),
                Ok(false) => return Err(lost),
                Err(_) if tokio::time::Instant::now() >= until => return Err(lost),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(backoff(tries).min(MAX_BACKOFF)).await;
                }
            }
        }
    }

    /// Connects again as this client first connected; false when it cannot (a client made
    /// some other way).
    pub(super) async fn reconnect(&mut self) -> Result<bool, ClientError> {
        let fresh = match self.reconnect.clone() {
            None => return Ok(false),
            Some(Reconnect::Unix { path, within }) => Client::connect_within(&path, within).await?,
            Some(Reconnect::Remote(remote)) => {
                // A stopped node accepts the connection and never answers: bounded by the
                // silence this client tolerates, as an answer is.
                let bound = self.silent_after.unwrap_or(super::remote::CONNECT_TIMEOUT);
                Client::connect_remote_within(&remote, bound).await?
            }
        };
        self.transport = fresh.transport;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_id_is_added_and_the_callers_is_kept() {
        let added = with_request_id(json!({"session": "s"}));
        let id = added["request_id"].as_str().expect("an id");
        assert_eq!(crate::once::check_request_id(id), Ok(()));
        let kept = with_request_id(json!({"request_id": "mine"}));
        assert_eq!(kept["request_id"], "mine");
    }

    #[test]
    fn lost_connections_are_retried_and_refusals_are_not() {
        assert!(lost(&ClientError::Closed));
        assert!(lost(&ClientError::Io(std::io::Error::other("reset"))));
        let refused = ClientError::Rpc(crate::protocol::RpcError::new(-32001, "no"));
        assert!(!lost(&refused));
        assert!(lost(&ClientError::Silent {
            waited: Duration::from_secs(1)
        }));
        assert_eq!(wait_before_retry(&refused, 1), None);
        assert_eq!(
            wait_before_retry(&ClientError::Closed, 5),
            Some(MAX_BACKOFF),
            "capped"
        );
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(3), FIRST_BACKOFF * 4);
        assert!(backoff(100) <= FIRST_BACKOFF * 64);
    }

    #[test]
    fn leased_elsewhere_waits_its_retry_after_up_to_five_seconds() {
        let leased = |data: Option<Value>| {
            let mut error = crate::protocol::RpcError::new(code::LEASED_ELSEWHERE, "held");
            error.data = data;
            ClientError::Rpc(error)
        };
        let soon = leased(Some(json!({"node": "a", "retry_after_ms": 1500})));
        assert_eq!(
            wait_before_retry(&soon, 1),
            Some(Duration::from_millis(1500))
        );
        let late = leased(Some(json!({"node": "a", "retry_after_ms": 30000})));
        assert_eq!(wait_before_retry(&late, 1), Some(MAX_LEASE_WAIT));
        assert_eq!(
            wait_before_retry(&leased(None), 1),
            Some(Duration::from_millis(100))
        );
    }

    #[test]
    fn the_answer_deadline_is_the_cells_timeouts_plus_a_margin() {
        let one = json!({"cells": [{"language": "py", "code": "1"}]});
        assert_eq!(answer_deadline(&one), DEFAULT_CELL_TIMEOUT + ANSWER_MARGIN);
        let mixed = json!({"timeout": 5, "cells": [
            {"language": "py", "code": "1"}, {"language": "py", "code": "2", "timeout": 2}]});
        assert_eq!(
            answer_deadline(&mixed),
            Duration::from_secs(7) + ANSWER_MARGIN
        );
    }

    /// A daemon on a Unix socket that answers `initialize`, records each `eval`'s params,
    /// and closes the connection under the first `drops` of them before answering.
    async fn flaky_daemon(
        path: PathBuf,
        drops: usize,
        connections: usize,
    ) -> tokio::task::JoinHandle<Vec<Value>> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            let mut seen = Vec::new();
            for round in 0..connections {
                let (stream, _) = listener.accept().await.expect("accept");
                let (reader, mut writer) = stream.into_split();
                let mut lines = BufReader::new(reader).lines();
                let answer = |id: &Value, result: Value| {
                    let mut line =
                        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
                    line.push('\n');
                    line
                };
                let init: Value =
                    serde_json::from_str(&lines.next_line().await.expect("read").expect("line"))
                        .expect("json");
                let line = answer(&init["id"], json!({"protocol_version": 1}));
                writer.write_all(line.as_bytes()).await.expect("write");
                let Ok(Some(line)) = lines.next_line().await else {
                    continue;
                };
                let eval: Value = serde_json::from_str(&line).expect("json");
                seen.push(eval["params"].clone());
                if round < drops {
                    continue;
                }
                let line = answer(&eval["id"], json!({"is_error": false, "cells": []}));
                writer.write_all(line.as_bytes()).await.expect("write");
            }
            seen
        })
    }

    fn socket(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "cellvisor-client-retry-{}-{name}.sock",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        path
    }

    #[tokio::test]
    async fn an_eval_whose_connection_is_lost_is_sent_again_with_the_same_request_id() {
        let path = socket("same-id");
        let daemon = flaky_daemon(path.clone(), 2, 3).await;
        let mut client = Client::connect(&path).await.expect("connect");
        let request = crate::cell::EvalRequest {
            cells: vec![crate::cell::CellSpec::new(crate::Language::Python, "x = 1")],
            ..Default::default()
        };
        let result = client
            .eval(&request, |_| {})
            .await
            .expect("answered at last");
        assert!(!result.is_error);
        let seen = daemon.await.expect("daemon");
        assert_eq!(seen.len(), 3, "{seen:?}");
        let id = seen[0]["request_id"].as_str().expect("a fresh id");
        assert_eq!(crate::once::check_request_id(id), Ok(()));
        assert!(seen.iter().all(|p| p["request_id"] == id), "{seen:?}");
        assert!(seen.iter().all(|p| p["cells"] == seen[0]["cells"]));
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn retries_are_bounded_and_the_loss_is_answered() {
        let path = socket("bounded");
        let daemon = flaky_daemon(path.clone(), usize::MAX, 3).await;
        let client = Client::connect(&path).await.expect("connect");
        let mut client = client.with_retries(2);
        let request = crate::cell::EvalRequest {
            cells: vec![crate::cell::CellSpec::new(crate::Language::Python, "x = 1")],
            request_id: Some("chosen-1".into()),
            ..Default::default()
        };
        let err = client.eval(&request, |_| {}).await.expect_err("gave up");
        assert!(lost(&err), "{err}");
        let seen = daemon.await.expect("daemon");
        assert_eq!(seen.len(), 3, "the first send and two retries");
        assert!(seen.iter().all(|p| p["request_id"] == "chosen-1"));
        let _ = std::fs::remove_file(&path);
    }
}
