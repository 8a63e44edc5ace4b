//! The Python engine: the shim's side of a cell, between the worker runtime's frames and the
//! `python -u runner.py` child (its start, its pipes' threads, interrupts, state tasks, its
//! end).

use crate::events::Event;
use crate::forked::PythonProcess;
#[cfg(test)]
use crate::install::*;
use crate::install::{install_ipython_module, install_runner};
use crate::locking::lock;
use crate::runtime::{
    Engine, Interrupt, LoadedState, Outbox, SavedState, StateError, WorkerContext, WorkerError,
};
use crate::{child, events, forked, interpreter, output_relay};
use crate::{runtime, start_check};
use cellvisor_ipc::state::NameInfo;
use cellvisor_ipc::{CellOutcome, ExecuteCell, Language, OutputStream};

// The state tasks reach into the engine's pipes and threads: a module of its own, inside it.
#[path = "state.rs"]
mod state;

/// Runs a Python worker on `socket` until the supervisor says `Shutdown` or goes away.
pub fn serve(socket: &Path) -> Result<(), WorkerError> {
    runtime::serve(socket, PythonEngine::new)
}
use crate::interpreter::Interpreter;
use crate::output_relay::SharedRouting;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long python may take to start and say `ready`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `execute` waits for a cell's sync marker after its `done` event; only a cell
/// that broke the output pipe makes it wait that long.
const SYNC_TIMEOUT: Duration = Duration::from_secs(2);
/// How often `execute` checks that python is still alive while a cell runs (EOF on the
/// event pipe is the fast path, but a process the cell forked may hold that pipe open).
const LIVENESS_INTERVAL: Duration = Duration::from_millis(100);
/// How long python may stay stopped (SIGSTOP, SIGTSTP) under a cell before it is declared
/// hung and killed: heartbeats reach only this shim, so the shim watches its child.
const STOPPED_GRACE: Duration = Duration::from_secs(1);
/// How long a python that closed its event pipe gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long the last output of a dead python may take to drain.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// The python child, the pipes to it and what its threads share with us.
pub struct PythonEngine {
    child: PythonProcess,
    /// The runner's fd 3, shared with the threads that write tool results.
    commands: Arc<Mutex<File>>,
    events: Receiver<Event>,
    routing: Arc<SharedRouting>,
    /// The pid interrupts go to; `None` once the child is reaped, so a recycled pid is
    /// never signalled.
    signal_target: Arc<Mutex<Option<Pid>>>,
    program: PathBuf,
    name: String,
    /// Why python can no longer run cells, once it died.
    dead: Option<String>,
    /// State tasks sent so far, which numbers them apart from cells (see `state`).
    state_tasks: u64,
}

impl PythonEngine {
    /// Finds the session's Python and starts its runner, or takes the runner a zygote forked
    /// for this worker when it runs that Python; a Python that cannot start fails the worker,
    /// saying why.
    pub fn new(context: &WorkerContext) -> Result<Self, WorkerError> {
        let interpreter = interpreter::locate(&context.runtime_dir).map_err(WorkerError::Engine)?;
        match forked::take() {
            Some(Ok(forked)) => {
                let rules = crate::sandbox::rules_from_env();
                // A sandboxed worker adopts only a runner that waits for its rules; one that
                // needs a network namespace starts its own (the namespace is entered before
                // the runner could be forked under it).
                let fits = match (&rules, &forked.confinement) {
                    (Ok(None), None) => true,
                    (Ok(Some(rules)), Some(_)) => !rules.network_namespace,
                    _ => false,
                };
                if forked.program == interpreter.program && fits {
                    return Self::adopt(&interpreter, &context.runtime_dir, forked);
                }
                // Not the Python this session runs on (or not confined as it must be): the
                // runner goes, and this worker starts its own.
                let mut process = forked.spawned.child;
                let _ = process.kill();
                let _ = process.wait();
            }
            Some(Err(why)) => eprintln!("cellvisor worker: ignoring the forked runner: {why}"),
            None => {}
        }
        Self::start(&interpreter, &context.runtime_dir)
    }

    /// Starts `interpreter` on the runner and waits for it to say it is ready.
    pub fn start(interpreter: &Interpreter, runtime_dir: &Path) -> Result<Self, WorkerError> {
        let runner = install_runner(runtime_dir).map_err(WorkerError::Engine)?;
        let token = random_token();
        if crate::sandbox::rules_from_env().is_ok_and(|rules| rules.is_some()) {
            // Confined, the shim could not write it later.
            install_ipython_module(&runner);
        }
        // Before the spawn: the interpreter and everything it starts inherit the confinement.
        crate::sandbox::confine_once(&interpreter_reads(interpreter, &runner))
            .map_err(|e| WorkerError::Engine(format!("sandbox: {e}")))?;
        let spawned = child::spawn(interpreter, &runner, &token).map_err(WorkerError::Engine)?;
        // Only a cell that uses IPython syntax imports it, well after start: written while
        // python starts rather than before.
        install_ipython_module(&runner);
        Self::attach(interpreter, spawned, &token)
    }

    /// Takes the runner a zygote forked into this process before it became the worker. Its
    /// files (the runner, the prelude, the IPython module) are there already: the
    /// supervisor wrote them before it started the zygote. A sandboxed worker confines
    /// itself here, where a plain one does before it starts python, with the same rules,
    /// and hands the runner (waiting, not yet running anything of the session) the same
    /// ruleset; a runner that cannot confine itself is killed and the worker fails.
    fn adopt(
        interpreter: &Interpreter,
        runtime_dir: &Path,
        forked: forked::Forked,
    ) -> Result<Self, WorkerError> {
        let mut spawned = forked.spawned;
        if let Some(socket) = forked.confinement {
            // Before the confinement, so that it stays outside it (see `Signaller`).
            let signaller = forked::Signaller::start(spawned.child.id()).map_err(|e| {
                WorkerError::Engine(format!("cannot start the runner's signaller: {e}"))
            });
            match (&mut spawned.child, signaller) {
                (
                    PythonProcess::Adopted {
                        signaller: slot, ..
                    },
                    Ok(signaller),
                ) => {
                    *slot = Some(signaller);
                }
                (_, Err(e)) => {
                    let _ = spawned.child.kill();
                    let _ = spawned.child.wait();
                    return Err(e);
                }
                (PythonProcess::Spawned(_), Ok(_)) => {}
            }
            // Written before the zygote started: this only finds it.
            let confined = install_runner(runtime_dir).and_then(|runner| {
                let reads = interpreter_reads(interpreter, &runner);
                crate::sandbox::confine_once_sharing(&reads, |ruleset| {
                    forked::give_ruleset(&socket, ruleset)
                })
            });
            if let Err(e) = confined {
                let _ = spawned.child.kill();
                let _ = spawned.child.wait();
                return Err(WorkerError::Engine(format!("sandbox: {e}")));
            }
        }
        Self::attach(interpreter, spawned, &forked.token)
    }

    /// Starts the threads that drain a running python's pipes and waits for its `ready`.
    fn attach(
        interpreter: &Interpreter,
        spawned: child::Spawned,
        token: &str,
    ) -> Result<Self, WorkerError> {
        let pid = Pid::from_raw(spawned.child.id() as i32);
        let routing = Arc::new(SharedRouting::default());
        let (sender, events) = mpsc::channel();
        let mut engine = PythonEngine {
            child: spawned.child,
            commands: Arc::new(Mutex::new(spawned.commands)),
            events,
            routing: Arc::clone(&routing),
            signal_target: Arc::new(Mutex::new(Some(pid))),
            program: interpreter.program.clone(),
            name: String::new(),
            dead: None,
            state_tasks: 0,
        };
        let prefix = format!("\x1ecellvisor-sync:{token}:").into_bytes();
        let output_events = sender.clone();
        let threads = output_relay::spawn_output_thread(
            spawned.output,
            spawned.errors,
            prefix,
            Arc::clone(&routing),
            output_events,
        )
        .and_then(|()| {
            let commands = Arc::clone(&engine.commands);
            events::spawn_event_thread(spawned.events, routing, sender, commands)
        });
        if let Err(e) = threads {
            return Err(WorkerError::Engine(format!(
                "cannot start the python pipe threads: {e}"
            )));
        }
        engine.name = engine.wait_ready()?;
        Ok(engine)
    }

    fn wait_ready(&mut self) -> Result<String, WorkerError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Ready { version }) => return Ok(version),
                Ok(Event::Closed) | Err(RecvTimeoutError::Disconnected) => {
                    let how = self.reap();
                    return Err(self.start_failure(&how));
                }
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    self.kill_and_reap();
                    let how = format!("did not start within {} s", START_TIMEOUT.as_secs());
                    return Err(self.start_failure(&how));
                }
            }
        }
    }

    /// An error that says which python failed and shows what it printed.
    fn start_failure(&self, how: &str) -> WorkerError {
        let guard = self.routing.wait_until(DRAIN_TIMEOUT, |s| s.closed);
        let printed = String::from_utf8_lossy(&guard.pending);
        let printed = printed.trim_end();
        WorkerError::Engine(start_check::exited_early(&self.program, how, printed))
    }

    /// Checks, without blocking, whether python has exited (reaping it if so).
    fn poll_exit(&mut self) -> Option<ExitStatus> {
        let mut target = lock(&self.signal_target);
        match self.child.try_wait() {
            Ok(Some(status)) => {
                *target = None;
                Some(status)
            }
            Ok(None) => None,
            // Already reaped or not ours to wait for: treat as gone.
            Err(_) => {
                *target = None;
                Some(ExitStatus::from_raw(0))
            }
        }
    }

    /// Waits (bounded) for python to exit, killing it if it lingers; says how it ended.
    fn reap(&mut self) -> String {
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            if let Some(status) = self.poll_exit() {
                return describe_exit(status);
            }
            if Instant::now() >= deadline {
                self.kill_and_reap();
                return "python stopped answering (its event pipe closed) and was killed".into();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill_and_reap(&mut self) {
        let mut target = lock(&self.signal_target);
        *target = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Python died under a cell: let its last output through, remember why, and give the
    /// error that ends the worker.
    fn died(&mut self, how: String) -> WorkerError {
        drop(self.routing.wait_until(DRAIN_TIMEOUT, |s| s.closed));
        self.dead = Some(how.clone());
        WorkerError::Engine(how)
    }

    fn send_interrupt(&self) {
        let target = lock(&self.signal_target);
        if let Some(pid) = *target {
            interrupt(pid, self.child.signaller().as_ref());
        }
    }

    /// Points output at `cell` and hands it what python printed before the first cell.
    fn route_to(&self, cell: &ExecuteCell, outbox: &Outbox) {
        let cell_id = cell.cell_id;
        let (pending, dropped) = {
            let mut state = self.routing.lock();
            state.cell_id = cell_id;
            state.tools.clone_from(&cell.tools);
            state.outbox = Some(outbox.clone());
            state.last_marker = None;
            (
                std::mem::take(&mut state.pending),
                std::mem::take(&mut state.dropped),
            )
        };
        outbox.output(cell_id, OutputStream::Stdout, &pending);
        if dropped > 0 {
            let note =
                format!("[cellvisor: {dropped} more bytes of python start-up output dropped]\n");
            outbox.output(cell_id, OutputStream::Stdout, note.as_bytes());
        }
    }

    /// Waits for the `done` of cell (or state task) `cell_id`, handing any other event to
    /// `other`.
    fn wait_done(
        &mut self,
        cell_id: u64,
        mut other: impl FnMut(Event),
    ) -> Result<(String, Option<String>, bool), WorkerError> {
        let mut stopped_since: Option<Instant> = None;
        loop {
            match self.events.recv_timeout(LIVENESS_INTERVAL) {
                Ok(Event::Done {
                    id,
                    status,
                    summary,
                    marker,
                }) if id == cell_id => return Ok((status, summary, marker)),
                Ok(Event::Closed) | Err(RecvTimeoutError::Disconnected) => {
                    let how = self.reap();
                    return Err(self.died(how));
                }
                Ok(event) => other(event),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(status) = self.poll_exit() {
                        return Err(self.died(describe_exit(status)));
                    }
                    if !cellvisor_os::proc::is_stopped(self.child.id()) {
                        stopped_since = None;
                    } else if stopped_since.get_or_insert_with(Instant::now).elapsed()
                        >= STOPPED_GRACE
                    {
                        self.kill_and_reap();
                        let how = format!(
                            "python (pid {}) was stopped by a signal and stayed stopped for {} s \
                             under a cell; it was killed",
                            self.child.id(),
                            STOPPED_GRACE.as_secs()
                        );
                        return Err(self.died(how));
                    }
                }
            }
        }
    }
}

impl Engine for PythonEngine {
    const LANGUAGE: Language = Language::Python;

    fn engine_name(&self) -> String {
        self.name.clone()
    }

    /// The cells run in python, not here: the changes go with the cell's command.
    fn apply_env_changes(&mut self, _changes: &[(String, Option<String>)]) {}

    fn own_children(&self) -> Vec<u32> {
        vec![self.child.id()]
    }

    fn reap_ended(&mut self, pids: &[u32]) {
        // Ahead of any next command in the pipe: the runner reaps them before the next cell.
        let mut command = serde_json::json!({"type": "reap", "pids": pids}).to_string();
        command.push('\n');
        let _ = events::lock_commands(&self.commands).write_all(command.as_bytes());
    }

    fn interrupt_hook(&self) -> Option<Arc<dyn Fn() + Send + Sync>> {
        let target = Arc::clone(&self.signal_target);
        let signaller = self.child.signaller();
        Some(Arc::new(move || {
            let target = lock(&target);
            if let Some(pid) = *target {
                // The child only: the cell's own subprocesses are the supervisor's business.
                interrupt(pid, signaller.as_ref());
            }
        }))
    }

    fn save_state(
        &mut self,
        payload: &Path,
        max_bytes: u64,
        interrupt: &Interrupt,
    ) -> Result<SavedState, StateError> {
        state::save(self, payload, max_bytes, interrupt)
    }

    fn load_state(
        &mut self,
        payload: &Path,
        len: u64,
        replace: bool,
        interrupt: &Interrupt,
    ) -> Result<LoadedState, StateError> {
        state::load(self, payload, len, replace, interrupt)
    }

    fn list_names(&mut self, interrupt: &Interrupt) -> Result<Vec<NameInfo>, StateError> {
        state::names(self, interrupt)
    }

    fn execute(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> Result<CellOutcome, WorkerError> {
        if let Some(how) = &self.dead {
            return Err(WorkerError::Engine(how.clone()));
        }
        self.route_to(cell, outbox);
        let tools = crate::tools::all_tools_json(&cell.tools);
        let mut command = serde_json::json!({
            "type": "execute",
            "id": cell.cell_id,
            "code": cell.code,
            "cwd": cell.cwd,
            "tools": tools,
        });
        if !cell.session_env.is_empty() || !cell.env_changes.is_empty() {
            // The interpreter's own environment: a prewarmed worker learns its session here,
            // and every worker the caller's environment where it changed.
            let set = cell.session_env.iter().cloned().chain(
                (cell.env_changes.iter())
                    .filter_map(|(name, value)| Some((name.clone(), value.clone()?))),
            );
            command["env"] = set.collect();
            let unset: Vec<&String> = (cell.env_changes.iter())
                .filter_map(|(name, value)| value.is_none().then_some(name))
                .collect();
            if !unset.is_empty() {
                command["unset"] = serde_json::json!(unset);
            }
        }
        let mut command = command.to_string();
        command.push('\n');
        let written = events::lock_commands(&self.commands).write_all(command.as_bytes());
        if written.is_err() {
            let how = self.reap();
            return Err(self.died(how));
        }
        // An interrupt raised before the command was in the pipe reached an idle runner,
        // which drops it; now the runner will apply it to this cell.
        if interrupt.is_raised() {
            self.send_interrupt();
        }
        let (status, summary, marker) = self.wait_done(cell.cell_id, drop)?;
        if marker {
            drop(self.routing.wait_until(SYNC_TIMEOUT, |s| {
                s.last_marker == Some(cell.cell_id) || s.closed
            }));
        }
        Ok(match status.as_str() {
            "ok" => CellOutcome::Completed,
            "interrupted" => CellOutcome::Interrupted,
            _ => CellOutcome::Failed {
                summary: summary.unwrap_or_else(|| "error".into()),
            },
        })
    }
}

impl Drop for PythonEngine {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// Sends SIGINT to python: through the signaller of a confined adopted runner, directly
/// otherwise.
fn interrupt(pid: Pid, signaller: Option<&forked::Signaller>) {
    match signaller {
        Some(signaller) => drop(signaller.send(libc::SIGINT)),
        None => drop(kill(pid, Signal::SIGINT)),
    }
}

/// "python exited with code 3" / "python was killed by signal 11 (SIGSEGV)".
fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("python exited with code {code}");
    }
    match status.signal() {
        Some(number) => match Signal::try_from(number) {
            Ok(signal) => format!("python was killed by signal {number} ({})", signal.as_str()),
            Err(_) => format!("python was killed by signal {number}"),
        },
        None => format!("python ended: {status}"),
    }
}

/// What a confined interpreter reads besides the system trees: its runner directory, its
/// installation (the prefix above the real binary's `bin`) and its virtualenv with the base
/// installation that venv was made from.
fn interpreter_reads(interpreter: &Interpreter, runner: &Path) -> Vec<PathBuf> {
    let mut reads: Vec<PathBuf> = runner.parent().map(Path::to_path_buf).into_iter().collect();
    let prefix_of = |binary: &Path| -> Option<PathBuf> {
        let real = std::fs::canonicalize(binary).ok()?;
        Some(real.parent()?.parent()?.to_path_buf())
    };
    reads.extend(prefix_of(&interpreter.program));
    if let Some(venv) = &interpreter.venv {
        reads.push(venv.clone());
        let config = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap_or_default();
        let home = config.lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "home").then(|| PathBuf::from(value.trim()))
        });
        if let Some(home) = home {
            reads.extend(prefix_of(&home.join("python3")));
            reads.extend(home.parent().map(Path::to_path_buf));
        }
    }
    reads
}

/// A nonce for the output sync markers, so a cell cannot fake one by accident.
fn random_token() -> String {
    let mut bytes = [0u8; 16];
    let read = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let seed = format!("{}:{:?}:{:p}", std::process::id(), now, &bytes);
        bytes[..8].copy_from_slice(&interpreter::fnv1a(seed.as_bytes()).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
