//! The processes of a session's uid: found by walking `/proc`, and ended all at once by a
//! helper that becomes that uid and signals every process it may (`kill(-1)`), which no
//! `setsid`, double fork or fork race escapes (the kernel walks its task list under the lock
//! that `fork` takes).

use std::time::Duration;

/// The pids of live (not zombie) processes whose real uid is `uid`.
pub fn processes_of(uid: u32) -> Vec<u32> {
    processes_where(|owner| owner == uid)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// Live processes whose real uid `wanted` accepts, with that uid.
pub fn processes_where(wanted: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let status = cellvisor_os::proc::status(Some(pid))?;
            let uid = status.real_uid;
            (wanted(uid) && status.state != 'Z').then_some((pid, uid))
        })
        .collect()
}

/// Sends SIGKILL to every process of `uid` from a helper running as `uid` (blocking: run it
/// off the actors' thread). Returns whether the kill was sent.
fn kill_all_as(uid: u32) -> bool {
    // SAFETY: the child makes only raw system calls (no allocation, no locks) and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return false;
    }
    if pid == 0 {
        // SAFETY: plain system calls on integers, then _exit.
        unsafe {
            let none: *const libc::gid_t = std::ptr::null();
            let ok = libc::syscall(libc::SYS_setgroups, 0, none) == 0
                && libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0;
            if !ok {
                libc::_exit(2);
            }
            libc::kill(-1, libc::SIGKILL);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child just forked.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got == pid {
            return libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// Ends every process of `uid` and waits until none is left (zombies aside: they run
/// nothing, and their parents reap them). Blocking. `false` if some still ran after
/// `patience`.
pub fn end_all(uid: u32, patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if processes_of(uid).is_empty() {
            return true;
        }
        if !kill_all_as(uid) {
            tracing::warn!(uid, "cannot end the processes of uid {uid}");
        }
        if std::time::Instant::now() >= deadline {
            return processes_of(uid).is_empty();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_under_its_own_uid() {
        let me = nix::unistd::getuid().as_raw();
        let mine = processes_of(me);
        assert!(mine.contains(&std::process::id()), "{mine:?}");
    }
}
