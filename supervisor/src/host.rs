//! The library API: a running supervisor and the calls a host makes on it.
//!
//! [`Cellvisor::start`] runs the actix system on a thread of its own (workers die with the
//! thread that spawned them, so it must live as long as the supervisor) and hands back a
//! handle whose methods can be awaited from any async runtime.
//! [`Cellvisor::start_on_current_system`] runs the actors on the caller's own actix system
//! instead (the daemon: connections and actors on one thread, no wake-up between threads).

use crate::cell::{
    CellEvent, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult, ToolCallRequest,
};
use crate::python_choice::PythonChoice;
use crate::session::observation::Refusal;
use crate::session::{CellJob, CellReport, SessionKey, SessionStatus};
use crate::session::{TerminateCell, WaitCell};
use crate::supervisor::{
    CellCommand, Control, ControlAction, ForCell, PrewarmedCount, ReloadConfig, RequestDone,
    ShutdownAll, Status, Submit, Supervisor, WorkerBase,
};
use actix::prelude::*;
use cellvisor_config::{CellsConfig, Config};
use cellvisor_ipc::Language;
use cellvisor_ipc::ToolInfo;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// Largest cell source accepted: well inside the frame limit.
pub const MAX_CODE_BYTES: usize = 8 * 1024 * 1024;

/// Longest session name accepted.
pub const MAX_SESSION_NAME: usize = 128;

/// Longest host tool name accepted (MCP servers name tools like `github.search_issues`).
pub const MAX_TOOL_NAME: usize = 128;

/// How long a `wait` watches a background cell unless told otherwise.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest `yield_time_ms` a `wait` accepts (an hour).
pub const MAX_WAIT_MS: u64 = 3_600_000;

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

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The runtime directory could not be made private (it is someone else's, or not writable).
    #[error("cannot prepare the runtime directory {path}: {source}")]
    RuntimeDir {
        /// The directory.
        path: PathBuf,
        /// Why it could not be prepared.
        source: std::io::Error,
    },
    /// Workers run this executable; without it no worker can start.
    #[error("cannot find the cellvisor executable: {0}")]
    Exe(std::io::Error),
    /// The supervisor's own thread could not be started.
    #[error("cannot start the supervisor thread: {0}")]
    Thread(std::io::Error),
}

/// A request the supervisor refuses as a whole, before running anything.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RequestError {
    /// The session name is not one a file name and a log line can hold safely.
    #[error("invalid session name {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ - :")]
    SessionName(String),
    /// A request without cells is a host's mistake, not a no-op.
    #[error("a request needs at least one cell")]
    NoCells,
    /// More cells than `cells.max-cells-per-request`: one request must not hold a session forever.
    #[error(
        "the request has {count} cells; at most {max} cells per request \
         (cells.max-cells-per-request): split it into several requests"
    )]
    TooManyCells {
        /// Cells in the request.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A cell's timeout is not a positive number of seconds.
    #[error(
        "cell {index}: timeout must be a positive number of seconds, got {value}; \
         {min} to {max} seconds are kept as given, a shorter timeout is raised to {min} and a \
         longer one cut to {max} (cells.min-timeout, cells.max-timeout); omit it for the \
         default of {default} seconds"
    )]
    Timeout {
        /// The cell's place in its request.
        index: usize,
        /// The timeout given.
        value: f64,
        /// `cells.min-timeout`, in seconds.
        min: f64,
        /// `cells.max-timeout`, in seconds.
        max: f64,
        /// `cells.default-timeout`, in seconds.
        default: f64,
    },
    /// A cell's code is larger than a worker frame may carry.
    #[error("cell {index}: code is {len} bytes; at most {max} bytes per cell", max = MAX_CODE_BYTES)]
    CodeTooLarge {
        /// The cell's place in its request.
        index: usize,
        /// The code's size in bytes.
        len: usize,
    },
    /// The working directory is not a directory: the cells would run somewhere unexpected.
    #[error("working directory {0} does not exist or is not a directory")]
    Cwd(PathBuf),
    /// A tool name that cells could not call as `tool.<name>`.
    #[error("invalid tool name {0:?}: use 1 to {max} characters from A-Z a-z 0-9 _ - .", max = MAX_TOOL_NAME)]
    ToolName(String),
    /// Two tools with one name: a call would be ambiguous.
    #[error("tool {0:?} is declared twice")]
    DuplicateTool(String),
    /// The request's sandbox fields would loosen the operator's, or cannot be enforced.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// `wait` or `terminate` named a cell that is not in the background (or was collected).
    #[error(
        "session {session} has no background cell {cell_id} (ids come from results with status \
         \"running\"; a finished cell's result is handed out once)"
    )]
    UnknownCell {
        /// The session named.
        session: String,
        /// The cell id named.
        cell_id: u64,
    },
    /// `wait` named a cell whose own request still waits for it.
    #[error(
        "cell {0} has not gone to the background: the request that started it still waits for \
         it (use interrupt to stop it)"
    )]
    NotYielded(u64),
    /// Another `wait` is already collecting this cell's output.
    #[error(
        "cell {0} is already being waited on: one wait at a time per cell; try again when that \
         wait returns"
    )]
    AlreadyObserved(u64),
    /// `yield_time_ms` is longer than [`MAX_WAIT_MS`].
    #[error("yield_time_ms must be at most {max} ms (an hour), got {0}", max = MAX_WAIT_MS)]
    WaitTime(u64),
    /// `max_tokens` of 0 would return nothing.
    #[error("max_tokens must be at least 1")]
    MaxTokens,
    /// The supervisor has shut down; no more requests are taken.
    #[error("the supervisor has stopped")]
    Stopped,
}

/// A running supervisor. Cheap to share (`Arc`); stop it with [`Cellvisor::shutdown`].
pub struct Cellvisor {
    supervisor: Addr<Supervisor>,
    /// One lock per session name: a request's cells run together, not interleaved with
    /// another request's cells for the same session.
    request_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The system and thread the actors run on, when they have a thread of their own
    /// (`None`: they run on the caller's system, which outlives them).
    own_thread: Mutex<Option<(actix::System, std::thread::JoinHandle<()>)>>,
    /// The configuration in force, to tell what a reload changes.
    config: Mutex<Config>,
    /// The environment a Python worker gets under that configuration, which a request's
    /// choice of Python is made in: filtered once per configuration, not once per request.
    python_env: Mutex<Arc<crate::environment::WorkerEnv>>,
    next_request: std::sync::atomic::AtomicU64,
    /// Cell ids: unique across sessions, so a session can tell its own cells.
    next_cell: std::sync::atomic::AtomicU64,
    /// Cells that went to the background, and their session, until collected.
    background: Mutex<HashMap<u64, SessionKey>>,
    run_dir: PathBuf,
    _run_dir_guard: tempfile::TempDir,
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

    /// The private directory of this supervisor (worker sockets, runner script).
    pub fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

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
        let cells = match self.config.lock() {
            Ok(config) => config.cells.clone(),
            Err(poisoned) => poisoned.into_inner().cells.clone(),
        };
        validate(&request, &cells)?;
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
        let sandbox = self.sandbox_plan(&request)?.map(Arc::new);
        let python = self.python_choice(&request).map(Arc::new);
        let request_id = self
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A per-call request runs in a throw-away session of its own, discarded at its end
        // (however it ends), so the named session's workers and state are not touched.
        let throwaway = (request.fresh || policy.per_call)
            .then(|| ThrowawaySession::new(self.supervisor.clone(), &request.session, request_id));
        let session = throwaway
            .as_ref()
            .map_or(request.session.as_str(), |t| t.name.as_str());
        let lock = self.request_lock(session);
        let _turn = lock.lock().await;
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
                        requester: requester.clone(),
                        reply,
                    };
                    let key = SessionKey {
                        session: session.to_string(),
                        language: spec.language,
                    };
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
                    if result.report.status == CellStatus::Running {
                        self.remember_background(cell_id, key);
                        in_background = Some(cell_id);
                    }
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
        Ok(EvalResult::from_cells(results))
    }

    /// Watches a cell that went to the background: answers with what it printed since the
    /// last look once `yield_time_ms` passes (status `running`), or with its final result as
    /// soon as it ends. One wait per cell at a time; only the cell's own session may wait.
    pub async fn wait(
        &self,
        session: &str,
        cell_id: u64,
        options: WaitOptions,
    ) -> Result<CellResult, RequestError> {
        let yield_time = match options.yield_time_ms {
            Some(ms) if ms > MAX_WAIT_MS => return Err(RequestError::WaitTime(ms)),
            Some(ms) => std::time::Duration::from_millis(ms),
            None => DEFAULT_WAIT,
        };
        if options.max_tokens == Some(0) {
            return Err(RequestError::MaxTokens);
        }
        let max_bytes = options
            .max_tokens
            .map(|t| t.saturating_mul(crate::directive::BYTES_PER_TOKEN));
        self.for_cell(session, cell_id, |reply| {
            CellCommand::Wait(WaitCell {
                cell_id,
                yield_time,
                max_bytes,
                reply,
            })
        })
        .await
    }

    /// Stops a cell that went to the background (interrupt, then the grace, then kill) and
    /// answers with its final result; the session and its state stay.
    pub async fn terminate(&self, session: &str, cell_id: u64) -> Result<CellResult, RequestError> {
        self.for_cell(session, cell_id, |reply| {
            CellCommand::Terminate(TerminateCell { cell_id, reply })
        })
        .await
    }

    /// Hands a `wait` or `terminate` to the session holding `cell_id`, if it is `session`.
    async fn for_cell(
        &self,
        session: &str,
        cell_id: u64,
        command: impl FnOnce(crate::session::CellReply) -> CellCommand,
    ) -> Result<CellResult, RequestError> {
        validate_session_name(session)?;
        let unknown = || RequestError::UnknownCell {
            session: session.to_string(),
            cell_id,
        };
        let key = {
            let cells = lock(&self.background);
            cells
                .get(&cell_id)
                .filter(|k| k.session == session)
                .cloned()
        }
        .ok_or_else(unknown)?;
        let (reply, answer) = oneshot::channel();
        self.supervisor
            .send(ForCell {
                key,
                command: command(reply),
            })
            .await
            .map_err(|_| RequestError::Stopped)?;
        let answer = answer.await.unwrap_or(Err(Refusal::Unknown));
        let ended = match &answer {
            Ok(result) => result.report.status != CellStatus::Running,
            Err(refusal) => *refusal == Refusal::Unknown,
        };
        if ended {
            lock(&self.background).remove(&cell_id);
        }
        answer.map_err(|refusal| match refusal {
            Refusal::Unknown => unknown(),
            Refusal::NotYielded => RequestError::NotYielded(cell_id),
            Refusal::Observed => RequestError::AlreadyObserved(cell_id),
        })
    }

    /// Remembers that `cell_id` of `key` runs in the background (bounded: the oldest ids go
    /// first; their sessions drop uncollected results long before).
    fn remember_background(&self, cell_id: u64, key: SessionKey) {
        let mut cells = lock(&self.background);
        while cells.len() >= MAX_BACKGROUND_CELLS {
            let Some(oldest) = cells.keys().min().copied() else {
                break;
            };
            cells.remove(&oldest);
        }
        cells.insert(cell_id, key);
    }

    /// What the configuration in force says about requests: read once per request.
    fn request_policy(&self) -> RequestPolicy {
        let config = match self.config.lock() {
            Ok(config) => config,
            Err(poisoned) => poisoned.into_inner(),
        };
        RequestPolicy {
            per_call: config.sessions.mode == cellvisor_config::SessionMode::PerCall,
            enabled: [
                (Language::Python, config.python.enabled),
                (Language::JavaScript, config.js.enabled),
                (Language::Lua, config.lua.enabled),
            ],
        }
    }

    /// The sandbox this request's cells run under: the operator's policy tightened by the
    /// request, checked against the kernel (a required one it cannot enforce is refused).
    fn sandbox_plan(
        &self,
        request: &EvalRequest,
    ) -> Result<Option<crate::sandbox::Plan>, RequestError> {
        let operator = match self.config.lock() {
            Ok(config) => config.sandbox.clone(),
            Err(poisoned) => poisoned.into_inner().sandbox.clone(),
        };
        let Some(policy) = crate::sandbox::effective(&operator, request.sandbox.as_ref())
            .map_err(RequestError::Sandbox)?
        else {
            return Ok(None);
        };
        let cwd = match &request.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir()
                .map_err(|e| RequestError::Sandbox(format!("no working directory: {e}")))?,
        };
        crate::sandbox::plan(policy, crate::sandbox::KernelSupport::detect(), cwd)
            .map(Some)
            .map_err(RequestError::Sandbox)
    }

    /// The Python this request's cells run on, when it has Python cells.
    fn python_choice(&self, request: &EvalRequest) -> Option<PythonChoice> {
        if !request.cells.iter().any(|c| c.language == Language::Python) {
            return None;
        }
        let worker_env = match self.python_env.lock() {
            Ok(env) => Arc::clone(&env),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        };
        crate::python_choice::choose(
            &worker_env,
            request.cwd.as_deref(),
            request.virtual_env.as_deref(),
        )
    }

    fn request_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = match self.request_locks.lock() {
            Ok(locks) => locks,
            Err(poisoned) => poisoned.into_inner(),
        };
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(session.to_string()).or_default())
    }

    async fn control(
        &self,
        session: &str,
        language: Option<Language>,
        action: ControlAction,
    ) -> Result<usize, RequestError> {
        validate_session_name(session)?;
        self.supervisor
            .send(Control {
                session: session.to_string(),
                language,
                action,
            })
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// Interrupts the running cell of the session (all languages, or one); answers how many
    /// cells were interrupted.
    pub async fn interrupt(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Interrupt)
            .await
    }

    /// Replaces the session's workers with fresh ones; answers how many were reset.
    pub async fn reset(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Reset).await
    }

    /// Closes the session's workers; answers how many were closed.
    pub async fn close(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Close).await
    }

    /// One row per live session, with each worker tree's memory and CPU.
    pub async fn status(&self) -> Result<Vec<SessionStatus>, RequestError> {
        self.supervisor
            .send(Status)
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
            let mut current = match self.config.lock() {
                Ok(current) => current,
                Err(poisoned) => poisoned.into_inner(),
            };
            let changes = cellvisor_config::changes(&current, &config);
            *current = config.clone();
            changes
        };
        let python_env = python_worker_env(&config);
        match self.python_env.lock() {
            Ok(mut env) => *env = python_env,
            Err(poisoned) => *poisoned.into_inner() = python_env,
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

    /// Stops every worker (Shutdown, grace, SIGTERM, SIGKILL), then the supervisor thread.
    pub async fn shutdown(&self) {
        let _ = self.supervisor.send(ShutdownAll).await;
        let own_thread = match self.own_thread.lock() {
            Ok(mut thread) => thread.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
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
        let run_dir_guard = tempfile::Builder::new()
            .prefix(&format!("sup-{}-", std::process::id()))
            .tempdir_in(&base_dir)
            .map_err(|source| StartupError::RuntimeDir {
                path: base_dir.clone(),
                source,
            })?;
        let run_dir = run_dir_guard.path().to_path_buf();
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
        let base = WorkerBase {
            programs: crate::spawn::WorkerPrograms::beside(exe),
            run_dir: run_dir.clone(),
            artifacts,
            store_dir: crate::paths::stores_dir(),
        };
        Ok(Prepared {
            initial_config: options.config.clone(),
            config: Arc::new(options.config),
            base,
            run_dir,
            run_dir_guard,
        })
    }

    fn into_handle(
        self,
        supervisor: Addr<Supervisor>,
        own_thread: Option<(actix::System, std::thread::JoinHandle<()>)>,
    ) -> Cellvisor {
        Cellvisor {
            supervisor,
            request_locks: Mutex::new(HashMap::new()),
            own_thread: Mutex::new(own_thread),
            python_env: Mutex::new(python_worker_env(&self.initial_config)),
            config: Mutex::new(self.initial_config),
            next_request: std::sync::atomic::AtomicU64::new(1),
            next_cell: std::sync::atomic::AtomicU64::new(first_cell_id(
                std::time::SystemTime::now(),
            )),
            background: Mutex::new(HashMap::new()),
            run_dir: self.run_dir,
            _run_dir_guard: self.run_dir_guard,
        }
    }
}

/// The environment of a Python worker under `config` (the daemon's own environment, as
/// `env` filters it, does not change while it runs).
fn python_worker_env(config: &Config) -> Arc<crate::environment::WorkerEnv> {
    Arc::new(crate::environment::WorkerEnv::for_worker(
        config,
        Language::Python,
    ))
}

/// The cell as its session runs it: a JavaScript `// @exec:` line turned into the cell's
/// observation time (`yield_time_ms`, which the line overrides) and output cap (code mode).
/// `Err` is the message for a bad line.
fn with_directive(spec: &CellSpec) -> Result<(CellSpec, Option<u64>), String> {
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

/// Locks `mutex`; a panic elsewhere while holding it leaves plain data behind.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parts of the configuration a request's handling depends on.
struct RequestPolicy {
    /// `sessions.mode = "per-call"`.
    per_call: bool,
    /// `python.enabled`, `js.enabled`, `lua.enabled`.
    enabled: [(Language, bool); 3],
}

impl RequestPolicy {
    /// The message for a cell of a disabled language, `None` when it may run.
    fn disabled(&self, language: Language) -> Option<String> {
        let off = self
            .enabled
            .iter()
            .any(|(lang, enabled)| *lang == language && !enabled);
        off.then(|| {
            let (name, section) = match language {
                Language::Python => ("Python", "python"),
                Language::JavaScript => ("JavaScript", "js"),
                Language::Lua => ("Lua", "lua"),
            };
            format!(
                "{name} cells are disabled by `{section}.enabled = false` in the configuration; \
                 set it to true (or remove it) to run them"
            )
        })
    }
}

/// The session of a per-call request (`fresh: true` or `sessions.mode = "per-call"`): its
/// workers are discarded when the request ends, however it ends.
struct ThrowawaySession {
    supervisor: Addr<Supervisor>,
    name: String,
}

impl ThrowawaySession {
    fn new(supervisor: Addr<Supervisor>, session: &str, request: u64) -> ThrowawaySession {
        ThrowawaySession {
            supervisor,
            name: format!("{session}~call-{request}"),
        }
    }
}

impl Drop for ThrowawaySession {
    fn drop(&mut self) {
        self.supervisor.do_send(Control {
            session: std::mem::take(&mut self.name),
            language: None,
            action: ControlAction::Discard,
        });
    }
}

/// Keeps a request's sessions from eviction until the request ends, however it ends.
struct RequestPin {
    supervisor: Addr<Supervisor>,
    request: u64,
}

impl Drop for RequestPin {
    fn drop(&mut self) {
        self.supervisor.do_send(RequestDone {
            request: self.request,
        });
    }
}

fn validate_session_name(name: &str) -> Result<(), RequestError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SESSION_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        Err(RequestError::SessionName(name.to_string()))
    }
}

/// The one check of a request, for every host (library, CLI, daemon, MCP): what it refuses
/// here no host refuses differently, and no host checks it again.
fn validate(request: &EvalRequest, cells: &CellsConfig) -> Result<(), RequestError> {
    let max_cells = cells.max_cells_per_request;
    validate_session_name(&request.session)?;
    if request.cells.is_empty() {
        return Err(RequestError::NoCells);
    }
    if request.cells.len() > max_cells {
        return Err(RequestError::TooManyCells {
            count: request.cells.len(),
            max: max_cells,
        });
    }
    if let Some((index, cell)) = request
        .cells
        .iter()
        .enumerate()
        .find(|(_, c)| c.code.len() > MAX_CODE_BYTES)
    {
        return Err(RequestError::CodeTooLarge {
            index,
            len: cell.code.len(),
        });
    }
    for (index, cell) in request.cells.iter().enumerate() {
        if let Some(value) = cell.timeout {
            check_timeout(index, value, cells)?;
        }
    }
    if let Some(cwd) = &request.cwd {
        if !cwd.is_dir() {
            return Err(RequestError::Cwd(cwd.clone()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for tool in &request.tools {
        let name = tool.name.as_str();
        let valid = (1..=MAX_TOOL_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(RequestError::ToolName(tool.name.clone()));
        }
        if !seen.insert(name) {
            return Err(RequestError::DuplicateTool(tool.name.clone()));
        }
    }
    Ok(())
}

/// The rule for a requested cell timeout: a positive number of seconds, nothing else. A
/// positive one out of the configured range is not refused: the supervisor raises it to
/// `cells.min-timeout` or cuts it to `cells.max-timeout` ([`CellsConfig::timeout_for`]), as
/// docs/config.md says, so a request that runs on one host runs on every other.
fn check_timeout(index: usize, value: f64, cells: &CellsConfig) -> Result<(), RequestError> {
    if value.is_finite() && value > 0.0 {
        return Ok(());
    }
    let min = cells.min_timeout.as_secs_f64();
    Err(RequestError::Timeout {
        index,
        value,
        min,
        max: cells.max_timeout.as_secs_f64().max(min),
        default: cells.default_timeout.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_must_be_positive_and_is_otherwise_brought_into_range() {
        let cells = CellsConfig::default();
        for kept in [0.001, 0.5, 1.0, 30.0, 600.0, 1e9, 1e300, f64::MAX] {
            assert_eq!(check_timeout(0, kept, &cells), Ok(()), "{kept}");
        }
        for refused in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let message = check_timeout(2, refused, &cells)
                .expect_err("refused")
                .to_string();
            assert!(
                message.starts_with("cell 2: timeout must be a positive"),
                "{message}"
            );
            assert!(message.contains("1 to 600 seconds"), "{message}");
            assert!(message.contains("default of 30 seconds"), "{message}");
        }
        // What a kept timeout becomes is the config's part of the rule.
        assert_eq!(cells.timeout_for(Some(0.5)), cells.min_timeout);
        assert_eq!(cells.timeout_for(Some(1e300)), cells.max_timeout);
        let request = |timeout: f64| -> EvalRequest {
            serde_json::from_value(serde_json::json!(
                {"cells": [{"language": "js", "code": "1"}, {"language": "js", "code": "2", "timeout": timeout}]}
            ))
            .expect("request")
        };
        assert_eq!(validate(&request(1e300), &cells), Ok(()));
        let err = validate(&request(-1.0), &cells).expect_err("refused");
        assert!(
            matches!(err, RequestError::Timeout { index: 1, .. }),
            "{err}"
        );
    }

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

    #[test]
    fn tool_names_may_hold_dashes_and_dots() {
        let request = |name: &str| EvalRequest {
            tools: vec![crate::cell::ToolSpec {
                name: name.into(),
                description: String::new(),
                input_schema: serde_json::json!({}),
            }],
            ..serde_json::from_value(
                serde_json::json!({"cells": [{"language": "js", "code": "1"}]}),
            )
            .expect("request")
        };
        for good in [
            "list-dir",
            "github.search_issues",
            "3d",
            &"x".repeat(MAX_TOOL_NAME),
        ] {
            assert_eq!(
                validate(&request(good), &CellsConfig::default()),
                Ok(()),
                "{good}"
            );
        }
        for bad in ["", "a b", "a/b", "ünï", &"x".repeat(MAX_TOOL_NAME + 1)] {
            let err = validate(&request(bad), &CellsConfig::default()).expect_err(bad);
            assert!(err.to_string().contains("A-Z a-z 0-9 _ - ."), "{err}");
        }
    }

    #[test]
    fn session_names_are_checked() {
        assert!(validate_session_name("agent-1:task.2_x").is_ok());
        for bad in ["", "../etc", "a b", &"x".repeat(129)] {
            assert!(validate_session_name(bad).is_err(), "{bad:?}");
        }
    }
}
