//! The two ways a client's JSON-RPC messages travel: newline-delimited on the Unix socket, or
//! one per text frame on the network listener's WebSocket. A WebSocket read given a silence
//! bound pings a quiet connection at half of it and gives up at all of it: a stopped node
//! accepts bytes and answers none, which only a deadline tells from a long cell.

use super::remote::WsStream;
use super::ClientError;
use futures::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// One connection's message channel.
pub(super) enum Transport {
    /// The daemon's Unix socket.
    Unix {
        reader: BufReader<OwnedReadHalf>,
        writer: OwnedWriteHalf,
    },
    /// A WebSocket to the daemon's `/v1/rpc` (boxed: it is much larger than the socket).
    WebSocket(Box<WsStream>),
}

impl Transport {
    /// Sends one message.
    pub(super) async fn send(&mut self, mut text: String) -> Result<(), ClientError> {
        match self {
            Transport::Unix { writer, .. } => {
                text.push('\n');
                writer.write_all(text.as_bytes()).await?;
                Ok(())
            }
            Transport::WebSocket(stream) => {
                stream.send(Message::text(text)).await.map_err(ws_error)
            }
        }
    }

    /// The next message; [`ClientError::Closed`] when the daemon closed the connection, and
    /// on a WebSocket [`ClientError::Silent`] once nothing came for `silent_after` (pinged at
    /// half of it; `None`: waits for ever).
    pub(super) async fn recv(
        &mut self,
        silent_after: Option<Duration>,
    ) -> Result<String, ClientError> {
        match self {
            Transport::Unix { reader, .. } => {
                let mut line = String::new();
                if reader.read_line(&mut line).await? == 0 {
                    return Err(ClientError::Closed);
                }
                Ok(line)
            }
            Transport::WebSocket(stream) => {
                let mut heard = tokio::time::Instant::now();
                let mut pinged = false;
                loop {
                    let next = match silent_after {
                        None => stream.next().await,
                        Some(limit) => {
                            let quiet = heard.elapsed();
                            if quiet >= limit {
                                return Err(ClientError::Silent { waited: limit });
                            }
                            let step = if pinged { limit } else { limit / 2 };
                            match tokio::time::timeout(step.saturating_sub(quiet), stream.next())
                                .await
                            {
                                Ok(next) => {
                                    heard = tokio::time::Instant::now();
                                    pinged = false;
                                    next
                                }
                                Err(_) => {
                                    if !pinged {
                                        pinged = true;
                                        let ping = Message::Ping(b"alive?".to_vec().into());
                                        stream.send(ping).await.map_err(ws_error)?;
                                    }
                                    continue;
                                }
                            }
                        }
                    };
                    match next {
                        None => return Err(ClientError::Closed),
                        Some(Err(e)) => return Err(ws_error(e)),
                        Some(Ok(Message::Text(text))) => return Ok(text.as_str().to_string()),
                        Some(Ok(Message::Close(_))) => return Err(ClientError::Closed),
                        Some(Ok(Message::Binary(_))) => return Err(ClientError::Protocol(
                            "the daemon sent a binary frame; its JSON-RPC travels in text frames"
                                .into(),
                        )),
                        // Pings are answered by the WebSocket layer itself.
                        Some(Ok(_)) => {}
                    }
                }
            }
        }
    }
}

/// A WebSocket error once connected: the daemon going away, or the link failing.
fn ws_error(error: WsError) -> ClientError {
    match error {
        WsError::ConnectionClosed | WsError::AlreadyClosed => ClientError::Closed,
        WsError::Io(e) => ClientError::Io(e),
        other => ClientError::Io(std::io::Error::other(other)),
    }
}
