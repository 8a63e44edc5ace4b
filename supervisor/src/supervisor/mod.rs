//! The `Supervisor` actor: the registry of sessions, the per-language cap, idle eviction,
//! process sampling, and the fan-out of host commands to sessions.
//!
//! Each message's handler sits in the file of its policy, beside the logic it applies:
//!
//! - [`messages`]: everything the actor is told.
//! - `placement`: `Submit`, `RequestDone`, `SessionEvent`, `RoomWaitExpired`: where a cell
//!   goes under the cap, deciding with [`capacity`] (plain data) and waiting in [`waiting`]
//!   (plain data).
//! - `commands`: the host's commands fanned out to sessions (`Control`, `ForCell`,
//!   `Status`), `ReloadConfig` and `ShutdownAll`.
//! - [`prewarm`]: the pool of Python workers started ahead of demand, and a session's
//!   `ClaimWorker`.
//! - `sampling`: `SampleTick`: one sampler of the workers' process trees for `max-rss` and
//!   `status`.
//! - `sweep`: `SweepTick`: idle eviction and the pruning of old spilled outputs.
//! - `drain`: `SetDraining`, `DrainTick`, `WaitNoSessions`: no new sessions, idle ones
//!   stopped, a wait for the last to go.
//! - `probes`: `HealthCheck`, `ReadinessCheck` (deciding with [`capacity::readiness`]),
//!   `HoldsSession`, `GaugesQuery` (the metrics' gauges).
//! - `count`: `LiveSessions`: how many sessions are live, from the registry alone (the
//!   daemon's idle-exit check).
//! - `leases`: `Admit`, `RenewLeases`: a fleet's node runs a session only under its lease.
//! - [`ends`]: the sessions that ended, told to hosts that follow them.

pub mod capacity;
mod commands;
mod count;
mod drain;
#[cfg(test)]
mod drain_tests;
pub mod ends;
#[cfg(test)]
mod lease_tests;
mod leases;
pub mod messages;
mod placement;
pub mod prewarm;
mod probes;
mod sampling;
#[cfg(test)]
mod snapshot_tests;
mod sweep;
#[cfg(test)]
mod tests;
mod uids;
pub mod waiting;

use crate::environment::WorkerEnv;
use crate::session::outcome::Eviction;
use crate::session::{
    CloseSession, RunCell, Session, SessionKey, SessionSetup, SessionState, Setup,
};
use crate::spawn::{Launcher, ProcessLauncher, WorkerSpec};
use crate::usage::ProcessSampler;
use actix::prelude::*;
use cellvisor_config::Config;
use cellvisor_ipc::Language;
pub use count::{LiveSessionNames, LiveSessions};
pub use messages::*;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use waiting::WaitingRoom;

/// Where workers come from and where their files go; fixed for a supervisor's life.
#[derive(Debug, Clone)]
pub struct WorkerBase {
    pub programs: crate::spawn::WorkerPrograms,
    pub run_dir: PathBuf,
    /// Where spilled outputs go, and their total size.
    pub artifacts: Arc<crate::artifacts::ArtifactStore>,
    /// Where sessions keep what JS `store()` saves; outlives workers and the daemon.
    pub store_dir: PathBuf,
    /// Where sessions' snapshots live (none when the directory cannot be used).
    pub snapshots: Option<Arc<crate::snapshots::SnapshotStore>>,
    /// The supervisor's metrics, moved by the actors where things happen.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The leases this node holds on its sessions (`fleet.leases`); `None`: no fleet.
    pub leases: Option<Arc<crate::fleet::LeaseBook>>,
    /// The isolation level in force (`[isolation]`), decided at start.
    pub isolation: crate::isolation::IsolationStatus,
    /// The root of sessions' workspaces (`workspaces.root`): at the uid level a session's
    /// workspace is given to its uid with its other directories.
    pub workspaces: PathBuf,
    /// Where the sessions that end are told (hosts follow them through the handle).
    pub ended: ends::SessionEnds,
}

struct Entry {
    addr: Addr<Session>,
    state: SessionState,
    /// Cells sent to the session; it is idle only once it has received them all.
    sent: u64,
    /// Cells the session says it has received.
    received: u64,
    last_active: Instant,
    closing: bool,
    /// Requests under way that have used this session.
    pinned_by: Vec<u64>,
    /// Its live worker, for the sampler.
    pid: Option<u32>,
}

impl Entry {
    fn evictable(&self) -> bool {
        !self.closing
            && self.pinned_by.is_empty()
            && self.sent == self.received
            && matches!(self.state, SessionState::Idle | SessionState::Failed)
    }
}

/// How many evicted sessions we remember, to tell their next cell.
const EVICTED_MEMORY: usize = 4096;

pub struct Supervisor {
    config: Arc<Config>,
    launcher: Arc<dyn Launcher>,
    /// Idle Python workers started ahead of demand (`python.prewarm`); no session owns them.
    pool: Vec<prewarm::Pooled>,
    pool_starting: usize,
    base: WorkerBase,
    sessions: HashMap<SessionKey, Entry>,
    evicted: HashMap<SessionKey, String>,
    evicted_order: VecDeque<SessionKey>,
    /// Requests waiting for room under the cap.
    waiting: WaitingRoom<Language, Submit>,
    stopping: bool,
    /// Set while the node drains.
    draining: Option<drain::Draining>,
    /// Drain waits, told when no session is left.
    no_sessions_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    last_prune: Option<Instant>,
    last_snapshot_prune: Option<Instant>,
    sweep_timer: Option<SpawnHandle>,
    /// Shared with the blocking pool, where its `/proc` reads run (off the actors' thread,
    /// which in the daemon is also the connections' thread).
    sampler: Arc<std::sync::Mutex<ProcessSampler>>,
    sample_timer: Option<SpawnHandle>,
    sampling_fast: bool,
    last_discovery: Option<Instant>,
    /// The sessions' uids, at the `uid` isolation level.
    uids: Option<crate::isolation::leases::UidLeases>,
    /// The directories given to each leased session's uid: given back to the daemon before
    /// the uid is leased again, so the next session of that uid finds none of them its own.
    uid_dirs: HashMap<String, Vec<std::path::PathBuf>>,
    /// The order in which sessions' directories change hands (given, taken back).
    turns: Arc<crate::isolation::turns::Turns>,
    /// Memory caps by session-name prefix ([`SetMemoryCaps`](messages::SetMemoryCaps)).
    memory_caps: Vec<(String, u64)>,
}

impl Supervisor {
    pub fn new(config: Arc<Config>, base: WorkerBase) -> Supervisor {
        let zygotes = crate::zygote::Zygotes::new(base.run_dir.clone());
        Supervisor::with_launcher(config, base, Arc::new(ProcessLauncher { zygotes }))
    }

    /// A supervisor whose workers come from `launcher`.
    pub fn with_launcher(
        config: Arc<Config>,
        base: WorkerBase,
        launcher: Arc<dyn Launcher>,
    ) -> Supervisor {
        let uids = base
            .isolation
            .range()
            .map(crate::isolation::leases::UidLeases::new);
        Supervisor {
            uids,
            uid_dirs: HashMap::new(),
            turns: crate::isolation::turns::Turns::new(),
            config,
            launcher,
            pool: Vec::new(),
            pool_starting: 0,
            base,
            sessions: HashMap::new(),
            evicted: HashMap::new(),
            evicted_order: VecDeque::new(),
            waiting: WaitingRoom::default(),
            stopping: false,
            draining: None,
            no_sessions_waiters: Vec::new(),
            last_prune: None,
            last_snapshot_prune: None,
            sweep_timer: None,
            sampler: Arc::default(),
            sample_timer: None,
            sampling_fast: false,
            last_discovery: None,
            memory_caps: Vec::new(),
        }
    }

    /// The configuration session `session` runs under: the node's, with `limits.max-rss`
    /// lowered to its prefix's memory cap, if one applies.
    pub(super) fn config_for(&self, session: &str) -> Arc<Config> {
        let cap = self
            .memory_caps
            .iter()
            .find(|(prefix, _)| session.starts_with(prefix.as_str()))
            .map(|(_, cap)| *cap);
        let Some(cap) = cap else {
            return Arc::clone(&self.config);
        };
        let node = self.config.limits.max_rss.map(|b| b.as_u64());
        let mut config = (*self.config).clone();
        config.limits.max_rss = Some(bytesize::ByteSize::b(node.map_or(cap, |n| n.min(cap))));
        Arc::new(config)
    }

    /// Whether any session runs under a memory cap, so the workers must be sampled.
    pub(super) fn caps_memory(&self) -> bool {
        self.config.limits.max_rss.is_some() || !self.memory_caps.is_empty()
    }

    fn start_session(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        let language = submit.key.language;
        let mut spec = self.worker_spec(language, submit.cwd.clone(), Some(&submit.key.session));
        if let Err(why) = self.give_uid(&submit.key, &mut spec) {
            tracing::warn!(session = %submit.key, "{why}");
            let _ = submit
                .job
                .reply
                .send(crate::session::CellReport::error(format!(
                    "isolation: {why}"
                )));
            self.release_uid_if_unused(&submit.key.session, ctx);
            return;
        }
        // A sandboxed session confines its worker from its first moment: a prewarmed worker
        // started unconfined never serves it.
        let prestarted = if language == Language::Python
            && submit.job.sandbox.is_none()
            && self.uids.is_none()
        {
            let wanted =
                crate::session::Wanted::new(submit.job.python.as_deref(), submit.cwd.as_deref());
            self.claim_prewarmed(&wanted, ctx)
        } else {
            None
        };
        // A throw-away session (a per-call request's) keeps no state beyond its request.
        let snapshots = self
            .base
            .snapshots
            .clone()
            .filter(|_| !submit.key.session.is_throwaway());
        let session = Session::new(SessionSetup {
            fixed: Setup {
                key: submit.key.clone(),
                config: self.config_for(&submit.key.session),
                spec,
                artifacts: Arc::clone(&self.base.artifacts),
                launcher: Arc::clone(&self.launcher),
                events: ctx.address().recipient(),
                metrics: Arc::clone(&self.base.metrics),
            },
            pool: (language == Language::Python).then(|| ctx.address().recipient()),
            notice: self.evicted.remove(&submit.key),
            prestarted,
            restore: snapshots.as_ref().is_some_and(|store| {
                crate::snapshots::policy::restores_latest(self.config.snapshots.when)
                    && store.has_latest(&submit.key)
            }),
            snapshots,
        });
        let addr = session.start();
        addr.do_send(RunCell(submit.job));
        self.sessions.insert(
            submit.key,
            Entry {
                addr,
                state: SessionState::Starting,
                sent: 1,
                received: 0,
                last_active: Instant::now(),
                closing: false,
                pinned_by: vec![submit.request],
                pid: None,
            },
        );
    }

    /// How to start a worker; `session` is `None` for a prewarmed worker that no session
    /// owns yet (so nothing session-specific may go in its environment).
    fn worker_spec(
        &self,
        language: Language,
        cwd: Option<PathBuf>,
        session: Option<&crate::names::SessionName>,
    ) -> WorkerSpec {
        let mut env = WorkerEnv::for_worker(&self.config, language);
        env.set_artifact_dir(self.base.artifacts.dir());
        if let Some(session) = session {
            let store_dir = self.base.store_dir.join(session.dir_name());
            env.set_session(session, &store_dir);
        }
        let (exe, exe_args) = self.base.programs.command(language);
        WorkerSpec {
            exe,
            exe_args,
            fallback: self.base.programs.fallback(language),
            language,
            run_dir: self.base.run_dir.clone(),
            cwd,
            env,
            start_timeout: self.config.sessions.start_timeout,
            rlimits: crate::limits::from_config(&self.config.limits),
            zygote: self.config.python.zygote,
            preload: self.config.python.preload.clone(),
            uid: None,
            handover: None,
        }
    }

    fn close_entry(&mut self, key: &SessionKey, eviction: Option<Eviction>) {
        if let Some(entry) = self.sessions.get_mut(key) {
            if !entry.closing {
                match &eviction {
                    Some(why) => tracing::info!(session = %key, reason = %why, "closing session"),
                    None => tracing::info!(session = %key, "closing session"),
                }
                entry.closing = true;
                if let Some(why) = &eviction {
                    let reason = crate::metrics::EvictionReason::of(why);
                    self.base.metrics.evicted(key.language, reason);
                }
                let save = eviction
                    .as_ref()
                    .and_then(crate::snapshots::policy::save_for);
                entry.addr.do_send(CloseSession {
                    eviction,
                    save,
                    reply: None,
                });
            }
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.arm_sweep(ctx);
        self.arm_sampling(ctx);
        // A prewarmed worker dies with the supervisor anyway (parent-death signal); this
        // only makes the pool's own processes part of an orderly stop.
        if self.config.python.enabled && !self.config.sandbox.enabled {
            // The zygote of the configured interpreter, so the first sessions fork.
            self.launcher
                .warm(&self.worker_spec(Language::Python, None, None));
        }
        self.refill_pool(ctx);
        self.prune_artifacts();
        self.prune_snapshots();
        self.arm_lease_renewal(ctx);
    }
}
