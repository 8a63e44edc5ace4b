//! The health handshake: a daemon that accepts a connection must answer `initialize` within
//! a bound ([`health_timeout`]), so a hung daemon, a stopped one or a stranger holding the
//! socket makes a client fail with a message instead of waiting forever. A cell that runs
//! for minutes is not affected: the bound is for the first answer only.
//!
//! [`prove_stale`] and [`replace_stale`] let autostart replace a daemon that failed the
//! handshake, and only one it can prove is this socket's cellvisor daemon.

use super::ClientError;
use std::path::Path;
use std::time::{Duration, Instant};

/// The environment variable that sets the handshake's bound, in seconds.
pub const HEALTH_TIMEOUT_ENV: &str = "CELLVISOR_HEALTH_TIMEOUT";

/// The handshake's bound when [`HEALTH_TIMEOUT_ENV`] is not set: ample for a daemon on a
/// loaded machine, short next to a person's patience.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stale daemon has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The handshake's bound: [`HEALTH_TIMEOUT_ENV`] (seconds, a positive number) or the default.
pub fn health_timeout() -> Result<Duration, ClientError> {
    match std::env::var(HEALTH_TIMEOUT_ENV) {
        Err(_) => Ok(DEFAULT_HEALTH_TIMEOUT),
        Ok(text) => parse_timeout(&text),
    }
}

fn parse_timeout(text: &str) -> Result<Duration, ClientError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            ClientError::Protocol(format!(
                "{HEALTH_TIMEOUT_ENV}={text:?} is not a number of seconds from 0 to 3600 \
                 (the wait for a daemon's first answer; default {})",
                DEFAULT_HEALTH_TIMEOUT.as_secs()
            ))
        })
}

/// The advice of an unresponsive daemon's error.
pub(super) fn advice(path: &Path, pid: Option<u32>) -> String {
    let holder = pid.map_or_else(String::new, |pid| format!(" (process {pid})"));
    format!(
        "the process holding the socket{holder} may be stopped or hung. `cellvisor eval` \
         replaces it when it can prove it is this socket's cellvisor daemon; otherwise stop \
         that process (or remove {} if nothing should listen there), or name another socket \
         with --socket; {HEALTH_TIMEOUT_ENV} sets the wait in seconds",
        path.display()
    )
}

/// Whether `pid` is provably the cellvisor daemon serving `socket`: a `cellvisor serve`
/// process of this user that holds the listening socket bound to that path. Anything less
/// (another program, another user, a process that does not hold this socket) is `Err` with
/// what was not proven.
pub fn prove_stale(pid: u32, socket: &Path) -> Result<(), String> {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(proc_dir.join("status"))
        .map_err(|e| format!("cannot read process {pid}: {e}"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse::<u32>().ok());
    // SAFETY: getuid has no preconditions and cannot fail.
    let own_uid = unsafe { libc::getuid() };
    if uid != Some(own_uid) {
        return Err(format!("process {pid} is not this user's"));
    }
    let cmdline = std::fs::read(proc_dir.join("cmdline"))
        .map_err(|e| format!("cannot read process {pid}'s command line: {e}"))?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let is_cellvisor = args.first().is_some_and(|program| {
        Path::new(program)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("cellvisor"))
    });
    if !is_cellvisor || !args.iter().any(|a| a == "serve") {
        return Err(format!(
            "process {pid} is not a `cellvisor serve` ({})",
            args.join(" ").trim()
        ));
    }
    let inode = listening_inode(socket)
        .ok_or_else(|| format!("no listening socket is bound to {}", socket.display()))?;
    let wanted = format!("socket:[{inode}]");
    let holds = std::fs::read_dir(proc_dir.join("fd"))
        .map_err(|e| format!("cannot read process {pid}'s descriptors: {e}"))?
        .filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()));
    if holds {
        Ok(())
    } else {
        Err(format!(
            "process {pid} does not hold the socket {}",
            socket.display()
        ))
    }
}

/// The inode of the listening Unix socket bound to `path` (`/proc/net/unix`).
fn listening_inode(path: &Path) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let path = path.to_str()?;
    // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 is __SO_ACCEPTCON.
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let listening = fields.get(3).is_some_and(|f| *f == "00010000");
        (listening && fields.get(7) == Some(&path))
            .then(|| fields.get(6)?.parse().ok())
            .flatten()
    })
}

/// Stops the stale daemon `pid` (proven by [`prove_stale`]): SIGTERM and SIGCONT (a
/// stopped daemon shuts down its workers), then SIGKILL if it is still there after a
/// grace; then removes its socket file.
pub async fn replace_stale(pid: u32, socket: &Path) -> Result<(), ClientError> {
    let raw = pid as libc::pid_t;
    // SAFETY: kill has no memory preconditions; the pid was just proven to be the daemon.
    unsafe {
        libc::kill(raw, libc::SIGTERM);
        libc::kill(raw, libc::SIGCONT);
    }
    let deadline = Instant::now() + STOP_GRACE;
    let gone = || !Path::new("/proc").join(pid.to_string()).exists() || is_zombie(pid);
    while !gone() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !gone() {
        // Only the proven daemon, and only once its grace is spent.
        // SAFETY: as above.
        unsafe {
            libc::kill(raw, libc::SIGKILL);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while !gone() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    if !gone() {
        return Err(ClientError::Start(format!(
            "the unresponsive daemon (process {pid}) did not exit after SIGTERM and SIGKILL"
        )));
    }
    match std::fs::remove_file(socket) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ClientError::Start(format!(
            "cannot remove the stale socket {}: {e}",
            socket.display()
        ))),
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_a_positive_number_of_seconds() {
        assert_eq!(parse_timeout("2").ok(), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout("0.5").ok(), Some(Duration::from_millis(500)));
        for bad in ["0", "-1", "x", "nan", "1e9"] {
            let err = parse_timeout(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("CELLVISOR_HEALTH_TIMEOUT"), "{bad}: {err}");
        }
    }

    #[test]
    fn this_process_is_never_proven_a_stale_daemon() {
        let dir = std::env::temp_dir().join(format!("cv-health-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let socket = dir.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let why = prove_stale(std::process::id(), &socket).unwrap_err();
        assert!(why.contains("is not a `cellvisor serve`"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
