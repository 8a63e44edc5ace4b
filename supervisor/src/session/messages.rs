//! Everything a [`Session`](super::Session) is told, in one place: by hosts (through the
//! supervisor), by its own timers, by its worker's connection, and what it reports upward.
//! Each message has exactly one handler, in the file of its policy (see `session/mod.rs`).

use super::link::CellProducts;
use super::observation::{Refusal, YieldCause};
use super::outcome::{Eviction, WorkerEnd};
use super::Wanted;
use super::{CellJob, SessionKey, SessionState, SessionStatus};
use crate::cell::CellResult;
use crate::output::SinkResult;
use crate::spawn::{StartError, StartedWorker};
use actix::Message;
use cellvisor_config::Config;
use cellvisor_ipc::CellOutcome as WorkerOutcome;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

// --- From hosts, through the supervisor -------------------------------------------------

/// Queue a cell; cells of one session run one at a time, in arrival order.
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

/// Stop the worker and end the actor; queued cells fail. `eviction` is what the next cell of
/// this session will be told (the supervisor evicted it, or a host closed it); none for a
/// throw-away session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseSession {
    pub eviction: Option<Eviction>,
    /// Save the namespace first, for this reason, if the configuration wants it.
    /// [`SaveReason::DaemonStop`] also tells a cell cut short that the daemon stopped.
    ///
    /// [`SaveReason::DaemonStop`]: crate::snapshots::policy::SaveReason::DaemonStop
    pub save: Option<crate::snapshots::policy::SaveReason>,
    pub reply: Option<oneshot::Sender<()>>,
}

/// What a `wait` or `terminate` is answered: the cell's result (status `running` with the
/// output since the last look, or its final result), or why it was refused.
pub type CellReply = oneshot::Sender<Result<CellResult, Refusal>>;

/// Watch background cell `cell_id` for up to `yield_time`: answered with its output since
/// the last look when that time passes, or with its final result when it ends first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WaitCell {
    pub cell_id: u64,
    pub yield_time: Duration,
    /// A tighter cap on the returned output than the configuration's (`max_tokens`).
    pub max_bytes: Option<u64>,
    /// Where the cell's events go while this wait watches it (`None`: only the answer).
    pub events: Option<tokio::sync::mpsc::Sender<crate::cell::CellEvent>>,
    pub reply: CellReply,
}

/// Stop background cell `cell_id` (interrupt, then grace, then kill); answered with its final
/// result once it ended.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TerminateCell {
    pub cell_id: u64,
    pub reply: CellReply,
}

/// One row of `status` (without memory figures: the supervisor's sampler adds those).
#[derive(Message)]
#[rtype(result = "SessionStatus")]
pub struct QueryStatus;

/// New limits for new cells and new workers; a changed heartbeat interval applies at once.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateConfig(pub Arc<Config>);

// --- From the session's own timers --------------------------------------------------------

/// Every `heartbeat-interval`: check that the worker said anything (a pong or any other
/// frame) since the previous tick, send a ping.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HeartbeatTick;

/// The running cell's timeout passed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CellDeadline {
    pub cell_id: u64,
}

/// The running cell yields: its `yield_time_ms` passed (a timer), or it called
/// `yield_control()` (its connection). Whoever watches it gets the output so far.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CellYield {
    pub cell_id: u64,
    pub cause: YieldCause,
}

/// A `wait` on the running cell has waited its `yield_time_ms`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WaitExpired {
    pub cell_id: u64,
    pub ticket: u64,
}

/// `interrupt-grace` passed since the running cell was interrupted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct GraceExpired {
    pub cell_id: u64,
}

/// `shutdown-grace` passed since a stopping worker was asked (or signalled) to exit: send it
/// the next, harder signal.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopEscalation {
    pub generation: u64,
    pub step: StopStep,
}

/// The steps after the `Shutdown` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    Terminate,
    Kill,
}

/// The host that asked for the cell is gone (a client that disconnected).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RequesterGone {
    pub cell_id: u64,
}

// --- From the supervisor's sampler ----------------------------------------------------------

/// The latest resident memory of the worker `pid` and its descendants.
#[derive(Message)]
#[rtype(result = "()")]
pub struct MemoryTick {
    pub pid: u32,
    pub rss: u64,
}

// --- From the worker and its connection -----------------------------------------------------

/// A worker start finished (or failed).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerStarted {
    pub generation: u64,
    pub result: Result<StartedWorker, StartError>,
}

/// The worker has something to tell the next cell (a startup module failed).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerNotice {
    pub generation: u64,
    pub message: String,
}

/// The connection's reader found the cell done.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CellFinished {
    pub generation: u64,
    pub cell_id: u64,
    pub outcome: WorkerOutcome,
    /// How many processes the worker ended with the cell (a cancelled cell's).
    pub processes_ended: u32,
    /// How many of the cell's processes the worker saw (see `CellUsage::processes_seen`).
    pub processes_seen: u32,
    pub output: SinkResult,
    pub displays: Vec<serde_json::Value>,
    pub status_events: Vec<serde_json::Value>,
    /// A state task's report (none for a host's cell).
    pub state: Option<cellvisor_ipc::state::StateReport>,
    /// The worker's tree before and after the cell, for its usage.
    pub readings: crate::usage::CellReadings,
    /// The descriptors the worker reported with its `Done` (inside, `None`: it could not
    /// count them); `None` when it reported no usage at all (a scripted worker).
    pub descriptors: Option<Option<super::descriptors::Descriptors>>,
}

/// The worker's connection ended and its process group is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerExited {
    pub generation: u64,
    /// How it ended: its exit status and its own last word (`Fatal`), if any.
    pub ended: WorkerEnd,
    pub stderr_tail: String,
    /// The cell that was running, with the output it produced before the end.
    pub partial: Option<CellProducts>,
}

// --- To the supervisor ----------------------------------------------------------------------

/// What a session tells whoever supervises it (a `Recipient`, so the session does not know
/// the supervisor's type).
#[derive(Message)]
#[rtype(result = "()")]
pub enum SessionEvent {
    /// The session's state changed.
    Changed {
        key: SessionKey,
        state: SessionState,
        /// How many cells it has received so far (the supervisor compares with what it sent,
        /// so it never evicts a session with a cell still in its mailbox).
        received: u64,
        last_active: Instant,
        /// The live worker's pid, for the sampler.
        pid: Option<u32>,
    },
    /// The worker is gone and the actor stopped.
    Stopped {
        key: SessionKey,
        eviction: Option<Eviction>,
        /// What became of the snapshot tried before the stop.
        snapshot: super::state::SnapshotFate,
    },
}

/// The session wants a Python worker (its first, or a replacement after a crash, a reset or
/// a change of Python): one started ahead of demand if one fits, else `None` and the session
/// starts its own. Sent through a `Recipient`, so the session need not know who answers (the
/// supervisor's prewarm pool).
#[derive(Message)]
#[rtype(result = "Option<StartedWorker>")]
pub struct ClaimWorker {
    pub wanted: Wanted,
}
