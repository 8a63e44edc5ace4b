//! A started worker's process: waiting for it, signalling its group, and ending it with
//! everything under it.

use crate::session::outcome::Exit;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::process::Child;

/// The process behind a worker.
pub enum WorkerProcess {
    Os {
        child: Child,
        /// Set once the process is being reaped: its pid may then be reused, so no handle
        /// signals it any more.
        reaped: Arc<AtomicBool>,
    },
    /// Forked by a zygote: the supervisor's child all the same, awaited through a pidfd.
    Forked {
        child: crate::zygote::ForkedChild,
        reaped: Arc<AtomicBool>,
    },
    #[cfg(test)]
    Scripted(crate::testing::ScriptedProcess),
}

impl WorkerProcess {
    /// Where signals for this worker go.
    pub fn handle(&self) -> ProcessHandle {
        match self {
            WorkerProcess::Os { child, reaped } => ProcessHandle::Os {
                pid: child.id().unwrap_or_default(),
                reaped: Arc::clone(reaped),
            },
            WorkerProcess::Forked { child, reaped } => ProcessHandle::Os {
                pid: child.id(),
                reaped: Arc::clone(reaped),
            },
            #[cfg(test)]
            WorkerProcess::Scripted(process) => ProcessHandle::Scripted(process.control()),
        }
    }

    /// Waits for the worker to end and reaps it; says how it ended.
    pub async fn wait(&mut self) -> Exit {
        match self {
            WorkerProcess::Os { child, reaped } => {
                // The actor and this task share one thread: no handle can signal between
                // this flag and the reaping.
                reaped.store(true, Ordering::SeqCst);
                match child.wait().await {
                    Ok(status) => Exit::from(status),
                    Err(err) => Exit::Unreaped(err.to_string()),
                }
            }
            WorkerProcess::Forked { child, reaped } => {
                reaped.store(true, Ordering::SeqCst);
                match child.wait().await {
                    Ok(status) => Exit::from(status),
                    Err(err) => Exit::Unreaped(err.to_string()),
                }
            }
            #[cfg(test)]
            WorkerProcess::Scripted(process) => process.wait().await,
        }
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        match self {
            WorkerProcess::Os { child, reaped } => {
                let running = matches!(child.try_wait(), Ok(None));
                if !running {
                    reaped.store(true, Ordering::SeqCst);
                }
                running
            }
            WorkerProcess::Forked { child, reaped } => {
                let running = matches!(child.try_wait(), Ok(None));
                if !running {
                    reaped.store(true, Ordering::SeqCst);
                }
                running
            }
            #[cfg(test)]
            WorkerProcess::Scripted(process) => process.is_running(),
        }
    }
}

impl WorkerProcess {
    /// How it ended, if it has (reaping it), without waiting: for a worker still starting.
    pub(super) fn try_exit(&mut self) -> Option<Exit> {
        let status = match self {
            WorkerProcess::Os { child, .. } => child.try_wait(),
            WorkerProcess::Forked { child, .. } => child.try_wait(),
            #[cfg(test)]
            WorkerProcess::Scripted(_) => return None,
        };
        let exit = status.ok().flatten().map(Exit::from)?;
        #[allow(irrefutable_let_patterns)] // refutable in tests, which add a scripted process
        if let WorkerProcess::Os { reaped, .. } | WorkerProcess::Forked { reaped, .. } = self {
            reaped.store(true, Ordering::SeqCst);
        }
        Some(exit)
    }

    /// Kills the worker's whole group, then reaps the worker: in that order, so no process
    /// of the group survives and the group id cannot have been reused in between.
    pub(super) async fn kill_and_reap(&mut self) {
        let pid = self.handle().pid();
        kill_group(pid, Signal::SIGKILL);
        self.wait().await;
    }
}

/// The way to signal a worker and its descendants; cheap to clone.
#[derive(Clone)]
pub enum ProcessHandle {
    Os {
        pid: u32,
        reaped: Arc<AtomicBool>,
    },
    #[cfg(test)]
    Scripted(std::sync::Arc<crate::testing::ScriptedControl>),
}

impl ProcessHandle {
    pub fn pid(&self) -> u32 {
        match self {
            ProcessHandle::Os { pid, .. } => *pid,
            #[cfg(test)]
            ProcessHandle::Scripted(control) => control.pid(),
        }
    }

    /// Sends `signal` to the worker's process group.
    pub fn signal_group(&self, signal: Signal) {
        match self {
            ProcessHandle::Os { pid, reaped } => {
                if !reaped.load(Ordering::SeqCst) {
                    kill_group(*pid, signal);
                }
            }
            #[cfg(test)]
            ProcessHandle::Scripted(control) => control.signal(signal),
        }
    }

    /// Kills the worker and every process under it, those that left its group included.
    /// The worker is stopped first, so it stays alive (the reaper of orphans) while its
    /// tree is walked and ended; then its group and itself are killed.
    pub fn kill_tree(&self) {
        match self {
            ProcessHandle::Os { pid, reaped } => {
                if reaped.load(Ordering::SeqCst) {
                    return;
                }
                let Some(raw) = i32::try_from(*pid).ok().filter(|p| *p > 1) else {
                    return;
                };
                let _ = nix::sys::signal::kill(Pid::from_raw(raw), Signal::SIGSTOP);
                cellvisor_os::process_tree::end_descendants(*pid, &[]);
                kill_group(*pid, Signal::SIGKILL);
            }
            #[cfg(test)]
            ProcessHandle::Scripted(control) => control.signal(Signal::SIGKILL),
        }
    }
}

/// Sends `signal` to the worker's whole process group (its pid is the group id). A group that
/// is already gone is not an error.
pub fn kill_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        if raw > 1 {
            let _ = killpg(Pid::from_raw(raw), signal);
        }
    }
}
