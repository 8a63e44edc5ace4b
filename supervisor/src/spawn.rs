//! Starting a worker process, and ending it with everything under it.
//!
//! Every worker is the cellvisor executable re-run as `__worker <lang> --socket PATH` (a
//! Python worker is the smaller `cellvisor-py-worker` beside it, when it is there:
//! [`WorkerPrograms`]), in a process group of its own (so one signal reaches the cell's children too), with
//! `PR_SET_PDEATHSIG` so it dies with the supervisor, and with the filtered environment.
//! Workers are child subreapers, so a cell's child that left the group is still under its
//! worker: killing a worker outright ([`ProcessHandle::kill_tree`]) ends that tree too.
//!
//! - `programs`: which program a worker runs ([`WorkerPrograms`]).
//! - `process`: the started process: waiting, signalling, ending it and its tree.
//!
//! Sessions start workers through a [`Launcher`], so actor tests can put a scripted worker
//! speaking the real frames in place of a process.

mod process;
mod programs;

pub use process::{ProcessHandle, WorkerProcess};
pub use programs::WorkerPrograms;

use crate::socket_halves::{split_async, ReadSide, WriteSide};
use crate::worker_entry::WORKER_SUBCOMMAND;
use crate::zygote::Zygotes;
use cellvisor_ipc::handshake::{supervisor_handshake, HandshakeError};
use cellvisor_ipc::socket::bind_async;
use cellvisor_ipc::taken::TakenRecord;
use cellvisor_ipc::Language;
use interprocess::local_socket::traits::tokio::Listener as _;
use nix::sys::signal::Signal;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

/// Everything needed to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The program to run, and its arguments before `__worker` ([`WorkerPrograms::command`]).
    pub exe: PathBuf,
    pub exe_args: Vec<OsString>,
    /// Run (without `exe_args`) when `exe` cannot be started ([`WorkerPrograms::fallback`]).
    pub fallback: Option<PathBuf>,
    pub language: Language,
    /// The supervisor's private runtime directory, where the socket is made.
    pub run_dir: PathBuf,
    pub cwd: Option<PathBuf>,
    /// The complete environment of the worker (already filtered); the record of taken cells
    /// is added at spawn.
    pub env: crate::environment::WorkerEnv,
    pub start_timeout: Duration,
    pub rlimits: Vec<crate::limits::Rlimit>,
    /// A Python worker may be forked from a zygote (`python.zygote`).
    pub zygote: bool,
    /// What that zygote preloads (`python.preload`): part of which zygote serves it.
    pub preload: Vec<String>,
    /// The uid (and gid of the same number) the worker runs as: its session's lease at the
    /// `uid` isolation level; `None`: the daemon's own.
    pub uid: Option<u32>,
    /// At the `uid` level, the session's directories to give to `uid` before the worker
    /// starts (run off the supervisor's thread, in the session's turn).
    pub handover: Option<Arc<crate::isolation::turns::Handover>>,
}

/// Starts workers; [`ProcessLauncher`] outside tests.
pub trait Launcher: Send + Sync + 'static {
    fn launch(&self, spec: WorkerSpec, serial: u64)
        -> BoxFuture<Result<StartedWorker, StartError>>;

    /// Gets ready to start workers like `spec`'s quickly (a zygote for its Python).
    fn warm(&self, _spec: &WorkerSpec) {}

    /// Whether a worker like `spec`'s would be forked from a ready zygote now.
    fn forks_now(&self, _spec: &WorkerSpec) -> bool {
        false
    }

    /// Whether the zygote a worker like `spec`'s would be forked from is starting.
    fn zygote_starting(&self, _spec: &WorkerSpec) -> bool {
        false
    }

    /// What `status` shows of the launcher's zygotes.
    fn zygotes(&self) -> Vec<crate::zygote::ZygoteStatus> {
        Vec::new()
    }
}

/// A boxed future that can move between threads.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Starts real worker processes ([`start`]), Python ones forked from a zygote where one
/// serves them.
pub struct ProcessLauncher {
    pub zygotes: Option<Arc<Zygotes>>,
}

impl Launcher for ProcessLauncher {
    fn launch(
        &self,
        spec: WorkerSpec,
        serial: u64,
    ) -> BoxFuture<Result<StartedWorker, StartError>> {
        let zygotes = self.zygotes.clone();
        Box::pin(async move { start(&spec, serial, zygotes.as_deref()).await })
    }

    fn warm(&self, spec: &WorkerSpec) {
        if let Some(zygotes) = &self.zygotes {
            zygotes.warm(spec);
        }
    }

    fn forks_now(&self, spec: &WorkerSpec) -> bool {
        self.zygotes.as_ref().is_some_and(|z| z.forks_now(spec))
    }

    fn zygote_starting(&self, spec: &WorkerSpec) -> bool {
        self.zygotes.as_ref().is_some_and(|z| z.starting(spec))
    }

    fn zygotes(&self) -> Vec<crate::zygote::ZygoteStatus> {
        self.zygotes
            .as_ref()
            .map(|z| z.status())
            .unwrap_or_default()
    }
}

/// A worker that connected and passed the handshake.
pub struct StartedWorker {
    pub pid: u32,
    pub engine: String,
    pub child: WorkerProcess,
    /// The connection, read and written by the session's link.
    pub reader: ReadSide,
    pub writer: WriteSide,
    /// The last few KiB the worker wrote to stderr, for crash reports.
    pub stderr_tail: StderrTail,
    /// Where the worker records the cell it took, read once it is gone.
    pub taken: TakenRecord,
}

/// Why a worker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the worker socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the worker's record of taken cells {path}: {source}")]
    TakenRecord {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("worker exited during start-up ({status}){stderr}")]
    ExitedEarly { status: String, stderr: String },
    #[error("worker did not connect within {0:?}")]
    Timeout(Duration),
    #[error("worker handshake failed: {error}{stderr}")]
    Handshake {
        error: HandshakeError,
        stderr: String,
    },
    #[error("worker socket error: {0}")]
    Accept(std::io::Error),
    /// The worker closed its connection before its handshake; the text is what it said why.
    #[error("{0}")]
    GaveUp(String),
    /// The session's directories could not be given to its uid.
    #[error("isolation: {0}")]
    Isolation(String),
}

/// The end of a worker's stderr, kept for the crash message, and whether its reader has
/// seen the pipe close (so a crash report waits for the worker's last words only as long as
/// they are still coming).
#[derive(Clone)]
pub struct StderrTail {
    text: Arc<Mutex<VecDeque<u8>>>,
    closed: tokio::sync::watch::Sender<bool>,
}

const STDERR_TAIL_BYTES: usize = 4096;

impl Default for StderrTail {
    /// A tail nobody writes to: already closed.
    fn default() -> StderrTail {
        StderrTail {
            text: Arc::default(),
            closed: tokio::sync::watch::Sender::new(true),
        }
    }
}

impl StderrTail {
    /// A tail a reader task fills until it calls [`StderrTail::close`].
    fn open() -> StderrTail {
        StderrTail {
            text: Arc::default(),
            closed: tokio::sync::watch::Sender::new(false),
        }
    }

    fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Waits until the worker's stderr has closed, or `at_most`.
    pub async fn settled(&self, at_most: Duration) {
        let mut closed = self.closed.subscribe();
        let _ = tokio::time::timeout(at_most, closed.wait_for(|closed| *closed)).await;
    }

    fn push_line(&self, line: &str) {
        if let Ok(mut buf) = self.text.lock() {
            buf.extend(line.as_bytes());
            buf.push_back(b'\n');
            while buf.len() > STDERR_TAIL_BYTES {
                buf.pop_front();
            }
        }
    }

    /// The kept text, trimmed; empty when the worker said nothing.
    pub fn text(&self) -> String {
        match self.text.lock() {
            Ok(buf) => {
                let bytes: Vec<u8> = buf.iter().copied().collect();
                String::from_utf8_lossy(&bytes).trim().to_string()
            }
            Err(_) => String::new(),
        }
    }
}

/// Starts a worker and waits for it to connect and say hello.
pub async fn start(
    spec: &WorkerSpec,
    serial: u64,
    zygotes: Option<&Zygotes>,
) -> Result<StartedWorker, StartError> {
    if let Some(handover) = spec.handover.clone() {
        tokio::task::spawn_blocking(move || handover.run())
            .await
            .map_err(|e| StartError::Isolation(format!("the directory handover failed: {e}")))?
            .map_err(StartError::Isolation)?;
    }
    let socket_path = spec.run_dir.join(format!(
        "w{}-{}-{serial}.sock",
        std::process::id(),
        spec.language
    ));
    let _ = std::fs::remove_file(&socket_path);
    let listener = bind_async(&socket_path).map_err(|source| StartError::Socket {
        path: socket_path.clone(),
        source,
    })?;
    // The socket file is only needed until the worker connects.
    let _remove_socket = RemoveOnDrop(socket_path.clone());
    // The record of taken cells: its name is only needed until the worker has opened it,
    // which it does before its hello.
    let taken_path = socket_path.with_extension("taken");
    let _ = std::fs::remove_file(&taken_path);
    let taken = TakenRecord::create(&taken_path).map_err(|source| StartError::TakenRecord {
        path: taken_path.clone(),
        source,
    })?;
    let _remove_taken = RemoveOnDrop(taken_path.clone());
    if let Some(uid) = spec.uid {
        // The worker connects and opens its record as its session's uid, and only it may.
        for path in [&socket_path, &taken_path] {
            give_to(path, uid).map_err(|source| StartError::Socket {
                path: path.clone(),
                source,
            })?;
        }
    }

    let forked = match zygotes {
        Some(zygotes) => fork_from_zygote(zygotes, spec, &socket_path, &taken_path).await,
        None => None,
    };
    let (mut child, stderr) = match forked {
        Some((child, stderr)) => (
            WorkerProcess::Forked {
                child,
                reaped: Arc::default(),
            },
            Some(Box::new(stderr) as WorkerStderr),
        ),
        None => {
            let mut child = spawn_worker(spec, &socket_path, &taken_path)?;
            let stderr = child.stderr.take().map(|s| Box::new(s) as WorkerStderr);
            (
                WorkerProcess::Os {
                    child,
                    reaped: Arc::default(),
                },
                stderr,
            )
        }
    };
    let pid = child.handle().pid();
    let stderr_tail = match stderr {
        Some(stderr) => {
            let stderr_tail = StderrTail::open();
            let tail = stderr_tail.clone();
            let language = spec.language;
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "cellvisor::worker", %language, pid, "{line}");
                    tail.push_line(&line);
                }
                tail.close();
            });
            stderr_tail
        }
        None => StderrTail::default(),
    };

    let connected = tokio::time::timeout(spec.start_timeout, async {
        loop {
            tokio::select! {
                accepted = listener.accept() => return accepted.map_err(StartError::Accept),
                _ = tokio::time::sleep(Duration::from_millis(25)) => {
                    if let Some(exit) = child.try_exit() {
                        // Let the stderr reader collect the reason, as long as it still comes.
                        stderr_tail.settled(Duration::from_millis(20)).await;
                        return Err(StartError::ExitedEarly {
                            status: exit.to_string(),
                            stderr: said_on_stderr(&stderr_tail),
                        });
                    }
                }
            }
        }
    })
    .await;
    let stream = match connected {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            child.kill_and_reap().await;
            return Err(err);
        }
        Err(_) => {
            child.kill_and_reap().await;
            return Err(StartError::Timeout(spec.start_timeout));
        }
    };

    let (mut reader, mut writer) = tokio::io::split(stream);
    let hello = tokio::time::timeout(
        spec.start_timeout,
        supervisor_handshake(&mut reader, &mut writer),
    )
    .await;
    let hello = match hello {
        Ok(Ok(hello)) => hello,
        Ok(Err(error)) => {
            child.kill_and_reap().await;
            // The worker is gone: its stderr closes once the reader has the reason.
            stderr_tail.settled(Duration::from_millis(500)).await;
            let said = stderr_tail.text();
            return Err(match error {
                // It gave up before its Hello and said why: that is the error.
                HandshakeError::Closed | HandshakeError::Frame(_) if !said.is_empty() => {
                    StartError::GaveUp(said)
                }
                error => StartError::Handshake {
                    error,
                    stderr: said_on_stderr(&stderr_tail),
                },
            });
        }
        Err(_) => {
            child.kill_and_reap().await;
            return Err(StartError::Timeout(spec.start_timeout));
        }
    };
    let (reader, writer) = match split_async(reader.unsplit(writer)) {
        Ok(halves) => halves,
        Err(err) => {
            child.kill_and_reap().await;
            return Err(StartError::Accept(err));
        }
    };
    Ok(StartedWorker {
        pid,
        engine: hello.engine,
        child,
        reader,
        writer,
        stderr_tail,
        taken,
    })
}

/// A worker's stderr, spawned or forked.
type WorkerStderr = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// Spawns the worker program (or its fallback, when the program cannot be started).
fn spawn_worker(
    spec: &WorkerSpec,
    socket_path: &Path,
    taken_path: &Path,
) -> Result<tokio::process::Child, StartError> {
    let launch = |program: &Path, args: &[OsString]| {
        worker_command(spec, program, args, socket_path, taken_path).spawn()
    };
    match (launch(&spec.exe, &spec.exe_args), &spec.fallback) {
        (Ok(child), _) => Ok(child),
        (Err(source), Some(fallback)) => {
            tracing::warn!(
                "cannot start {}: {source}; starting {} instead",
                spec.exe.display(),
                fallback.display()
            );
            launch(fallback, &[]).map_err(|source| StartError::Spawn {
                exe: fallback.clone(),
                source,
            })
        }
        (Err(source), None) => Err(StartError::Spawn {
            exe: spec.exe.clone(),
            source,
        }),
    }
}

/// The worker forked by its zygote, and the read end of its stderr; `None` when no zygote
/// serves it now (the caller spawns it).
async fn fork_from_zygote(
    zygotes: &Zygotes,
    spec: &WorkerSpec,
    socket_path: &Path,
    taken_path: &Path,
) -> Option<(crate::zygote::ForkedChild, tokio::net::unix::pipe::Receiver)> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let (program, args) = if executable(&spec.exe) {
        (spec.exe.clone(), spec.exe_args.clone())
    } else {
        (spec.fallback.clone().filter(|f| executable(f))?, Vec::new())
    };
    let mut argv = vec![program.into_os_string()];
    argv.extend(args);
    argv.extend([
        WORKER_SUBCOMMAND.into(),
        spec.language.short_name().into(),
        "--socket".into(),
        socket_path.as_os_str().to_owned(),
    ]);
    let mut env = spec.env.clone();
    env.set_taken_record(taken_path);
    let worker_env: Vec<(OsString, OsString)> = env
        .render()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(read).ok()?;
    let child = zygotes.fork(spec, &argv, &worker_env, &write).await?;
    Some((child, stderr))
}

/// The command that starts a worker for `spec` as `program args __worker <lang> --socket
/// PATH`: in a process group of its own, with the filtered environment, the record of taken
/// cells, the death signal and the rlimits.
fn worker_command(
    spec: &WorkerSpec,
    program: &Path,
    args: &[OsString],
    socket_path: &Path,
    taken_path: &Path,
) -> Command {
    let mut env = spec.env.clone();
    env.set_taken_record(taken_path);
    let mut command = Command::new(program);
    command
        .args(args)
        .arg(WORKER_SUBCOMMAND)
        .arg(spec.language.short_name())
        .arg("--socket")
        .arg(socket_path)
        .env_clear()
        .envs(env.render())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    if let Some(uid) = spec.uid {
        // Set before the directory is entered and before `pre_exec`, with the supplementary
        // groups dropped: the parent-death signal set there survives (a change of uid
        // clears it), and the worker enters its directory as its session's uid.
        command.uid(uid).gid(uid);
    }
    let parent = std::process::id();
    let rlimits = spec.rlimits.clone();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (prctl, getppid, setrlimit, _exit) on data prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
            // The supervisor may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            crate::limits::apply_in_child(&rlimits)
        });
    }
    command
}

/// ": <what the worker wrote to stderr>", or nothing.
fn said_on_stderr(tail: &StderrTail) -> String {
    let said = tail.text();
    if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    }
}

/// Gives the file at `path` (not following a link) to `uid:uid`, readable and writable by it
/// alone.
fn give_to(path: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl StartedWorker {
    /// Ends a worker nobody will use (its session went away while it started, or the
    /// prewarm pool no longer wants it).
    pub async fn discard(mut self) {
        self.child.handle().signal_group(Signal::SIGKILL);
        self.child.wait().await;
    }
}
