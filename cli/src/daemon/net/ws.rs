//! `GET /v1/rpc`: the Unix socket's JSON-RPC over a WebSocket, one message per text frame,
//! served by the same connection code (its bounds, its tool calls, its abandoned cells).

use super::super::connection::{self, MessageSource, ReadError, Transport, CONNECTION_BACKLOG};
use super::super::{lock, Daemon};
use super::ConnectionSlot;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cellvisor::daemon::protocol::MAX_LINE_BYTES;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The header that binds a connection to one session, so a router can place it by it.
pub(super) const SESSION_HEADER: &str = "cellvisor-session";

/// Upgrades to a WebSocket, bound to the session of its `Cellvisor-Session` header if any.
pub(super) async fn upgrade(
    State(daemon): State<Arc<Daemon>>,
    slot: Option<Extension<ConnectionSlot>>,
    Extension(principal): Extension<super::Principal>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let bound = match headers.get(SESSION_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(session)) if !session.trim().is_empty() => Some(session.trim().to_string()),
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "the Cellvisor-Session header must name a session (visible ASCII)",
            )
                .into_response()
        }
    };
    if let Some(session) = &bound {
        let internal = principal.tenant.internal(session);
        if let Err(refusal) = daemon.cv.admission(&internal).await {
            return elsewhere(refusal);
        }
    }
    upgrade
        .max_message_size(MAX_LINE_BYTES)
        .max_frame_size(MAX_LINE_BYTES)
        .on_upgrade(move |socket| async move {
            serve(daemon, socket, bound, principal).await;
            // The TCP connection's place is free once its WebSocket ends.
            drop(slot);
        })
}

/// The answer to an upgrade for a session this node will not run (it is draining, or
/// another node holds the session's lease): 503, which a router retries on another node,
/// with the JSON-RPC error a client would have got, `Retry-After`, and the holder's name in
/// `Cellvisor-Node`.
fn elsewhere(refusal: cellvisor::RequestError) -> Response {
    let error = super::super::dispatch::refused(refusal);
    let retry_secs = error
        .data
        .as_ref()
        .and_then(|d| d["retry_after_ms"].as_u64())
        .map_or(1, |ms| ms.div_ceil(1000).max(1));
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, retry_secs.to_string())],
        axum::Json(serde_json::json!({ "error": &error })),
    )
        .into_response();
    if let Some(node) = error.data.as_ref().and_then(|d| d["node"].as_str()) {
        if let Ok(value) = axum::http::HeaderValue::from_str(node) {
            response.headers_mut().insert("cellvisor-node", value);
        }
    }
    response
}

async fn serve(
    daemon: Arc<Daemon>,
    socket: WebSocket,
    bound: Option<String>,
    principal: super::Principal,
) {
    let (sink, stream) = socket.split();
    let stall = lock(&daemon.limits).stalled_client_timeout;
    let (out, out_rx) = mpsc::channel::<Vec<u8>>(CONNECTION_BACKLOG);
    let writer = spawn_writer(sink, out_rx, stall);
    let transport = Transport::WebSocket { bound, principal };
    connection::serve_messages(daemon, FrameSource(stream), out, transport).await;
    let _ = writer.await;
}

/// The client's text frames, each one JSON-RPC message.
struct FrameSource(SplitStream<WebSocket>);

impl MessageSource for FrameSource {
    async fn next_message(&mut self) -> Result<Option<Vec<u8>>, ReadError> {
        loop {
            return match self.0.next().await {
                None | Some(Ok(Message::Close(_))) => Ok(None),
                // The frame's buffer is taken over when nothing else holds it, else copied.
                Some(Ok(Message::Text(text))) => Ok(Some(Vec::from(axum::body::Bytes::from(text)))),
                Some(Ok(Message::Binary(_))) => Err(ReadError::Refused(
                    "binary frames are not read: send each JSON-RPC message as one text frame"
                        .into(),
                )),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Err(err)) if err.to_string().contains("too long") => Err(ReadError::TooLong),
                Some(Err(err)) => {
                    tracing::debug!("WebSocket read failed: {err}");
                    Err(ReadError::Io)
                }
            };
        }
    }
}

/// The connection's writer: each queued line as one text frame (those already queued
/// flushed together), giving up on a client that reads none of them for `stall`.
fn spawn_writer(
    mut sink: SplitSink<WebSocket, Message>,
    mut out_rx: mpsc::Receiver<Vec<u8>>,
    stall: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(line) = out_rx.recv().await {
            let sent = tokio::time::timeout(stall, async {
                let mut next = Some(line);
                let mut queued = 0usize;
                while let Some(line) = next {
                    queued += line.len();
                    sink.feed(text_frame(line)).await?;
                    next = if queued < 1 << 20 {
                        out_rx.try_recv().ok()
                    } else {
                        None
                    };
                }
                sink.flush().await
            })
            .await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::warn!(
                        "dropping a WebSocket connection: its client read none of its answers \
                         for {} (daemon.stalled-client-timeout)",
                        humantime::format_duration(stall)
                    );
                    break;
                }
            }
        }
        let _ = sink.close().await;
    })
}

/// An encoded line (JSON and its newline) as a text frame.
fn text_frame(mut line: Vec<u8>) -> Message {
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    // The daemon's own JSON is UTF-8; a lossy copy is only a guard.
    let text = String::from_utf8(line)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Message::Text(text.into())
}
