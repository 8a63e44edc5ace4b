//! The daemon's methods, one function each: what a request's params ask of the supervisor
//! and what its answer is.

use super::connection::{forward_tool_call, Connection};
use super::held_start::HeldStart;
use super::{confined_first, files, lifecycle, tenancy, Daemon};
use cellvisor::cell::{CellEvent, EvalRequest, ToolCallRequest};
use cellvisor::daemon::protocol::{
    self, code, method, Call, CheckpointParams, DrainParams, DrainResult, Events, InitializeParams,
    InitializeResult, MethodName, NamesParams, Request, RpcError, SessionParams, TerminateParams,
    WaitParams,
};
use cellvisor::{RequestError, SessionRef, WaitOptions};
use serde_json::Value;
use tokio::sync::mpsc;

/// A method's answer: a JSON tree, or an eval's result as it is, which the hot path encodes
/// straight to its line (no tree of it is built, walked and dropped per cell).
pub(super) enum Answer {
    Tree(Value),
    Eval(Box<cellvisor::cell::EvalResult>),
}

impl Answer {
    /// The response line to request `id`.
    pub(super) fn response_line(id: Value, answer: Result<Answer, RpcError>) -> Vec<u8> {
        match answer {
            Ok(Answer::Eval(result)) => protocol::encode_line(&TypedResponse {
                jsonrpc: "2.0",
                id,
                result,
            }),
            Ok(Answer::Tree(result)) => protocol::encode_line(&protocol::response(id, Ok(result))),
            Err(error) => protocol::encode_line(&protocol::response(id, Err(error))),
        }
    }
}

/// A successful response whose result is encoded as it is.
#[derive(serde::Serialize)]
struct TypedResponse<T: serde::Serialize> {
    jsonrpc: &'static str,
    id: Value,
    result: T,
}

/// Answers one request (its result or its error; the caller sends it when it has an id):
/// its method and params are read once into a [`Call`], which the handlers match on.
pub(super) async fn dispatch(
    daemon: &Daemon,
    request: Request,
    connection: &Connection,
) -> Result<Answer, RpcError> {
    let tenant = &connection.principal.tenant;
    let name =
        MethodName::parse(&request.method).ok_or_else(|| MethodName::not_found(&request.method))?;
    let mut raw = request.params;
    tenancy::enter(tenant, name, &mut raw)?;
    let call = match Call::parse(name, raw) {
        Ok(call) => call,
        Err(error) => return tenancy::leave(tenant, Err(error)).map(Answer::Tree),
    };
    let id = request.id.unwrap_or(Value::Null);
    // What may start a session counts against the tenant's quotas, from its check until
    // it is answered.
    let _reservation = match &call {
        Call::Eval(_) | Call::Restore(_) => {
            let ask = tenancy::asked_by(&call);
            Some(tenancy::within_quotas(daemon, tenant, ask, || 0).await?)
        }
        _ => None,
    };
    // The default tenant's results name sessions as they are: nothing to rewrite.
    if tenant.default {
        if let Call::Eval(eval_request) = call {
            return eval(daemon, *eval_request, &id, connection)
                .await
                .map(|result| Answer::Eval(Box::new(result)));
        }
    }
    let result = method_of(daemon, call, &id, connection).await;
    tenancy::leave(tenant, result).map(Answer::Tree)
}

/// Answers one call whose session is the internal one: one handler per method.
async fn method_of(
    daemon: &Daemon,
    call: Call,
    id: &Value,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let tenant = &connection.principal.tenant;
    match call {
        Call::Initialize(p) => initialize(daemon, &p),
        Call::Eval(p) => to_json(&eval(daemon, *p, id, connection).await?),
        Call::Interrupt(p) => interrupt(daemon, &p).await,
        Call::Reset(p) => reset(daemon, &p).await,
        Call::Close(p) => close(daemon, &p).await,
        Call::Own(p) => to_json(&super::owned::own(&connection.owned, *p)?),
        Call::Status => tenancy::status(
            tenant,
            to_json(&daemon.cv.status().await.map_err(refused)?)?,
        ),
        Call::Zygotes => to_json(&daemon.cv.zygotes().await.map_err(refused)?),
        Call::Wait(p) => wait(daemon, *p, id, connection).await,
        Call::Terminate(p) => terminate(daemon, &p).await,
        Call::Shutdown => shutdown(daemon),
        Call::ConfigReload => config_reload(daemon).await,
        Call::Drain(p) => drain(daemon, &p).await,
        Call::Undrain => {
            let state = daemon.cv.undrain().await.map_err(refused)?;
            drain_result(daemon, state)
        }
        Call::Checkpoint(p) => checkpoint(daemon, &p, connection).await,
        Call::Restore(p) => restore(daemon, &p, connection).await,
        Call::Checkpoints(p) => {
            let session = SessionRef::new(&p.session, p.cwd.as_deref());
            to_json(&daemon.cv.checkpoints(session).await.map_err(refused)?)
        }
        Call::FilesList(p) => files::list_method(daemon, tenant, *p).await,
        Call::FilesRead(p) => files::read_method(daemon, tenant, *p).await,
        Call::FilesWrite(p) => files::write_method(daemon, tenant, *p).await,
        Call::FilesDelete(p) => files::delete_method(daemon, tenant, *p).await,
        Call::Names(p) => names(daemon, &p, connection).await,
    }
}

/// `checkpoint`: saves the session's namespace (its confined languages first).
async fn checkpoint(
    daemon: &Daemon,
    p: &CheckpointParams,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let languages =
        confined_first::languages(daemon, connection, &p.session, None, p.language).await;
    confined_first::confine(daemon, connection, &p.session, &languages).await?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let saved = daemon.cv.checkpoint(session, p.language, &p.name).await;
    to_json(&saved.map_err(refused)?)
}

/// `restore`: replaces the session's namespace with a checkpoint (confined languages first).
async fn restore(
    daemon: &Daemon,
    p: &CheckpointParams,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let languages =
        confined_first::languages(daemon, connection, &p.session, Some(&p.name), p.language).await;
    confined_first::confine(daemon, connection, &p.session, &languages).await?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let restored = daemon.cv.restore(session, p.language, &p.name).await;
    to_json(&restored.map_err(refused)?)
}

/// `names`: the user names of the session's namespace in one language.
async fn names(
    daemon: &Daemon,
    p: &NamesParams,
    connection: &Connection,
) -> Result<Value, RpcError> {
    confined_first::confine(daemon, connection, &p.session, &[p.language]).await?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    to_json(
        &daemon
            .cv
            .names(session, p.language)
            .await
            .map_err(refused)?,
    )
}

/// `initialize`: the protocol and program versions, the languages, the daemon's pid, its
/// node and whether it drains; a client that names another protocol version is refused
/// with both versions and what to do.
fn initialize(daemon: &Daemon, p: &InitializeParams) -> Result<Value, RpcError> {
    if let Some(mismatch) = protocol_mismatch(p) {
        return Err(RpcError {
            code: code::PROTOCOL_MISMATCH,
            message: mismatch.to_string(),
            data: serde_json::to_value(&mismatch).ok(),
        });
    }
    to_json(&InitializeResult {
        protocol_version: protocol::PROTOCOL_VERSION,
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        languages: cellvisor_ipc::Language::ALL.to_vec(),
        pid: std::process::id(),
        node: daemon.cv.node().to_string(),
        draining: daemon.cv.is_draining(),
        isolation: serde_json::to_value(daemon.cv.isolation()).ok(),
    })
}

/// The mismatch between the client's protocol version (when it says one) and ours.
fn protocol_mismatch(p: &InitializeParams) -> Option<protocol::VersionMismatch> {
    let theirs = p.protocol_version?;
    (theirs != protocol::PROTOCOL_VERSION).then(|| protocol::VersionMismatch {
        daemon_protocol: protocol::PROTOCOL_VERSION,
        daemon_version: env!("CARGO_PKG_VERSION").to_string(),
        client_protocol: theirs,
        client_version: p.client_version.clone().unwrap_or_default(),
    })
}

/// `drain`: no new sessions, idle ones stopped; with `wait`, answers once none is live or
/// at `timeout_ms`.
async fn drain(daemon: &Daemon, p: &DrainParams) -> Result<Value, RpcError> {
    let timeout_ms = p.timeout_ms.unwrap_or(protocol::DEFAULT_DRAIN_WAIT_MS);
    if timeout_ms > cellvisor::MAX_WAIT_MS {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "timeout_ms must be at most {} (an hour), got {timeout_ms}",
                cellvisor::MAX_WAIT_MS
            ),
        ));
    }
    let mut state = daemon.cv.drain().await.map_err(refused)?;
    if p.wait {
        let timeout = std::time::Duration::from_millis(timeout_ms);
        state = daemon.cv.drain_wait(timeout).await.map_err(refused)?;
    }
    drain_result(daemon, state)
}

/// The answer of `drain` and `undrain`.
fn drain_result(daemon: &Daemon, state: cellvisor::DrainState) -> Result<Value, RpcError> {
    to_json(&DrainResult {
        draining: state.draining,
        live: state.live,
        node: daemon.cv.node().to_string(),
    })
}

/// `eval`: runs the cells, sending their events as `eval/event` notifications (those its
/// `events` param chooses) and their tool calls as `tool/call` requests while they run;
/// answers the result.
async fn eval(
    daemon: &Daemon,
    mut eval: EvalRequest,
    request_id: &Value,
    connection: &Connection,
) -> Result<cellvisor::cell::EvalResult, RpcError> {
    let out = &connection.out;
    if connection.origin == cellvisor::Origin::Network {
        if let Some(cwd) = eval.cwd.take() {
            let name = cellvisor::SessionName::parse(&eval.session)
                .map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))?;
            let inside = daemon
                .cv
                .workspace_cwd(&name, &cwd)
                .await
                .map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))?;
            eval.cwd = Some(inside);
        }
    }
    let (events, mut stream) = EventStream::new(eval.events);
    // A request that declares no tools gets no channel for their calls (none is made).
    let (tool_host, mut tool_calls) = if eval.tools.is_empty() {
        (None, None)
    } else {
        let (host, calls) = mpsc::channel::<ToolCallRequest>(8);
        (Some(host), Some(calls))
    };
    let eval = daemon
        .cv
        .eval_to_the_end(connection.origin, eval, events, tool_host);
    tokio::pin!(eval);
    let mut started = HeldStart::default();
    let result = loop {
        tokio::select! {
            biased;
            Some(event) = stream.next() => {
                let line = notify(request_id, &event);
                // A client that stopped reading stalls only its own cells here.
                let (earlier, now) = started.hold_or_release(&event, line);
                for line in earlier.into_iter().chain(now) {
                    let _ = out.send(line).await;
                }
            }
            Some(call) = next_tool_call(&mut tool_calls) => {
                if let Some(line) = started.release() {
                    let _ = out.send(line).await;
                }
                forward_tool_call(connection, request_id, call).await;
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
    for event in stream.rest() {
        let _ = out.send(notify(request_id, &event)).await;
    }
    result.map_err(refused)
}

/// The next tool call a cell makes; pending for ever when the request declared no tools.
async fn next_tool_call(
    calls: &mut Option<mpsc::Receiver<ToolCallRequest>>,
) -> Option<ToolCallRequest> {
    match calls {
        Some(calls) => calls.recv().await,
        None => std::future::pending().await,
    }
}

/// The `eval/event` line of `event`, for the request `request_id`.
fn notify(request_id: &Value, event: &CellEvent) -> Vec<u8> {
    protocol::encode_line(&protocol::TypedNotification::new(
        method::EVAL_EVENT,
        protocol::EvalEvent { request_id, event },
    ))
}

/// The events of one `eval` or `wait`, as its `events` param chooses them. With
/// [`Events::None`] there is no channel at all: the supervisor is given none, so it makes and
/// sends no event.
struct EventStream {
    receiver: Option<mpsc::Receiver<CellEvent>>,
    choice: Events,
}

impl EventStream {
    /// The sender to give the supervisor (none for [`Events::None`]) and the stream.
    fn new(choice: Events) -> (Option<mpsc::Sender<CellEvent>>, EventStream) {
        let (sender, receiver) = match choice {
            Events::None => (None, None),
            Events::All | Events::Output | Events::Values => {
                let (sender, receiver) = mpsc::channel::<CellEvent>(64);
                (Some(sender), Some(receiver))
            }
        };
        (sender, EventStream { receiver, choice })
    }

    /// The next event to send; pending for ever when there is no channel, `None` once the
    /// channel is closed.
    async fn next(&mut self) -> Option<CellEvent> {
        let Some(receiver) = self.receiver.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            let event = receiver.recv().await?;
            if self.choice.passes(&event) {
                return Some(event);
            }
        }
    }

    /// The events already sent by the supervisor when the request ended, to go out before
    /// its answer.
    fn rest(&mut self) -> Vec<CellEvent> {
        let mut rest = Vec::new();
        if let Some(receiver) = self.receiver.as_mut() {
            while let Ok(event) = receiver.try_recv() {
                if self.choice.passes(&event) {
                    rest.push(event);
                }
            }
        }
        rest
    }
}

/// `interrupt`: stops the running cell of a session; answers how many sessions it reached.
async fn interrupt(daemon: &Daemon, p: &SessionParams) -> Result<Value, RpcError> {
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let count = daemon.cv.interrupt(session, p.language).await;
    sessions_reached(count)
}

/// `reset`: replaces a session's workers with fresh ones.
async fn reset(daemon: &Daemon, p: &SessionParams) -> Result<Value, RpcError> {
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let count = daemon.cv.reset(session, p.language).await;
    sessions_reached(count)
}

/// `close`: ends a session's workers.
async fn close(daemon: &Daemon, p: &SessionParams) -> Result<Value, RpcError> {
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let options = cellvisor::CloseOptions {
        keep_workspace: p.keep_workspace,
    };
    let count = daemon.cv.close_with(session, p.language, options).await;
    sessions_reached(count)
}

/// The answer of `interrupt`, `reset` and `close`: how many sessions the command reached.
fn sessions_reached(count: Result<usize, RequestError>) -> Result<Value, RpcError> {
    to_json(&protocol::SessionsReached {
        sessions: count.map_err(refused)?,
    })
}

/// `wait`: watches a cell that went to the background.
/// While it watches, the cell's events (those its `events` param chooses) stream as
/// `eval/event` notifications carrying the wait's own request id, as an `eval`'s do.
async fn wait(
    daemon: &Daemon,
    p: WaitParams,
    request_id: &Value,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let options = WaitOptions {
        yield_time_ms: p.yield_time_ms,
        max_tokens: p.max_tokens,
    };
    let (events, mut stream) = EventStream::new(p.events);
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let wait = daemon
        .cv
        .wait_with_events(session, p.cell_id, options, events);
    tokio::pin!(wait);
    let result = loop {
        tokio::select! {
            biased;
            Some(event) = stream.next() => {
                // A client that stopped reading stalls only this cell's reader.
                let _ = connection.out.send(notify(request_id, &event)).await;
            }
            result = &mut wait => break result,
        }
    };
    // What the cell sent just before the answer goes first, as in `eval`.
    for event in stream.rest() {
        let _ = connection.out.send(notify(request_id, &event)).await;
    }
    to_json(&result.map_err(refused)?)
}

/// `terminate`: stops a cell that went to the background and answers its end.
async fn terminate(daemon: &Daemon, p: &TerminateParams) -> Result<Value, RpcError> {
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let result = daemon.cv.terminate(session, p.cell_id).await;
    to_json(&result.map_err(refused)?)
}

/// `shutdown`: stops the daemon and every worker (after this answer).
fn shutdown(daemon: &Daemon) -> Result<Value, RpcError> {
    let _ = daemon.shutdown.send(true);
    to_json(&protocol::ShutdownResult { stopping: true })
}

/// `config/reload`: re-reads the config file and answers what changed.
async fn config_reload(daemon: &Daemon) -> Result<Value, RpcError> {
    let changes = lifecycle::reload(daemon).await?;
    to_json(&protocol::ReloadResult {
        reloaded: true,
        changes,
    })
}

/// The JSON-RPC error of a refused request (a typed code where a client acts on it).
pub(super) fn refused(err: RequestError) -> RpcError {
    match err {
        RequestError::Stopped => RpcError::new(code::SHUTTING_DOWN, err.to_string()),
        RequestError::Draining(_) => RpcError::new(code::DRAINING, err.to_string()),
        RequestError::LeasedElsewhere {
            ref node,
            retry_after,
            ..
        } => RpcError {
            code: code::LEASED_ELSEWHERE,
            data: Some(serde_json::json!({
                "node": node,
                "retry_after_ms": u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
            })),
            message: err.to_string(),
        },
        RequestError::SessionUnknown(_) => RpcError::new(code::SESSION_UNKNOWN, err.to_string()),
        RequestError::RequestId(_) => RpcError::new(code::INVALID_PARAMS, err.to_string()),
        other => RpcError::new(code::REQUEST_REFUSED, other.to_string()),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
}
