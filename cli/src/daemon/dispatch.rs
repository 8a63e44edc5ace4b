//! The daemon's methods, one function each: what a request's params ask of the supervisor
//! and what its answer is.

use super::connection::{forward_tool_call, Connection};
use super::held_start::HeldStart;
use super::{confined_first, lifecycle, tenancy, Daemon};
use cellvisor::cell::{CellEvent, EvalRequest, ToolCallRequest};
use cellvisor::daemon::protocol::{
    self, code, method, params, CheckpointParams, CheckpointsParams, DrainParams, DrainResult,
    Events, InitializeParams, InitializeResult, NamesParams, Request, RpcError, SessionParams,
    TerminateParams, WaitParams,
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

/// Answers one request (its result or its error; the caller sends it when it has an id).
pub(super) async fn dispatch(
    daemon: &Daemon,
    mut request: Request,
    connection: &Connection,
) -> Result<Answer, RpcError> {
    let tenant = &connection.principal.tenant;
    tenancy::enter(tenant, &request.method, &mut request.params)?;
    // What may start a session counts against the tenant's quotas, from its check until
    // it is answered.
    let _reservation = if matches!(request.method.as_str(), method::EVAL | method::RESTORE) {
        let ask = tenancy::asked_session(&request.params);
        Some(tenancy::within_quotas(daemon, tenant, ask, || 0).await?)
    } else {
        None
    };
    // The default tenant's results name sessions as they are: nothing to rewrite.
    if tenant.default && request.method == method::EVAL {
        return eval(daemon, request, connection)
            .await
            .map(|result| Answer::Eval(Box::new(result)));
    }
    let result = method_of(daemon, request, connection).await;
    tenancy::leave(tenant, result).map(Answer::Tree)
}

/// Answers one request whose session is the internal one.
async fn method_of(
    daemon: &Daemon,
    request: Request,
    connection: &Connection,
) -> Result<Value, RpcError> {
    match request.method.as_str() {
        method::INITIALIZE => initialize(daemon, request.params),
        method::EVAL => to_json(&eval(daemon, request, connection).await?),
        method::INTERRUPT => interrupt(daemon, request.params).await,
        method::RESET => reset(daemon, request.params).await,
        method::CLOSE => close(daemon, request.params).await,
        method::OWN => super::owned::own(&connection.owned, request.params),
        method::STATUS => tenancy::status(
            &connection.principal.tenant,
            to_json(&daemon.cv.status().await.map_err(refused)?)?,
        ),
        method::ZYGOTES => to_json(&daemon.cv.zygotes().await.map_err(refused)?),
        method::WAIT => wait(daemon, request, connection).await,
        method::TERMINATE => terminate(daemon, request.params).await,
        method::SHUTDOWN => shutdown(daemon),
        method::CONFIG_RELOAD => config_reload(daemon).await,
        method::DRAIN => drain(daemon, request.params).await,
        method::UNDRAIN => {
            let state = daemon.cv.undrain().await.map_err(refused)?;
            drain_result(daemon, state)
        }
        method::CHECKPOINT => {
            let p: CheckpointParams = params(request.params)?;
            let languages =
                confined_first::languages(daemon, connection, &p.session, None, p.language).await;
            confined_first::confine(daemon, connection, &p.session, &languages).await?;
            let session = SessionRef::new(&p.session, p.cwd.as_deref());
            let saved = daemon.cv.checkpoint(session, p.language, &p.name).await;
            to_json(&saved.map_err(refused)?)
        }
        method::RESTORE => {
            let p: CheckpointParams = params(request.params)?;
            let languages = confined_first::languages(
                daemon,
                connection,
                &p.session,
                Some(&p.name),
                p.language,
            )
            .await;
            confined_first::confine(daemon, connection, &p.session, &languages).await?;
            let session = SessionRef::new(&p.session, p.cwd.as_deref());
            let restored = daemon.cv.restore(session, p.language, &p.name).await;
            to_json(&restored.map_err(refused)?)
        }
        method::CHECKPOINTS => {
            let p: CheckpointsParams = params(request.params)?;
            let session = SessionRef::new(&p.session, p.cwd.as_deref());
            to_json(&daemon.cv.checkpoints(session).await.map_err(refused)?)
        }
        method::FILES_LIST | method::FILES_READ | method::FILES_WRITE | method::FILES_DELETE => {
            let tenant = &connection.principal.tenant;
            super::files::method(daemon, tenant, &request.method, request.params).await
        }
        method::NAMES => {
            let p: NamesParams = params(request.params)?;
            confined_first::confine(daemon, connection, &p.session, &[p.language]).await?;
            to_json(
                &daemon
                    .cv
                    .names(SessionRef::new(&p.session, p.cwd.as_deref()), p.language)
                    .await
                    .map_err(refused)?,
            )
        }
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!(
                "method not found: {other}; the methods are initialize, eval, wait, terminate, \
                 interrupt, reset, close, own, status, zygotes, checkpoint, restore, checkpoints, names, \
                 files/list, files/read, files/write, files/delete, drain, undrain, shutdown \
                 and config/reload"
            ),
        )),
    }
}

/// `initialize`: the protocol and program versions, the languages, the daemon's pid, its
/// node and whether it drains; a client that names another protocol version is refused
/// with both versions and what to do.
fn initialize(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: InitializeParams = params(params_in)?;
    if let Some(mismatch) = protocol_mismatch(&p) {
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
async fn drain(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: DrainParams = params(params_in)?;
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
    request: Request,
    connection: &Connection,
) -> Result<cellvisor::cell::EvalResult, RpcError> {
    let out = &connection.out;
    let mut eval: EvalRequest = params(request.params)?;
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
    let request_id = request.id.unwrap_or(Value::Null);
    let (events, mut stream) = EventStream::new(eval.events);
    let (tool_host, mut tool_calls) = mpsc::channel::<ToolCallRequest>(8);
    let tool_host = (!eval.tools.is_empty()).then_some(tool_host);
    let eval = daemon
        .cv
        .eval_to_the_end(connection.origin, eval, events, tool_host);
    tokio::pin!(eval);
    let mut started = HeldStart::default();
    let result = loop {
        tokio::select! {
            biased;
            Some(event) = stream.next() => {
                let line = notify(&request_id, &event);
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
    for event in stream.rest() {
        let _ = out.send(notify(&request_id, &event)).await;
    }
    result.map_err(refused)
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
async fn interrupt(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: SessionParams = params(params_in)?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let count = daemon.cv.interrupt(session, p.language).await;
    sessions_reached(count)
}

/// `reset`: replaces a session's workers with fresh ones.
async fn reset(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: SessionParams = params(params_in)?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let count = daemon.cv.reset(session, p.language).await;
    sessions_reached(count)
}

/// `close`: ends a session's workers.
async fn close(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: SessionParams = params(params_in)?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let options = cellvisor::CloseOptions {
        keep_workspace: p.keep_workspace,
    };
    let count = daemon.cv.close_with(session, p.language, options).await;
    sessions_reached(count)
}

/// The answer of `interrupt`, `reset` and `close`: how many sessions the command reached.
fn sessions_reached(count: Result<usize, RequestError>) -> Result<Value, RpcError> {
    Ok(serde_json::json!({ "sessions": count.map_err(refused)? }))
}

/// `wait`: watches a cell that went to the background.
/// While it watches, the cell's events (those its `events` param chooses) stream as
/// `eval/event` notifications carrying the wait's own request id, as an `eval`'s do.
async fn wait(
    daemon: &Daemon,
    request: Request,
    connection: &Connection,
) -> Result<Value, RpcError> {
    let p: WaitParams = params(request.params)?;
    let request_id = request.id.unwrap_or(Value::Null);
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
                let _ = connection.out.send(notify(&request_id, &event)).await;
            }
            result = &mut wait => break result,
        }
    };
    // What the cell sent just before the answer goes first, as in `eval`.
    for event in stream.rest() {
        let _ = connection.out.send(notify(&request_id, &event)).await;
    }
    to_json(&result.map_err(refused)?)
}

/// `terminate`: stops a cell that went to the background and answers its end.
async fn terminate(daemon: &Daemon, params_in: Option<Value>) -> Result<Value, RpcError> {
    let p: TerminateParams = params(params_in)?;
    let session = SessionRef::new(&p.session, p.cwd.as_deref());
    let result = daemon.cv.terminate(session, p.cell_id).await;
    to_json(&result.map_err(refused)?)
}

/// `shutdown`: stops the daemon and every worker (after this answer).
fn shutdown(daemon: &Daemon) -> Result<Value, RpcError> {
    let _ = daemon.shutdown.send(true);
    Ok(serde_json::json!({ "stopping": true }))
}

/// `config/reload`: re-reads the config file and answers what changed.
async fn config_reload(daemon: &Daemon) -> Result<Value, RpcError> {
    let changes = lifecycle::reload(daemon).await?;
    Ok(serde_json::json!({ "reloaded": true, "changes": changes }))
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
