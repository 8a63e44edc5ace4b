//! Why things happen to a session, as typed values, and the one place they become the text a
//! host reads: how a worker's process ended ([`Exit`], [`WorkerEnd`]), why a worker was killed
//! ([`KillReason`]), how it was lost ([`WorkerLoss`]),
//! why a cell was cancelled ([`CancelCause`]) and why a session was evicted ([`Eviction`]).

use crate::session::SessionKey;
use cellvisor_client::usage::{MemoryLimit, OutOfMemory};
use cellvisor_ipc::Language;
use std::fmt;
use std::time::Duration;

/// Why the supervisor killed a live worker on purpose (a policy, not a crash).
#[derive(Debug, Clone, PartialEq)]
pub enum KillReason {
    /// No frame at all (not even a `Pong`) within `heartbeat-timeout`.
    MissedHeartbeats { timeout: Duration },
    /// The running cell did not end within `interrupt-grace` after its interrupt.
    IgnoredInterrupt { grace: Duration },
    /// The worker's process tree used more memory than `limits.max-rss`.
    OverMemory { rss: u64, cap: u64 },
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KillReason::MissedHeartbeats { timeout } => write!(
                f,
                "missed heartbeats (no answer for {}, heartbeat-timeout)",
                humanize(*timeout)
            ),
            KillReason::IgnoredInterrupt { grace } => write!(
                f,
                "did not stop within interrupt-grace ({}) after the interrupt",
                humanize(*grace)
            ),
            KillReason::OverMemory { rss, cap } => write!(
                f,
                "used {} of memory (RSS), over the cap of {} (limits.max-rss)",
                bytesize::ByteSize::b(*rss),
                bytesize::ByteSize::b(*cap)
            ),
        }
    }
}

impl KillReason {
    /// The typed verdict when the kill was for memory (`limits.max-rss`).
    pub fn out_of_memory(&self) -> Option<OutOfMemory> {
        match self {
            KillReason::OverMemory { rss, cap } => Some(OutOfMemory {
                limit: MemoryLimit::MaxRss,
                limit_bytes: *cap,
                used_bytes: *rss,
            }),
            KillReason::MissedHeartbeats { .. } | KillReason::IgnoredInterrupt { .. } => None,
        }
    }
}

/// How a worker was lost without being asked to stop.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerLoss {
    /// We killed it for a policy.
    Killed(KillReason),
    /// It ended by itself; the text is its last word or its exit status
    /// (`killed by signal 11 (SIGSEGV)`).
    Crashed(String),
}

impl WorkerLoss {
    /// A worker that ended by itself, `how` (its last word or exit status). What it wrote last
    /// on stderr explains a death before any cell (a thread it could not start) and is added
    /// when given and not already said; a process or thread that could not be created gets
    /// the process-limit hint.
    pub fn crashed(how: String, last_stderr_line: Option<&str>) -> WorkerLoss {
        let mut text = match last_stderr_line.map(str::trim) {
            Some(said) if !said.is_empty() && !how.contains(said) => format!("{how}: {said}"),
            _ => how,
        };
        text.push_str(process_limit_hint(&text));
        WorkerLoss::Crashed(text)
    }
}

impl fmt::Display for WorkerLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerLoss::Killed(reason) => reason.fmt(f),
            WorkerLoss::Crashed(how) => f.write_str(how),
        }
    }
}

/// How a worker's process ended, as its supervisor saw it when it reaped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited by itself with this code.
    Code(i32),
    /// A signal ended it (by its number).
    Signal(i32),
    /// It ended, with neither a code nor a signal to say how.
    Unknown,
    /// Waiting for it failed (the error's text).
    Unreaped(String),
}

impl From<std::process::ExitStatus> for Exit {
    fn from(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Unknown,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal(signal) => match nix::sys::signal::Signal::try_from(*signal) {
                Ok(sig) => write!(f, "killed by signal {signal} ({})", sig.as_str()),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
            Exit::Unknown => f.write_str("exited"),
            Exit::Unreaped(err) => write!(f, "could not be reaped: {err}"),
        }
    }
}

/// How a worker that nobody asked to stop ended: its process's [`Exit`] and its own last
/// word (a `Fatal` frame, or a bad frame it sent), if it said one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEnd {
    pub exit: Exit,
    pub fatal: Option<String>,
}

impl WorkerEnd {
    /// Whether it (or its Python interpreter, as its last word says) died of SIGKILL: the
    /// supervisor's own kills are [`KillReason`]s and planned stops, never a `WorkerEnd`.
    pub fn unsent_sigkill(&self) -> bool {
        self.exit == Exit::Signal(libc::SIGKILL)
            || self
                .fatal
                .as_deref()
                .is_some_and(|fatal| fatal.contains(INTERPRETER_SIGKILLED))
    }

    /// The same end, told as the kernel's OOM killer's.
    pub fn by_kernel_oom(self) -> WorkerEnd {
        let fatal = match self.fatal {
            Some(fatal) => format!("{fatal}: the kernel's out-of-memory killer ended it"),
            None => "the kernel's out-of-memory killer ended it".to_string(),
        };
        WorkerEnd {
            exit: self.exit,
            fatal: Some(fatal),
        }
    }
}

/// How the Python worker's last word says its interpreter died of SIGKILL.
const INTERPRETER_SIGKILLED: &str = "python was killed by signal 9 (SIGKILL)";

/// The verdict of a cell whose worker the kernel's OOM killer took (see
/// [`super::kernel_oom`]): the cgroup's limit when that was the one, and `used` (the most
/// the worker's tree was seen using; 0 when it was never measured).
pub fn kernel_out_of_memory(source: super::kernel_oom::OomSource, used: u64) -> OutOfMemory {
    let limit_bytes = match source {
        super::kernel_oom::OomSource::Cgroup { limit } => limit.unwrap_or(0),
        super::kernel_oom::OomSource::Host => 0,
    };
    OutOfMemory {
        limit: MemoryLimit::KernelOom,
        limit_bytes,
        used_bytes: used,
    }
}

impl fmt::Display for WorkerEnd {
    /// Its crash story: its own last word when it said one, with its exit status only when
    /// that adds something. A worker that gives up says why and then exits with a code, so
    /// the code would only repeat (or contradict) its reason; a signal is news.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.fatal, &self.exit) {
            (Some(fatal), Exit::Code(_)) => f.write_str(fatal),
            (Some(fatal), exit) => write!(f, "{fatal} ({exit})"),
            (None, exit) => exit.fmt(f),
        }
    }
}

/// Why a running cell was stopped before it finished by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CancelCause {
    /// It ran past its timeout.
    Timeout(Duration),
    /// The host interrupted it, or the host that asked for it went away.
    Interrupt,
    /// Its session stopped its worker under it.
    SessionStopped(StopCause),
}

/// Why a session stopped its worker on purpose, as the running cell is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopCause {
    /// A host reset or closed the session, or the supervisor evicted it.
    #[default]
    ResetOrClosed,
    /// The daemon (or whatever ran the supervisor) is stopping every session.
    DaemonStopped,
}

impl CancelCause {
    /// The line appended to the cell's output.
    pub fn line(self) -> String {
        match self {
            CancelCause::Timeout(after) => {
                format!("Command timed out after {} seconds", humanize_secs(after))
            }
            CancelCause::Interrupt => "Interrupted".to_string(),
            CancelCause::SessionStopped(StopCause::ResetOrClosed) => {
                "Interrupted: the session was reset or closed".into()
            }
            CancelCause::SessionStopped(StopCause::DaemonStopped) => {
                "Interrupted: the daemon stopped".into()
            }
        }
    }
}

/// What a worker's loss means for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consequence {
    Restarted,
    /// Over the restart budget: the session is failed until reset.
    Failed {
        budget: u32,
    },
    /// Nothing was running: a new worker starts with the next cell.
    ReplacedOnDemand,
}

impl fmt::Display for Consequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Consequence::Restarted | Consequence::ReplacedOnDemand => {
                f.write_str("session restarted, state lost")
            }
            Consequence::Failed { budget } => write!(
                f,
                "restart budget used up (restart-budget = {budget}): session failed, reset it to \
                 start over"
            ),
        }
    }
}

/// The line a cell gets when its worker was lost under it.
pub fn loss_line(loss: &WorkerLoss, consequence: Consequence, cancelled: bool) -> String {
    match loss {
        WorkerLoss::Killed(_) if cancelled => format!("worker {loss}; killed it; {consequence}"),
        WorkerLoss::Killed(_) => format!("worker killed: it {loss}; {consequence}"),
        WorkerLoss::Crashed(_) => format!("worker crashed: {loss}; {consequence}"),
    }
}

/// Why a failed session refuses cells until it is reset.
pub fn failed_reason(key: &SessionKey, loss: &WorkerLoss, budget: u32) -> String {
    format!(
        "the {} worker of session {} was lost ({loss}) with its restart budget used up \
         (restart-budget = {budget}); the session is failed: reset it to start over",
        key.language, key.session
    )
}

/// Told to the first cell on a replacement worker.
pub fn replaced_notice(language: Language, loss: &WorkerLoss) -> String {
    format!(
        "the previous {language} worker is gone ({loss}); a new worker was started and earlier \
         state is lost"
    )
}

/// What the next cell is told when a lost worker's replacement restores the last snapshot
/// (the restore's own notice then says what came back).
pub fn replaced_restoring_notice(language: Language, loss: &WorkerLoss) -> String {
    format!(
        "the previous {language} worker is gone ({loss}); a new worker was started from the \
         session's last snapshot"
    )
}

/// Why a worker could not start, as the waiting cell and `status` say it.
pub fn start_failed(language: Language, error: &str) -> String {
    format!(
        "could not start the {language} worker: {error}{}",
        process_limit_hint(error)
    )
}

/// A hint for a process or thread that could not be created (EAGAIN): the per-user limit.
fn process_limit_hint(error: &str) -> &'static str {
    if error.contains("Resource temporarily unavailable") || error.contains("os error 11") {
        " (the per-user process limit, RLIMIT_NPROC, counts every process and thread of this \
         user, so one session's children can exhaust it for all; see limits.processes)"
    } else {
        ""
    }
}

/// Why a session was closed under its next cell: the supervisor closed it (the host did not
/// ask), or a host closed it on purpose. A throw-away session's close has none.
#[derive(Debug, Clone, PartialEq)]
pub enum Eviction {
    /// A host asked to close it (`close`).
    Closed { key: SessionKey },
    /// Room was needed for another session of the language.
    ForRoom { key: SessionKey, cap: usize },
    /// Idle longer than `idle-timeout`.
    Idle {
        key: SessionKey,
        idle_timeout: Duration,
    },
    /// Its node is draining (`cellvisor drain`): it was idle, or became idle for
    /// `daemon.drain-idle`.
    Drained { key: SessionKey },
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Eviction::Closed { key } => {
                write!(f, "session {key} was closed; its earlier state is gone")
            }
            Eviction::ForRoom { key, cap } => write!(
                f,
                "session {key} was evicted to make room for another {} session \
                 (max-sessions = {cap}); its earlier state is gone",
                key.language
            ),
            Eviction::Idle { key, idle_timeout } => write!(
                f,
                "session {key} was evicted after being idle longer than idle-timeout ({}); its \
                 earlier state is gone",
                humantime::format_duration(*idle_timeout)
            ),
            Eviction::Drained { key } => write!(
                f,
                "session {key} was stopped because its node was draining; its earlier state is \
                 gone"
            ),
        }
    }
}

/// A cell that waited for room longer than its timeout.
pub fn no_room(key: &SessionKey, cap: usize, waited: Duration) -> String {
    format!(
        "no room for session {key}: all {cap} {} sessions are busy (max-sessions = {cap} in \
         [sessions]) and none became free within {}. Raise max-sessions in the config file, \
         close a session, or retry later.",
        key.language,
        humantime::format_duration(waited)
    )
}

pub fn humanize(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn humanize_secs(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{}", secs as u64)
    } else {
        format!("{secs:.1}")
    }
}

/// Appends `line` on a line of its own.
pub fn append_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_hosts_see_are_kept() {
        assert_eq!(
            CancelCause::Timeout(Duration::from_secs(1)).line(),
            "Command timed out after 1 seconds"
        );
        assert_eq!(
            CancelCause::Timeout(Duration::from_millis(1500)).line(),
            "Command timed out after 1.5 seconds"
        );
        let crash = WorkerLoss::Crashed("killed by signal 11 (SIGSEGV)".into());
        assert_eq!(
            loss_line(&crash, Consequence::Restarted, false),
            "worker crashed: killed by signal 11 (SIGSEGV); session restarted, state lost"
        );
        let grace = WorkerLoss::Killed(KillReason::IgnoredInterrupt {
            grace: Duration::from_secs(5),
        });
        assert_eq!(
            loss_line(&grace, Consequence::Failed { budget: 1 }, true),
            "worker did not stop within interrupt-grace (5s) after the interrupt; killed it; \
             restart budget used up (restart-budget = 1): session failed, reset it to start over"
        );
        let heartbeat = WorkerLoss::Killed(KillReason::MissedHeartbeats {
            timeout: Duration::from_secs(15),
        });
        assert_eq!(
            loss_line(&heartbeat, Consequence::Restarted, false),
            "worker killed: it missed heartbeats (no answer for 15s, heartbeat-timeout); \
             session restarted, state lost"
        );
        let end = |fatal: Option<&str>, exit| WorkerEnd {
            exit,
            fatal: fatal.map(str::to_string),
        };
        assert_eq!(
            end(Some("python exited with code 3"), Exit::Code(1)).to_string(),
            "python exited with code 3"
        );
        assert_eq!(
            end(Some("out of memory"), Exit::Signal(9)).to_string(),
            "out of memory (killed by signal 9 (SIGKILL))"
        );
        assert_eq!(end(None, Exit::Code(3)).to_string(), "exited with code 3");
        assert_eq!(
            end(Some("gone"), Exit::Unknown).to_string(),
            "gone (exited)"
        );
        assert!(failed_reason(&SessionKey::for_tests(), &crash, 1).contains("restart-budget = 1"));
        assert_eq!(
            WorkerLoss::crashed("exited with code 1".into(), Some("thread spawn failed ")),
            WorkerLoss::Crashed("exited with code 1: thread spawn failed".into())
        );
        assert_eq!(
            WorkerLoss::crashed("python exited with code 3".into(), Some("code 3")),
            WorkerLoss::Crashed("python exited with code 3".into())
        );
        let eagain = WorkerLoss::crashed(
            "exited with code 1".into(),
            Some("Resource temporarily unavailable (os error 11)"),
        );
        assert!(eagain.to_string().contains("RLIMIT_NPROC"), "{eagain}");
        assert!(start_failed(Language::Lua, "fork: os error 11").contains("limits.processes"));
        assert!(Eviction::ForRoom {
            key: SessionKey::for_tests(),
            cap: 2
        }
        .to_string()
        .contains("max-sessions = 2"));
        assert_eq!(
            Eviction::Closed {
                key: SessionKey::for_tests()
            }
            .to_string(),
            "session s/py was closed; its earlier state is gone"
        );
        assert!(no_room(&SessionKey::for_tests(), 2, Duration::from_secs(1))
            .contains("no room for session s/py"));
    }

    #[test]
    fn a_kill_for_memory_is_a_typed_verdict_with_its_figures() {
        let kill = KillReason::OverMemory {
            rss: 530 << 20,
            cap: 512 << 20,
        };
        assert_eq!(
            kill.out_of_memory().map(|v| v.to_string()).as_deref(),
            Some("out of memory: 512 MiB limit ([limits] max-rss), 530 MiB used")
        );
        let heartbeat = KillReason::MissedHeartbeats {
            timeout: Duration::from_secs(1),
        };
        assert_eq!(heartbeat.out_of_memory(), None);
    }

    #[test]
    fn a_sigkill_nobody_here_sent_is_told_as_the_kernels_when_it_was() {
        let worker = WorkerEnd {
            exit: Exit::Signal(9),
            fatal: None,
        };
        assert!(worker.unsent_sigkill());
        assert_eq!(
            worker.clone().by_kernel_oom().to_string(),
            "the kernel's out-of-memory killer ended it (killed by signal 9 (SIGKILL))"
        );
        // The Python shim exits by itself after its interpreter was killed, and says so.
        let interpreter = WorkerEnd {
            exit: Exit::Code(1),
            fatal: Some("python was killed by signal 9 (SIGKILL)".into()),
        };
        assert!(interpreter.unsent_sigkill());
        assert_eq!(
            interpreter.by_kernel_oom().to_string(),
            "python was killed by signal 9 (SIGKILL): the kernel's out-of-memory killer ended it"
        );
        let others = [
            WorkerEnd {
                exit: Exit::Signal(11),
                fatal: None,
            },
            WorkerEnd {
                exit: Exit::Code(1),
                fatal: Some("python was killed by signal 15 (SIGTERM)".into()),
            },
            WorkerEnd {
                exit: Exit::Code(0),
                fatal: None,
            },
        ];
        assert!(others.iter().all(|end| !end.unsent_sigkill()), "{others:?}");
        let source = super::super::kernel_oom::OomSource::Cgroup {
            limit: Some(1 << 30),
        };
        let verdict = kernel_out_of_memory(source, 1_110_000_000);
        assert_eq!(
            (verdict.limit, verdict.limit_bytes, verdict.used_bytes),
            (MemoryLimit::KernelOom, 1 << 30, 1_110_000_000)
        );
        let host = kernel_out_of_memory(super::super::kernel_oom::OomSource::Host, 0);
        assert_eq!(host.limit_bytes, 0);
    }

    #[test]
    fn exit_statuses_read_as_before() {
        use std::os::unix::process::ExitStatusExt;
        use std::process::ExitStatus;
        assert_eq!(Exit::from(ExitStatus::from_raw(3 << 8)), Exit::Code(3));
        assert_eq!(Exit::from(ExitStatus::from_raw(11)), Exit::Signal(11));
        assert_eq!(Exit::Code(3).to_string(), "exited with code 3");
        assert_eq!(
            Exit::Signal(11).to_string(),
            "killed by signal 11 (SIGSEGV)"
        );
        assert_eq!(Exit::Signal(9).to_string(), "killed by signal 9 (SIGKILL)");
        assert_eq!(Exit::Signal(99).to_string(), "killed by signal 99");
    }
}
