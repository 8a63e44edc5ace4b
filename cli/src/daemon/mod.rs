//! `cellvisor serve`: the daemon's listener and connections.
//!
//! Each connection has a reader (this task) and a writer task fed by a bounded channel, and
//! every request runs in a task of its own, so a long `eval` does not hold up `status` and a
//! slow client slows only its own sessions (its events wait for room in its channel).
//!
//! What a connection costs the daemon is bounded whatever its client does: at most
//! `daemon.max-pending-requests` requests in flight (past it the daemon stops reading that
//! connection), at most [`MAX_PENDING_TOOL_CALLS`] tool calls awaiting the client, and a
//! client that reads none of its answers for `daemon.stalled-client-timeout` is dropped.

use cellvisor::cell::{CellEvent, EvalRequest, ToolCallRequest};
use cellvisor::daemon::protocol::{
    self, code, method, params, Incoming, InitializeResult, Request, RpcError, SessionParams,
    TerminateParams, WaitParams,
};
use cellvisor::{Cellvisor, Options, RequestError, WaitOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub socket: PathBuf,
    pub supervisor: Options,
    /// The config file to re-read on SIGHUP and `config/reload`.
    pub config_path: Option<PathBuf>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("a cellvisor daemon is already listening on {0}; stop it first (`cellvisor stop`)")]
    AlreadyRunning(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Startup(#[from] cellvisor::StartupError),
}

/// Frames queued per connection before request tasks wait for the client to read.
const CONNECTION_BACKLOG: usize = 256;

/// Tool calls one connection's client may leave unanswered; a cell's call past it fails
/// at once with a message saying so.
pub const MAX_PENDING_TOOL_CALLS: usize = 1024;

/// The per-connection bounds from `[daemon]`; a reload applies them to new connections.
#[derive(Debug, Clone, Copy)]
struct ConnectionLimits {
    max_pending_requests: usize,
    stalled_client_timeout: Duration,
}

impl ConnectionLimits {
    fn from_config(config: &cellvisor_config::Config) -> ConnectionLimits {
        ConnectionLimits {
            max_pending_requests: config.daemon.max_pending_requests.max(1),
            stalled_client_timeout: config.daemon.stalled_client_timeout,
        }
    }
}

/// Shared by every connection.
struct Daemon {
    cv: Cellvisor,
    config_path: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
    connections: AtomicU64,
    last_activity: Mutex<Instant>,
    limits: Mutex<ConnectionLimits>,
}

/// Runs the daemon until `shutdown`, SIGTERM or SIGINT (or its idle exit).
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    crate::allocator::map_big_blocks_separately();
    let listener = bind(&options.socket).await?;
    let socket_inode = socket_inode(&options.socket);
    let idle_exit = options.supervisor.config.daemon.idle_exit;
    let limits = ConnectionLimits::from_config(&options.supervisor.config);
    // On the daemon's own actix system the connections and the actors share one thread.
    let cv = match Cellvisor::start_on_current_system(options.supervisor.clone()) {
        Some(started) => started?,
        None => Cellvisor::start(options.supervisor)?,
    };
    let (shutdown, mut shutdown_rx) = watch::channel(false);
    let daemon = Arc::new(Daemon {
        cv,
        config_path: options.config_path,
        shutdown,
        connections: AtomicU64::new(0),
        last_activity: Mutex::new(Instant::now()),
        limits: Mutex::new(limits),
    });
    tracing::info!(socket = %options.socket.display(), pid = std::process::id(), "cellvisor daemon listening");
    spawn_signal_handlers(&daemon);
    if !idle_exit.is_zero() {
        spawn_idle_exit(&daemon, idle_exit);
    }
    let uid = nix::unistd::getuid().as_raw();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    match stream.peer_cred() {
                        Ok(cred) if cred.uid() == uid && from_own_worker(cred.pid()) => {
                            tracing::warn!(peer_pid = cred.pid(), "refused a connection from a cell (a process under one of this daemon's workers)");
                            refuse_cell(stream);
                        }
                        Ok(cred) if cred.uid() == uid => {
                            let daemon = Arc::clone(&daemon);
                            tokio::spawn(async move { handle_connection(daemon, stream).await });
                        }
                        Ok(cred) => tracing::warn!(peer_uid = cred.uid(), "refused a connection from another user"),
                        Err(err) => tracing::warn!("refused a connection without credentials: {err}"),
                    }
                }
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown_rx.changed() => break,
        }
    }
    tracing::info!("shutting down: stopping every worker");
    drop(listener);
    daemon.cv.shutdown().await;
    // A daemon started meanwhile may have replaced our socket file; leave its one alone.
    if socket_inode.is_some() && socket_inode == self::socket_inode(&options.socket) {
        let _ = std::fs::remove_file(&options.socket);
    }
    tracing::info!("stopped");
    Ok(())
}

/// Whether the peer `pid` is one of this daemon's workers or runs under one (a cell, or a
/// process a cell started): workers are the daemon's only children, and as subreapers they
/// keep every descendant under them. A peer without a pid is not trusted either.
fn from_own_worker(pid: Option<i32>) -> bool {
    let Some(pid) = pid.and_then(|p| u32::try_from(p).ok()) else {
        return true;
    };
    descends_from_child_of(pid, std::process::id(), |p| {
        cellvisor_workers::process_tree::stat(p).map(|s| s.ppid)
    })
}

/// Whether `pid`'s line of ancestors (itself included) holds a child of `parent`.
fn descends_from_child_of(pid: u32, parent: u32, parent_of: impl Fn(u32) -> Option<u32>) -> bool {
    let mut current = pid;
    // Bounded, in case /proc changes under us into a loop.
    for _ in 0..4096 {
        match parent_of(current) {
            Some(p) if p == parent => return current != parent,
            Some(p) if p > 1 && p != current => current = p,
            _ => return false,
        }
    }
    false
}

/// Tells a refused cell why, then drops its connection.
fn refuse_cell(stream: UnixStream) {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut stream = stream;
        let refusal = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": code::REQUEST_REFUSED,
                "message": "refused: cells may not drive the daemon (this connection comes from a process under one of its workers)"
            }
        });
        let line = format!("{refusal}\n");
        let _ =
            tokio::time::timeout(Duration::from_secs(1), stream.write_all(line.as_bytes())).await;
    });
}

fn socket_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Binds the socket in a private directory, replacing a stale socket file but never a live one.
async fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let bind_error = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        cellvisor_ipc::socket::ensure_private_dir(dir).map_err(bind_error)?;
    }
    if path.exists() {
        match UnixStream::connect(path).await {
            Ok(_) => return Err(ServeError::AlreadyRunning(path.to_path_buf())),
            Err(_) => {
                tracing::info!(socket = %path.display(), "replacing a stale socket file");
                std::fs::remove_file(path).map_err(bind_error)?;
            }
        }
    }
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok(listener)
}

fn spawn_signal_handlers(daemon: &Arc<Daemon>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let daemon = Arc::clone(daemon);
        if let Ok(mut stream) = signal(kind) {
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    tracing::info!("signal received");
                    let _ = daemon.shutdown.send(true);
                }
            });
        }
    }
    let daemon = Arc::clone(daemon);
    if let Ok(mut hangups) = signal(SignalKind::hangup()) {
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match reload(&daemon).await {
                    Ok(changes) => {
                        tracing::info!(changed = changes.len(), "configuration reloaded (SIGHUP)")
                    }
                    Err(err) => tracing::error!("configuration not reloaded: {}", err.message),
                }
            }
        });
    }
}

/// Exits once there have been no sessions and no clients for `idle_exit`.
fn spawn_idle_exit(daemon: &Arc<Daemon>, idle_exit: Duration) {
    let daemon = Arc::clone(daemon);
    tokio::spawn(async move {
        let tick = (idle_exit / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            tokio::time::sleep(tick).await;
            let busy = daemon.connections.load(Ordering::SeqCst) > 0
                || !daemon
                    .cv
                    .status()
                    .await
                    .map(|s| s.is_empty())
                    .unwrap_or(true);
            let mut last = match daemon.last_activity.lock() {
                Ok(last) => last,
                Err(poisoned) => poisoned.into_inner(),
            };
            if busy {
                *last = Instant::now();
            } else if last.elapsed() >= idle_exit {
                tracing::info!(
                    "no sessions for {}: exiting",
                    humantime::format_duration(idle_exit)
                );
                let _ = daemon.shutdown.send(true);
                return;
            }
        }
    });
}

/// Re-reads the config file; a bad file is refused and the configuration in force is kept.
async fn reload(daemon: &Daemon) -> Result<Vec<String>, RpcError> {
    let config = cellvisor_config::load(daemon.config_path.as_deref()).map_err(|e| {
        RpcError::new(
            code::REQUEST_REFUSED,
            format!("{e}\nthe configuration in force is unchanged"),
        )
    })?;
    *lock(&daemon.limits) = ConnectionLimits::from_config(&config);
    daemon
        .cv
        .reload(config)
        .await
        .map_err(|e| RpcError::new(code::SHUTTING_DOWN, e.to_string()))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct ConnectionGuard(Arc<Daemon>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Tool calls this connection's client has been asked to answer, by request id.
type PendingToolCalls = Mutex<HashMap<String, tokio::sync::oneshot::Sender<Result<Value, String>>>>;

/// What request tasks share with their connection.
struct Connection {
    /// Encoded lines (each ends in a newline) for the writer, in order.
    out: mpsc::Sender<Vec<u8>>,
    tool_calls: PendingToolCalls,
    next_tool_call: AtomicU64,
}

/// An eval in flight on a connection: aborted and its session interrupted if the client leaves.
struct InFlight {
    session: String,
    task: JoinHandle<()>,
}

async fn handle_connection(daemon: Arc<Daemon>, stream: UnixStream) {
    daemon.connections.fetch_add(1, Ordering::SeqCst);
    let _guard = ConnectionGuard(Arc::clone(&daemon));
    let limits = *lock(&daemon.limits);
    // Registered for reading only: a client reading its answer must not wake the daemon.
    let halves = stream.into_std().and_then(cellvisor::socket_halves::split);
    let (reader, mut writer) = match halves {
        Ok(halves) => halves,
        Err(err) => {
            tracing::warn!("cannot serve a connection: {err}");
            return;
        }
    };
    let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(CONNECTION_BACKLOG);
    let stall = limits.stalled_client_timeout;
    let writer_task = tokio::spawn(async move {
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
    });
    // Each request task holds a permit; with none left the reader waits (and so stops
    // reading this client) until an answer has gone out.
    let pending = Arc::new(tokio::sync::Semaphore::new(limits.max_pending_requests));
    let in_flight: Arc<Mutex<HashMap<u64, InFlight>>> = Arc::default();
    let connection = Arc::new(Connection {
        out: out.clone(),
        tool_calls: Mutex::default(),
        next_tool_call: AtomicU64::new(1),
    });
    let mut next_task = 0u64;
    let mut reader = BufReader::new(reader);
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
            read = read_line(&mut reader) => read,
            () = out.closed() => break,
        };
        let line = match read {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(LineError::TooLong) => {
                let error = RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "request line exceeds {} bytes; closing this connection",
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
            Err(LineError::Io) => break,
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
        next_task += 1;
        let task_id = next_task;
        // An eval or a wait ends with its client: a cell (or a watch) nobody reads is stopped.
        let eval_session =
            matches!(request.method.as_str(), method::EVAL | method::WAIT).then(|| {
                request
                    .params
                    .as_ref()
                    .and_then(|p| p.get("session"))
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string()
            });
        let daemon = Arc::clone(&daemon);
        let connection = Arc::clone(&connection);
        let registry = Arc::clone(&in_flight);
        let task = tokio::spawn(async move {
            let _permit = permit;
            let id = request.id.clone();
            let result = dispatch(&daemon, request, &connection).await;
            if let Some(id) = id {
                let _ = connection
                    .out
                    .send(protocol::encode_line(&protocol::response(id, result)))
                    .await;
            }
            if big {
                crate::allocator::release_free_memory();
            }
            if let Ok(mut registry) = registry.lock() {
                registry.remove(&task_id);
            }
        });
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
    // The writer ends once every sender is gone: ours, and the one the connection holds.
    drop(connection);
    drop(out);
    let _ = writer_task.await;
}

/// How long a `cell_started` event may wait to go out in one write with what follows it (the
/// cell's first output, its `cell_done` and the result): a quick cell then wakes its client
/// once instead of twice, and the worker gets the cell before the client is woken.
const STARTED_LINGER: Duration = Duration::from_millis(1);

/// The `cell_started` event held back for [`STARTED_LINGER`]; anything else of the request
/// sends it first, so the order of events never changes.
#[derive(Default)]
struct HeldStart(Option<(Vec<u8>, tokio::time::Instant)>);

impl HeldStart {
    /// When the held event must go out, if one is held.
    fn until(&self) -> Option<tokio::time::Instant> {
        self.0.as_ref().map(|(_, until)| *until)
    }

    /// Resolves when the held event is due; never while none is held (and then no timer is
    /// made at all).
    fn due(&self) -> impl std::future::Future<Output = ()> {
        let until = self.until();
        async move {
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        }
    }

    /// Holds `line` if it is a `cell_started` event; otherwise returns what to send, in
    /// order: the event held before it, then `line`.
    fn hold_or_release(
        &mut self,
        event: &CellEvent,
        line: Vec<u8>,
    ) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let earlier = self.release();
        if matches!(event, CellEvent::CellStarted { .. }) {
            let until = tokio::time::Instant::now() + STARTED_LINGER;
            self.0 = Some((line, until));
            (earlier, None)
        } else {
            (earlier, Some(line))
        }
    }

    /// The held event, to send now.
    fn release(&mut self) -> Option<Vec<u8>> {
        self.0.take().map(|(line, _)| line)
    }
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
async fn forward_tool_call(connection: &Connection, request_id: &Value, call: ToolCallRequest) {
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

enum LineError {
    TooLong,
    Io,
}

/// Reads one line of at most `MAX_LINE_BYTES` without ever buffering more than that.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let available = reader.fill_buf().await.map_err(|_| LineError::Io)?;
        if available.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(pos) => (&available[..pos], Some(pos + 1)),
            None => (available, None),
        };
        if line.len() + chunk.len() > protocol::MAX_LINE_BYTES {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(chunk);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(line));
        }
    }
}

fn refused(err: RequestError) -> RpcError {
    match err {
        RequestError::Stopped => RpcError::new(code::SHUTTING_DOWN, err.to_string()),
        other => RpcError::new(code::REQUEST_REFUSED, other.to_string()),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
}

async fn dispatch(
    daemon: &Daemon,
    request: Request,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let out = &connection.out;
    match request.method.as_str() {
        method::INITIALIZE => to_json(&InitializeResult {
            protocol_version: protocol::PROTOCOL_VERSION,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            languages: cellvisor_ipc::Language::ALL.to_vec(),
            pid: std::process::id(),
        }),
        method::EVAL => {
            let eval: EvalRequest = params(request.params)?;
            let request_id = request.id.clone().unwrap_or(Value::Null);
            let (events, mut events_rx) = mpsc::channel::<CellEvent>(64);
            let (tool_host, mut tool_calls) = mpsc::channel::<ToolCallRequest>(8);
            let tool_host = (!eval.tools.is_empty()).then_some(tool_host);
            let notify = |event: &CellEvent| {
                protocol::encode_line(&protocol::TypedNotification::new(
                    method::EVAL_EVENT,
                    protocol::EvalEvent {
                        request_id: &request_id,
                        event,
                    },
                ))
            };
            let eval = daemon.cv.eval_with_tools(eval, Some(events), tool_host);
            tokio::pin!(eval);
            let mut started = HeldStart::default();
            let result = loop {
                tokio::select! {
                    biased;
                    Some(event) = events_rx.recv() => {
                        let line = notify(&event);
                        // A client that stopped reading stalls only its own cells here.
                        let (earlier, now) = started.hold_or_release(&event, line);
                        for line in earlier.into_iter().chain(now) {
                            let _ = out.send(line).await;
                        }
                    }
                    Some(call) = tool_calls.recv() => {
                        if let Some(line) = started.release() {
                            let _ = out.send(line).await;
                        }
                        forward_tool_call(connection, &request_id, call).await;
                    }
                    () = started.due() =>
                    {
                        if let Some(line) = started.release() {
                            let _ = out.send(line).await;
                        }
                    }
                    result = &mut eval => break result,
                }
            };
            if let Some(line) = started.release() {
                let _ = out.send(line).await;
            }
            while let Ok(event) = events_rx.try_recv() {
                let _ = out.send(notify(&event)).await;
            }
            to_json(&result.map_err(refused)?)
        }
        method::INTERRUPT | method::RESET | method::CLOSE => {
            let p: SessionParams = params(request.params)?;
            let count = match request.method.as_str() {
                method::INTERRUPT => daemon.cv.interrupt(&p.session, p.language).await,
                method::RESET => daemon.cv.reset(&p.session, p.language).await,
                _ => daemon.cv.close(&p.session, p.language).await,
            }
            .map_err(refused)?;
            Ok(serde_json::json!({ "sessions": count }))
        }
        method::STATUS => to_json(&daemon.cv.status().await.map_err(refused)?),
        method::WAIT => {
            let p: WaitParams = params(request.params)?;
            let options = WaitOptions {
                yield_time_ms: p.yield_time_ms,
                max_tokens: p.max_tokens,
            };
            let result = daemon.cv.wait(&p.session, p.cell_id, options).await;
            to_json(&result.map_err(refused)?)
        }
        method::TERMINATE => {
            let p: TerminateParams = params(request.params)?;
            let result = daemon.cv.terminate(&p.session, p.cell_id).await;
            to_json(&result.map_err(refused)?)
        }
        method::SHUTDOWN => {
            let _ = daemon.shutdown.send(true);
            Ok(serde_json::json!({ "stopping": true }))
        }
        method::CONFIG_RELOAD => {
            let changes = reload(daemon).await?;
            Ok(serde_json::json!({ "reloaded": true, "changes": changes }))
        }
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!(
                "method not found: {other}; the methods are initialize, eval, wait, terminate, \
                 interrupt, reset, close, status, shutdown and config/reload"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cell_started_event_waits_for_what_follows_it_and_never_changes_the_order() {
        let started = |index| CellEvent::CellStarted {
            index,
            language: cellvisor_ipc::Language::JavaScript,
            title: None,
        };
        let output = CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: "2\n".into(),
        };
        let mut held = HeldStart::default();
        assert_eq!(held.until(), None);
        let patience = Duration::from_millis(200);
        assert!(
            tokio::time::timeout(patience, held.due()).await.is_err(),
            "nothing held: never due"
        );
        assert_eq!(
            held.hold_or_release(&started(0), b"s0".to_vec()),
            (None, None)
        );
        let until = held.until().expect("held");
        assert!(until <= tokio::time::Instant::now() + STARTED_LINGER);
        assert!(
            tokio::time::timeout(patience, held.due()).await.is_ok(),
            "a held event falls due"
        );
        // What follows goes out after it, in one batch.
        assert_eq!(
            held.hold_or_release(&output, b"o".to_vec()),
            (Some(b"s0".to_vec()), Some(b"o".to_vec()))
        );
        assert_eq!(held.until(), None);
        // A second start releases the first and is held in its place.
        held.hold_or_release(&started(0), b"s0".to_vec());
        assert_eq!(
            held.hold_or_release(&started(1), b"s1".to_vec()),
            (Some(b"s0".to_vec()), None)
        );
        assert_eq!(held.release(), Some(b"s1".to_vec()));
        assert_eq!(held.release(), None);
    }

    #[test]
    fn peers_under_a_child_of_the_daemon_are_cells() {
        // 100 is the daemon; 200 its worker; 300 a cell's process; 400 -> 50 a client.
        let parents = |pid: u32| match pid {
            100 => Some(1),
            200 => Some(100),
            300 => Some(200),
            301 => Some(300),
            400 => Some(50),
            50 => Some(1),
            _ => None,
        };
        assert!(descends_from_child_of(200, 100, parents));
        assert!(descends_from_child_of(301, 100, parents));
        assert!(!descends_from_child_of(400, 100, parents));
        assert!(!descends_from_child_of(100, 100, parents));
        assert!(!descends_from_child_of(999, 100, parents));
    }

    fn call() -> (
        ToolCallRequest,
        tokio::sync::oneshot::Receiver<Result<Value, String>>,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = ToolCallRequest {
            name: "t".into(),
            arguments: Value::Null,
            reply,
        };
        (request, answer)
    }

    #[tokio::test]
    async fn unanswered_tool_calls_are_bounded_per_connection() {
        let (out, mut out_rx) = mpsc::channel(MAX_PENDING_TOOL_CALLS * 2);
        let connection = Connection {
            out,
            tool_calls: Mutex::default(),
            next_tool_call: AtomicU64::new(1),
        };
        let mut waiting = Vec::new();
        for _ in 0..MAX_PENDING_TOOL_CALLS {
            let (request, answer) = call();
            forward_tool_call(&connection, &Value::from(1), request).await;
            waiting.push(answer);
        }
        let (request, mut refused) = call();
        forward_tool_call(&connection, &Value::from(1), request).await;
        let message = refused
            .try_recv()
            .expect("answered at once")
            .expect_err("refused");
        assert!(message.contains("at most 1024"), "{message}");
        // Calls whose cells ended make room again.
        waiting.truncate(10);
        let (request, mut accepted) = call();
        forward_tool_call(&connection, &Value::from(1), request).await;
        assert!(
            accepted.try_recv().is_err(),
            "sent to the host, not refused"
        );
        assert_eq!(lock(&connection.tool_calls).len(), 11);
        let mut sent = 0;
        while out_rx.try_recv().is_ok() {
            sent += 1;
        }
        assert_eq!(sent, MAX_PENDING_TOOL_CALLS + 1);
    }
}
