//! The library API: a running supervisor and the calls a host makes on it.
//!
//! [`Cellvisor::start`] runs the actix system on a thread of its own (workers die with the
//! thread that spawned them, so it must live as long as the supervisor) and hands back a
//! handle whose methods can be awaited from any async runtime.
//! [`Cellvisor::start_on_current_system`] runs the actors on the caller's own actix system
//! instead (the daemon: connections and actors on one thread, no wake-up between threads).
//!
//! - `eval`: running a request's cells: the checks, the sessions it pins or throws away,
//!   the cells in order, each to its session.
//! - `cell_log`: the log line at each cell's start and end (session, node, fencing token,
//!   wall clock), what a fleet's audit reads.
//! - `background`: cells that went to the background, and `wait` and `terminate` on them.
//! - `node`: the node's name, health, readiness, metrics and drain.
//! - `policy`: what the configuration in force says about a request (enabled languages,
//!   per-call sessions, the sandbox, the Python), and the one check of a request.
//! - `startup`: why a supervisor cannot start, and the checks made before it does.
//! - `pairs`: `sessions.key = "session+cwd"`: a session's state keyed by (name, cwd), and
//!   which pairs a method without `cwd` names.
//! - `confinement`: the sandbox a request runs under (the operator's, or the `landlock`
//!   isolation level's), and the daemon's files carved out of every one.
//! - `watch`: every request's cells and events on a session, for observers that join it.

mod background;
mod cell_log;
mod confinement;
mod control;
mod eval;
mod node;
mod once;
mod pairs;
mod policy;
mod startup;
mod state;
mod state_files;
mod watch;
mod workspace;

pub(crate) use crate::request_error::lease_refusal;
pub use crate::request_error::RequestError;
pub use confinement::Origin;
pub use control::CloseOptions;
pub use node::{DrainState, Health, Readiness, HEALTH_BOUND};

pub use pairs::SessionRef;

pub use startup::StartupError;
pub use watch::{WatchEvent, Watched};

use crate::locking::lock;
use crate::session::{SessionKey, SessionStatus};
use crate::supervisor::{
    LiveSessions, PrewarmedCount, ReloadConfig, SetMemoryCaps, ShutdownAll, Status, Supervisor,
    WorkerBase,
};
use actix::prelude::*;
use cellvisor_config::Config;
use cellvisor_ipc::Language;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

pub use crate::names::MAX_SESSION_NAME;
pub use crate::request_error::{MAX_CODE_BYTES, MAX_TOOL_NAME, MAX_WAIT_MS};

/// How long a `wait` watches a background cell unless told otherwise.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Background cells remembered (id -> session) for `wait` and `terminate`, at most.
const MAX_BACKGROUND_CELLS: usize = 4096;

/// The first cell id of a supervisor started at `now`: its start in milliseconds since the
/// epoch, times 1,000. An id from before a restart is then never one of the new supervisor's
/// cells (that would take a thousand cells a millisecond), as code mode promises ("an ID from
/// before then is reported as not found and never reaches a newer cell"), and ids stay below
/// 2^53, exact in every JSON reader, for some 280 years.
fn first_cell_id(now: std::time::SystemTime) -> u64 {
    let millis = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    millis.saturating_mul(1000).max(1)
}

/// How a host watches a background cell ([`Cellvisor::wait`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitOptions {
    /// How long to watch before answering with the output so far; default [`DEFAULT_WAIT`].
    pub yield_time_ms: Option<u64>,
    /// Cap on the returned output, in tokens (about 4 bytes each).
    pub max_tokens: Option<u64>,
}

/// How to start a supervisor.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The configuration to run under; a running supervisor takes a new one with `reload`.
    pub config: Config,
    /// The cellvisor executable that workers run as (`cellvisor __worker ...`). Default: the
    /// current executable, which is right for the `cellvisor` binary; an embedding program
    /// either points this at an installed `cellvisor` or calls
    /// [`crate::worker_entry::run_worker_if_requested`] first thing in `main`. Python
    /// workers run `cellvisor-py-worker` instead when it sits beside an executable named
    /// `cellvisor`.
    pub worker_exe: Option<PathBuf>,
    /// The per-user runtime directory; default `$XDG_RUNTIME_DIR/cellvisor` (or a private
    /// directory under the temp dir). Each supervisor makes a private directory inside it.
    pub runtime_dir: Option<PathBuf>,
}

/// A running supervisor. Cheap to share (`Arc`); stop it with [`Cellvisor::shutdown`].
pub struct Cellvisor {
    supervisor: Addr<Supervisor>,
    /// One lock per session name: a request's cells run together, not interleaved with
    /// another request's cells for the same session.
    request_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each session's recent `request_id`s and their answers, so a retry runs nothing.
    requests: Arc<crate::once::RequestBook>,
    /// The system and thread the actors run on, when they have a thread of their own
    /// (`None`: they run on the caller's system, which outlives them).
    own_thread: Mutex<Option<(actix::System, std::thread::JoinHandle<()>)>>,
    /// The configuration in force, to tell what a reload changes.
    config: Mutex<Config>,
    /// The environment a Python worker gets under that configuration, which a request's
    /// choice of Python is made in: filtered once per configuration, not once per request.
    python_env: Mutex<Arc<crate::environment::WorkerEnv>>,
    /// Recent choices of Python, so a session's cells do not each search for it.
    python_choices: crate::python_choice::ChoiceCache,
    next_request: std::sync::atomic::AtomicU64,
    /// Cell ids: unique across sessions, so a session can tell its own cells.
    next_cell: std::sync::atomic::AtomicU64,
    /// Cells that went to the background, and their session, until collected.
    background: Mutex<HashMap<u64, SessionKey>>,
    /// The snapshot directory, for listing checkpoints (none when it could not be opened).
    snapshots: Option<Arc<crate::snapshots::SnapshotStore>>,
    /// The leases this node holds (`fleet.leases`): a request for a session held here
    /// skips asking the supervisor.
    leases: Option<Arc<crate::fleet::LeaseBook>>,
    run_dir: PathBuf,
    _run_dir_guard: tempfile::TempDir,
    /// The machine-wide lock on this daemon's uid range, at the `uid` level.
    _range_claim: Option<crate::isolation::RangeClaim>,
    isolation: crate::isolation::IsolationStatus,
    /// The daemon's files no cell reads ([`Cellvisor::hide_from_cells`]).
    hidden: Mutex<confinement::Hidden>,
    /// Where outputs too big for a result spill (`output.artifact-dir`, a restart key).
    artifact_dir: PathBuf,
    /// This node's name (`daemon.node` or the host name), read at start.
    node: String,
    /// The root of sessions' workspaces (`workspaces.root`, a restart key).
    workspaces: PathBuf,
    metrics: Arc<crate::metrics::Metrics>,
    /// Set by `drain`, cleared by `undrain` (the supervisor is told too).
    draining: std::sync::atomic::AtomicBool,
    /// `sessions.key` as the supervisor started with it (it applies at restart).
    session_key: cellvisor_config::SessionKeyBy,
    /// Under `sessions.key = "session+cwd"`, the pairs run here: their names and cwds.
    pairs: Mutex<pairs::Pairs>,
    /// The sessions someone watches ([`Cellvisor::watch`]).
    watchers: watch::Watchers,
    /// The sessions that end ([`Cellvisor::follow_ends`]).
    ends: crate::supervisor::ends::SessionEnds,
}

impl Cellvisor {
    /// Starts a supervisor with its own runtime directory, its actors on a thread of their
    /// own: the handle can then be awaited from any executor.
    pub fn start(options: Options) -> Result<Cellvisor, StartupError> {
        let prepared = Prepared::new(options)?;
        let (config, base) = (Arc::clone(&prepared.config), prepared.base.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cellvisor-supervisor".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let addr = Supervisor::new(config, base).start();
                    let _ = tx.send((addr, actix::System::current()));
                });
                let _ = system.run();
            })
            .map_err(StartupError::Thread)?;
        let (supervisor, system) = rx.recv().map_err(|_| {
            StartupError::Thread(std::io::Error::other(
                "the supervisor thread ended at start",
            ))
        })?;
        Ok(prepared.into_handle(supervisor, Some((system, thread))))
    }

    /// Starts a supervisor whose actors run on the calling thread's actix system, so a
    /// caller on that system (the daemon) reaches them without a wake-up of another thread.
    /// The handle must then be used from that system's thread, and the thread must outlive
    /// the supervisor (workers die with the thread that started them). `None` when the
    /// caller runs no actix system: use [`Cellvisor::start`] there.
    pub fn start_on_current_system(options: Options) -> Option<Result<Cellvisor, StartupError>> {
        actix::System::try_current()?;
        Some(Prepared::new(options).map(|prepared| {
            let supervisor =
                Supervisor::new(Arc::clone(&prepared.config), prepared.base.clone()).start();
            prepared.into_handle(supervisor, None)
        }))
    }

    /// The isolation level in force (`[isolation]`): who cells run as.
    pub fn isolation(&self) -> &crate::isolation::IsolationStatus {
        &self.isolation
    }

    /// The private directory of this supervisor (worker sockets, runner script).
    pub fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    /// The artifact directory: hosts that serve spilled outputs (MCP resources) read them
    /// there.
    pub fn artifact_dir(&self) -> &std::path::Path {
        &self.artifact_dir
    }

    /// One row per Python zygote: its interpreter, state, forks and preloads.
    pub async fn zygotes(&self) -> Result<Vec<crate::zygote::ZygoteStatus>, RequestError> {
        self.supervisor
            .send(crate::supervisor::messages::ZygoteRows)
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// One row per live session, with each worker tree's memory and CPU; a pair's row
    /// (`sessions.key = "session+cwd"`) carries its session name and `cwd`.
    pub async fn status(&self) -> Result<Vec<SessionStatus>, RequestError> {
        let mut rows = self.raw_status().await?;
        self.show_pairs(&mut rows);
        Ok(rows)
    }

    /// [`Cellvisor::status`] with each row under its session's key (a pair's, not its name).
    async fn raw_status(&self) -> Result<Vec<SessionStatus>, RequestError> {
        let mut rows = self
            .supervisor
            .send(Status)
            .await
            .map_err(|_| RequestError::Stopped)?;
        for row in &mut rows {
            row.node.clone_from(&self.node);
        }
        Ok(rows)
    }

    /// How many sessions are live (the rows [`status`](Self::status) would list), without
    /// sampling any worker: cheap enough for a host to ask on every tick (the daemon's idle
    /// exit does).
    pub async fn live_sessions(&self) -> Result<usize, RequestError> {
        self.supervisor
            .send(LiveSessions)
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// How many prewarmed Python workers (`python.prewarm`) wait to be claimed.
    pub async fn prewarmed(&self) -> Result<usize, RequestError> {
        self.supervisor
            .send(PrewarmedCount)
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// Applies a new configuration to new cells and new workers, logging each change; answers
    /// the changes as `key: old -> new` lines.
    pub async fn reload(&self, config: Config) -> Result<Vec<String>, RequestError> {
        let changes = {
            let mut current = lock(&self.config);
            let changes = cellvisor_config::changes(&current, &config);
            *current = config.clone();
            changes
        };
        if config.sessions.key != self.session_key {
            tracing::warn!(
                "config: sessions.key = {:?} takes effect at the next start: until then \
                 sessions stay keyed by {:?}, so no state is split or merged under a live host",
                config.sessions.key.as_str(),
                self.session_key.as_str()
            );
        }
        let python_env = python_worker_env(&config);
        *lock(&self.python_env) = python_env;
        if let Some(store) = &self.snapshots {
            // The leases' time to live is the node's start's; the snapshots' timeout is new.
            let lease_ttl = self.leases.as_ref().map(|leases| leases.ttl());
            store.set_tree_lock_wait(crate::snapshots::policy::tree_lock_wait(
                config.snapshots.timeout,
                lease_ttl,
            ));
        }
        for change in &changes {
            tracing::info!("config: {change}");
        }
        self.supervisor
            .send(ReloadConfig(Arc::new(config)))
            .await
            .map_err(|_| RequestError::Stopped)?;
        Ok(changes)
    }

    /// Caps the memory of the sessions whose name starts with each prefix (a network
    /// tenant's `max-session-memory`): each runs under the smaller of its cap and
    /// `limits.max-rss`. Replaces the caps set before; live sessions take them at once.
    pub async fn set_memory_caps(&self, caps: Vec<(String, u64)>) -> Result<(), RequestError> {
        self.supervisor
            .send(SetMemoryCaps(caps))
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// Stops every worker (Shutdown, grace, SIGTERM, SIGKILL), then the supervisor thread.
    pub async fn shutdown(&self) {
        let _ = self.supervisor.send(ShutdownAll).await;
        let own_thread = lock(&self.own_thread).take();
        if let Some((system, thread)) = own_thread {
            system.stop();
            // Joined on a helper thread, so any executor can await this.
            let (joined, wait) = oneshot::channel();
            let helper = std::thread::Builder::new()
                .name("cellvisor-join".into())
                .spawn(move || {
                    let _ = thread.join();
                    let _ = joined.send(());
                });
            if helper.is_ok() {
                let _ = wait.await;
            }
        }
    }
}

/// What a supervisor needs before its actors start: its private directory, what workers
/// are made from, the configuration.
struct Prepared {
    config: Arc<Config>,
    initial_config: Config,
    base: WorkerBase,
    run_dir: PathBuf,
    run_dir_guard: tempfile::TempDir,
    /// The supervisor's own directories and key file, which no cell reads.
    hidden: Vec<PathBuf>,
    range_claim: Option<crate::isolation::RangeClaim>,
}

impl Prepared {
    fn new(options: Options) -> Result<Prepared, StartupError> {
        let base_dir = options
            .runtime_dir
            .clone()
            .unwrap_or_else(cellvisor_ipc::socket::default_runtime_dir);
        cellvisor_ipc::socket::ensure_private_dir(&base_dir).map_err(|source| {
            StartupError::RuntimeDir {
                path: base_dir.clone(),
                source,
            }
        })?;
        startup::remove_stale_run_dirs(&base_dir);
        let run_dir_guard = tempfile::Builder::new()
            .prefix(&format!("sup-{}-", std::process::id()))
            .tempdir_in(&base_dir)
            .map_err(|source| StartupError::RuntimeDir {
                path: base_dir.clone(),
                source,
            })?;
        let run_dir = run_dir_guard.path().to_path_buf();
        startup::check_socket_room(&run_dir)?;
        let exe = match options.worker_exe {
            Some(exe) => exe,
            None => std::env::current_exe().map_err(StartupError::Exe)?,
        };
        let artifact_dir = options
            .config
            .output
            .artifact_dir
            .clone()
            .unwrap_or_else(|| base_dir.join("artifacts"));
        let artifacts = crate::artifacts::ArtifactStore::new(
            artifact_dir,
            options.config.output.artifact_max_total.as_u64(),
        );
        let snapshots = startup::open_snapshots(&options.config)?;
        let leases = startup::open_leases(&options.config, snapshots.as_deref())?;
        let stores = crate::paths::stores_dir();
        let workspaces = crate::workspaces::root(&options.config.workspaces);
        let tmp = run_dir.join("tmp");
        // cellvisor's own state directory (the stores' parent) first: it leads to the rest.
        let mut shared: Vec<&std::path::Path> = stores.parent().into_iter().collect();
        shared.extend([base_dir.as_path(), &run_dir, &tmp, artifacts.dir(), &stores]);
        shared.push(&workspaces);
        if let Some(store) = &snapshots {
            shared.push(store.root());
        }
        let mut hidden: Vec<PathBuf> = shared.iter().map(|p| p.to_path_buf()).collect();
        hidden.extend(options.config.snapshots.key_file.clone());
        let (isolation, range_claim) =
            startup::prepare_isolation(&options.config, &shared, &run_dir)?;
        tracing::info!("{}", isolation.line());
        let base = WorkerBase {
            ended: Default::default(),
            programs: crate::spawn::WorkerPrograms::beside(exe),
            run_dir: run_dir.clone(),
            artifacts,
            store_dir: stores,
            snapshots,
            leases,
            isolation,
            workspaces,
            metrics: Arc::new(crate::metrics::Metrics::new(&node::node_name(
                &options.config,
            ))),
        };
        Ok(Prepared {
            initial_config: options.config.clone(),
            config: Arc::new(options.config),
            base,
            run_dir,
            run_dir_guard,
            hidden,
            range_claim,
        })
    }

    fn into_handle(
        self,
        supervisor: Addr<Supervisor>,
        own_thread: Option<(actix::System, std::thread::JoinHandle<()>)>,
    ) -> Cellvisor {
        let node = node::node_name(&self.initial_config);
        let session_key = self.initial_config.sessions.key;
        Cellvisor {
            supervisor,
            request_locks: Mutex::new(HashMap::new()),
            requests: Arc::new(request_book(
                &self.initial_config,
                self.base.snapshots.as_ref(),
            )),
            own_thread: Mutex::new(own_thread),
            python_env: Mutex::new(python_worker_env(&self.initial_config)),
            python_choices: crate::python_choice::ChoiceCache::default(),
            config: Mutex::new(self.initial_config),
            next_request: std::sync::atomic::AtomicU64::new(1),
            next_cell: std::sync::atomic::AtomicU64::new(first_cell_id(
                std::time::SystemTime::now(),
            )),
            background: Mutex::new(HashMap::new()),
            snapshots: self.base.snapshots.clone(),
            leases: self.base.leases.clone(),
            run_dir: self.run_dir,
            _run_dir_guard: self.run_dir_guard,
            _range_claim: self.range_claim,
            isolation: self.base.isolation.clone(),
            hidden: Mutex::new(confinement::Hidden {
                own: self.hidden,
                host: Vec::new(),
            }),
            artifact_dir: self.base.artifacts.dir().to_path_buf(),
            workspaces: self.base.workspaces.clone(),
            node,
            metrics: Arc::clone(&self.base.metrics),
            draining: std::sync::atomic::AtomicBool::new(false),
            session_key,
            pairs: Mutex::new(pairs::Pairs::default()),
            watchers: watch::Watchers::default(),
            ends: self.base.ended.clone(),
        }
    }
}

/// The book of remembered requests: kept beside the snapshots when snapshots are on, so a
/// restart or a move to another node keeps them (in etcd mode, behind a fenced pointer);
/// in memory otherwise.
fn request_book(
    config: &Config,
    snapshots: Option<&Arc<crate::snapshots::SnapshotStore>>,
) -> crate::once::RequestBook {
    let log = snapshots
        .filter(|_| config.snapshots.when != cellvisor_config::SnapshotWhen::Never)
        .map(|store| match store.fenced() {
            // In etcd mode, current only as far as its pointer committed under the lease.
            Some(etcd) => Arc::new(crate::once::fenced::FencedRequestLog::new(
                Arc::clone(store),
                Arc::clone(etcd),
                config.daemon.request_memory,
            )) as Arc<dyn crate::once::file::RequestLog>,
            None => Arc::new(crate::once::file::FileRequestLog::new(
                Arc::clone(store),
                config.daemon.request_memory,
            )) as Arc<dyn crate::once::file::RequestLog>,
        });
    crate::once::RequestBook::new(config.daemon.request_memory, log)
}

/// The environment of a Python worker under `config` (the daemon's own environment, as
/// `env` filters it, does not change while it runs).
fn python_worker_env(config: &Config) -> Arc<crate::environment::WorkerEnv> {
    Arc::new(crate::environment::WorkerEnv::for_worker(
        config,
        Language::Python,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_ids_of_a_later_start_are_above_any_earlier_ones_and_exact_in_json() {
        use std::time::{Duration, UNIX_EPOCH};
        let start = UNIX_EPOCH + Duration::from_secs(1_764_600_000);
        let first = first_cell_id(start);
        // A supervisor that ran 10,000 cells a second for its whole life ends below the next
        // one's first id, however soon that one starts.
        let lived = Duration::from_secs(3600);
        let restarted = first_cell_id(start + lived + Duration::from_millis(1));
        assert!(first + 10_000 * lived.as_secs() < restarted);
        assert!(first_cell_id(UNIX_EPOCH + Duration::from_secs(200 * 365 * 86_400)) < 1 << 53);
        assert_eq!(first_cell_id(UNIX_EPOCH), 1);
    }
}
