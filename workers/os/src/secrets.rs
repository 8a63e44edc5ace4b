//! Keeping the daemon's secrets out of cells' reach.
//!
//! The environment filter decides what a worker is given, but a cell running as the same user
//! could still read what the supervisor holds through `/proc/<pid>/environ` and
//! `/proc/<pid>/mem`, or attach with ptrace. A non-dumpable process refuses all of that to
//! other processes of its user (only root, or the process itself, may look). The flag is
//! reset by `execve`, so each process sets it for itself: the daemon, the MCP server and the
//! in-process supervisor of `eval --no-daemon` at start, and every worker first thing.
//!
//! Reading our own workers' figures stays possible: `/proc/<pid>/stat` and `statm` remain
//! world-readable for a non-dumpable process.

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0). An embedding program that keeps
/// secrets in its environment can call this too.
pub fn make_non_dumpable() -> std::io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes plain integer arguments and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process is dumpable (what `/proc/<pid>` of it allows others).
#[cfg(test)]
fn is_dumpable() -> bool {
    // SAFETY: PR_GET_DUMPABLE takes no pointers.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_can_make_itself_non_dumpable() {
        // In a child, so the test binary itself stays debuggable.
        // SAFETY: the child only calls prctl and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = make_non_dumpable().is_ok() && !is_dumpable();
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
