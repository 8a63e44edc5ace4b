//! One client's connection: a reader (this task) and a writer task fed by a bounded
//! channel, each request in a task of its own, and the tool calls the client is asked to
//! answer for its cells.

use super::dispatch::dispatch;
use super::net::Principal;
use super::{lock, Daemon, MAX_PENDING_TOOL_CALLS};
use crate::mcp::lines::{BoundedLines, Line, Overlong};
use cellvisor::cell::ToolCallRequest;
use cellvisor::daemon::protocol::{self, code, Incoming, MethodName, Request, RpcError};
use cellvisor::socket_halves::WriteSide;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufRead, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Frames queued per connection before request tasks wait for the client to read.
pub(super) const CONNECTION_BACKLOG: usize = 256;

struct ConnectionGuard(Arc<Daemon>);

impl ConnectionGuard {
    fn open(daemon: Arc<Daemon>) -> ConnectionGuard {
        let open = daemon.connections.fetch_add(1, Ordering::SeqCst) + 1;
        daemon.connections_peak.fetch_max(open, Ordering::SeqCst);
        ConnectionGuard(daemon)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let daemon = &self.0;
        let open = daemon.connections.fetch_sub(1, Ordering::SeqCst) - 1;
        let peak = daemon.connections_peak.load(Ordering::SeqCst);
        // Once per step of a spike's way down: the connection that takes it below the bar
        // schedules a trim a moment later, once the closed connections' tasks and buffers
        // have all been dropped (trimmed at once, most of them were still held), and off the
        // thread the connections and actors share (a trim of a big heap takes milliseconds).
        if crate::allocator::spike_passed(peak, open)
            && daemon
                .connections_peak
                .compare_exchange(peak, open, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async {
                    tokio::time::sleep(crate::allocator::SPIKE_SETTLE).await;
                    let _ =
                        tokio::task::spawn_blocking(crate::allocator::release_free_memory).await;
                });
            }
        }
    }
}

/// Tool calls this connection's client has been asked to answer, by request id.
type PendingToolCalls = Mutex<HashMap<String, tokio::sync::oneshot::Sender<Result<Value, String>>>>;

/// What request tasks share with their connection.
pub(super) struct Connection {
    /// Encoded lines (each ends in a newline) for the writer, in order.
    pub(super) out: mpsc::Sender<Vec<u8>>,
    tool_calls: PendingToolCalls,
    next_tool_call: AtomicU64,
    /// Who the client is: its tenant names its sessions and bounds what it may do.
    pub(super) principal: Principal,
    /// Whether it came over the network (the `landlock` level of `auto` confines its cells).
    pub(super) origin: cellvisor::Origin,
    /// The sessions it owns (`own`): closed when it closes.
    pub(super) owned: super::owned::Owned,
}

/// An eval in flight on a connection: aborted and its session interrupted if the client leaves.
struct InFlight {
    session: String,
    task: JoinHandle<()>,
}

/// Where a connection's request tasks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tasks {
    /// On the actors' own `LocalSet` (the daemon's actix system, which serves the Unix
    /// socket): a request and its session's actor wake each other with a push on one queue,
    /// where a task of the runtime's reaching an actor costs a wake of the whole thread (an
    /// `eventfd` write and one more `epoll_wait`) per message.
    Local,
    /// On the runtime, as the network listeners' tasks (which hyper spawns there) are.
    Runtime,
}

impl Tasks {
    /// `Local` when the caller runs on an actix system (whose futures are polled in its
    /// `LocalSet`), `Runtime` otherwise.
    pub(super) fn here() -> Tasks {
        if actix::System::try_current().is_some() {
            Tasks::Local
        } else {
            Tasks::Runtime
        }
    }

    pub(super) fn spawn<F>(self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self {
            Tasks::Local => tokio::task::spawn_local(task),
            Tasks::Runtime => tokio::spawn(task),
        }
    }
}

/// Serves one Unix-socket client until it leaves (or stalls), then stops what it left running.
/// `tasks` is where the connection itself was spawned, and where its requests go.
pub(super) async fn handle_connection(daemon: Arc<Daemon>, stream: UnixStream, tasks: Tasks) {
    // Registered for reading only: a client reading its answer must not wake the daemon.
    let halves = stream.into_std().and_then(cellvisor::socket_halves::split);
    let (reader, writer) = match halves {
        Ok(halves) => halves,
        Err(err) => {
            tracing::warn!("cannot serve a connection: {err}");
            return;
        }
    };
    let limits = *lock(&daemon.limits);
    let (out, out_rx) = mpsc::channel::<Vec<u8>>(CONNECTION_BACKLOG);
    let writer_task = spawn_writer(writer, out_rx, limits.stalled_client_timeout);
    let lines = LineSource(BufReader::new(reader));
    serve_messages(daemon, lines, out, Transport::Unix(tasks)).await;
    let _ = writer_task.await;
}

/// Where a connection's requests come from: the lines of a Unix socket, the text frames of
/// a WebSocket. Each message is one JSON-RPC message.
pub(super) trait MessageSource: Send {
    /// The next message; `None` when the client has gone.
    fn next_message(&mut self) -> impl Future<Output = Result<Option<Vec<u8>>, ReadError>> + Send;
}

/// Why a connection's next message could not be read.
pub(super) enum ReadError {
    /// Over [`protocol::MAX_LINE_BYTES`]: answered, then the connection is closed.
    TooLong,
    /// A message the transport carries but JSON-RPC does not (a binary frame): answered
    /// with this error, and the connection goes on.
    Refused(String),
    /// The connection broke.
    Io,
}

/// The Unix socket's messages: one per line.
struct LineSource<R>(R);

impl<R: AsyncBufRead + Unpin + Send> MessageSource for LineSource<R> {
    async fn next_message(&mut self) -> Result<Option<Vec<u8>>, ReadError> {
        read_line(&mut self.0).await
    }
}

/// What carries a connection: its label in the metrics, and the session a WebSocket may be
/// bound to.
pub(super) enum Transport {
    /// The Unix socket, its tasks spawned where its connection was.
    Unix(Tasks),
    WebSocket {
        bound: Option<String>,
        principal: Principal,
    },
}

/// Serves the requests from `source` until the client leaves, answering into `out` (which a
/// writer task drains to the client), then stops what the client left running. A connection
/// bound to a session refuses requests that name another.
pub(super) async fn serve_messages<S: MessageSource>(
    daemon: Arc<Daemon>,
    mut source: S,
    out: mpsc::Sender<Vec<u8>>,
    transport: Transport,
) {
    let _guard = ConnectionGuard::open(Arc::clone(&daemon));
    let (label, bound, principal, tasks) = match transport {
        Transport::Unix(tasks) => ("unix", None, Principal::operator(), tasks),
        Transport::WebSocket { bound, principal } => {
            ("websocket", bound, principal, Tasks::Runtime)
        }
    };
    let revoked = revoked(Arc::clone(&daemon), principal.clone(), label == "unix");
    tokio::pin!(revoked);
    let _counted = daemon.cv.metrics().connection_opened(label);
    let limits = *lock(&daemon.limits);
    // Each request task holds a permit; with none left the reader waits (and so stops
    // reading this client) until an answer has gone out.
    let pending = Arc::new(tokio::sync::Semaphore::new(limits.max_pending_requests));
    let in_flight: Arc<Mutex<HashMap<u64, InFlight>>> = Arc::default();
    let connection = Arc::new(Connection {
        out: out.clone(),
        tool_calls: Mutex::default(),
        next_tool_call: AtomicU64::new(1),
        principal,
        origin: if label == "unix" {
            cellvisor::Origin::Local
        } else {
            cellvisor::Origin::Network
        },
        owned: Default::default(),
    });
    let mut next_task = 0u64;
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&pending).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            // The writer gave up on this client.
            () = out.closed() => break,
        };
        let read = tokio::select! {
            read = source.next_message() => read,
            () = out.closed() => break,
            () = &mut revoked => {
                tracing::info!("closing a connection: its token no longer names its tenant");
                break;
            }
        };
        let line = match read {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(ReadError::TooLong) => {
                let error = RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "request exceeds {} bytes; closing this connection",
                        protocol::MAX_LINE_BYTES
                    ),
                );
                let _ = out
                    .send(protocol::encode_line(&protocol::response(
                        Value::Null,
                        Err(error),
                    )))
                    .await;
                break;
            }
            Err(ReadError::Refused(message)) => {
                let error = RpcError::new(code::INVALID_REQUEST, message);
                let _ = out
                    .send(protocol::encode_line(&protocol::response(
                        Value::Null,
                        Err(error),
                    )))
                    .await;
                continue;
            }
            Err(ReadError::Io) => break,
        };
        let big = line.len() >= crate::allocator::BIG_MESSAGE_BYTES;
        let request = match protocol::parse_line(&line) {
            Incoming::Blank => continue,
            Incoming::Answer(value) => {
                answer_tool_call(&connection, value);
                continue;
            }
            Incoming::Invalid { id, error } => {
                let _ = out
                    .send(protocol::encode_line(&protocol::response(id, Err(error))))
                    .await;
                continue;
            }
            Incoming::Request(request) => request,
        };
        if let Some(error) = bound.as_deref().and_then(|b| other_session(b, &request)) {
            if let Some(id) = request.id {
                let _ = out
                    .send(protocol::encode_line(&protocol::response(id, Err(error))))
                    .await;
            }
            continue;
        }
        next_task += 1;
        let task_id = next_task;
        // An eval or a wait ends with its client: a cell (or a watch) nobody reads is stopped.
        let eval_session = matches!(
            MethodName::parse(&request.method),
            Some(MethodName::Eval | MethodName::Wait)
        )
        .then(|| session_named(&request).to_string());
        let task = spawn_request(
            tasks,
            Arc::clone(&daemon),
            Arc::clone(&connection),
            request,
            (task_id, Arc::clone(&in_flight)),
            (permit, big),
        );
        if let Some(session) = eval_session {
            if let Ok(mut registry) = in_flight.lock() {
                if !task.is_finished() {
                    registry.insert(task_id, InFlight { session, task });
                }
            }
        }
    }
    // The client is gone: stop what it started.
    let abandoned: Vec<InFlight> = match in_flight.lock() {
        Ok(mut registry) => registry.drain().map(|(_, f)| f).collect(),
        Err(_) => Vec::new(),
    };
    // Aborting an eval drops its request, and the sessions stop exactly its cells; aborting a
    // wait frees its cell for the next wait.
    for flight in abandoned {
        tracing::info!(session = %flight.session, "client disconnected during eval or wait");
        flight.task.abort();
    }
    connection.owned.close_all(&daemon).await;
    // The writer ends once every sender is gone: ours, and the one the connection holds.
    drop(connection);
    drop(out);
}

/// Resolves once the connection's credential no longer names its tenant (a reload removed
/// or rotated its token, or changed its tenant); never for the Unix socket.
pub(super) async fn revoked(daemon: Arc<Daemon>, principal: Principal, local: bool) {
    if local {
        return std::future::pending().await;
    }
    let mut generation = daemon.credentials.subscribe();
    loop {
        if generation.changed().await.is_err() {
            return std::future::pending().await;
        }
        let admitted = lock(&daemon.tenants)
            .as_ref()
            .is_some_and(|tenants| tenants.still_admits(&principal));
        if !admitted {
            return;
        }
    }
}

/// The session a request is for: its `session` param, `default` when it names none.
fn session_named(request: &Request) -> &str {
    request
        .params
        .as_ref()
        .and_then(|p| p.get("session"))
        .and_then(Value::as_str)
        .unwrap_or("default")
}

/// On a connection bound to session `bound`: the error for a request that is for another
/// session (methods that name none, like `status`, pass).
fn other_session(bound: &str, request: &Request) -> Option<RpcError> {
    // `zygotes` and a method the daemon does not have count as for a session here.
    let for_a_session = !matches!(
        MethodName::parse(&request.method),
        Some(
            MethodName::Initialize
                | MethodName::Status
                | MethodName::Shutdown
                | MethodName::ConfigReload
                | MethodName::Drain
                | MethodName::Undrain
        )
    );
    let named = session_named(request);
    (for_a_session && named != bound).then(|| {
        RpcError::new(
            code::WRONG_SESSION,
            format!(
                "this connection is bound to session {bound:?} (its Cellvisor-Session header), \
                 and this request is for session {named:?}; open another connection for it"
            ),
        )
    })
}

/// The connection's writer: sends the queued lines (those already queued in one write) and
/// gives up on a client that reads none of them for `stall`.
///
/// The writer runs on the runtime, never on the actors' `LocalSet`: the runtime polls it once
/// the `LocalSet` has nothing left to run, so a quick cell's events and its answer, which the
/// actors and the request's task make in one go, are all queued by then and leave in one
/// write (on the `LocalSet` it ran as soon as the first line was queued).
fn spawn_writer(
    mut writer: WriteSide,
    mut out_rx: mpsc::Receiver<Vec<u8>>,
    stall: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Lines already queued (a cell's events and its result) go out in one write.
        let mut batch = Vec::new();
        while let Some(line) = out_rx.recv().await {
            batch.clear();
            let mut next = Some(line);
            while let Some(line) = next {
                batch.extend_from_slice(&line);
                next = if batch.len() < 1 << 20 {
                    out_rx.try_recv().ok()
                } else {
                    None
                };
            }
            match tokio::time::timeout(stall, writer.write_all(&batch)).await {
                Ok(Ok(())) if batch.len() >= crate::allocator::BIG_MESSAGE_BYTES => {
                    batch = Vec::new();
                    crate::allocator::release_free_memory();
                }
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::warn!(
                        "dropping a connection: its client read none of its answers for {} \
                         (daemon.stalled-client-timeout)",
                        humantime::format_duration(stall)
                    );
                    break;
                }
            }
        }
    })
}

/// Runs one request in a task of its own and sends its answer; the task holds its `permit`
/// of the connection's pending requests, and leaves the connection's registry of evals in
/// flight when it ends. After a `big` request the daemon returns freed memory to the OS.
fn spawn_request(
    tasks: Tasks,
    daemon: Arc<Daemon>,
    connection: Arc<Connection>,
    request: Request,
    (task_id, registry): (u64, Arc<Mutex<HashMap<u64, InFlight>>>),
    (permit, big): (tokio::sync::OwnedSemaphorePermit, bool),
) -> JoinHandle<()> {
    tasks.spawn(async move {
        let _permit = permit;
        let id = request.id.clone();
        let result = dispatch(&daemon, request, &connection).await;
        if let Some(id) = id {
            let _ = connection
                .out
                .send(super::dispatch::Answer::response_line(id, result))
                .await;
        }
        if big {
            crate::allocator::release_free_memory();
        }
        if let Ok(mut registry) = registry.lock() {
            registry.remove(&task_id);
        }
    })
}

/// A client's response to a `tool/call` request: hand it to the waiting cell.
fn answer_tool_call(connection: &Connection, response: Value) {
    let Some(id) = response.get("id").and_then(Value::as_str) else {
        tracing::debug!("ignoring a response with an unknown id: {response}");
        return;
    };
    let waiter = match connection.tool_calls.lock() {
        Ok(mut calls) => calls.remove(id),
        Err(_) => None,
    };
    let Some(waiter) = waiter else {
        tracing::debug!(id, "ignoring a response to no pending tool call");
        return;
    };
    let outcome = match (response.get("result"), response.get("error")) {
        (_, Some(error)) => Err(error
            .get("message")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| error.to_string())),
        (Some(result), None) => Ok(result.clone()),
        (None, None) => Err("the host answered the tool call with neither result nor error".into()),
    };
    let _ = waiter.send(outcome);
}

/// Asks the client to run a tool for a cell of request `request_id`.
pub(super) async fn forward_tool_call(
    connection: &Connection,
    request_id: &Value,
    call: ToolCallRequest,
) {
    let id = format!(
        "tool-{}",
        connection.next_tool_call.fetch_add(1, Ordering::Relaxed)
    );
    {
        let mut calls = lock(&connection.tool_calls);
        if calls.len() >= MAX_PENDING_TOOL_CALLS {
            // Calls whose cell has ended wait for nobody.
            calls.retain(|_, waiter| !waiter.is_closed());
        }
        if calls.len() >= MAX_PENDING_TOOL_CALLS {
            let _ = call.reply.send(Err(format!(
                "the host has {} tool calls unanswered on this connection (at most \
                 {MAX_PENDING_TOOL_CALLS}); it must answer them before more are sent",
                calls.len()
            )));
            return;
        }
        calls.insert(id.clone(), call.reply);
    }
    let request = protocol::tool_call(&id, request_id, &call.name, &call.arguments);
    let _ = connection.out.send(protocol::encode_line(&request)).await;
}

/// Reads one line of at most `MAX_LINE_BYTES` without ever buffering more than that (the
/// reader `cellvisor mcp` shares).
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<Vec<u8>>, ReadError> {
    let mut lines = BoundedLines::new(protocol::MAX_LINE_BYTES, Overlong::Stop);
    match lines.next(reader).await {
        Ok(Some(Line::Complete(line))) => Ok(Some(line)),
        Ok(Some(Line::TooLong { .. })) => Err(ReadError::TooLong),
        Ok(None) => Ok(None),
        Err(_) => Err(ReadError::Io),
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
