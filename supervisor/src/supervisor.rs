//! The `Supervisor` actor: the registry of sessions, the per-language cap, idle eviction and
//! the fan-out of host commands to sessions.

use crate::cell::CellOutcome;
use crate::session::{
    CellJob, CloseSession, InterruptCell, QueryStatus, ResetSession, RunCell, Session, SessionKey,
    SessionState, SessionStatus, UpdateConfig,
};
use crate::spawn::{self, kill_group, StartedWorker, WorkerSpec};
use actix::prelude::*;
use cellvisor_config::Config;
use cellvisor_ipc::Language;
use nix::sys::signal::Signal;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where workers come from and where their files go; fixed for a supervisor's life.
#[derive(Debug, Clone)]
pub struct WorkerBase {
    pub exe: PathBuf,
    pub run_dir: PathBuf,
    /// Where spilled outputs go, and their total size.
    pub artifacts: Arc<crate::artifacts::ArtifactStore>,
    /// Where sessions keep what JS `store()` saves; outlives workers and the daemon.
    pub store_dir: PathBuf,
}

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
    Close,
}

/// Answers how many sessions it applied to.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Control {
    pub session: String,
    pub language: Option<Language>,
    pub action: ControlAction,
}

#[derive(Message)]
#[rtype(result = "Vec<SessionStatus>")]
pub struct Status;

/// How many prewarmed workers wait to be claimed.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct PrewarmedCount;

/// Close every session and wait for their workers to be gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShutdownAll;

/// New configuration for new cells and new workers.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReloadConfig(pub Arc<Config>);

/// A session's state changed (sent by the session).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SessionChanged {
    pub key: SessionKey,
    pub state: SessionState,
    /// How many cells the session has received from us so far.
    pub received: u64,
    pub last_active: Instant,
}

/// A session's worker is gone and its actor stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SessionStopped {
    pub key: SessionKey,
    pub reason: Option<String>,
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
}

/// How many evicted sessions we remember, to tell their next cell.
const EVICTED_MEMORY: usize = 4096;

/// A prewarmed worker finished starting.
#[derive(Message)]
#[rtype(result = "()")]
struct PoolWorkerReady(Result<StartedWorker, spawn::StartError>);

static POOL_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Whether `dir` holds a virtual environment the Python worker would pick.
fn has_venv(dir: &std::path::Path) -> bool {
    dir.join(".venv").is_dir() || dir.join("venv").is_dir()
}

pub struct Supervisor {
    config: Arc<Config>,
    /// Idle Python workers started ahead of demand (`python.prewarm`); no session owns them.
    pool: Vec<StartedWorker>,
    pool_starting: usize,
    base: WorkerBase,
    sessions: HashMap<SessionKey, Entry>,
    evicted: HashMap<SessionKey, String>,
    evicted_order: VecDeque<SessionKey>,
    waiting: VecDeque<Waiting>,
    next_waiting_id: u64,
    stopping: bool,
    last_prune: Option<Instant>,
}

impl Supervisor {
    pub fn new(config: Arc<Config>, base: WorkerBase) -> Supervisor {
        Supervisor {
            config,
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
        }
    }

    fn live_count(&self, language: Language) -> usize {
        self.sessions
            .keys()
            .filter(|k| k.language == language)
            .count()
    }

    /// Places a submission, or gives it back when it has to wait.
    fn try_place(&mut self, submit: Submit, ctx: &mut Context<Self>) -> Option<Submit> {
        if let Some(entry) = self.sessions.get_mut(&submit.key) {
            if entry.closing {
                return Some(submit);
            }
            entry.sent += 1;
            entry.state = SessionState::Busy;
            if !entry.pinned_by.contains(&submit.request) {
                entry.pinned_by.push(submit.request);
            }
            entry.addr.do_send(RunCell(submit.job));
            return None;
        }
        let language = submit.key.language;
        let cap = self.config.sessions.max_sessions;
        if self.live_count(language) >= cap {
            let closing_any = self
                .sessions
                .iter()
                .any(|(k, e)| k.language == language && e.closing);
            if !closing_any {
                self.evict_lru_idle(language);
            }
            return Some(submit);
        }
        let notice = self.evicted.remove(&submit.key);
        let spec = self.worker_spec(language, submit.cwd.clone(), Some(&submit.key.session));
        let prestarted = if language == Language::Python {
            self.claim_prewarmed(submit.cwd.as_deref(), ctx)
        } else {
            None
        };
        let session = Session::new(
            submit.key.clone(),
            Arc::clone(&self.config),
            spec,
            Arc::clone(&self.base.artifacts),
            ctx.address(),
            notice,
            prestarted,
        );
        let addr = session.start();
        let request = submit.request;
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
                pinned_by: vec![request],
            },
        );
        None
    }

    /// How to start a worker; `session` is `None` for a prewarmed worker that no session
    /// owns yet (so nothing session-specific may go in its environment).
    fn worker_spec(
        &self,
        language: Language,
        cwd: Option<PathBuf>,
        session: Option<&str>,
    ) -> WorkerSpec {
        let mut env = crate::environment::for_worker(&self.config, language);
        let mut set = |key: &str, value: std::ffi::OsString| {
            env.retain(|(k, _)| k.to_str() != Some(key));
            env.push((key.into(), value));
        };
        set(
            "CELLVISOR_ARTIFACT_DIR",
            self.base.artifacts.dir().as_os_str().to_owned(),
        );
        if let Some(session) = session {
            set("CELLVISOR_SESSION", session.into());
            set(
                "CELLVISOR_STORE_DIR",
                self.base
                    .store_dir
                    .join(crate::paths::file_safe(session))
                    .into(),
            );
        }
        WorkerSpec {
            exe: self.base.exe.clone(),
            language,
            run_dir: self.base.run_dir.clone(),
            cwd,
            env,
            start_timeout: self.config.sessions.start_timeout,
            rlimits: crate::limits::from_config(&self.config.limits),
        }
    }

    /// Starts Python workers until `python.prewarm` of them wait unclaimed.
    fn refill_pool(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        while self.pool.len() + self.pool_starting < self.config.python.prewarm {
            self.pool_starting += 1;
            let spec = self.worker_spec(Language::Python, None, None);
            let me = ctx.address();
            actix::spawn(async move {
                let serial = 1_000_000 + POOL_SERIAL.fetch_add(1, Ordering::Relaxed);
                let result = spawn::start(&spec, serial).await;
                if let Err(actix::dev::SendError::Closed(PoolWorkerReady(Ok(worker)))) =
                    me.try_send(PoolWorkerReady(result))
                {
                    worker.discard().await;
                }
            });
        }
    }

    /// A prewarmed worker for a new Python session in `cwd`, if one fits: the interpreter was
    /// chosen in the supervisor's directory, so a session whose directory has a virtual
    /// environment of its own starts its own worker.
    fn claim_prewarmed(
        &mut self,
        cwd: Option<&std::path::Path>,
        ctx: &mut Context<Self>,
    ) -> Option<StartedWorker> {
        if cwd.is_some_and(has_venv) {
            return None;
        }
        while let Some(mut worker) = self.pool.pop() {
            if matches!(worker.child.try_wait(), Ok(None)) {
                self.refill_pool(ctx);
                return Some(worker);
            }
            kill_group(worker.pid, Signal::SIGKILL);
        }
        self.refill_pool(ctx);
        None
    }

    /// Closes the least recently used idle session of `language`; false if all are busy.
    fn evict_lru_idle(&mut self, language: Language) -> bool {
        let cap = self.config.sessions.max_sessions;
        let victim = self
            .sessions
            .iter()
            .filter(|(k, e)| k.language == language && e.evictable())
            .min_by_key(|(_, e)| e.last_active)
            .map(|(k, _)| k.clone());
        let Some(victim) = victim else {
            return false;
        };
        let reason = format!(
            "session {victim} was evicted to make room for another {language} session \
             (max-sessions = {cap}); its earlier state is gone"
        );
        self.close_entry(&victim, Some(reason));
        true
    }

    fn close_entry(&mut self, key: &SessionKey, reason: Option<String>) {
        if let Some(entry) = self.sessions.get_mut(key) {
            if !entry.closing {
                tracing::info!(session = %key, reason = reason.as_deref().unwrap_or("closed"), "closing session");
                entry.closing = true;
                entry.addr.do_send(CloseSession {
                    reason,
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
                still_waiting.push_back(Waiting {
                    id: waiting.id,
                    submit,
                });
            }
        }
        self.waiting = still_waiting;
    }

    fn wait_for_room(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        let id = self.next_waiting_id;
        self.next_waiting_id += 1;
        let timeout = self.config.cells.timeout_for(submit.job.spec.timeout);
        self.waiting.push_back(Waiting { id, submit });
        ctx.run_later(timeout, move |act, _| act.give_up_waiting(id, timeout));
    }

    fn give_up_waiting(&mut self, id: u64, waited: Duration) {
        let Some(pos) = self.waiting.iter().position(|w| w.id == id) else {
            return;
        };
        let Some(waiting) = self.waiting.remove(pos) else {
            return;
        };
        let language = waiting.submit.key.language;
        let cap = self.config.sessions.max_sessions;
        let message = format!(
            "no room for session {}: all {cap} {language} sessions are busy (max-sessions = {cap} \
             in [sessions]) and none became free within {}. Raise max-sessions in the config \
             file, close a session, or retry later.",
            waiting.submit.key,
            humantime::format_duration(waited)
        );
        let _ = waiting.submit.job.reply.send(CellOutcome::error(message));
    }

    /// Deletes spilled outputs past `output.artifact-max-age`, at most once a minute.
    fn prune_artifacts(&mut self) {
        let max_age = self.config.output.artifact_max_age;
        if max_age.is_zero()
            || self
                .last_prune
                .is_some_and(|at| at.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        self.last_prune = Some(Instant::now());
        let dir = self.base.artifacts.dir().to_path_buf();
        actix::spawn(async move {
            let pruned = tokio::task::spawn_blocking(move || {
                crate::artifacts::prune_artifacts(&dir, max_age)
            })
            .await
            .unwrap_or(0);
            if pruned > 0 {
                tracing::info!(pruned, "deleted old spilled outputs");
            }
        });
    }

    fn sweep(&mut self) {
        self.prune_artifacts();
        let idle_timeout = self.config.sessions.idle_timeout;
        if idle_timeout.is_zero() {
            return;
        }
        let expired: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, e)| e.evictable() && e.last_active.elapsed() > idle_timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            let reason = format!(
                "session {key} was evicted after being idle longer than idle-timeout ({}); its \
                 earlier state is gone",
                humantime::format_duration(idle_timeout)
            );
            self.close_entry(&key, Some(reason));
        }
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
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let interval = self.config.sessions.sweep_interval;
        ctx.run_interval(interval, |act, _| act.sweep());
        // A prewarmed worker dies with the supervisor anyway (parent-death signal); this
        // only makes the pool's own processes part of an orderly stop.
        self.refill_pool(ctx);
        self.prune_artifacts();
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
        self.pool_starting = self.pool_starting.saturating_sub(1);
        match msg.0 {
            Ok(worker) if self.pool.len() < self.config.python.prewarm && !self.stopping => {
                self.pool.push(worker)
            }
            Ok(worker) => {
                actix::spawn(worker.discard());
            }
            Err(err) => {
                tracing::warn!("could not prewarm a Python worker: {err}; retrying in 5s");
                self.pool_starting += 1;
                ctx.run_later(Duration::from_secs(5), |act, ctx| {
                    act.pool_starting = act.pool_starting.saturating_sub(1);
                    if !act.stopping {
                        act.refill_pool(ctx);
                    }
                });
            }
        }
    }
}

impl Handler<Submit> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        if self.stopping {
            let _ = msg
                .job
                .reply
                .send(CellOutcome::error("cellvisor is shutting down".into()));
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

impl Handler<SessionChanged> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: SessionChanged, ctx: &mut Context<Self>) {
        if let Some(entry) = self.sessions.get_mut(&msg.key) {
            entry.state = msg.state;
            entry.received = msg.received;
            entry.last_active = msg.last_active;
        }
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
    }
}

impl Handler<SessionStopped> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: SessionStopped, ctx: &mut Context<Self>) {
        self.sessions.remove(&msg.key);
        if let Some(reason) = msg.reason {
            if self.evicted.len() >= EVICTED_MEMORY {
                if let Some(oldest) = self.evicted_order.pop_front() {
                    self.evicted.remove(&oldest);
                }
            }
            self.evicted_order.push_back(msg.key.clone());
            self.evicted.insert(msg.key, reason);
        }
        self.drain_waiting(ctx);
    }
}

impl Handler<Control> for Supervisor {
    type Result = ResponseFuture<usize>;
    fn handle(&mut self, msg: Control, _: &mut Context<Self>) -> Self::Result {
        let targets = self.matching(&msg.session, msg.language);
        if msg.action == ControlAction::Close {
            for (key, _) in &targets {
                if let Some(entry) = self.sessions.get_mut(key) {
                    entry.closing = true;
                }
            }
        }
        Box::pin(async move {
            let mut applied = 0;
            for (_, addr) in targets {
                let done = match msg.action {
                    ControlAction::Interrupt => addr.send(InterruptCell).await.unwrap_or(false),
                    ControlAction::Reset => {
                        let (tx, rx) = oneshot::channel();
                        addr.send(ResetSession { reply: Some(tx) }).await.is_ok()
                            && rx.await.is_ok()
                    }
                    ControlAction::Close => {
                        let (tx, rx) = oneshot::channel();
                        addr.send(CloseSession {
                            reason: None,
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

impl Handler<Status> for Supervisor {
    type Result = ResponseFuture<Vec<SessionStatus>>;
    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<Addr<Session>> = self.sessions.values().map(|e| e.addr.clone()).collect();
        Box::pin(async move {
            let mut rows = Vec::new();
            for addr in addrs {
                if let Ok(row) = addr.send(QueryStatus).await {
                    rows.push(row);
                }
            }
            rows.sort_by(|a, b| (&a.session, a.language).cmp(&(&b.session, b.language)));
            rows
        })
    }
}

impl Handler<ShutdownAll> for Supervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: ShutdownAll, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let pool: Vec<StartedWorker> = self.pool.drain(..).collect();
        for waiting in self.waiting.drain(..) {
            let _ = waiting
                .submit
                .job
                .reply
                .send(CellOutcome::error("cellvisor is shutting down".into()));
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
                    reason: None,
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
        self.config = msg.0;
        self.base
            .artifacts
            .set_max_total(self.config.output.artifact_max_total.as_u64());
        for entry in self.sessions.values() {
            entry.addr.do_send(UpdateConfig(Arc::clone(&self.config)));
        }
        // New limits apply to new workers: the prewarmed ones were made under the old ones.
        for worker in self.pool.drain(..) {
            actix::spawn(worker.discard());
        }
        self.refill_pool(ctx);
        self.drain_waiting(ctx);
    }
}
