//! Everything the [`Supervisor`](super::Supervisor) is told, in one place: by hosts, by its
//! own timers, by its prewarm pool, and by its sessions ([`SessionEvent`]). Each message has
//! exactly one handler, in the file of its policy (see `supervisor/mod.rs`).

use crate::session::{CellJob, SessionKey, SessionStatus, TerminateCell, WaitCell};
use crate::spawn::{StartError, StartedWorker};
use actix::Message;
use cellvisor_config::Config;
use cellvisor_ipc::Language;
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::session::SessionEvent;

// --- From hosts -----------------------------------------------------------------------------

/// Run a cell in `key`'s session, creating it (within the cap) if needed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Submit {
    pub key: SessionKey,
    pub cwd: Option<PathBuf>,
    pub job: CellJob,
    /// The request the cell belongs to: its sessions are not evicted until it ends
    /// ([`RequestDone`]), so a request's later cells find the state its earlier ones left.
    pub request: u64,
}

/// A request has ended (or was abandoned): its sessions may be evicted again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RequestDone {
    pub request: u64,
}

/// A command for every language of a session, or one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlAction {
    Interrupt,
    Reset,
    /// Close on a host's request: the session's next cell is told its state is gone.
    Close,
    /// Close a throw-away session (a per-call request's) without remembering it.
    Discard,
}

/// Answers how many sessions it applied to.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Control {
    pub session: crate::names::SessionName,
    pub language: Option<Language>,
    pub action: ControlAction,
}

/// A `wait` or `terminate` for a cell of `key`'s session; refused as unknown if that session
/// is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ForCell {
    pub key: SessionKey,
    pub command: CellCommand,
}

/// What [`ForCell`] carries to the session.
pub enum CellCommand {
    Wait(WaitCell),
    Terminate(TerminateCell),
}

/// Every live session, with its worker tree's memory and CPU.
#[derive(Message)]
#[rtype(result = "Vec<SessionStatus>")]
pub struct Status;

/// Memory caps of the sessions whose name starts with a prefix (a network tenant's
/// `max-session-memory`, prefix `<tenant>/`): each such session runs under the smaller of
/// its cap and `limits.max-rss`. Replaces the caps set before.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetMemoryCaps(pub Vec<(String, u64)>);

/// The launcher's Python zygotes, for `status`.
#[derive(Message)]
#[rtype(result = "Vec<crate::zygote::ZygoteStatus>")]
pub struct ZygoteRows;

/// How many prewarmed workers wait to be claimed.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct PrewarmedCount;

/// Close every session and wait for their workers to be gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShutdownAll;

/// New configuration for new cells and new workers; changed intervals apply at once.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReloadConfig(pub Arc<Config>);

/// Drain (`true`: start no session the node does not hold, stop idle sessions) or undrain.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetDraining(pub bool);

/// Answers once no session is live, or when `timeout` has passed (a drain's wait).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WaitNoSessions {
    pub timeout: std::time::Duration,
}

/// Whether a request for `session` may run here: its lease is taken when the node is part
/// of a fleet, and with `resume` the session must be live here or saved.
#[derive(Message)]
#[rtype(result = "Result<(), crate::request_error::RequestError>")]
pub struct Admit {
    pub session: crate::names::SessionName,
    pub resume: bool,
}

/// Renew the leases of the sessions live here, give up the others, and stop the sessions
/// whose leases were lost.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RenewLeases;

/// Whether a live session has this name (in any language).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct HoldsSession(pub String);

/// Answers once the supervisor and each of its sessions have answered within the bound;
/// the error names who did not.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct HealthCheck {
    pub bound: std::time::Duration,
}

/// Whether the node takes new sessions; the error says why not.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct ReadinessCheck;

/// The registry's state for the metrics' gauges.
#[derive(Message)]
#[rtype(result = "crate::metrics::RegistryGauges")]
pub struct GaugesQuery;

// --- From the supervisor's own timers -------------------------------------------------------

/// Every `sweep-interval`: evict sessions idle past `idle-timeout`, prune old artifacts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SweepTick;

/// While draining: stop the sessions idle for `daemon.drain-idle`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DrainTick;

/// A request waiting for room has waited as long as its cell's timeout.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RoomWaitExpired {
    pub id: u64,
}

/// Time to sample the workers' process trees (for `limits.max-rss`): every
/// `heartbeat-interval`, and every [`super::sampling::BUSY_SAMPLE_INTERVAL`] while a cell runs.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SampleTick;

// --- From the prewarm pool ------------------------------------------------------------------

/// A prewarmed worker finished starting.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PoolWorkerReady {
    pub result: Result<StartedWorker, StartError>,
    /// The interpreter its discovery picks (the supervisor's directory, no request's venv).
    pub program: Option<PathBuf>,
}

/// Retry filling the pool after a failed start.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PoolRetry;
