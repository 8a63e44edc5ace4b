//! Why things happen to a session, as typed values, and the one place they become the text a
//! host reads: why a worker was killed ([`KillReason`]), how it was lost ([`WorkerLoss`]),
//! why a cell was cancelled ([`CancelCause`]) and why a session was evicted ([`Eviction`]).

use crate::session::SessionKey;
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

/// How a worker that ended by itself is told: its own last word (`Fatal`) when it said one,
/// with its exit status only when that adds something. A worker that gives up says why and
/// then exits with a code, so the code would only repeat (or contradict) its reason; a
/// signal is news. `exit` is [`crate::spawn::describe_exit`]'s text.
pub fn crash_story(fatal: Option<&str>, exit: &str) -> String {
    match fatal {
        Some(fatal) if exit.starts_with(crate::spawn::EXITED_WITH_CODE) => fatal.to_string(),
        Some(fatal) => format!("{fatal} ({exit})"),
        None => exit.to_string(),
    }
}

/// Why a running cell was stopped before it finished by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CancelCause {
    /// It ran past its timeout.
    Timeout(Duration),
    /// The host interrupted it, or the host that asked for it went away.
    Interrupt,
    /// Its session was reset or closed under it.
    SessionStopped,
}

impl CancelCause {
    /// The line appended to the cell's output.
    pub fn line(self) -> String {
        match self {
            CancelCause::Timeout(after) => {
                format!("Command timed out after {} seconds", humanize_secs(after))
            }
            CancelCause::Interrupt => "Interrupted".to_string(),
            CancelCause::SessionStopped => "Interrupted: the session was reset or closed".into(),
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

    fn key() -> SessionKey {
        SessionKey {
            session: "s".into(),
            language: Language::Python,
        }
    }

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
        assert_eq!(
            crash_story(Some("python exited with code 3"), "exited with code 1"),
            "python exited with code 3"
        );
        assert_eq!(
            crash_story(Some("out of memory"), "killed by signal 9 (SIGKILL)"),
            "out of memory (killed by signal 9 (SIGKILL))"
        );
        assert_eq!(
            crash_story(None, "exited with code 3"),
            "exited with code 3"
        );
        assert!(failed_reason(&key(), &crash, 1).contains("restart-budget = 1"));
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
        assert!(Eviction::ForRoom { key: key(), cap: 2 }
            .to_string()
            .contains("max-sessions = 2"));
        assert_eq!(
            Eviction::Closed { key: key() }.to_string(),
            "session s/py was closed; its earlier state is gone"
        );
        assert!(no_room(&key(), 2, Duration::from_secs(1)).contains("no room for session s/py"));
    }
}
