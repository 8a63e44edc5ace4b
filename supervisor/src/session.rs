//! The `Session` actor: one per (session, language). It owns that session's worker, runs its
//! cells one at a time in arrival order, and applies the supervision policies: heartbeats,
//! cell deadlines with an interrupt grace, and the restart budget.

use crate::artifacts::ArtifactStore;
use crate::cell::ToolCallRequest;
use crate::cell::{CellEvent, CellOutcome, CellSpec, CellStatus};
use crate::link::{ActiveCell, CellFinished, Link, PongReceived, WorkerExited};
use crate::output::{OutputSink, SinkLimits};
use crate::spawn::{self, kill_group, StartError, StartedWorker, WorkerSpec};
use crate::supervisor::{SessionChanged, SessionStopped, Supervisor};
use actix::prelude::*;
use cellvisor_config::Config;
use cellvisor_ipc::{CellOutcome as WorkerOutcome, ExecuteCell, Language, ToWorker, ToolInfo};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Which session and language a worker serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SessionKey {
    pub session: String,
    pub language: Language,
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.session, self.language)
    }
}

/// What a session is doing, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Starting,
    Idle,
    Busy,
    Failed,
    Stopping,
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    pub session: String,
    pub language: Language,
    pub pid: Option<u32>,
    pub engine: Option<String>,
    pub state: SessionState,
    pub cells_run: u64,
    pub restarts: u32,
    pub idle_ms: u64,
    pub queued: usize,
    /// Resident memory of the worker and its children, when sampled.
    pub rss_bytes: Option<u64>,
    /// CPU use of the worker and its children since the previous status, in percent of a core.
    pub cpu_percent: Option<f32>,
    /// Why the session is failed, or why its last worker could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A cell to run, with where to send its outcome.
pub struct CellJob {
    pub index: usize,
    pub spec: CellSpec,
    pub cwd: Option<PathBuf>,
    pub events: Option<mpsc::Sender<CellEvent>>,
    /// Tools the host offers, and where their calls go.
    pub tools: Arc<[ToolInfo]>,
    pub tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    /// A tighter cap on the kept output than the configuration's (from an `@exec` line).
    pub max_output_bytes: Option<u64>,
    /// Closes when whoever asked for the cell is gone (a client that disconnected): its
    /// running cell is then interrupted, and its queued cells are dropped.
    pub requester: watch::Receiver<()>,
    pub reply: oneshot::Sender<CellOutcome>,
}

impl CellJob {
    /// Nobody waits for this cell's result any more.
    pub(crate) fn abandoned(&self) -> bool {
        self.reply.is_closed() || self.requester.has_changed().is_err()
    }
}

/// Queue a cell.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RunCell(pub CellJob);

/// Interrupt the running cell; answers whether one was running.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct InterruptCell;

/// Replace the worker with a fresh one, clear `failed` and refill the restart budget. Answers
/// once the old worker is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ResetSession {
    pub reply: Option<oneshot::Sender<()>>,
}

/// Stop the worker and end the actor; queued cells fail. `reason` is what the next cell of
/// this session will be told (eviction), if anything.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseSession {
    pub reason: Option<String>,
    pub reply: Option<oneshot::Sender<()>>,
}

#[derive(Message)]
#[rtype(result = "SessionStatus")]
pub struct QueryStatus;

/// New limits for new cells and new workers.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateConfig(pub Arc<Config>);

/// A heartbeat's RSS sample found the worker over `limits.max-rss`.
#[derive(Message)]
#[rtype(result = "()")]
struct OverMemory {
    generation: u64,
    rss: u64,
}

#[derive(Message)]
#[rtype(result = "()")]
struct WorkerStarted {
    generation: u64,
    result: Result<StartedWorker, StartError>,
}

/// What to do once the current worker has exited on request.
enum AfterStop {
    Restart,
    Close,
}

enum Worker {
    None,
    Starting {
        generation: u64,
    },
    Ready {
        generation: u64,
        link: Link,
        last_pong: Instant,
        /// Set when we killed it on purpose for a policy (heartbeat, grace); the reason.
        killed_for: Option<String>,
    },
    Stopping {
        generation: u64,
        pid: Option<u32>,
    },
}

struct Running {
    cell_id: u64,
    /// Kept whole so a cell whose worker died before starting it can run on the next one.
    job: CellJob,
    started: Instant,
    timeout: Duration,
    timed_out: bool,
    interrupted_by_host: bool,
    deadline: Option<SpawnHandle>,
    grace: Option<SpawnHandle>,
    /// Watches the requester for this cell only: cancelled when the cell ends, or a request
    /// of N cells would leave N watchers for the actor to poll on every wake-up (quadratic).
    requester_watch: SpawnHandle,
    notice: Option<String>,
}

impl Running {
    /// Ends the futures that exist for this cell alone: its deadline, grace and requester
    /// watch.
    fn cancel_timers(&self, ctx: &mut Context<Session>) {
        let handles = [self.deadline, self.grace, Some(self.requester_watch)];
        for handle in handles.into_iter().flatten() {
            ctx.cancel_future(handle);
        }
    }
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The actor. Created by the [`Supervisor`].
pub struct Session {
    key: SessionKey,
    config: Arc<Config>,
    spec: WorkerSpec,
    artifacts: Arc<ArtifactStore>,
    supervisor: Addr<Supervisor>,
    worker: Worker,
    generation: u64,
    after_stop: Vec<AfterStop>,
    close_replies: Vec<oneshot::Sender<()>>,
    reset_replies: Vec<oneshot::Sender<()>>,
    close_reason: Option<String>,
    queue: VecDeque<CellJob>,
    running: Option<Running>,
    next_cell_id: u64,
    restarts_left: u32,
    restarts_used: u32,
    failed: Option<String>,
    /// Why the last worker could not start, until one does.
    start_error: Option<String>,
    cells_run: u64,
    last_active: Instant,
    /// Told to the next cell: the session was started, restarted, reset or evicted.
    notice: Option<String>,
    heartbeat_seq: u64,
    heartbeat_timer: Option<SpawnHandle>,
    /// A worker started ahead of demand (`python.prewarm`), used for the first start.
    prestarted: Option<StartedWorker>,
    /// Cells handed to this session so far; the supervisor compares it with what it sent,
    /// so it never evicts a session with a cell still in its mailbox.
    jobs_received: u64,
}

impl Session {
    pub(crate) fn new(
        key: SessionKey,
        config: Arc<Config>,
        spec: WorkerSpec,
        artifacts: Arc<ArtifactStore>,
        supervisor: Addr<Supervisor>,
        notice: Option<String>,
        prestarted: Option<StartedWorker>,
    ) -> Session {
        Session {
            restarts_left: config.sessions.restart_budget,
            key,
            config,
            spec,
            artifacts,
            supervisor,
            worker: Worker::None,
            generation: 0,
            after_stop: Vec::new(),
            close_replies: Vec::new(),
            reset_replies: Vec::new(),
            close_reason: None,
            queue: VecDeque::new(),
            running: None,
            next_cell_id: 1,
            restarts_used: 0,
            failed: None,
            start_error: None,
            cells_run: 0,
            last_active: Instant::now(),
            notice,
            heartbeat_seq: 0,
            heartbeat_timer: None,
            prestarted,
            jobs_received: 0,
        }
    }

    fn state(&self) -> SessionState {
        match &self.worker {
            Worker::Stopping { .. } => SessionState::Stopping,
            _ if self.running.is_some() => SessionState::Busy,
            _ if self.failed.is_some() => SessionState::Failed,
            Worker::Starting { .. } => SessionState::Starting,
            _ if !self.queue.is_empty() => SessionState::Busy,
            _ => SessionState::Idle,
        }
    }

    fn report(&self) {
        self.supervisor.do_send(SessionChanged {
            key: self.key.clone(),
            state: self.state(),
            received: self.jobs_received,
            last_active: self.last_active,
        });
    }

    fn pid(&self) -> Option<u32> {
        match &self.worker {
            Worker::Ready { link, .. } => Some(link.pid),
            Worker::Stopping { pid, .. } => *pid,
            _ => None,
        }
    }

    /// Starts queued work if nothing is running.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        loop {
            if self.running.is_some()
                || matches!(
                    self.worker,
                    Worker::Starting { .. } | Worker::Stopping { .. }
                )
            {
                break;
            }
            if self.queue.front().is_some_and(CellJob::abandoned) {
                self.queue.pop_front();
                continue;
            }
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if front.spec.reset {
                front.spec.reset = false;
                self.begin_reset(ctx, "the session was reset before this cell".into());
                break;
            }
            if let Some(why) = &self.failed {
                let message = why.clone();
                if let Some(job) = self.queue.pop_front() {
                    let _ = job.reply.send(CellOutcome::error(message));
                }
                continue;
            }
            if matches!(self.worker, Worker::None) {
                self.start_worker(ctx);
                break;
            }
            if let Some(job) = self.queue.pop_front() {
                self.run_cell(ctx, job);
            }
        }
        self.report();
    }

    fn start_worker(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        let generation = self.generation;
        self.worker = Worker::Starting { generation };
        if let Some(worker) = self.prestarted.take() {
            ctx.notify(WorkerStarted {
                generation,
                result: Ok(worker),
            });
            return;
        }
        let spec = self.spec.clone();
        let me = ctx.address();
        let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        // Not tied to the actor's lifetime: if the actor is gone when the worker is up, the
        // worker must still be stopped rather than leak.
        actix::spawn(async move {
            let result = spawn::start(&spec, serial).await;
            if let Err(actix::dev::SendError::Closed(WorkerStarted {
                result: Ok(worker), ..
            })) = me.try_send(WorkerStarted { generation, result })
            {
                worker.discard().await;
            }
        });
    }

    fn on_started(&mut self, msg: WorkerStarted, ctx: &mut Context<Self>) {
        if !matches!(self.worker, Worker::Starting { generation } if generation == msg.generation) {
            if let Ok(worker) = msg.result {
                actix::spawn(worker.discard());
            }
            return;
        }
        match msg.result {
            Ok(worker) => {
                tracing::info!(session = %self.key, pid = worker.pid, engine = %worker.engine, "worker started");
                self.start_error = None;
                let link = Link::spawn(worker, msg.generation, ctx.address());
                self.worker = Worker::Ready {
                    generation: msg.generation,
                    link,
                    last_pong: Instant::now(),
                    killed_for: None,
                };
                if !self.after_stop.is_empty() {
                    self.stop_worker(ctx);
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(session = %self.key, "worker failed to start: {err}");
                self.worker = Worker::None;
                let message = format!(
                    "could not start the {} worker: {err}{}",
                    self.key.language,
                    process_limit_hint(&err.to_string())
                );
                self.start_error = Some(message.clone());
                if !self.after_stop.is_empty() {
                    self.finish_stop(ctx);
                    return;
                }
                if let Some(job) = self.queue.pop_front() {
                    let _ = job.reply.send(CellOutcome::error(message));
                }
            }
        }
        self.pump(ctx);
    }

    fn run_cell(&mut self, ctx: &mut Context<Self>, job: CellJob) {
        let Worker::Ready { link, .. } = &self.worker else {
            self.queue.push_front(job);
            return;
        };
        let cell_id = self.next_cell_id;
        self.next_cell_id += 1;
        let max_bytes = job
            .max_output_bytes
            .map_or(self.config.output.max_bytes.as_u64(), |cap| {
                cap.min(self.config.output.max_bytes.as_u64())
            });
        let sink = OutputSink::new(SinkLimits {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            max_lines: self.config.output.max_lines,
            artifact_name: format!(
                "{}-{}-{}-{cell_id}.txt",
                crate::paths::file_safe(&self.key.session),
                self.key.language,
                link.pid
            ),
            artifacts: Arc::clone(&self.artifacts),
        });
        let declared: Vec<String> = job.tools.iter().map(|t| t.name.clone()).collect();
        link.begin(
            ActiveCell::new(cell_id, job.index, sink, job.events.clone())
                .with_tools(declared, job.tool_host.clone()),
        );
        link.send(ToWorker::Execute(ExecuteCell {
            cell_id,
            code: job.spec.code.clone(),
            cwd: job.cwd.as_ref().map(|p| p.to_string_lossy().into_owned()),
            tools: job.tools.to_vec(),
        }));
        let mut requester = job.requester.clone();
        let requester_watch = ctx.spawn(
            async move {
                // Only an error ends this: the requester's side was dropped.
                while requester.changed().await.is_ok() {}
            }
            .into_actor(self)
            .map(move |(), act, ctx| act.on_requester_gone(cell_id, ctx)),
        );
        let timeout = self.config.cells.timeout_for(job.spec.timeout);
        let deadline = ctx.run_later(timeout, move |act, ctx| act.on_deadline(cell_id, ctx));
        self.running = Some(Running {
            cell_id,
            job,
            started: Instant::now(),
            timeout,
            timed_out: false,
            interrupted_by_host: false,
            deadline: Some(deadline),
            grace: None,
            requester_watch,
            notice: self.notice.take(),
        });
        self.last_active = Instant::now();
    }

    /// The host that asked for `cell_id` is gone: stop the cell if it still runs.
    fn on_requester_gone(&mut self, cell_id: u64, ctx: &mut Context<Self>) {
        if let Some(running) = self.running.as_mut().filter(|r| r.cell_id == cell_id) {
            tracing::info!(session = %self.key, cell_id, "requester gone: interrupting its cell");
            running.interrupted_by_host = true;
            self.interrupt_running(ctx);
        }
    }

    fn on_deadline(&mut self, cell_id: u64, ctx: &mut Context<Self>) {
        let Some(running) = self.running.as_mut().filter(|r| r.cell_id == cell_id) else {
            return;
        };
        running.deadline = None;
        running.timed_out = true;
        self.interrupt_running(ctx);
    }

    /// Sends the interrupt and arms the grace timer, once per cell.
    fn interrupt_running(&mut self, ctx: &mut Context<Self>) {
        let Some(running) = self.running.as_mut() else {
            return;
        };
        if running.grace.is_some() {
            return;
        }
        let cell_id = running.cell_id;
        if let Worker::Ready { link, .. } = &self.worker {
            link.send(ToWorker::Interrupt { cell_id });
        }
        let grace = self.config.sessions.interrupt_grace;
        running.grace =
            Some(ctx.run_later(grace, move |act, ctx| act.on_grace_expired(cell_id, ctx)));
    }

    fn on_grace_expired(&mut self, cell_id: u64, _ctx: &mut Context<Self>) {
        if self.running.as_ref().is_some_and(|r| r.cell_id == cell_id) {
            let grace = self.config.sessions.interrupt_grace;
            self.kill_worker(format!(
                "did not stop within interrupt-grace ({}) after the interrupt",
                humanize(grace)
            ));
        }
    }

    /// Kills the live worker for a policy reason; its exit arrives as `WorkerExited`.
    fn kill_worker(&mut self, reason: String) {
        if let Worker::Ready {
            link, killed_for, ..
        } = &mut self.worker
        {
            if killed_for.is_none() {
                tracing::warn!(session = %self.key, pid = link.pid, "killing worker: {reason}");
                *killed_for = Some(reason);
                link.abandon_host();
                kill_group(link.pid, Signal::SIGKILL);
            }
        }
    }

    fn on_cell_finished(&mut self, msg: CellFinished, ctx: &mut Context<Self>) {
        if !self.is_current(msg.generation) {
            return;
        }
        let Some(running) = self.running.take_if(|r| r.cell_id == msg.cell_id) else {
            return;
        };
        running.cancel_timers(ctx);
        let mut output = msg.output;
        let status_events = msg.status_events;
        let status = match msg.outcome {
            WorkerOutcome::Completed => {
                self.restarts_left = self.config.sessions.restart_budget;
                CellStatus::Complete
            }
            WorkerOutcome::Failed { .. } => CellStatus::Error,
            WorkerOutcome::Interrupted => CellStatus::Cancelled,
        };
        if status == CellStatus::Cancelled || running.timed_out {
            let line = if running.timed_out {
                timed_out_line(running.timeout)
            } else {
                "Interrupted".to_string()
            };
            append_line(&mut output.text, &line);
        }
        let status = if running.timed_out || running.interrupted_by_host {
            CellStatus::Cancelled
        } else {
            status
        };
        self.cells_run += 1;
        self.last_active = Instant::now();
        let _ = running.job.reply.send(CellOutcome {
            status,
            output: output.text,
            duration_ms: running.started.elapsed().as_secs_f64() * 1000.0,
            displays: msg.displays,
            status_events,
            truncation: output.truncation,
            notice: running.notice,
        });
        self.pump(ctx);
    }

    fn is_current(&self, generation: u64) -> bool {
        match &self.worker {
            Worker::Ready { generation: g, .. } | Worker::Stopping { generation: g, .. } => {
                *g == generation
            }
            _ => false,
        }
    }

    fn on_worker_exited(&mut self, msg: WorkerExited, ctx: &mut Context<Self>) {
        if !self.is_current(msg.generation) {
            return;
        }
        let worker = std::mem::replace(&mut self.worker, Worker::None);
        let running = self.running.take();
        if let Some(running) = &running {
            running.cancel_timers(ctx);
        }
        let killed_for = match worker {
            Worker::Stopping { .. } => {
                // Planned: reset or close.
                if let Some(running) = running {
                    let partial = msg.partial.map(|p| p.output.text).unwrap_or_default();
                    let mut text = partial;
                    append_line(&mut text, "Interrupted: the session was reset or closed");
                    let mut outcome = CellOutcome::error(text);
                    outcome.status = CellStatus::Cancelled;
                    outcome.duration_ms = running.started.elapsed().as_secs_f64() * 1000.0;
                    let _ = running.job.reply.send(outcome);
                }
                self.finish_stop(ctx);
                return;
            }
            Worker::Ready { killed_for, .. } => killed_for,
            _ => None,
        };

        // Unplanned: a crash, or a kill for a policy.
        let cause = killed_for.clone().unwrap_or_else(|| msg.reason.clone());
        // A cell the dead worker never started did not cause its death: it runs on the next.
        let (running, partial) = match (running, msg.partial) {
            (Some(running), partial)
                if !partial
                    .as_ref()
                    .is_some_and(|p| p.cell_id == running.cell_id && p.started) =>
            {
                self.queue.push_front(running.job);
                (None, None)
            }
            (running, partial) => (running, partial),
        };
        // What the worker said last explains a death before any cell (a thread it could not
        // start); a crash under a cell shows the whole stderr below instead.
        let said = msg.stderr_tail.lines().last().unwrap_or_default().trim();
        let mut cause = if killed_for.is_none()
            && !said.is_empty()
            && running.is_none()
            && !cause.contains(said)
        {
            format!("{cause}: {said}")
        } else {
            cause
        };
        cause.push_str(process_limit_hint(&cause));
        tracing::warn!(session = %self.key, "worker gone: {cause}");
        let restarted = self.restarts_left > 0;
        let budget = self.config.sessions.restart_budget;
        let consequence = if restarted {
            self.restarts_left -= 1;
            self.restarts_used += 1;
            "session restarted, state lost".to_string()
        } else {
            let reason = format!(
                "the {} worker of session {} was lost ({cause}) with its restart budget used up \
                 (restart-budget = {budget}); the session is failed: reset it to start over",
                self.key.language, self.key.session
            );
            self.failed = Some(reason);
            format!(
                "restart budget used up (restart-budget = {budget}): session failed, reset it to \
                 start over"
            )
        };
        if let Some(running) = running {
            let (mut text, displays, truncation) = match partial {
                Some(partial) if partial.cell_id == running.cell_id => (
                    partial.output.text,
                    partial.displays,
                    partial.output.truncation,
                ),
                _ => (String::new(), Vec::new(), Default::default()),
            };
            let status =
                if killed_for.is_some() && (running.timed_out || running.interrupted_by_host) {
                    if running.timed_out {
                        append_line(&mut text, &timed_out_line(running.timeout));
                    }
                    append_line(
                        &mut text,
                        &format!("worker {cause}; killed it; {consequence}"),
                    );
                    CellStatus::Cancelled
                } else {
                    let mut line = match &killed_for {
                        Some(policy) => format!("worker killed: it {policy}; {consequence}"),
                        None => format!("worker crashed: {cause}; {consequence}"),
                    };
                    if !msg.stderr_tail.is_empty() && killed_for.is_none() {
                        line.push_str(&format!("\nworker stderr:\n{}", msg.stderr_tail));
                    }
                    append_line(&mut text, &line);
                    CellStatus::Error
                };
            let _ = running.job.reply.send(CellOutcome {
                status,
                output: text,
                duration_ms: running.started.elapsed().as_secs_f64() * 1000.0,
                displays,
                status_events: Vec::new(),
                truncation,
                notice: running.notice,
            });
            self.cells_run += 1;
        }
        if restarted {
            self.notice = Some(format!(
                "the previous {} worker is gone ({cause}); a new worker was started and earlier \
                 state is lost",
                self.key.language
            ));
            self.start_worker(ctx);
        }
        self.pump(ctx);
    }

    /// Asks the worker to exit: Shutdown frame, then SIGTERM, then SIGKILL to its group.
    fn stop_worker(&mut self, ctx: &mut Context<Self>) {
        match std::mem::replace(&mut self.worker, Worker::None) {
            Worker::Ready {
                generation, link, ..
            } => {
                link.send(ToWorker::Shutdown);
                link.abandon_host();
                let pid = link.pid;
                self.worker = Worker::Stopping {
                    generation,
                    pid: Some(pid),
                };
                // The link goes away here; the reader task keeps running until the worker exits.
                drop(link);
                let grace = self.config.sessions.shutdown_grace;
                ctx.run_later(grace, move |act, ctx| {
                    if matches!(act.worker, Worker::Stopping { generation: g, .. } if g == generation)
                    {
                        kill_group(pid, Signal::SIGTERM);
                        ctx.run_later(grace, move |act, _| {
                            if matches!(act.worker, Worker::Stopping { generation: g, .. } if g == generation)
                            {
                                kill_group(pid, Signal::SIGKILL);
                            }
                        });
                    }
                });
            }
            starting @ Worker::Starting { .. } => {
                // Stopped once it is up (see on_started).
                self.worker = starting;
            }
            stopping @ Worker::Stopping { .. } => self.worker = stopping,
            Worker::None => self.finish_stop(ctx),
        }
        self.report();
    }

    /// The worker is gone on request: carry out what was asked.
    fn finish_stop(&mut self, ctx: &mut Context<Self>) {
        self.worker = Worker::None;
        let actions = std::mem::take(&mut self.after_stop);
        if actions.iter().any(|a| matches!(a, AfterStop::Close)) {
            let why = format!("session {} was closed", self.key);
            for job in self.queue.drain(..) {
                let _ = job.reply.send(CellOutcome::error(why.clone()));
            }
            for reply in self
                .close_replies
                .drain(..)
                .chain(self.reset_replies.drain(..))
            {
                let _ = reply.send(());
            }
            self.supervisor.do_send(SessionStopped {
                key: self.key.clone(),
                reason: self.close_reason.take(),
            });
            ctx.stop();
            return;
        }
        for reply in self.reset_replies.drain(..) {
            let _ = reply.send(());
        }
        if actions.iter().any(|a| matches!(a, AfterStop::Restart)) {
            self.start_worker(ctx);
        }
        self.pump(ctx);
    }

    fn begin_reset(&mut self, ctx: &mut Context<Self>, notice: String) {
        self.failed = None;
        self.restarts_left = self.config.sessions.restart_budget;
        self.notice = Some(notice);
        self.after_stop.push(AfterStop::Restart);
        self.stop_worker(ctx);
    }

    /// (Re)starts the heartbeat at the configured interval. The worker gets a fresh
    /// allowance: silence measured against the old interval says nothing under the new one.
    fn arm_heartbeat(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.heartbeat_timer.take() {
            ctx.cancel_future(timer);
        }
        if let Worker::Ready { last_pong, .. } = &mut self.worker {
            *last_pong = Instant::now();
        }
        let interval = self.config.sessions.heartbeat_interval;
        self.heartbeat_timer = Some(ctx.run_interval(interval, |act, ctx| act.heartbeat(ctx)));
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let timeout = self.config.sessions.heartbeat_timeout;
        let Worker::Ready {
            generation,
            link,
            last_pong,
            ..
        } = &mut self.worker
        else {
            return;
        };
        if link.host_stalled() {
            // The reader waits for a slow host and reads no pongs meanwhile; the worker is
            // held back on purpose, not dead.
            *last_pong = Instant::now();
        }
        if let Some(cap) = self.config.limits.max_rss {
            // Sampling reads /proc; keep it off the actor's thread.
            let (pid, generation, me) = (link.pid, *generation, ctx.address());
            actix::spawn(async move {
                if let Ok(Some(rss)) =
                    tokio::task::spawn_blocking(move || crate::usage::rss_of_tree(pid)).await
                {
                    if rss > cap.as_u64() {
                        me.do_send(OverMemory { generation, rss });
                    }
                }
            });
        }
        if last_pong.elapsed() > timeout {
            self.kill_worker(format!(
                "missed heartbeats (no answer for {}, heartbeat-timeout)",
                humanize(timeout)
            ));
            return;
        }
        self.heartbeat_seq += 1;
        link.send(ToWorker::Ping {
            seq: self.heartbeat_seq,
        });
    }
}

impl Actor for Session {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.arm_heartbeat(ctx);
    }
}

impl Handler<RunCell> for Session {
    type Result = ();
    fn handle(&mut self, msg: RunCell, ctx: &mut Context<Self>) {
        self.jobs_received += 1;
        if self.close_reason.is_some()
            || self
                .after_stop
                .iter()
                .any(|a| matches!(a, AfterStop::Close))
        {
            let _ = msg.0.reply.send(CellOutcome::error(format!(
                "session {} is closing",
                self.key
            )));
            return;
        }
        self.queue.push_back(msg.0);
        self.pump(ctx);
    }
}

impl Handler<InterruptCell> for Session {
    type Result = bool;
    fn handle(&mut self, _: InterruptCell, ctx: &mut Context<Self>) -> bool {
        match self.running.as_mut() {
            Some(running) => {
                running.interrupted_by_host = true;
                self.interrupt_running(ctx);
                true
            }
            None => false,
        }
    }
}

impl Handler<ResetSession> for Session {
    type Result = ();
    fn handle(&mut self, msg: ResetSession, ctx: &mut Context<Self>) {
        if let Some(reply) = msg.reply {
            self.reset_replies.push(reply);
        }
        self.begin_reset(ctx, "the session was reset; earlier state is gone".into());
    }
}

impl Handler<CloseSession> for Session {
    type Result = ();
    fn handle(&mut self, msg: CloseSession, ctx: &mut Context<Self>) {
        if let Some(reply) = msg.reply {
            self.close_replies.push(reply);
        }
        if self.close_reason.is_none() {
            self.close_reason = msg.reason;
        }
        self.after_stop.push(AfterStop::Close);
        self.stop_worker(ctx);
    }
}

impl Handler<QueryStatus> for Session {
    type Result = MessageResult<QueryStatus>;
    fn handle(&mut self, _: QueryStatus, _: &mut Context<Self>) -> Self::Result {
        MessageResult(SessionStatus {
            session: self.key.session.clone(),
            language: self.key.language,
            pid: self.pid(),
            engine: match &self.worker {
                Worker::Ready { link, .. } => Some(link.engine.clone()),
                _ => None,
            },
            state: self.state(),
            cells_run: self.cells_run,
            restarts: self.restarts_used,
            idle_ms: if self.running.is_some() {
                0
            } else {
                self.last_active.elapsed().as_millis() as u64
            },
            queued: self.queue.len(),
            rss_bytes: None,
            cpu_percent: None,
            reason: self.failed.clone().or_else(|| self.start_error.clone()),
        })
    }
}

impl Handler<UpdateConfig> for Session {
    type Result = ();
    fn handle(&mut self, msg: UpdateConfig, ctx: &mut Context<Self>) {
        let old_interval = self.config.sessions.heartbeat_interval;
        self.config = msg.0;
        if self.config.sessions.heartbeat_interval != old_interval {
            self.arm_heartbeat(ctx);
        }
    }
}

impl Handler<WorkerStarted> for Session {
    type Result = ();
    fn handle(&mut self, msg: WorkerStarted, ctx: &mut Context<Self>) {
        self.on_started(msg, ctx);
    }
}

impl Handler<CellFinished> for Session {
    type Result = ();
    fn handle(&mut self, msg: CellFinished, ctx: &mut Context<Self>) {
        self.on_cell_finished(msg, ctx);
    }
}

impl Handler<PongReceived> for Session {
    type Result = ();
    fn handle(&mut self, msg: PongReceived, _: &mut Context<Self>) {
        if let Worker::Ready {
            generation,
            last_pong,
            ..
        } = &mut self.worker
        {
            if *generation == msg.generation {
                *last_pong = Instant::now();
            }
        }
    }
}

impl Handler<OverMemory> for Session {
    type Result = ();
    fn handle(&mut self, msg: OverMemory, _: &mut Context<Self>) {
        if !matches!(self.worker, Worker::Ready { generation, .. } if generation == msg.generation)
        {
            return;
        }
        let cap = self
            .config
            .limits
            .max_rss
            .map(|c| c.to_string())
            .unwrap_or_default();
        self.kill_worker(format!(
            "used {} of memory (RSS), over the cap of {cap} (limits.max-rss)",
            bytesize::ByteSize::b(msg.rss)
        ));
    }
}

impl Handler<WorkerExited> for Session {
    type Result = ();
    fn handle(&mut self, msg: WorkerExited, ctx: &mut Context<Self>) {
        self.on_worker_exited(msg, ctx);
    }
}

fn timed_out_line(timeout: Duration) -> String {
    format!("Command timed out after {} seconds", humanize_secs(timeout))
}

fn humanize_secs(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{}", secs as u64)
    } else {
        format!("{secs:.1}")
    }
}

fn humanize(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn append_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

/// A hint for a process or thread that could not be created (EAGAIN): the per-user limit.
fn process_limit_hint(error: &str) -> &'static str {
    if error.contains("Resource temporarily unavailable") || error.contains("os error 11") {
        " (the per-user process limit, RLIMIT_NPROC, counts every process and thread of this \
         user, so one session's children can exhaust it for all; see limits.processes)"
    } else {
        ""
    }
}
