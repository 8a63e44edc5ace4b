//! One kernel: a session and language of a tenant, its iopub broadcast (every connected
//! client sees it), its shell queue (one request at a time, as a kernel has), and (in
//! `relay`) the cells other hosts (an agent's JSON-RPC or MCP) run in its session.

use super::super::super::admission::Ask;
use super::super::super::{lock, tenancy, Daemon};
use super::super::tenants::Tenant;
use crate::jupyter::history::History;
use crate::jupyter::mapping;
use crate::jupyter::message::{Outgoing, Request};
use crate::jupyter::traceback::{self, Outputs};
use crate::jupyter::{shell, snippets};
use cellvisor::cell::{CellEvent, CellResult, CellSpec, EvalRequest};
use cellvisor::{Language, SessionRef};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, watch};

/// iopub messages a slow client may fall behind by before it misses the oldest.
const IOPUB_BACKLOG: usize = 1024;

/// Shell requests queued on one kernel at most; past it a client waits to send more.
const SHELL_BACKLOG: usize = 256;

/// A message on its way to one client, serialised once.
pub(super) type Frame = Arc<str>;

/// A shell request and where its reply goes.
pub(super) struct Job {
    pub(super) request: Request,
    pub(super) reply: mpsc::Sender<Frame>,
}

/// What a kernel shows of itself in the REST model and `execution_state`.
#[derive(Debug)]
pub(super) struct State {
    pub(super) execution_count: u64,
    /// The cells run, for `history_request`.
    pub(super) history: History,
    last_activity: String,
    busy: bool,
    /// A cell of this kernel or of another host is running: an interrupt has something to
    /// stop.
    running: bool,
    /// The worker was asked for its values' bundles (`snippets::send_values_code`); a new
    /// worker (a restart, a notice on a cell) has to be asked again.
    values_asked: bool,
}

/// A kernel of the gateway.
pub(super) struct Kernel {
    pub(super) id: String,
    pub(super) tenant: String,
    /// The tenant whose quotas each of the kernel's requests is admitted against (a kernel
    /// outlives its session: a later request may start the session again).
    owner: Arc<Tenant>,
    /// The session's name as its tenant sends it (the model shows it, so a person picks the
    /// session an agent named).
    session: String,
    /// Its internal name (the tenant's prefix and the name).
    pub(super) internal: String,
    pub(super) language: Language,
    /// The tag of this kernel's own requests, so its relay skips them.
    pub(super) origin: u64,
    /// The `session` of the headers this kernel writes.
    header_session: String,
    iopub: broadcast::Sender<Frame>,
    shell: mpsc::Sender<Job>,
    pub(super) state: Mutex<State>,
    pub(super) connections: AtomicUsize,
    /// Held while an interrupt checks and stops the running cell, and while a cell is
    /// marked as running or not: an interrupt never reaches the cell queued after.
    turn: tokio::sync::Mutex<()>,
    /// Set when the kernel is shut down: its tasks and connections end.
    ended: watch::Sender<bool>,
}

impl Kernel {
    /// A kernel over `internal`, with its shell task and its relay running.
    pub(super) fn start(
        daemon: &Arc<Daemon>,
        id: String,
        owner: Arc<Tenant>,
        session: String,
        internal: String,
        language: Language,
        origin: u64,
    ) -> Arc<Kernel> {
        let (shell, jobs) = mpsc::channel(SHELL_BACKLOG);
        let kernel = Arc::new(Kernel {
            id,
            tenant: owner.name.clone(),
            owner,
            session,
            internal,
            language,
            origin,
            header_session: uuid::Uuid::new_v4().to_string(),
            iopub: broadcast::channel(IOPUB_BACKLOG).0,
            shell,
            state: Mutex::new(State {
                execution_count: 0,
                history: History::default(),
                last_activity: crate::jupyter::message::now(),
                busy: false,
                running: false,
                values_asked: false,
            }),
            connections: AtomicUsize::new(0),
            turn: tokio::sync::Mutex::new(()),
            ended: watch::Sender::new(false),
        });
        let watched = daemon.cv.watch(&kernel.internal);
        let ends = daemon.cv.follow_ends();
        tokio::spawn(shell_loop(Arc::clone(daemon), Arc::clone(&kernel), jobs));
        tokio::spawn(super::relay::relay(Arc::clone(&kernel), watched));
        tokio::spawn(end_with_session(
            Arc::clone(daemon),
            Arc::clone(&kernel),
            ends,
        ));
        kernel
    }

    /// Whether the kernel was shut down, or ended with its session.
    pub(super) fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Whether the kernel's session still has a worker in its language.
    async fn session_is_live(&self, daemon: &Daemon) -> bool {
        match daemon.cv.status().await {
            Ok(rows) => rows
                .iter()
                .any(|row| row.session == self.internal && row.language == self.language),
            // The supervisor is stopping: so is every session.
            Err(_) => false,
        }
    }

    /// The REST model of the kernel.
    pub(super) fn model(&self) -> Value {
        let state = lock(&self.state);
        json!({
            "id": self.id,
            "name": mapping::kernel_name(self.language),
            "last_activity": state.last_activity,
            "execution_state": if state.busy { "busy" } else { "idle" },
            "connections": self.connections.load(Ordering::Relaxed),
            "cellvisor": {"session": self.session, "language": self.language.short_name()},
        })
    }

    /// A new client's view of iopub.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.iopub.subscribe()
    }

    /// The shell queue.
    pub(super) async fn queue(&self, job: Job) -> bool {
        self.touch();
        self.shell.send(job).await.is_ok()
    }

    /// Whether the kernel was shut down, and a way to wait for it.
    pub(super) fn ended(&self) -> watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Ends the kernel's tasks and connections (after telling them it is dead).
    pub(super) fn end(&self) {
        self.publish(Outgoing::new(
            "iopub",
            "status",
            &json!({}),
            json!({"execution_state": "dead"}),
        ));
        let _ = self.ended.send(true);
    }

    fn touch(&self) {
        lock(&self.state).last_activity = crate::jupyter::message::now();
    }

    /// A message to every connected client.
    pub(super) fn publish(&self, message: Outgoing) {
        let _ = self.iopub.send(self.frame(&message));
    }

    /// Messages (type and content) caused by the request whose header is `parent`, to every
    /// connected client.
    pub(super) fn publish_all(&self, parent: &Value, messages: Vec<traceback::Message>) {
        for (msg_type, content) in messages {
            self.publish(Outgoing::new("iopub", msg_type, parent, content));
        }
    }

    /// A message written for this kernel.
    pub(super) fn frame(&self, message: &Outgoing) -> Frame {
        message.to_json(&self.header_session).to_string().into()
    }

    pub(super) fn status(&self, parent: &Value, state: &str) {
        lock(&self.state).busy = state == "busy";
        self.publish(Outgoing::new(
            "iopub",
            "status",
            parent,
            json!({"execution_state": state}),
        ));
    }

    /// Stops the running cell, if one runs; never the one queued after it. Answers whether
    /// there was one.
    pub(super) async fn interrupt(&self, daemon: &Daemon) -> bool {
        let _turn = self.turn.lock().await;
        if !lock(&self.state).running {
            return false;
        }
        let session = SessionRef::new(&self.internal, None);
        matches!(daemon.cv.interrupt(session, Some(self.language)).await, Ok(n) if n > 0)
    }

    pub(super) async fn set_running(&self, running: bool) {
        let _turn = self.turn.lock().await;
        lock(&self.state).running = running;
    }

    /// After a restart: a fresh count, as a new kernel process has.
    pub(super) fn restarted(&self) {
        {
            let mut state = lock(&self.state);
            state.execution_count = 0;
            state.values_asked = false;
        }
        self.publish(Outgoing::new(
            "iopub",
            "status",
            &json!({}),
            json!({"execution_state": "restarting"}),
        ));
        self.status(&json!({}), "idle");
    }

    /// Starts the session's worker if it is not running, asking it for its values' bundles
    /// (once per worker), so the next cell's value is an `execute_result`.
    pub(super) async fn prepare(&self, daemon: &Daemon) -> Result<(), String> {
        if lock(&self.state).values_asked {
            return Ok(());
        }
        let code = snippets::send_values_code(self.language);
        let result = self.run(daemon, code, None).await?;
        if result.report.status.failed() {
            return Err(result.report.output);
        }
        lock(&self.state).values_asked = true;
        Ok(())
    }

    /// Runs `code` as one cell of this kernel's session, tagged as its own; the events go to
    /// `events`.
    pub(super) async fn run(
        &self,
        daemon: &Daemon,
        code: &str,
        events: Option<mpsc::Sender<CellEvent>>,
    ) -> Result<CellResult, String> {
        let request = EvalRequest {
            session: self.internal.clone(),
            cwd: None,
            cells: vec![CellSpec::new(self.language, code)],
            tools: Vec::new(),
            virtual_env: None,
            env: None,
            fresh: false,
            sandbox: None,
            resume: false,
            timeout: None,
            reset: false,
            events: Default::default(),
            request_id: None,
        };
        // Admitted as any request that may start a session, its place held until answered.
        let ask = Ask::Session(self.internal.clone());
        let _reservation = tenancy::within_quotas(daemon, &self.owner, ask, || 0)
            .await
            .map_err(|refused| refused.message)?;
        let result = daemon
            .cv
            .eval_tagged(
                cellvisor::Origin::Network,
                request,
                events,
                None,
                self.origin,
            )
            .await;
        let mut result = result.map_err(|e| e.to_string())?;
        result
            .cells
            .pop()
            .ok_or_else(|| "the request ran no cell".to_string())
    }
}

/// Ends the kernel (iopub `status: dead` to its clients, its WebSockets closed) when its
/// session ends by any host's doing (a JSON-RPC `close`, idle eviction, the daemon
/// stopping), as the supervisor tells it; a session started again meanwhile keeps it.
async fn end_with_session(
    daemon: Arc<Daemon>,
    kernel: Arc<Kernel>,
    mut ends: broadcast::Receiver<cellvisor::SessionEnded>,
) {
    let mut ended = kernel.ended();
    loop {
        let ours = tokio::select! {
            _ = ended.changed() => return,
            end = ends.recv() => match end {
                Ok(end) => end.session == kernel.internal && end.language == kernel.language,
                // Ends were missed: whether ours was among them, the session's state says.
                Err(broadcast::error::RecvError::Lagged(_)) => true,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        if ours && !kernel.session_is_live(&daemon).await {
            tracing::debug!(kernel = %kernel.id, "the kernel's session ended");
            kernel.end();
            return;
        }
    }
}

/// The kernel's shell: one request at a time, in the order they came.
async fn shell_loop(daemon: Arc<Daemon>, kernel: Arc<Kernel>, mut jobs: mpsc::Receiver<Job>) {
    let mut ended = kernel.ended();
    loop {
        let job = tokio::select! {
            job = jobs.recv() => match job { Some(job) => job, None => return },
            _ = ended.changed() => return,
        };
        let failed = handle(&daemon, &kernel, &job).await;
        if failed {
            // As ipykernel: an error aborts the execute requests already queued.
            while let Ok(queued) = jobs.try_recv() {
                if queued.request.msg_type == "execute_request" {
                    abort(&kernel, &queued).await;
                } else {
                    handle(&daemon, &kernel, &queued).await;
                }
            }
        }
    }
}

async fn reply(kernel: &Kernel, job: &Job, msg_type: &str, content: Value) {
    let channel = if job.request.channel == "control" {
        "control"
    } else {
        "shell"
    };
    let message = Outgoing::new(channel, msg_type, &job.request.header, content);
    let _ = job.reply.send(kernel.frame(&message)).await;
}

async fn abort(kernel: &Kernel, job: &Job) {
    kernel.status(&job.request.header, "busy");
    reply(kernel, job, "execute_reply", mapping::aborted_reply()).await;
    kernel.status(&job.request.header, "idle");
}

/// Answers one shell request between `busy` and `idle`; whether it was an execution that
/// failed with `stop_on_error`.
async fn handle(daemon: &Daemon, kernel: &Kernel, job: &Job) -> bool {
    let parent = &job.request.header;
    let content = &job.request.content;
    kernel.status(parent, "busy");
    let mut failed = false;
    match job.request.msg_type.as_str() {
        "execute_request" => {
            let stop_on_error = content["stop_on_error"].as_bool().unwrap_or(true);
            failed = execute(daemon, kernel, job).await && stop_on_error;
        }
        "complete_request" => {
            let answer = complete(daemon, kernel, content).await;
            reply(kernel, job, "complete_reply", answer).await
        }
        "inspect_request" => {
            let answer = inspect(daemon, kernel, content).await;
            reply(kernel, job, "inspect_reply", answer).await
        }
        other => {
            let answer = {
                let state = lock(&kernel.state);
                shell::answer(kernel.language, &state.history, other, content)
            };
            match answer {
                Some((reply_type, answer)) => reply(kernel, job, reply_type, answer).await,
                None => {
                    let reply_type = mapping::reply_type(other);
                    reply(kernel, job, &reply_type, mapping::unsupported_reply(other)).await
                }
            }
        }
    }
    kernel.status(parent, "idle");
    failed
}

/// An `execute_request`: its cell, its output on iopub (a failed cell's report as its
/// `error`'s traceback), its reply. Whether it failed.
async fn execute(daemon: &Daemon, kernel: &Kernel, job: &Job) -> bool {
    let parent = &job.request.header;
    let code = job.request.content["code"].as_str().unwrap_or_default();
    let silent = job.request.content["silent"].as_bool().unwrap_or(false);
    let store_history = !silent
        && job.request.content["store_history"]
            .as_bool()
            .unwrap_or(true);
    let count = {
        let mut state = lock(&kernel.state);
        if store_history {
            state.execution_count += 1;
            let count = state.execution_count;
            state.history.remember(count, code);
        }
        state.execution_count
    };
    if !silent {
        kernel.publish(Outgoing::new(
            "iopub",
            "execute_input",
            parent,
            mapping::execute_input(code, count),
        ));
    }
    if let Err(why) = kernel.prepare(daemon).await {
        tracing::debug!(kernel = %kernel.id, "values not asked for: {why}");
    }
    kernel.set_running(true).await;
    let mut outputs = Outputs::new(kernel.language);
    let (events, mut stream) = mpsc::channel::<CellEvent>(64);
    let run = kernel.run(daemon, code, Some(events));
    tokio::pin!(run);
    let outcome = loop {
        tokio::select! {
            biased;
            Some(event) = stream.recv() => forward(kernel, parent, &mut outputs, &event, silent),
            outcome = &mut run => break outcome,
        }
    };
    while let Ok(event) = stream.try_recv() {
        forward(kernel, parent, &mut outputs, &event, silent);
    }
    kernel.set_running(false).await;
    if outcome.as_ref().is_ok_and(|r| r.report.notice.is_some()) {
        // A new worker ran the cell: the next cell asks it for its values again.
        lock(&kernel.state).values_asked = false;
    }
    let (reply_content, failure) = shell::outcome(&outcome, count);
    if !silent {
        kernel.publish_all(parent, outputs.finish(failure.as_ref(), count));
    }
    reply(kernel, job, "execute_reply", reply_content).await;
    failure.is_some()
}

/// A cell's event on iopub, through the cell's `outputs` (which hold an error report back).
pub(super) fn forward(
    kernel: &Kernel,
    parent: &Value,
    outputs: &mut Outputs,
    event: &CellEvent,
    silent: bool,
) {
    if !silent {
        kernel.publish_all(parent, outputs.event(event));
    }
}

/// Runs a snippet and reads its answer (none when the cell failed or printed none).
async fn snippet(daemon: &Daemon, kernel: &Kernel, code: String) -> Option<Value> {
    let result = kernel.run(daemon, &code, None).await.ok()?;
    snippets::answer(&result.report.output)
}

async fn complete(daemon: &Daemon, kernel: &Kernel, content: &Value) -> Value {
    let ask = snippets::Completion::of(kernel.language, content);
    let found = snippet(daemon, kernel, ask.cell.clone()).await;
    ask.reply(found)
}

async fn inspect(daemon: &Daemon, kernel: &Kernel, content: &Value) -> Value {
    let found = match snippets::inspection_of(kernel.language, content) {
        Some(cell) => snippet(daemon, kernel, cell).await,
        None => None,
    };
    snippets::inspect_reply(found)
}
