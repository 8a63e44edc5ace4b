//! The library API: a running supervisor and the calls a host makes on it.
//!
//! [`Cellvisor::start`] runs the actix system on a thread of its own (workers die with the
//! thread that spawned them, so it must live as long as the supervisor) and hands back a
//! handle whose methods can be awaited from any async runtime.

use crate::cell::{CellEvent, CellResult, CellSpec, EvalRequest, EvalResult, ToolCallRequest};
use crate::python_choice::PythonChoice;
use crate::session::{CellJob, SessionKey, SessionStatus};
use crate::supervisor::{
    Control, ControlAction, PrewarmedCount, ReloadConfig, RequestDone, ShutdownAll, Status, Submit,
    Supervisor, WorkerBase,
};
use actix::prelude::*;
use cellvisor_config::Config;
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

/// How to start a supervisor.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub config: Config,
    /// The cellvisor executable that workers run as (`cellvisor __worker ...`). Default: the
    /// current executable, which is right for the `cellvisor` binary; an embedding program
    /// either points this at an installed `cellvisor` or calls
    /// [`crate::worker_entry::run_worker_if_requested`] first thing in `main`.
    pub worker_exe: Option<PathBuf>,
    /// The per-user runtime directory; default `$XDG_RUNTIME_DIR/cellvisor` (or a private
    /// directory under the temp dir). Each supervisor makes a private directory inside it.
    pub runtime_dir: Option<PathBuf>,
}

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot prepare the runtime directory {path}: {source}")]
    RuntimeDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot find the cellvisor executable: {0}")]
    Exe(std::io::Error),
    #[error("cannot start the supervisor thread: {0}")]
    Thread(std::io::Error),
}

/// A request the supervisor refuses as a whole, before running anything.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RequestError {
    #[error("invalid session name {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ - :")]
    SessionName(String),
    #[error("a request needs at least one cell")]
    NoCells,
    #[error(
        "the request has {count} cells; at most {max} cells per request \
         (cells.max-cells-per-request): split it into several requests"
    )]
    TooManyCells { count: usize, max: usize },
    #[error("cell {index}: timeout must be a positive number of seconds, got {value}")]
    Timeout { index: usize, value: f64 },
    #[error("cell {index}: code is {len} bytes; at most {max} bytes per cell", max = MAX_CODE_BYTES)]
    CodeTooLarge { index: usize, len: usize },
    #[error("working directory {0} does not exist or is not a directory")]
    Cwd(PathBuf),
    #[error("invalid tool name {0:?}: use 1 to {max} characters from A-Z a-z 0-9 _ - .", max = MAX_TOOL_NAME)]
    ToolName(String),
    #[error("tool {0:?} is declared twice")]
    DuplicateTool(String),
    #[error("the supervisor has stopped")]
    Stopped,
}

/// A running supervisor. Cheap to share (`Arc`); stop it with [`Cellvisor::shutdown`].
pub struct Cellvisor {
    supervisor: Addr<Supervisor>,
    /// One lock per session name: a request's cells run together, not interleaved with
    /// another request's cells for the same session.
    request_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The configuration in force, to tell what a reload changes.
    config: Mutex<Config>,
    next_request: std::sync::atomic::AtomicU64,
    system: actix::System,
    run_dir: PathBuf,
    _run_dir_guard: tempfile::TempDir,
}

impl Cellvisor {
    /// Starts a supervisor with its own runtime directory.
    pub fn start(options: Options) -> Result<Cellvisor, StartupError> {
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
            exe,
            run_dir: run_dir.clone(),
            artifacts,
            store_dir: crate::paths::stores_dir(),
        };
        let initial_config = options.config.clone();
        let config = Arc::new(options.config);
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
        Ok(Cellvisor {
            supervisor,
            request_locks: Mutex::new(HashMap::new()),
            thread: Mutex::new(Some(thread)),
            config: Mutex::new(initial_config),
            next_request: std::sync::atomic::AtomicU64::new(1),
            system,
            run_dir,
            _run_dir_guard: run_dir_guard,
        })
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
        let max_cells = match self.config.lock() {
            Ok(config) => config.cells.max_cells_per_request,
            Err(poisoned) => poisoned.into_inner().cells.max_cells_per_request,
        };
        validate(&request, max_cells)?;
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
        for (index, spec) in request.cells.iter().enumerate() {
            if stopped {
                results.push(CellResult::skipped(index, spec));
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
                Err(message) => CellResult::refused(index, spec, message),
                Ok((job_spec, max_output_bytes)) => {
                    let (reply, outcome) = oneshot::channel();
                    let job = CellJob {
                        index,
                        spec: job_spec,
                        cwd: request.cwd.clone(),
                        events: events.clone(),
                        tools: Arc::clone(&tools),
                        tool_host: tool_host.clone(),
                        max_output_bytes,
                        python: python.clone().filter(|_| spec.language == Language::Python),
                        requester: requester.clone(),
                        reply,
                    };
                    let key = SessionKey {
                        session: session.to_string(),
                        language: spec.language,
                    };
                    self.supervisor
                        .send(Submit {
                            key,
                            cwd: request.cwd.clone(),
                            job,
                            request: request_id,
                        })
                        .await
                        .map_err(|_| RequestError::Stopped)?;
                    match outcome.await {
                        Ok(outcome) => outcome.into_result(index, spec),
                        Err(_) => CellResult::refused(
                            index,
                            spec,
                            "the session ended before the cell finished".into(),
                        ),
                    }
                }
            };
            if let Some(events) = &events {
                let _ = events
                    .send(CellEvent::CellDone {
                        index,
                        status: result.status,
                    })
                    .await;
            }
            stopped = result.exit_code != 0;
            results.push(result);
        }
        Ok(EvalResult::from_cells(results))
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

    /// The Python this request's cells run on, when it has Python cells.
    fn python_choice(&self, request: &EvalRequest) -> Option<PythonChoice> {
        if !request.cells.iter().any(|c| c.language == Language::Python) {
            return None;
        }
        let worker_env = {
            let config = match self.config.lock() {
                Ok(config) => config,
                Err(poisoned) => poisoned.into_inner(),
            };
            crate::environment::for_worker(&config, Language::Python)
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
        self.system.stop();
        let thread = match self.thread.lock() {
            Ok(mut thread) => thread.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(thread) = thread {
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

/// The cell as its session runs it: a JavaScript `// @exec:` line turned into the cell's
/// timeout and output cap (code mode). `Err` is the message for a bad line.
fn with_directive(spec: &CellSpec) -> Result<(CellSpec, Option<u64>), String> {
    let mut job = spec.clone();
    if spec.language != Language::JavaScript {
        return Ok((job, None));
    }
    let Some(directive) = crate::directive::parse(&spec.code)? else {
        return Ok((job, None));
    };
    if let Some(time) = directive.yield_time() {
        job.timeout = Some(time.as_secs_f64());
    }
    Ok((job, directive.max_output_bytes()))
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

fn validate(request: &EvalRequest, max_cells: usize) -> Result<(), RequestError> {
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
    if let Some((index, value)) = request.cells.iter().enumerate().find_map(|(i, c)| {
        c.timeout
            .filter(|t| !(t.is_finite() && *t > 0.0))
            .map(|t| (i, t))
    }) {
        return Err(RequestError::Timeout { index, value });
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

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(validate(&request(good), 10), Ok(()), "{good}");
        }
        for bad in ["", "a b", "a/b", "ünï", &"x".repeat(MAX_TOOL_NAME + 1)] {
            let err = validate(&request(bad), 10).expect_err(bad);
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
