//! One running zygote: starting it (`python -u runner.py` with `CELLVISOR_ZYGOTE=1` and a
//! SOCK_SEQPACKET socket on its fd 3), asking it for a worker, and ending it.

use super::forked_child::ForkedChild;
use nix::sys::socket::{
    recv, sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use serde::Deserialize;
use std::ffi::OsString;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

/// The largest reply a zygote sends (a pid or an error).
const REPLY_BYTES: usize = 64 * 1024;
/// How long a zygote may take to make a worker: a fork and a clone take milliseconds.
const FORK_TIMEOUT: Duration = Duration::from_secs(5);

/// How to start a zygote.
pub struct ZygoteStart {
    pub program: PathBuf,
    pub runner: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    pub preload: Vec<String>,
    pub timeout: Duration,
}

use cellvisor_client::status::FailedPreload;

#[derive(Deserialize)]
struct Ready {
    version: String,
    #[serde(default)]
    preloaded: Vec<String>,
    #[serde(default)]
    failed: Vec<FailedPreload>,
    /// Threads it runs once loaded: it can only fork with one.
    #[serde(default = "one")]
    threads: u32,
}

fn one() -> u32 {
    1
}

/// Why a zygote did not start; `lasting` when starting it again would fail the same way
/// (its preloads left threads running), so no retry is made until its key changes.
#[derive(Debug)]
pub struct StartFailure {
    pub error: String,
    pub lasting: bool,
}

impl From<String> for StartFailure {
    fn from(error: String) -> StartFailure {
        StartFailure {
            error,
            lasting: false,
        }
    }
}

#[derive(Deserialize)]
struct Reply {
    pid: Option<u32>,
    error: Option<String>,
}

/// A running zygote.
pub struct Zygote {
    pub pid: u32,
    pub version: String,
    pub preloaded: Vec<String>,
    pub failed: Vec<FailedPreload>,
    pub forks: AtomicU64,
    /// Requests go one at a time: the zygote serves them in order on one thread.
    channel: tokio::sync::Mutex<AsyncFd<OwnedFd>>,
    alive: Arc<AtomicBool>,
    /// Dropped with the zygote: its watcher then kills it.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Zygote {
    /// Starts a zygote and waits for it to say it is ready; `on_exit` runs when it exits
    /// on its own (not when it is dropped).
    pub async fn start(
        start: ZygoteStart,
        on_exit: impl FnOnce(String) + Send + 'static,
    ) -> Result<Zygote, StartFailure> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| format!("cannot create the zygote's socket: {e}"))?;
        // Ours only: the zygote's end blocks (the two ends are separate open files).
        nix::fcntl::fcntl(
            ours.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| format!("cannot create the zygote's socket: {e}"))?;
        let mut command = Command::new(&start.program);
        command
            .arg("-u")
            .arg(&start.runner)
            .env_clear()
            .envs(start.env.iter().map(|(k, v)| (k, v)))
            .env(cellvisor_ipc::env::ZYGOTE, "1")
            .env(cellvisor_ipc::env::PRELOAD, start.preload.join(","))
            .current_dir(&start.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let theirs_raw = theirs.as_raw_fd();
        let parent = std::process::id();
        // SAFETY: the closure makes only async-signal-safe calls (dup2, fcntl, prctl, getppid,
        // _exit) on values prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(theirs_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", start.program.display()))?;
        drop(theirs);
        let pid = child.id().unwrap_or_default();
        let said = Arc::new(std::sync::Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let said = Arc::clone(&said);
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(target: "cellvisor::zygote", pid, "{line}");
                    if let Ok(mut kept) = said.lock() {
                        if kept.len() < 4096 {
                            kept.push_str(&line);
                            kept.push('\n');
                        }
                    }
                }
            });
        }
        // SAFETY: `ours` is an owned socket registered nowhere else.
        let channel = unsafe { AsyncFd::register(ours) }
            .map_err(|e| format!("zygote socket: {}", e.into_parts().1))?;
        let ready = tokio::time::timeout(start.timeout, receive(&channel)).await;
        let ready: Ready = match ready {
            Ok(Ok(bytes)) if !bytes.is_empty() => serde_json::from_slice(&bytes)
                .map_err(|e| format!("the zygote's ready message is not valid: {e}"))?,
            Ok(Ok(_)) | Ok(Err(_)) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let said = said
                    .lock()
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                return Err(format!("the zygote exited while starting: {said}").into());
            }
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(format!(
                    "the zygote did not start within {}",
                    humantime::format_duration(start.timeout)
                )
                .into());
            }
        };
        if ready.threads > 1 {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(StartFailure {
                error: format!(
                    "after its preloads the zygote runs {} threads (a preloaded module started \
                     them), and only a single-threaded process can be forked safely: Python \
                     workers start without it; preload other modules or set zygote = false",
                    ready.threads
                ),
                lasting: true,
            });
        }
        let alive = Arc::new(AtomicBool::new(true));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let watched = Arc::clone(&alive);
        tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => {
                    watched.store(false, Ordering::SeqCst);
                    let how = match status {
                        Ok(status) => crate::session::outcome::Exit::from(status).to_string(),
                        Err(error) => error.to_string(),
                    };
                    on_exit(how);
                }
                _ = stopped => {
                    watched.store(false, Ordering::SeqCst);
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
        });
        Ok(Zygote {
            pid,
            version: ready.version,
            preloaded: ready.preloaded,
            failed: ready.failed,
            forks: AtomicU64::new(0),
            channel: tokio::sync::Mutex::new(channel),
            alive,
            _stop: stop,
        })
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Asks for a worker: `request` is the JSON the zygote reads, `stderr` the write end of
    /// the pipe the worker's stderr goes to.
    pub async fn fork(&self, request: &[u8], stderr: &OwnedFd) -> Result<ForkedChild, ForkError> {
        let channel = self.channel.lock().await;
        let exchange = async {
            send(&channel, request, stderr).await?;
            receive(&channel).await
        };
        let reply = match tokio::time::timeout(FORK_TIMEOUT, exchange).await {
            Ok(Ok(reply)) if !reply.is_empty() => reply,
            Ok(Ok(_)) => {
                return Err(ForkError::Unresponsive(
                    "the zygote closed its socket".into(),
                ))
            }
            Ok(Err(e)) => return Err(ForkError::Unresponsive(format!("zygote socket: {e}"))),
            Err(_) => {
                return Err(ForkError::Unresponsive(format!(
                    "the zygote did not answer a fork request within {} s (stopped or hung)",
                    FORK_TIMEOUT.as_secs()
                )))
            }
        };
        let reply: Reply = serde_json::from_slice(&reply).map_err(|e| {
            ForkError::Unresponsive(format!("the zygote's reply is not valid: {e}"))
        })?;
        match (reply.pid, reply.error) {
            (Some(pid), _) if pid > 1 => {
                self.forks.fetch_add(1, Ordering::Relaxed);
                ForkedChild::new(pid).map_err(|e| {
                    ForkError::Refused(format!("cannot watch forked worker {pid}: {e}"))
                })
            }
            (_, Some(error)) => Err(ForkError::Refused(format!(
                "the zygote could not fork: {error}"
            ))),
            _ => Err(ForkError::Unresponsive(
                "the zygote's reply has neither a pid nor an error".into(),
            )),
        }
    }
}

async fn send(channel: &AsyncFd<OwnedFd>, bytes: &[u8], fd: &OwnedFd) -> std::io::Result<()> {
    let fds = [fd.as_raw_fd()];
    loop {
        let mut ready = channel.writable().await?;
        let sent = ready.try_io(|inner| {
            sendmsg::<()>(
                inner.as_raw_fd(),
                &[IoSlice::new(bytes)],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(std::io::Error::from)
        });
        match sent {
            Ok(result) => return result.map(drop),
            Err(_would_block) => continue,
        }
    }
}

/// Why a fork request got no worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    /// The zygote did not answer in time, closed its socket or answered garbage: it is
    /// stopped, hung or broken, and is replaced.
    #[error("{0}")]
    Unresponsive(String),
    /// The zygote answered, but no worker came of it (a failed fork): it stays.
    #[error("{0}")]
    Refused(String),
}

/// One packet; empty when the zygote closed its end.
async fn receive(channel: &AsyncFd<OwnedFd>) -> std::io::Result<Vec<u8>> {
    let mut buffer = vec![0u8; REPLY_BYTES];
    loop {
        let mut ready = channel.readable().await?;
        let got = ready.try_io(|inner| {
            recv(inner.as_raw_fd(), &mut buffer, MsgFlags::empty()).map_err(std::io::Error::from)
        });
        match got {
            Ok(result) => {
                let len = result?;
                buffer.truncate(len);
                return Ok(buffer);
            }
            Err(_would_block) => continue,
        }
    }
}
