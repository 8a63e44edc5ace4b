//! The kernel's end when the front end that started it is gone, as ipykernel's parent
//! poller: the process named by `JPY_PARENT_PID` (jupyter_client sets it to its own pid), else
//! the kernel's parent at its start. Without it a killed JupyterLab or nbclient would leave
//! the kernel, and its session's workers, running for good.

use std::time::Duration;

/// How often the parent is looked at (ipykernel looks every second too).
pub const POLL: Duration = Duration::from_secs(1);

/// The process a kernel outlives no longer than [`POLL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pid: i32,
    /// Whether it was the kernel's parent at the start (then being reparented means it died,
    /// even if its pid was reused since).
    was_parent: bool,
}

impl Parent {
    /// The parent named by `jpy_parent_pid` (`JPY_PARENT_PID`'s value) when it names a
    /// process, else `ppid`; `None` when that is init or nothing (nothing to watch).
    pub fn of(jpy_parent_pid: Option<&str>, ppid: i32) -> Option<Parent> {
        let named = jpy_parent_pid
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|pid| *pid > 1);
        let pid = named.unwrap_or(ppid);
        (pid > 1).then_some(Parent {
            pid,
            was_parent: pid == ppid,
        })
    }

    /// Whether it is gone, given the kernel's parent now and whether its pid still answers
    /// a signal 0.
    pub fn gone(&self, ppid_now: i32, answers: bool) -> bool {
        !answers || (self.was_parent && ppid_now != self.pid)
    }

    /// Whether it is gone now.
    fn gone_now(&self) -> bool {
        use nix::errno::Errno;
        use nix::sys::signal::kill;
        use nix::unistd::{getppid, Pid};
        // EPERM: a process of another user has the pid; it is there.
        let answers = !matches!(kill(Pid::from_raw(self.pid), None), Err(Errno::ESRCH));
        self.gone(getppid().as_raw(), answers)
    }

    /// Returns once the parent is gone.
    pub async fn wait(self) {
        let mut tick = tokio::time::interval(POLL);
        loop {
            tick.tick().await;
            if self.gone_now() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_jupyters_pid_else_the_process_parent() {
        let named = Parent::of(Some("4242"), 100).unwrap();
        assert_eq!(
            named,
            Parent {
                pid: 4242,
                was_parent: false
            }
        );
        let own = Parent::of(None, 100).unwrap();
        assert_eq!(own.pid, 100);
        assert!(own.was_parent);
        // Garbage, init or nothing in JPY_PARENT_PID: the process parent.
        for bad in ["", "x", "-3", "1", "0"] {
            assert_eq!(Parent::of(Some(bad), 100), Some(own), "{bad:?}");
        }
        assert_eq!(Parent::of(None, 1), None);
        assert_eq!(Parent::of(Some("1"), 0), None);
        assert_eq!(Parent::of(Some("100"), 100), Some(own));
    }

    #[test]
    fn gone_when_it_answers_no_more_or_the_kernel_was_reparented() {
        let own = Parent::of(None, 100).unwrap();
        assert!(!own.gone(100, true));
        assert!(own.gone(100, false));
        // Reparented to init or a subreaper: gone, even if the pid came back as another's.
        assert!(own.gone(1, true));
        let named = Parent::of(Some("4242"), 100).unwrap();
        assert!(
            !named.gone(1, true),
            "a named parent is watched by its pid alone"
        );
        assert!(named.gone(100, false));
    }
}
