//! The two ways a client's JSON-RPC messages travel: newline-delimited on the Unix socket, or
//! one per text frame on the network listener's WebSocket.

use super::remote::WsStream;
use super::ClientError;
use futures::{SinkExt, StreamExt};
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

    /// The next message; [`ClientError::Closed`] when the daemon closed the connection.
    pub(super) async fn recv(&mut self) -> Result<String, ClientError> {
        match self {
            Transport::Unix { reader, .. } => {
                let mut line = String::new();
                if reader.read_line(&mut line).await? == 0 {
                    return Err(ClientError::Closed);
                }
                Ok(line)
            }
            Transport::WebSocket(stream) => {
                loop {
                    match stream.next().await {
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
