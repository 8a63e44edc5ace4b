//! A worker a zygote made: the supervisor's own child (the zygote clones it with
//! `CLONE_PARENT`), but not one tokio spawned, so it is awaited through a pidfd and reaped
//! with `waitpid` here.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;

/// A forked worker process.
pub struct ForkedChild {
    pid: u32,
    pidfd: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
}

impl ForkedChild {
    /// Takes `pid`, a child of this process nobody else reaps.
    pub fn new(pid: u32) -> io::Result<ForkedChild> {
        let pidfd = pidfd_open(pid)?;
        Ok(ForkedChild {
            pid,
            // SAFETY: the pidfd is ours alone and registered nowhere else.
            pidfd: unsafe { AsyncFd::register(pidfd) }.map_err(|e| e.into_parts().1)?,
            status: None,
        })
    }

    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Its exit status if it has exited (reaping it), without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = waitpid_nohang(self.pid)?;
        }
        Ok(self.status)
    }

    /// Waits for it to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            // Readable once the process has exited.
            let mut ready = self.pidfd.readable().await?;
            ready.clear_ready();
        }
    }
}

/// Whether this kernel has pidfds (Linux 5.3): without them forked workers cannot be awaited.
pub fn pidfds_supported() -> bool {
    pidfd_open(std::process::id()).is_ok()
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let raw = i32::try_from(pid).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::ErrorKind::InvalidData)?;
    // SAFETY: the descriptor was just returned to us and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn waitpid_nohang(pid: u32) -> io::Result<Option<ExitStatus>> {
    let raw = i32::try_from(pid).map_err(|_| io::ErrorKind::InvalidInput)?;
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, filling a local.
        let got = unsafe { libc::waitpid(raw, &mut status, libc::WNOHANG) };
        if got == raw {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if got == 0 {
            return Ok(None);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
