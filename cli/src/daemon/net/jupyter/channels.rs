//! `GET /api/kernels/<id>/channels`: a kernel's channels over one WebSocket in the legacy
//! JSON framing (each message one text frame, naming its `channel`), or in the binary
//! `v1.kernel.websocket.jupyter.org` framing when the client offers that subprotocol. Shell
//! requests queue on the kernel; control requests (`interrupt_request`, `shutdown_request`,
//! `kernel_info_request`) are answered at once, even while a cell runs; stdin is never asked
//! for (cells that read it fail with the anchor's text); iopub is every message the kernel
//! broadcasts, from this client's requests, other clients' and other hosts' cells.

use super::super::super::Daemon;
use super::super::{ConnectionSlot, Principal};
use super::kernel::{Frame, Job, Kernel};
use super::rest::{error, refused_without_cells};
use super::Gateway;
use crate::jupyter::message::{Outgoing, Request};
use crate::jupyter::{framing, mapping};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use cellvisor::daemon::protocol::MAX_LINE_BYTES;
use cellvisor::SessionRef;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

/// Replies queued for one client before its reader waits for room.
const REPLY_BACKLOG: usize = 256;

/// Upgrades to the kernel's channels (404 for a kernel the tenant has not).
pub(super) async fn upgrade(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    slot: Option<Extension<ConnectionSlot>>,
    Path(id): Path<String>,
    upgrade: WebSocketUpgrade,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "the channels of /api/kernels/<id>") {
        return refused;
    }
    let Some(kernel) = gateway.find(&daemon, &principal, &id).await else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no kernel {id} for this client: GET /api/kernels lists its kernels"),
        );
    };
    upgrade
        .max_message_size(MAX_LINE_BYTES)
        .max_frame_size(MAX_LINE_BYTES)
        // Selected only when the client offers it; else the legacy JSON framing.
        .protocols([framing::V1_PROTOCOL])
        .on_upgrade(move |socket| async move {
            serve(daemon, gateway, kernel, principal, socket).await;
            drop(slot);
        })
        .into_response()
}

/// Sends one frame in the connection's framing; false when the client is gone or stalled.
async fn send(
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
    binary: bool,
    frame: &Frame,
    stall: std::time::Duration,
) -> bool {
    let message = match binary {
        false => Message::Text(frame.to_string().into()),
        true => match serde_json::from_str(frame) {
            Ok(value) => Message::Binary(framing::encode(&value).into()),
            Err(_) => return true,
        },
    };
    let sent = tokio::time::timeout(stall, sink.send(message)).await;
    matches!(sent, Ok(Ok(())))
}

/// Serves one client of `kernel` until it leaves, the kernel ends, or its credential is
/// revoked (a reload rotated or removed its token): then the connection is cut at once.
async fn serve(
    daemon: Arc<Daemon>,
    gateway: Arc<Gateway>,
    kernel: Arc<Kernel>,
    principal: Principal,
    socket: WebSocket,
) {
    kernel.connections.fetch_add(1, Ordering::Relaxed);
    let binary = socket
        .protocol()
        .is_some_and(|p| p.as_bytes() == framing::V1_PROTOCOL.as_bytes());
    let (mut sink, mut stream) = socket.split();
    let (out, mut replies) = mpsc::channel::<Frame>(REPLY_BACKLOG);
    let mut iopub = kernel.subscribe();
    let mut ended = kernel.ended();
    let stall = crate::daemon::lock(&daemon.limits).stalled_client_timeout;
    let writer = tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                frame = replies.recv() => match frame { Some(f) => f, None => break },
                frame = iopub.recv() => match frame {
                    Ok(f) => f,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "a Jupyter client fell behind its kernel's iopub");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = ended.changed() => {
                    // What the kernel said last (its `status: dead`) goes out before the close.
                    while let Ok(frame) = iopub.try_recv() {
                        if !send(&mut sink, binary, &frame, stall).await {
                            break;
                        }
                    }
                    break;
                }
            };
            if !send(&mut sink, binary, &frame, stall).await {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let mut ended = kernel.ended();
    let revoked = crate::daemon::connection::revoked(Arc::clone(&daemon), principal, false);
    tokio::pin!(revoked);
    let mut was_revoked = false;
    loop {
        let frame = tokio::select! {
            frame = stream.next() => frame,
            _ = ended.changed() => break,
            () = &mut revoked => {
                was_revoked = true;
                break;
            }
        };
        let read = match frame {
            None | Some(Ok(Message::Close(_))) | Some(Err(_)) => break,
            Some(Ok(Message::Text(text))) => Request::parse(text.as_str()),
            Some(Ok(Message::Binary(bytes))) if binary => {
                framing::decode(&bytes).and_then(Request::from_value)
            }
            Some(Ok(Message::Binary(_))) => {
                tracing::debug!(
                    "a Jupyter client sent a binary frame without offering {}: it is the \
                     legacy JSON framing's text frames here",
                    framing::V1_PROTOCOL
                );
                continue;
            }
            Some(Ok(_)) => continue,
        };
        let request = match read {
            Ok(request) => request,
            Err(bad) => {
                tracing::debug!("a Jupyter client sent a bad message: {bad}");
                continue;
            }
        };
        match (request.channel.as_str(), request.msg_type.as_str()) {
            ("stdin" | "iopub", _) => continue,
            ("control", _) | (_, "interrupt_request" | "shutdown_request") => {
                control(&daemon, &gateway, &kernel, request, &out).await
            }
            _ => {
                if !kernel
                    .queue(Job {
                        request,
                        reply: out.clone(),
                    })
                    .await
                {
                    break;
                }
            }
        }
    }
    drop(out);
    kernel.connections.fetch_sub(1, Ordering::Relaxed);
    if was_revoked {
        // Nothing more reaches the client, iopub included: the socket goes with the writer.
        tracing::info!(kernel = %kernel.id, "a Jupyter client's credential was revoked: its channels are closed");
        writer.abort();
    }
    let _ = writer.await;
}

/// A control request, answered now (a cell may be running on the shell).
async fn control(
    daemon: &Arc<Daemon>,
    gateway: &Gateway,
    kernel: &Arc<Kernel>,
    request: Request,
    out: &mpsc::Sender<Frame>,
) {
    let parent = &request.header;
    let reply = |msg_type: &str, content| {
        kernel.frame(&Outgoing::new("control", msg_type, parent, content))
    };
    match request.msg_type.as_str() {
        "interrupt_request" => {
            kernel.interrupt(daemon).await;
            let _ = out
                .send(reply("interrupt_reply", json!({"status": "ok"})))
                .await;
        }
        "shutdown_request" => {
            let restart = request.content["restart"].as_bool().unwrap_or(false);
            let session = SessionRef::new(&kernel.internal, None);
            let language = Some(kernel.language);
            let _ = out
                .send(reply(
                    "shutdown_reply",
                    json!({"status": "ok", "restart": restart}),
                ))
                .await;
            if restart {
                let _ = daemon.cv.reset(session, language).await;
                kernel.restarted();
            } else {
                gateway.remove(&kernel.id);
                kernel.end();
                let _ = daemon.cv.close(session, language).await;
            }
        }
        "kernel_info_request" => {
            let _ = out
                .send(reply(
                    "kernel_info_reply",
                    mapping::kernel_info(kernel.language),
                ))
                .await;
        }
        other => {
            let reply_type = format!("{}_reply", other.trim_end_matches("_request"));
            let content = json!({
                "status": "error", "ename": "UnsupportedRequest",
                "evalue": format!("{other} is not a control request of cellvisor's kernels; they \
                    are interrupt_request, shutdown_request and kernel_info_request"),
                "traceback": [],
            });
            let _ = out.send(reply(&reply_type, content)).await;
        }
    }
}
