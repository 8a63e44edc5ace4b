//! The `Supervisor` actor: the registry of sessions, the per-language cap, idle eviction,
//! process sampling, and the fan-out of host commands to sessions.
//!
//! - [`messages`]: everything the actor is told.
//! - [`capacity`]: where a new cell goes under `max-sessions` (plain data).
//! - `prewarm`: the pool of Python workers started ahead of demand.
//! - `sampling`: one sampler of the workers' process trees for `max-rss` and `status`.
//! - `sweep`: idle eviction and the pruning of old spilled outputs.

pub mod capacity;
pub mod messages;
pub mod prewarm;
mod sampling;
mod sweep;
#[cfg(test)]
mod tests;

use crate::environment::WorkerEnv;
use crate::session::outcome::{self, Eviction};
use crate::session::CellReport;
use crate::session::{
    CloseSession, InterruptCell, QueryStatus, ResetSession, RunCell, Session, SessionKey,
    SessionSetup, SessionState, SessionStatus, TerminateCell, UpdateConfig, WaitCell,
};
use crate::spawn::{Launcher, ProcessLauncher, StartedWorker, WorkerSpec};
use crate::usage::ProcessSampler;
use actix::prelude::*;
use capacity::{Placement, Slot};
use cellvisor_config::Config;
use cellvisor_ipc::Language;
pub use messages::*;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where workers come from and where their files go; fixed for a supervisor's life.
#[derive(Debug, Clone)]
pub struct WorkerBase {
    pub programs: crate::spawn::WorkerPrograms,
    pub run_dir: PathBuf,
    /// Where spilled outputs go, and their total size.
    pub artifacts: Arc<crate::artifacts::ArtifactStore>,
    /// Where sessions keep what JS `store()` saves; outlives workers and the daemon.
    pub store_dir: PathBuf,
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

struct Waiting {
    id: u64,
    submit: Submit,
    timeout: Duration,
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
    waiting: VecDeque<Waiting>,
    next_waiting_id: u64,
    stopping: bool,
    last_prune: Option<Instant>,
    sweep_timer: Option<SpawnHandle>,
    /// Shared with the blocking pool, where its `/proc` reads run (off the actors' thread,
    /// which in the daemon is also the connections' thread).
    sampler: Arc<std::sync::Mutex<ProcessSampler>>,
    sample_timer: Option<SpawnHandle>,
    sampling_fast: bool,
    last_discovery: Option<Instant>,
}

impl Supervisor {
    pub fn new(config: Arc<Config>, base: WorkerBase) -> Supervisor {
        Supervisor::with_launcher(config, base, Arc::new(ProcessLauncher))
    }

    /// A supervisor whose workers come from `launcher`.
    pub fn with_launcher(
        config: Arc<Config>,
        base: WorkerBase,
        launcher: Arc<dyn Launcher>,
    ) -> Supervisor {
        Supervisor {
            config,
            launcher,
            pool: Vec::new(),
            pool_starting: 0,
            base,
            sessions: HashMap::new(),
            evicted: HashMap::new(),
            evicted_order: VecDeque::new(),
            waiting: VecDeque::new(),
            next_waiting_id: 1,
            stopping: false,
            last_prune: None,
            sweep_timer: None,
            sampler: Arc::default(),
            sample_timer: None,
            sampling_fast: false,
            last_discovery: None,
        }
    }

    /// The live sessions of `language`, as the capacity decision sees them.
    fn slots(&self, language: Language) -> Vec<Slot<SessionKey>> {
        self.sessions
            .iter()
            .filter(|(k, _)| k.language == language)
            .map(|(k, e)| Slot {
                key: k.clone(),
                evictable: e.evictable(),
                closing: e.closing,
                last_active: e.last_active,
            })
            .collect()
    }

    /// Places a submission, or gives it back when it has to wait.
    fn try_place(&mut self, submit: Submit, ctx: &mut Context<Self>) -> Option<Submit> {
        let cap = self.config.sessions.max_sessions;
        let placement = match self.sessions.get(&submit.key) {
            Some(entry) => capacity::for_live(entry.closing),
            None => capacity::place(&submit.key, &self.slots(submit.key.language), cap),
        };
        match placement {
            Placement::RunHere => {
                if let Some(entry) = self.sessions.get_mut(&submit.key) {
                    entry.sent += 1;
                    entry.state = SessionState::Busy;
                    if !entry.pinned_by.contains(&submit.request) {
                        entry.pinned_by.push(submit.request);
                    }
                    entry.addr.do_send(RunCell(submit.job));
                }
                None
            }
            Placement::Start => {
                self.start_session(submit, ctx);
                None
            }
            Placement::Evict(victim) => {
                let eviction = Eviction::ForRoom {
                    key: victim.clone(),
                    cap,
                };
                self.close_entry(&victim, Some(eviction));
                Some(submit)
            }
            Placement::Wait => Some(submit),
        }
    }

    fn start_session(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        let language = submit.key.language;
        let spec = self.worker_spec(language, submit.cwd.clone(), Some(&submit.key.session));
        // A sandboxed session confines its worker from its first moment: a prewarmed worker
        // started unconfined never serves it.
        let prestarted = if language == Language::Python && submit.job.sandbox.is_none() {
            let wanted = prewarm::Wanted::new(submit.job.python.as_deref(), submit.cwd.as_deref());
            self.claim_prewarmed(&wanted, ctx)
        } else {
            None
        };
        let session = Session::new(SessionSetup {
            key: submit.key.clone(),
            config: Arc::clone(&self.config),
            spec,
            artifacts: Arc::clone(&self.base.artifacts),
            launcher: Arc::clone(&self.launcher),
            events: ctx.address().recipient(),
            pool: (language == Language::Python).then(|| ctx.address().recipient()),
            notice: self.evicted.remove(&submit.key),
            prestarted,
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
        session: Option<&str>,
    ) -> WorkerSpec {
        let mut env = WorkerEnv::for_worker(&self.config, language);
        env.set_artifact_dir(self.base.artifacts.dir());
        if let Some(session) = session {
            let store_dir = self.base.store_dir.join(crate::paths::file_safe(session));
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
                entry.addr.do_send(CloseSession {
                    eviction,
                    reply: None,
                });
            }
        }
    }

    /// Retries waiting submissions in arrival order.
    fn drain_waiting(&mut self, ctx: &mut Context<Self>) {
        let mut still_waiting = VecDeque::new();
        while let Some(waiting) = self.waiting.pop_front() {
            if waiting.submit.job.abandoned() {
                continue;
            }
            if let Some(submit) = self.try_place(waiting.submit, ctx) {
                still_waiting.push_back(Waiting { submit, ..waiting });
            }
        }
        self.waiting = still_waiting;
    }

    fn wait_for_room(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        let id = self.next_waiting_id;
        self.next_waiting_id += 1;
        let timeout = self.config.cells.timeout_for(submit.job.spec.timeout);
        self.waiting.push_back(Waiting {
            id,
            submit,
            timeout,
        });
        ctx.notify_later(RoomWaitExpired { id }, timeout);
    }

    fn give_up_waiting(&mut self, id: u64) {
        let Some(pos) = self.waiting.iter().position(|w| w.id == id) else {
            return;
        };
        let Some(waiting) = self.waiting.remove(pos) else {
            return;
        };
        let cap = self.config.sessions.max_sessions;
        let message = outcome::no_room(&waiting.submit.key, cap, waiting.timeout);
        let _ = waiting.submit.job.reply.send(CellReport::error(message));
    }

    fn matching(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Vec<(SessionKey, Addr<Session>)> {
        self.sessions
            .iter()
            .filter(|(k, _)| k.session == session && language.is_none_or(|l| l == k.language))
            .map(|(k, e)| (k.clone(), e.addr.clone()))
            .collect()
    }

    fn on_session_event(&mut self, event: SessionEvent, ctx: &mut Context<Self>) {
        match event {
            SessionEvent::Changed {
                key,
                state,
                received,
                last_active,
                pid,
            } => {
                if let Some(entry) = self.sessions.get_mut(&key) {
                    entry.state = state;
                    entry.received = received;
                    entry.last_active = last_active;
                    entry.pid = pid;
                }
                if state == SessionState::Busy
                    && !self.sampling_fast
                    && self.config.limits.max_rss.is_some()
                {
                    self.arm_sampling(ctx);
                }
            }
            SessionEvent::Stopped { key, eviction } => {
                self.sessions.remove(&key);
                if let Some(eviction) = eviction {
                    if self.evicted.len() >= EVICTED_MEMORY {
                        if let Some(oldest) = self.evicted_order.pop_front() {
                            self.evicted.remove(&oldest);
                        }
                    }
                    self.evicted_order.push_back(key.clone());
                    self.evicted.insert(key, eviction.to_string());
                }
            }
        }
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
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
        self.refill_pool(ctx);
        self.prune_artifacts();
    }
}

impl Handler<Submit> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        if self.stopping {
            let _ = msg
                .job
                .reply
                .send(CellReport::error("cellvisor is shutting down".into()));
            return;
        }
        // Earlier waiters go first.
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
        // A new session queues behind earlier ones waiting for room; a live one just runs.
        let must_wait = !self.sessions.contains_key(&msg.key)
            && self
                .waiting
                .iter()
                .any(|w| w.submit.key.language == msg.key.language);
        if must_wait {
            self.wait_for_room(msg, ctx);
            return;
        }
        if let Some(submit) = self.try_place(msg, ctx) {
            self.wait_for_room(submit, ctx);
        }
    }
}

impl Handler<RequestDone> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: RequestDone, ctx: &mut Context<Self>) {
        for entry in self.sessions.values_mut() {
            entry.pinned_by.retain(|r| *r != msg.request);
        }
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
    }
}

impl Handler<SessionEvent> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: SessionEvent, ctx: &mut Context<Self>) {
        self.on_session_event(msg, ctx);
    }
}

impl Handler<SweepTick> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: SweepTick, _: &mut Context<Self>) {
        self.sweep();
    }
}

impl Handler<RoomWaitExpired> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: RoomWaitExpired, _: &mut Context<Self>) {
        self.give_up_waiting(msg.id);
    }
}

impl Handler<SampleTick> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: SampleTick, ctx: &mut Context<Self>) {
        self.sample_timer = None;
        self.sample_memory(ctx);
        self.arm_sampling(ctx);
    }
}

impl Handler<PrewarmedCount> for Supervisor {
    type Result = usize;
    fn handle(&mut self, _: PrewarmedCount, _: &mut Context<Self>) -> usize {
        self.pool.len()
    }
}

impl Handler<PoolWorkerReady> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PoolWorkerReady, ctx: &mut Context<Self>) {
        self.on_pool_worker_ready(msg, ctx);
    }
}

impl Handler<ClaimPrewarmed> for Supervisor {
    type Result = Option<StartedWorker>;
    fn handle(&mut self, msg: ClaimPrewarmed, ctx: &mut Context<Self>) -> Self::Result {
        self.claim_prewarmed(&msg.0, ctx)
    }
}

impl Handler<PoolRetry> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: PoolRetry, ctx: &mut Context<Self>) {
        self.on_pool_retry(ctx);
    }
}

impl Handler<Control> for Supervisor {
    type Result = ResponseFuture<usize>;
    fn handle(&mut self, msg: Control, _: &mut Context<Self>) -> Self::Result {
        let targets = self.matching(&msg.session, msg.language);
        if matches!(msg.action, ControlAction::Close | ControlAction::Discard) {
            for (key, _) in &targets {
                if let Some(entry) = self.sessions.get_mut(key) {
                    entry.closing = true;
                }
            }
        }
        Box::pin(async move {
            let mut applied = 0;
            for (key, addr) in targets {
                let done = match msg.action {
                    ControlAction::Interrupt => addr.send(InterruptCell).await.unwrap_or(false),
                    ControlAction::Reset => {
                        let (tx, rx) = oneshot::channel();
                        addr.send(ResetSession { reply: Some(tx) }).await.is_ok()
                            && rx.await.is_ok()
                    }
                    ControlAction::Close | ControlAction::Discard => {
                        let eviction = (msg.action == ControlAction::Close)
                            .then(|| Eviction::Closed { key: key.clone() });
                        let (tx, rx) = oneshot::channel();
                        addr.send(CloseSession {
                            eviction,
                            reply: Some(tx),
                        })
                        .await
                        .is_ok()
                            && rx.await.is_ok()
                    }
                };
                applied += usize::from(done);
            }
            applied
        })
    }
}

impl Handler<ForCell> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: ForCell, _: &mut Context<Self>) {
        let addr = self.sessions.get(&msg.key).map(|entry| entry.addr.clone());
        match (addr, msg.command) {
            (Some(addr), CellCommand::Wait(wait)) => addr.do_send(wait),
            (Some(addr), CellCommand::Terminate(terminate)) => addr.do_send(terminate),
            (None, CellCommand::Wait(WaitCell { reply, .. }))
            | (None, CellCommand::Terminate(TerminateCell { reply, .. })) => {
                let _ = reply.send(Err(crate::session::observation::Refusal::Unknown));
            }
        }
    }
}

impl Handler<Status> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<SessionStatus>>;
    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<Addr<Session>> = self.sessions.values().map(|e| e.addr.clone()).collect();
        let sampler = Arc::clone(&self.sampler);
        Box::pin(
            async move {
                let mut rows = Vec::new();
                for addr in addrs {
                    if let Ok(row) = addr.send(QueryStatus).await {
                        rows.push(row);
                    }
                }
                rows.sort_by(|a, b| (&a.session, a.language).cmp(&(&b.session, b.language)));
                sampling::add_usage(&sampler, &mut rows).await;
                rows
            }
            .into_actor(self),
        )
    }
}

impl Handler<ShutdownAll> for Supervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: ShutdownAll, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let pool: Vec<StartedWorker> = self.pool.drain(..).map(|p| p.into_worker()).collect();
        for waiting in self.waiting.drain(..) {
            let _ = waiting
                .submit
                .job
                .reply
                .send(CellReport::error("cellvisor is shutting down".into()));
        }
        let addrs: Vec<Addr<Session>> = self
            .sessions
            .values_mut()
            .map(|e| {
                e.closing = true;
                e.addr.clone()
            })
            .collect();
        Box::pin(async move {
            for worker in pool {
                worker.discard().await;
            }
            let mut pending = Vec::new();
            for addr in addrs {
                let (tx, rx) = oneshot::channel();
                addr.do_send(CloseSession {
                    eviction: None,
                    reply: Some(tx),
                });
                pending.push(rx);
            }
            for rx in pending {
                let _ = rx.await;
            }
        })
    }
}

impl Handler<ReloadConfig> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: ReloadConfig, ctx: &mut Context<Self>) {
        let old = std::mem::replace(&mut self.config, msg.0);
        self.base
            .artifacts
            .set_max_total(self.config.output.artifact_max_total.as_u64());
        for entry in self.sessions.values() {
            entry.addr.do_send(UpdateConfig(Arc::clone(&self.config)));
        }
        if self.config.sessions.sweep_interval != old.sessions.sweep_interval {
            self.arm_sweep(ctx);
        }
        if self.config.sessions.heartbeat_interval != old.sessions.heartbeat_interval
            || self.config.limits.max_rss != old.limits.max_rss
        {
            self.arm_sampling(ctx);
        }
        // New limits apply to new workers: the prewarmed ones were made under the old ones.
        self.drain_pool();
        self.refill_pool(ctx);
        self.drain_waiting(ctx);
    }
}
