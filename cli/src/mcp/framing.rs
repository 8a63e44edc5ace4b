//! The stdio transport of `cellvisor mcp`: newline-delimited JSON-RPC, read with the
//! daemon's bounded line reader ([`BoundedLines`]) and judged with its classification
//! ([`protocol::parse_line`]), so that every request gets an answer.
//!
//! Well-formed messages go to rmcp as they are. Every other line is answered here, as the
//! daemon answers its socket: not UTF-8 or not JSON (nesting past serde_json's recursion
//! limit included) is -32700 with id `null`; JSON that is no JSON-RPC request is -32600 with
//! its id when that is a string or a number; a line over [`protocol::MAX_LINE_BYTES`] is
//! read to its newline (not buffered) and refused with -32600; a method this server serves
//! with parameters of the wrong shape (`tools/call` without `name`) is -32602. A malformed
//! notification is logged and not answered (JSON-RPC answers no notification), nor is a
//! malformed response. The server goes on reading after each.

use super::lines::{BoundedLines, Line, Overlong};
use cellvisor::daemon::protocol::{self, code, Incoming, RpcError};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, InitializeRequestParams,
    JsonRpcMessage, PaginatedRequestParams, ReadResourceRequestParams, ServerJsonRpcMessage,
};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// JSON-RPC over newline-delimited JSON on a reader and a writer (stdin and stdout).
pub(super) struct LineTransport<R, W> {
    reader: BufReader<R>,
    lines: BoundedLines,
    /// Shared with the sends rmcp runs in tasks of their own; `None` once closed.
    writer: Arc<Mutex<Option<W>>>,
    /// The answer to a refused line, written in a task of its own so that a cancelled
    /// `receive` cannot cut it short; awaited before the next line is read, so answers keep
    /// the order of the lines.
    answering: Option<JoinHandle<()>>,
}

impl<R: AsyncRead, W> LineTransport<R, W> {
    pub(super) fn new(reader: R, writer: W) -> LineTransport<R, W> {
        LineTransport {
            reader: BufReader::new(reader),
            lines: BoundedLines::new(protocol::MAX_LINE_BYTES, Overlong::Skip),
            writer: Arc::new(Mutex::new(Some(writer))),
            answering: None,
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_line(&writer, &line).await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(answering) = self.answering.as_mut() {
                let _ = answering.await;
                self.answering = None;
            }
            let verdict = match self.lines.next(&mut self.reader).await {
                Ok(Some(Line::Complete(line))) => classify(&line),
                Ok(Some(Line::TooLong { bytes, head })) => too_long(bytes, &head),
                Ok(None) => return None,
                Err(err) => {
                    tracing::warn!("cannot read the MCP client's input: {err}");
                    return None;
                }
            };
            match verdict {
                Verdict::Pass(message) => return Some(*message),
                Verdict::Skip => {}
                Verdict::Ignore(why) => tracing::warn!("ignoring a message of the client: {why}"),
                Verdict::Answer { id, error } => {
                    tracing::info!(%id, code = error.code, "refusing a message: {}", error.message);
                    let line = protocol::encode_line(&protocol::response(id, Err(error)));
                    let writer = Arc::clone(&self.writer);
                    self.answering = Some(tokio::spawn(async move {
                        if let Err(err) = write_line(&writer, &line).await {
                            tracing::warn!("cannot answer the MCP client: {err}");
                        }
                    }));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        if let Some(answering) = self.answering.take() {
            let _ = answering.await;
        }
        drop(self.writer.lock().await.take());
        Ok(())
    }
}

/// Writes one whole line (nothing else is written in between) and flushes it.
async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<Option<W>>,
    line: &[u8],
) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    let Some(writer) = writer.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the MCP transport is closed",
        ));
    };
    writer.write_all(line).await?;
    writer.flush().await
}

/// What becomes of one line from the client.
#[derive(Debug)]
pub(super) enum Verdict {
    /// A message for rmcp, as it is.
    Pass(Box<ClientJsonRpcMessage>),
    /// Only whitespace: nothing to do.
    Skip,
    /// A malformed notification or response: logged, not answered.
    Ignore(String),
    /// Refused: answer `error` to `id`.
    Answer { id: Value, error: RpcError },
}

/// UTF-8's byte order mark, which JSON readers may ignore (RFC 8259 §8.1), as rmcp does.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Judges one line (without its newline).
pub(super) fn classify(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(message) => match &message {
            // rmcp takes a request it has no type for (or whose params do not fit its type)
            // for a custom one, which it answers "method not found".
            JsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::CustomRequest(custom) => custom_request(
                    line,
                    request.id.clone().into_json_value(),
                    &custom.method,
                    custom.params.as_ref(),
                )
                .unwrap_or(Verdict::Pass(Box::new(message))),
                _ => Verdict::Pass(Box::new(message)),
            },
            _ => Verdict::Pass(Box::new(message)),
        },
        Err(refused) => explain(line, &refused),
    }
}

/// The refusal of a request rmcp read as a custom one: the daemon's (params that are not
/// an object), or that of params that do not fit a method this server serves; `None` when
/// it goes to rmcp (an unknown method, which it answers).
fn custom_request(line: &[u8], id: Value, method: &str, params: Option<&Value>) -> Option<Verdict> {
    if let Incoming::Invalid { id, error } = protocol::parse_line(line) {
        return Some(Verdict::Answer { id, error });
    }
    let (problem, expected) = match method {
        "tools/call" => (
            misfit::<CallToolRequestParams>(params, true),
            r#"{"name": string, "arguments"?: object}"#,
        ),
        "tools/list" | "resources/list" | "resources/templates/list" => (
            misfit::<PaginatedRequestParams>(params, false),
            r#"{"cursor"?: string}"#,
        ),
        "resources/read" => (
            misfit::<ReadResourceRequestParams>(params, true),
            r#"{"uri": string}"#,
        ),
        "initialize" => (
            misfit::<InitializeRequestParams>(params, true),
            r#"{"protocolVersion": string, "capabilities": object, "clientInfo": {"name": string, "version": string}}"#,
        ),
        _ => return None,
    };
    let error = RpcError::new(
        code::INVALID_PARAMS,
        format!("invalid params: {}; {method} takes {expected}", problem?),
    );
    Some(Verdict::Answer { id, error })
}

/// What is wrong with `params` as `P` (`required`: they may not be left out); `None` if they fit.
fn misfit<'a, P: Deserialize<'a>>(params: Option<&'a Value>, required: bool) -> Option<String> {
    match params {
        None if required => Some("params are missing".to_string()),
        None => None,
        Some(params) => P::deserialize(params).err().map(|err| err.to_string()),
    }
}

/// Why a line rmcp cannot read is refused, in the daemon's words where it has them.
fn explain(line: &[u8], refused: &serde_json::Error) -> Verdict {
    if let Err(err) = std::str::from_utf8(line) {
        let error = RpcError::new(
            code::PARSE_ERROR,
            format!(
                "parse error: the message is not UTF-8 (an invalid byte at offset {})",
                err.valid_up_to()
            ),
        );
        return Verdict::Answer {
            id: Value::Null,
            error,
        };
    }
    let envelope = Envelope::read(line);
    let (id, error) = match protocol::parse_line(line) {
        Incoming::Blank => return Verdict::Skip,
        Incoming::Invalid { error, .. } if error.code == code::PARSE_ERROR => (Value::Null, error),
        Incoming::Invalid { id, error } => (id, error),
        Incoming::Answer(value) => {
            if value.get("result").is_some() || value.get("error").is_some() {
                // JSON-RPC answers no response, not even a malformed one.
                return Verdict::Ignore(format!("a malformed response ({refused})"));
            }
            let error = RpcError::new(
                code::INVALID_REQUEST,
                "invalid request: missing field `method`",
            );
            (envelope.echoed_id(), error)
        }
        Incoming::Request(request) => {
            let message = match &request.id {
                // `"id": null` reads as no id.
                None if envelope.id.is_some() => {
                    "invalid request: MCP takes a string or an integer as id, not null".to_string()
                }
                Some(Value::Number(n)) if n.as_i64().is_none() => {
                    format!("invalid request: MCP takes a string or an integer as id, not {n}")
                }
                _ => format!("invalid request: {refused}"),
            };
            (
                envelope.echoed_id(),
                RpcError::new(code::INVALID_REQUEST, message),
            )
        }
    };
    if error.code != code::PARSE_ERROR && envelope.is_notification() {
        return Verdict::Ignore(format!("a malformed notification ({})", error.message));
    }
    Verdict::Answer { id, error }
}

/// The refusal of a line over the limit, with its id when its head has it.
pub(super) fn too_long(bytes: u64, head: &[u8]) -> Verdict {
    let error = RpcError::new(
        code::INVALID_REQUEST,
        format!(
            "request too large: {bytes} bytes, the limit is {} MiB",
            protocol::MAX_LINE_BYTES >> 20
        ),
    );
    Verdict::Answer {
        id: Envelope::read(head).echoed_id(),
        error,
    }
}

/// The `id` and `method` members of a message, as far as they can be read (from a line cut
/// short, those before the cut).
#[derive(Debug, Default)]
struct Envelope {
    object: bool,
    id: Option<Value>,
    method: Option<Value>,
}

impl Envelope {
    fn read(bytes: &[u8]) -> Envelope {
        let mut envelope = Envelope::default();
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        // What was read before an error is kept.
        let _ = DeserializeSeed::deserialize(&mut envelope, &mut reader);
        envelope
    }

    /// The id an answer may carry: a string or a number, else `null`.
    fn echoed_id(&self) -> Value {
        match &self.id {
            Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
            _ => Value::Null,
        }
    }

    /// An object with a method name and no id.
    fn is_notification(&self) -> bool {
        self.object && self.id.is_none() && matches!(self.method, Some(Value::String(_)))
    }
}

impl<'de> DeserializeSeed<'de> for &mut Envelope {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Envelope {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.object = true;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => self.id = Some(map.next_value()?),
                "method" => self.method = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "framing_tests.rs"]
mod tests;
