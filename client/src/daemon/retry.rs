//! An `eval` that survives a lost connection: the client names it with a fresh
//! `request_id` (unless the caller chose one), and when the connection is lost before the
//! answer (a router restarted, a daemon's node went away) it connects again the way it first
//! did and sends the same request with the same id, at most [`DEFAULT_RETRIES`] times. The
//! daemon runs an id once: a retry of a request that ran is answered with its first result,
//! one that still runs waits for it.

use super::{Client, ClientError, Remote};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// How many times an `eval` is sent again after a lost connection, by default.
pub const DEFAULT_RETRIES: u32 = 3;

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
        ClientError::Closed | ClientError::Io(_) | ClientError::Connect { .. }
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
    /// Sends `eval`s again at most `retries` times after a lost connection (0: never).
    pub fn with_retries(mut self, retries: u32) -> Client {
        self.retries = retries;
        self
    }

    /// Connects again as this client first connected; false when it cannot (a client made
    /// some other way).
    pub(super) async fn reconnect(&mut self) -> Result<bool, ClientError> {
        let fresh = match self.reconnect.clone() {
            None => return Ok(false),
            Some(Reconnect::Unix { path, within }) => Client::connect_within(&path, within).await?,
            Some(Reconnect::Remote(remote)) => Client::connect_remote(&remote).await?,
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
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(3), FIRST_BACKOFF * 4);
        assert!(backoff(100) <= FIRST_BACKOFF * 64);
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
