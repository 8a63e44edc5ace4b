//! Which program the daemon's socket lets in: the listener bound in a private directory, and
//! the peer check that refuses other users and the daemon's own cells.

use super::ServeError;
use cellvisor::daemon::protocol::code;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};

/// Whether the peer `pid` is one of this daemon's workers or runs under one (a cell, or a
/// process a cell started): workers are the daemon's only children, and as subreapers they
/// keep every descendant under them. A peer without a pid is not trusted either.
pub(super) fn from_own_worker(pid: Option<i32>) -> bool {
    let Some(pid) = pid.and_then(|p| u32::try_from(p).ok()) else {
        return true;
    };
    descends_from_child_of(pid, std::process::id(), |p| {
        cellvisor_os::process_tree::stat(p).map(|s| s.ppid)
    })
}

/// Whether `pid`'s line of ancestors (itself included) holds a child of `parent`.
fn descends_from_child_of(pid: u32, parent: u32, parent_of: impl Fn(u32) -> Option<u32>) -> bool {
    let mut current = pid;
    // Bounded, in case /proc changes under us into a loop.
    for _ in 0..4096 {
        match parent_of(current) {
            Some(p) if p == parent => return current != parent,
            Some(p) if p > 1 && p != current => current = p,
            _ => return false,
        }
    }
    false
}

/// Tells a refused cell why, then drops its connection.
pub(super) fn refuse_cell(stream: UnixStream) {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut stream = stream;
        let refusal = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": code::REQUEST_REFUSED,
                "message": "refused: cells may not drive the daemon (this connection comes from a process under one of its workers)"
            }
        });
        let line = format!("{refusal}\n");
        let _ =
            tokio::time::timeout(Duration::from_secs(1), stream.write_all(line.as_bytes())).await;
    });
}

/// The first file descriptor a service manager passes (`sd_listen_fds(3)`).
const LISTEN_FDS_START: RawFd = 3;

/// The listening socket a service manager passed by socket activation (`LISTEN_PID` is this
/// process, `LISTEN_FDS` at least 1: the first one, fd 3, is taken), else `None`. The
/// variables are cleared and the descriptor closed on exec, so workers inherit neither.
pub(super) fn activated() -> Result<Option<UnixListener>, ServeError> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    if pid.is_none() && fds.is_none() {
        return Ok(None);
    }
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    if pid.and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id()) {
        // Meant for another process (an ancestor's, leaked into our environment).
        return Ok(None);
    }
    let count = fds
        .as_deref()
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| {
            ServeError::Activation(format!(
                "LISTEN_FDS must be a number of descriptors, not {:?}",
                fds.unwrap_or_default()
            ))
        })?;
    if count == 0 {
        return Ok(None);
    }
    // SAFETY: the service manager passed fd 3 to this process for it to own; nothing else
    // in the process owns it (it was open at exec, so no descriptor we opened since is fd 3).
    let fd = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START) };
    let refuse = |what: String| {
        ServeError::Activation(format!(
            "the descriptor passed (fd {LISTEN_FDS_START}) {what}; the socket unit must say \
             ListenStream=/path/of/the/socket"
        ))
    };
    let listening = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::AcceptConn)
        .map_err(|e| refuse(format!("is not a socket ({e})")))?;
    let kind = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SockType)
        .map_err(|e| refuse(format!("is not a socket ({e})")))?;
    let unix = nix::sys::socket::getsockname::<nix::sys::socket::UnixAddr>(fd.as_raw_fd()).is_ok();
    if !listening || kind != nix::sys::socket::SockType::Stream || !unix {
        return Err(refuse("is not a listening Unix stream socket".to_string()));
    }
    nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|e| refuse(format!("cannot be closed on exec ({e})")))?;
    let listener = std::os::unix::net::UnixListener::from(fd);
    listener
        .set_nonblocking(true)
        .map_err(|e| refuse(format!("cannot be made non-blocking ({e})")))?;
    UnixListener::from_std(listener)
        .map(Some)
        .map_err(|e| refuse(format!("cannot be listened on ({e})")))
}

/// Binds the socket in a private directory, replacing a stale socket file but never a live one.
pub(super) async fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let bind_error = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        cellvisor_ipc::socket::ensure_private_dir(dir).map_err(bind_error)?;
    }
    if path.exists() {
        match UnixStream::connect(path).await {
            Ok(_) => return Err(ServeError::AlreadyRunning(path.to_path_buf())),
            Err(_) => {
                tracing::info!(socket = %path.display(), "replacing a stale socket file");
                std::fs::remove_file(path).map_err(bind_error)?;
            }
        }
    }
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_under_a_child_of_the_daemon_are_cells() {
        // 100 is the daemon; 200 its worker; 300 a cell's process; 400 -> 50 a client.
        let parents = |pid: u32| match pid {
            100 => Some(1),
            200 => Some(100),
            300 => Some(200),
            301 => Some(300),
            400 => Some(50),
            50 => Some(1),
            _ => None,
        };
        assert!(descends_from_child_of(200, 100, parents));
        assert!(descends_from_child_of(301, 100, parents));
        assert!(!descends_from_child_of(400, 100, parents));
        assert!(!descends_from_child_of(100, 100, parents));
        assert!(!descends_from_child_of(999, 100, parents));
    }
}
