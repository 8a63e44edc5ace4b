//! The `Session` actor: one per (session, language). It owns that session's worker, runs its
//! cells one at a time in arrival order, and applies the supervision policies.
//!
//! The actor's state is a few owned parts, each in its own file with its methods and unit
//! tests (plain data, no actor): `setup` (what it is made with), `slot` (its worker, budget
//! and heartbeat), `closing` (stops and the close), `turns` (the queue and the running
//! cell), `notice` (what the next cell is told), `worker_env` (the Python, sandbox and
//! environments its worker runs with) and `saves` (snapshots, restores and commits).
//!
//! Each message's handler sits in the file of its policy, beside the logic it applies; the
//! message types are all in [`messages`]:
//!
//! - [`messages`]: everything the actor is told, and what it reports ([`SessionEvent`],
//!   [`ClaimWorker`]).
//! - `worker`: the worker's lifecycle: start, heartbeat, memory cap, reset, close, planned
//!   stop, policy kill, reload (`WorkerStarted`, `HeartbeatTick`, `MemoryTick`,
//!   `WorkerNotice`, `ResetSession`, `CloseSession`, `StopEscalation`, `UpdateConfig`).
//! - [`loss`]: what a worker's end means, as a plain [`loss::Plan`]; `exited` carries it
//!   out (`WorkerExited`).
//! - `cells`: the queue, a cell's run and its deadline (`RunCell`, `InterruptCell`,
//!   `RequesterGone`, `CellDeadline`, `GraceExpired`); `finished`: its end
//!   (`CellFinished`).
//! - `background`: who watches a running cell: its yield, `wait`, `terminate`, and where its
//!   final result goes (`CellYield`, `WaitCell`, `WaitExpired`, `TerminateCell`).
//! - [`observation`]: those decisions as plain data ([`observation::Observer`]).
//! - `window`: a running cell's output since its host last looked.
//! - [`policy`]: the plain-data decisions ([`policy::RestartBudget`], [`policy::Deadline`]).
//! - [`outcome`]: why things happen, typed, and the text hosts read about it.
//! - `link`: the tasks on the worker's connection.
//! - `state`: state tasks: saves before planned stops and after cells, the restore before
//!   the next cell, a host's checkpoints and `names`.
//! - `fenced`: in etcd mode, those saves as immutable blobs behind fenced pointers, and
//!   named checkpoints committed and checked the same way.
//! - `saved`: a cell's answer held for its `every-cell` save (and, in etcd mode, its
//!   commit), which it then tells.
//! - `QueryStatus` is answered here, from the actor's state.
//! - [`CellReport`] (from the client crate): what a session reports for one cell.

mod background;
mod cells;
mod closing;
mod descriptors;
mod exited;
mod fenced;
mod files;
mod finished;
pub mod kernel_oom;
pub(crate) mod link;
pub mod loss;
pub mod messages;
mod notice;
pub mod observation;
pub mod outcome;
pub mod policy;
mod saved;
mod saves;
mod setup;
mod slot;
pub mod state;
#[cfg(test)]
mod tests;
mod tmp;
mod turns;
mod window;
mod worker;
mod worker_env;

pub use crate::cell::CellReport;
use crate::cell::{CellEvent, CellSpec, ToolCallRequest};
use crate::spawn::StartedWorker;
use actix::prelude::*;
pub use cellvisor_client::status::{SessionState, SessionStatus};
use cellvisor_ipc::{Language, ToolInfo};
use closing::Closing;
pub use messages::*;
use notice::Notice;
use policy::RestartBudget;
use saves::Saves;
use serde::Serialize;
pub(crate) use setup::Setup;
use slot::{Slot, Worker};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use turns::{Running, Turns, Waiter};
pub use worker::Wanted;
use worker_env::EnvTracking;

/// Which session and language a worker serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SessionKey {
    pub session: crate::names::SessionName,
    pub language: Language,
}

#[cfg(test)]
impl SessionKey {
    /// The key unit tests use: session `s`, in Python.
    pub(crate) fn for_tests() -> SessionKey {
        SessionKey {
            session: crate::names::SessionName::parse("s").expect("a valid name"),
            language: Language::Python,
        }
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.session, self.language)
    }
}

/// A cell to run, with where to send its outcome.
pub struct CellJob {
    /// Unique in the supervisor; a session answers `wait` only for its own cells.
    pub cell_id: u64,
    pub index: usize,
    pub spec: CellSpec,
    pub cwd: Option<PathBuf>,
    pub events: Option<mpsc::Sender<CellEvent>>,
    /// Tools the host offers, and where their calls go.
    pub tools: Arc<[ToolInfo]>,
    pub tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    /// A tighter cap on the kept output than the configuration's (from an `@exec` line).
    pub max_output_bytes: Option<u64>,
    /// When the request stops watching the cell and returns it as `running`
    /// (`yield_time_ms`).
    pub yield_time: Option<Duration>,
    /// Whether the cell may go to the background at all (not in a throw-away session, whose
    /// workers end with the request).
    pub may_yield: bool,
    /// The Python the request runs on (Python cells only).
    pub python: Option<Arc<crate::python_choice::PythonChoice>>,
    /// The sandbox the request runs under; `None`: none.
    pub sandbox: Option<Arc<crate::sandbox::Plan>>,
    /// A request the `landlock` level leaves unconfined (a local one, at `auto`): it runs in
    /// the session's worker as it is, confined by the level or not, rather than replacing a
    /// confined one (which a network client's request made so) and losing its state.
    pub keeps_level_confinement: bool,
    /// The caller's environment as the operator's `[env]` rules pass it; `None`: the caller
    /// sent none, and the worker's environment stays as it is.
    pub caller_env: Option<Arc<std::collections::BTreeMap<String, String>>>,
    /// Closes when whoever asked for the cell is gone (a client that disconnected): its
    /// running cell is then interrupted, and its queued cells are dropped.
    pub requester: watch::Receiver<()>,
    pub reply: oneshot::Sender<CellReport>,
    /// Set for a state task (save, load or list the namespace) instead of code.
    pub state: Option<state::StateJob>,
    /// The request's `request_id` and its earlier cells' results (etcd mode): the commit of
    /// the state after this cell says the request got this far.
    pub once: Option<Arc<crate::once::progress::Step>>,
}

impl CellJob {
    /// A state task for `language` as a job: no code, no tools, no output cap, never in the
    /// background.
    pub(crate) fn for_state(
        cell_id: u64,
        language: Language,
        requester: watch::Receiver<()>,
        reply: oneshot::Sender<CellReport>,
        state: state::StateJob,
    ) -> CellJob {
        CellJob {
            cell_id,
            index: 0,
            spec: CellSpec::new(language, ""),
            cwd: None,
            events: None,
            tools: Arc::new([]),
            tool_host: None,
            max_output_bytes: None,
            yield_time: None,
            may_yield: false,
            python: None,
            sandbox: None,
            keeps_level_confinement: false,
            caller_env: None,
            requester,
            reply,
            state: Some(state),
            once: None,
        }
    }

    /// Nobody waits for this cell's result any more (the session's own state tasks are
    /// always waited for).
    pub(crate) fn abandoned(&self) -> bool {
        match self.state.as_ref().map(|s| &s.purpose) {
            Some(state::StatePurpose::Host { report, .. }) => report.is_closed(),
            Some(_) => false,
            None => self.reply.is_closed() || self.requester.has_changed().is_err(),
        }
    }
}

/// Everything a session is made from. Built by the supervisor.
pub(crate) struct SessionSetup {
    /// What it keeps for its life.
    pub fixed: Setup,
    /// Told to the first cell (an earlier incarnation was evicted, say).
    pub notice: Option<String>,
    /// A worker started ahead of demand (`python.prewarm`), used for the first start.
    pub prestarted: Option<StartedWorker>,
    /// Where a Python session claims a prewarmed worker for a later start (a replacement).
    pub pool: Option<Recipient<ClaimWorker>>,
    /// The snapshot directory (none when it could not be opened).
    pub snapshots: Option<Arc<crate::snapshots::SnapshotStore>>,
    /// The session has a latest snapshot for its first worker to restore.
    pub restore: bool,
}

/// The actor. Created by the supervisor.
pub struct Session {
    /// What it is made with: its key, configuration, workers' spec, launcher, reporting.
    setup: Setup,
    /// Its worker in its phase, the restart budget and the heartbeat.
    slot: Slot,
    /// The stops asked for and the close under way.
    closing: Closing,
    /// The queue, the running cell and the results nobody collected yet.
    turns: Turns,
    /// Told to the next cell: the session was started, restarted, reset or evicted.
    notice: Notice,
    /// The Python, sandbox and environments its worker runs with.
    env: EnvTracking,
    /// Its snapshots: restores due, own state tasks, commits in etcd.
    saves: Saves,
}

impl Session {
    pub(crate) fn new(setup: SessionSetup) -> Session {
        Session {
            slot: Slot::new(
                RestartBudget::new(setup.fixed.config.sessions.restart_budget),
                setup.prestarted,
                setup.pool,
            ),
            closing: Closing::default(),
            turns: Turns::default(),
            env: EnvTracking::default(),
            notice: Notice::new(setup.notice),
            saves: Saves::new(setup.snapshots, setup.restore),
            setup: setup.fixed,
        }
    }

    fn state(&self) -> SessionState {
        match &self.slot.worker {
            Worker::Stopping { .. } => SessionState::Stopping,
            _ if self.turns.running.is_some() => SessionState::Busy,
            _ if self.slot.failed.is_some() => SessionState::Failed,
            Worker::Starting { .. } => SessionState::Starting,
            _ if !self.turns.queue.is_empty() => SessionState::Busy,
            _ => SessionState::Idle,
        }
    }

    fn report(&self) {
        self.setup.events.do_send(SessionEvent::Changed {
            key: self.setup.key.clone(),
            state: self.state(),
            received: self.turns.received(),
            last_active: self.turns.last_active,
            pid: self.pid(),
        });
    }

    fn pid(&self) -> Option<u32> {
        self.slot.pid()
    }

    fn status(&self) -> SessionStatus {
        SessionStatus {
            uid: self.setup.spec.uid,
            session: self.setup.key.session.to_string(),
            cwd: None,
            language: self.setup.key.language,
            pid: self.pid(),
            engine: self.slot.link().map(|link| link.engine.clone()),
            state: self.state(),
            cells_run: self.turns.cells_run,
            restarts: self.slot.budget.restarts(),
            idle_ms: self.turns.idle_ms(),
            queued: self.turns.queue.len(),
            cell_id: self.turns.running.as_ref().map(|r| r.cell_id),
            background: self
                .turns
                .running
                .as_ref()
                .is_some_and(|r| !r.observer.is_requester()),
            observed: self
                .turns
                .running
                .as_ref()
                .is_some_and(|r| r.observer.is_waiting()),
            rss_bytes: None,
            cpu_percent: None,
            reason: self.slot.reason(),
            sandbox: self.env.sandbox.as_ref().map(|plan| plan.status()),
            node: String::new(),
        }
    }

    fn is_closing(&self) -> bool {
        self.closing.is_closing()
    }
}

impl Actor for Session {
    type Context = Context<Self>;

    /// Cells still waiting for their commit are answered: their state was not committed.
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.answer_uncommitted(&fenced::uncommitted(
            "the session stopped here before etcd decided",
        ));
    }
}

impl Handler<QueryStatus> for Session {
    type Result = MessageResult<QueryStatus>;
    fn handle(&mut self, _: QueryStatus, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.status())
    }
}
