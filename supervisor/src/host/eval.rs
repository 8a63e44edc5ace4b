//! Running a request's cells: checked once, each cell to its session in order, the first
//! failure skipping the rest.

use super::cell_log::CellLog;
use super::policy::validate;
use super::{Cellvisor, Origin, RequestError};
use crate::cell::{
    CellEvent, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult, ToolCallRequest,
};
use crate::names::SessionName;
use crate::once::Begun;
use crate::session::{CellJob, CellReport, SessionKey};
use crate::supervisor::{Control, ControlAction, RequestDone, Submit, Supervisor};
use actix::prelude::*;
use cellvisor_ipc::Language;
use cellvisor_ipc::ToolInfo;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

impl Cellvisor {
    /// Runs a request's cells in order; the first failure skips the rest. `events`, if given,
    /// receives progress as it happens (cell started, output, displays, cell done).
    pub async fn eval(
        &self,
        request: EvalRequest,
        events: Option<mpsc::Sender<CellEvent>>,
    ) -> Result<EvalResult, RequestError> {
        self.eval_with_tools(request, events, None).await
    }

    /// [`Cellvisor::eval`] for a request that declares tools: each call a cell makes arrives
    /// on `tool_host`, and the host answers through the request's `reply`. A call still
    /// unanswered when its cell ends (or times out) is cancelled.
    pub async fn eval_with_tools(
        &self,
        request: EvalRequest,
        events: Option<mpsc::Sender<CellEvent>>,
        tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    ) -> Result<EvalResult, RequestError> {
        self.eval_from(Origin::Local, request, events, tool_host)
            .await
    }

    /// [`Cellvisor::eval_with_tools`] for a request that came from `origin`: a host serving
    /// requests from the network says so, and the `landlock` isolation level confines them.
    pub async fn eval_from(
        &self,
        origin: Origin,
        request: EvalRequest,
        events: Option<mpsc::Sender<CellEvent>>,
        tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    ) -> Result<EvalResult, RequestError> {
        self.eval_tagged(origin, request, events, tool_host, 0)
            .await
    }

    /// [`Cellvisor::eval_from`] for a caller that may go away mid-request (a daemon's client
    /// whose connection drops): a request with a `request_id` then runs to its end anyway and
    /// is remembered, so the client's retry with the same id gets its answer instead of
    /// running it again. Without an id (or outside a tokio runtime) the request ends with its
    /// caller, as [`Cellvisor::eval_from`]'s does.
    pub async fn eval_to_the_end(
        self: &Arc<Self>,
        origin: Origin,
        request: EvalRequest,
        events: Option<mpsc::Sender<CellEvent>>,
        tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    ) -> Result<EvalResult, RequestError> {
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(_), Ok(runtime)) = (&request.request_id, runtime) else {
            return self.eval_from(origin, request, events, tool_host).await;
        };
        let this = Arc::clone(self);
        let run =
            runtime.spawn(async move { this.eval_from(origin, request, events, tool_host).await });
        run.await.unwrap_or(Err(RequestError::Stopped))
    }

    /// [`Cellvisor::eval_from`] tagged with `tag`, which the session's watchers
    /// ([`Cellvisor::watch`]) see on each of its events, so a watcher that sends requests
    /// too can tell its own (0: untagged).
    pub async fn eval_tagged(
        &self,
        origin: Origin,
        mut request: EvalRequest,
        events: Option<mpsc::Sender<CellEvent>>,
        tool_host: Option<mpsc::Sender<ToolCallRequest>>,
        tag: u64,
    ) -> Result<EvalResult, RequestError> {
        let cells = crate::locking::lock(&self.config).cells.clone();
        validate(&request, &cells)?;
        // The request's `timeout` and `reset` become the cells' own, as the gateway tool has them.
        request.apply_request_level();
        let tools: Arc<[ToolInfo]> = request
            .tools
            .iter()
            .map(|t| ToolInfo {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema_json: t.input_schema.to_string(),
            })
            .collect();
        let policy = self.request_policy();
        // A session served without a caller directory works in its workspace (a per-call
        // request in its named session's).
        let look = self.look_at_workspace(&request)?;
        let files_pending = self.files_to_bring_back(&request, look.as_ref());
        let workspace_modified = self.enter_workspace(&mut request, look).await?;
        let sandbox = self.sandbox_plan(&request, origin)?.map(Arc::new);
        let keeps_level_confinement = sandbox.is_none() && self.isolation.landlock.is_some();
        let python = self
            .python_choice(&request, workspace_modified)
            .map(Arc::new);
        let caller_env = request.env.as_ref().map(|vars| {
            let filter = &crate::locking::lock(&self.config).env;
            Arc::new(crate::environment::caller_vars(vars, filter))
        });
        let request_id = self
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A per-call request runs in a throw-away session of its own, discarded at its end
        // (however it ends), so the named session's workers and state are not touched.
        let named = SessionName::parse(&request.session)?;
        let throwaway = (request.fresh || policy.per_call)
            .then(|| ThrowawaySession::new(self.supervisor.clone(), &named, request_id));
        // Under `sessions.key = "session+cwd"` a kept session is the pair (name, cwd).
        let key = match &throwaway {
            Some(throwaway) => throwaway.name.clone(),
            None => self.eval_key(&request.session, request.cwd.as_deref())?,
        };
        let session = &key;
        // The session's lease stays held while the request goes on: a renewal round between
        // its take and its first cell must not give it up (and with it what it read).
        let _lease_pin = match (&self.leases, &throwaway) {
            (Some(book), None) => Some(book.pin(session)),
            _ => None,
        };
        let admitted = match self.refuse_if_draining(session).await {
            Ok(()) => {
                self.admit(session, request.resume && throwaway.is_none())
                    .await
            }
            Err(err) => Err(err),
        };
        if let (Err(_), Some(pending)) = (&admitted, &files_pending) {
            pending.undo();
        }
        admitted?;
        // A per-call request's id is remembered by its named session: in etcd mode, under
        // that session's lease, held for the request.
        let _memory_lease = match (&throwaway, &request.request_id) {
            (Some(_), Some(_)) => match self.hold_for_memory(&named).await {
                Ok(pin) => pin,
                Err(err) => {
                    if let Some(pending) = &files_pending {
                        pending.undo();
                    }
                    return Err(err);
                }
            },
            _ => None,
        };
        // A request with an id runs once: a retry waits for the first run's turn and gets its
        // answer. What the id finds is looked up only once the session's lease is proven
        // (taken again if it went meanwhile), on the committed state that lease reads.
        let remembered_by = if throwaway.is_some() { &named } else { session };
        let turn = match request.request_id.as_deref() {
            Some(id) => Some(self.requests.turn(remembered_by, id).await),
            None => None,
        };
        let lock = self.request_lock(session);
        let _turn = lock.lock().await;
        let undo_files = || {
            if let Some(pending) = &files_pending {
                pending.undo();
            }
        };
        if let Err(refused) = self.prove_lease(session).await {
            // Not served here after all: its empty workspace must not hide the files from
            // the node that serves it, nor from this one when it comes back.
            undo_files();
            return Err(refused);
        }
        let once = match turn.map(|turn| turn.look(&request.cells)) {
            None => None,
            Some(Ok(Begun::Run(once))) if once.done().is_some() => {
                // Every cell is in the committed state already: nothing runs.
                undo_files();
                return Ok(self.answer_done(once, &request.cells).await);
            }
            Some(Ok(Begun::Run(once))) => Some(once),
            Some(Ok(Begun::Replay(result))) => {
                undo_files();
                return Ok(result);
            }
            Some(Err(crate::once::OnceError::NotHeld { session, .. })) => {
                // The lease went between its proof and the look up: the router retries.
                undo_files();
                return Err(RequestError::lease_let_go(session));
            }
            Some(Err(err)) => {
                undo_files();
                return Err(err.into());
            }
        };
        // A workspace missing on this node comes back from the session's latest recording.
        let files_back = match files_pending {
            Some(pending) => Some(self.bring_back(pending).await?),
            None => None,
        };
        let (events, tap) =
            self.watchers
                .tap(&request.session, request_id, tag, &request.cells, events);
        // Dropped when this future is (a client that disconnected): the sessions then stop
        // this request's cells, and only those.
        let (_requester_alive, requester) = tokio::sync::watch::channel(());
        let _pin = RequestPin {
            supervisor: self.supervisor.clone(),
            request: request_id,
        };
        let mut results = Vec::with_capacity(request.cells.len());
        let mut stopped = false;
        // A cell that went to the background holds its session: the request returns, and
        // its later cells are skipped rather than queued behind it.
        let mut in_background = None;
        for (index, spec) in request.cells.iter().enumerate() {
            let cell_id = self
                .next_cell
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(earlier) = once.as_ref().and_then(|o| o.resumed().get(index)) {
                // In the session's committed state from an earlier run: answered, not run.
                if let Some(events) = &events {
                    let (language, title) = (spec.language, spec.title.clone());
                    let started = CellEvent::CellStarted {
                        index,
                        language,
                        title,
                    };
                    let _ = events.send(started).await;
                    let status = earlier.report.status;
                    let _ = events.send(CellEvent::CellDone { index, status }).await;
                }
                results.push(earlier.clone());
                continue;
            }
            if let Some(running) = in_background {
                results.push(CellResult::skipped_behind(index, cell_id, spec, running));
                continue;
            }
            if stopped {
                results.push(CellResult::skipped(index, cell_id, spec));
                continue;
            }
            if let Some(events) = &events {
                let _ = events
                    .send(CellEvent::CellStarted {
                        index,
                        language: spec.language,
                        title: spec.title.clone(),
                    })
                    .await;
            }
            let directive = match policy.disabled(spec.language) {
                Some(message) => Err(message),
                None if index > 0 && !self.lease_still_provable(session) => Err(format!(
                    "not run: this node can no longer prove it holds session {session}'s lease \
                     (LEASED_ELSEWHERE); send it again and it runs where the session is held"
                )),
                None => with_directive(spec),
            };
            let result = match directive {
                Err(message) => CellReport::refused(index, cell_id, spec, message),
                Ok((job_spec, max_output_bytes)) => {
                    let (reply, outcome) = oneshot::channel();
                    let may_yield = throwaway.is_none();
                    let job = CellJob {
                        cell_id,
                        yield_time: job_spec.yield_time_ms.map(std::time::Duration::from_millis),
                        may_yield,
                        index,
                        spec: job_spec,
                        cwd: request.cwd.clone(),
                        events: events.clone(),
                        tools: Arc::clone(&tools),
                        tool_host: tool_host.clone(),
                        max_output_bytes,
                        python: python.clone().filter(|_| spec.language == Language::Python),
                        sandbox: sandbox.clone(),
                        keeps_level_confinement,
                        caller_env: caller_env.clone(),
                        requester: requester.clone(),
                        reply,
                        state: None,
                        once: once.as_ref().map(|o| Arc::new(o.step(&results))),
                    };
                    let key = SessionKey {
                        session: session.clone(),
                        language: spec.language,
                    };
                    if spec.reset {
                        // The reset cancels them: their ids are not found from now on.
                        self.forget_background(session, Some(spec.language));
                    }
                    let log = CellLog {
                        session,
                        language: spec.language,
                        cell_id,
                        request: request.request_id.as_deref(),
                        node: &self.node,
                        token: self.leases.as_ref().and_then(|book| book.token(session)),
                    };
                    log.started();
                    self.supervisor
                        .send(Submit {
                            key: key.clone(),
                            cwd: request.cwd.clone(),
                            job,
                            request: request_id,
                        })
                        .await
                        .map_err(|_| RequestError::Stopped)?;
                    let result = match outcome.await {
                        Ok(outcome) => outcome.into_result(index, cell_id, spec),
                        Err(_) => CellReport::refused(
                            index,
                            cell_id,
                            spec,
                            "the session ended before the cell finished".into(),
                        ),
                    };
                    log.ended(&result);
                    if result.report.status == CellStatus::Running {
                        self.remember_background(cell_id, key);
                        in_background = Some(cell_id);
                    }
                    let mut result = result;
                    self.check_workspace_after_cell(request.cwd.as_deref(), &mut result)
                        .await;
                    result
                }
            };
            if let Some(events) = &events {
                let _ = events
                    .send(CellEvent::CellDone {
                        index,
                        status: result.report.status,
                    })
                    .await;
            }
            stopped = result.exit_code != 0;
            results.push(result);
        }
        let replayed_cells = once.as_ref().map_or(0, |o| o.resumed().len());
        for result in results.iter_mut().skip(replayed_cells) {
            result.node.clone_from(&self.node);
        }
        if let Some(tap) = tap {
            tap.ended(&results).await;
        }
        let mut result = EvalResult::from_cells(results);
        result.node.clone_from(&self.node);
        result.replayed_cells = replayed_cells;
        if let Some(restored) = files_back {
            super::state_files::tell_files(&mut result, restored);
        }
        if let Some(once) = once {
            super::once::remember(once, &mut result).await;
        }
        Ok(result)
    }
}

/// The cell as its session runs it: a JavaScript `// @exec:` line turned into the cell's
/// observation time (`yield_time_ms`, which the line overrides) and output cap (code mode).
/// `Err` is the message for a bad line.
pub(super) fn with_directive(spec: &CellSpec) -> Result<(CellSpec, Option<u64>), String> {
    let mut job = spec.clone();
    if spec.language != Language::JavaScript {
        return Ok((job, None));
    }
    let Some(directive) = crate::directive::parse(&spec.code)? else {
        return Ok((job, None));
    };
    if let Some(time) = directive.yield_time_ms {
        job.yield_time_ms = Some(time);
    }
    Ok((job, directive.max_output_bytes()))
}

/// The session of a per-call request (`fresh: true` or `sessions.mode = "per-call"`): its
/// workers are discarded when the request ends, however it ends.
pub(super) struct ThrowawaySession {
    supervisor: Addr<Supervisor>,
    name: SessionName,
}

impl ThrowawaySession {
    pub(super) fn new(
        supervisor: Addr<Supervisor>,
        session: &SessionName,
        request: u64,
    ) -> ThrowawaySession {
        ThrowawaySession {
            supervisor,
            name: SessionName::throwaway(session, request),
        }
    }
}

impl Drop for ThrowawaySession {
    fn drop(&mut self) {
        self.supervisor.do_send(Control {
            session: self.name.clone(),
            language: None,
            action: ControlAction::Discard,
        });
    }
}

/// Keeps a request's sessions from eviction until the request ends, however it ends.
pub(super) struct RequestPin {
    pub(super) supervisor: Addr<Supervisor>,
    pub(super) request: u64,
}

impl Drop for RequestPin {
    fn drop(&mut self) {
        self.supervisor.do_send(RequestDone {
            request: self.request,
        });
    }
}
