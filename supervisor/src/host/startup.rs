//! Why a supervisor cannot start, and the checks made before it does.

use crate::snapshots::SnapshotStore;
use cellvisor_config::Config;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The runtime directory could not be made private (it is someone else's, or not writable).
    #[error("cannot prepare the runtime directory {path}: {source}")]
    RuntimeDir {
        /// The directory.
        path: PathBuf,
        /// Why it could not be prepared.
        source: std::io::Error,
    },
    /// Worker sockets under this directory would not fit a Unix socket address, so every
    /// worker would fail to start.
    #[error(
        "the runtime directory {} is too long for worker sockets: their paths would be up to \
         {longest} bytes, and a Unix socket path holds at most {max}; point XDG_RUNTIME_DIR \
         (or the library's `Options::runtime_dir`) at a directory at least {} bytes shorter",
        path.display(),
        longest - max
    )]
    RuntimeDirTooLong {
        /// The directory the workers' sockets would be made in.
        path: PathBuf,
        /// The longest worker socket path under it.
        longest: usize,
        /// The most a socket path may have.
        max: usize,
    },
    /// Workers run this executable; without it no worker can start.
    #[error("cannot find the cellvisor executable: {0}")]
    Exe(std::io::Error),
    /// The supervisor's own thread could not be started.
    #[error("cannot start the supervisor thread: {0}")]
    Thread(std::io::Error),
    /// A fleet's node needs its snapshot directory (and its key file), and they cannot be
    /// used.
    #[error("{0}")]
    Snapshots(crate::snapshots::StoreError),
    /// The fleet's lease directory cannot be made.
    #[error("{0}")]
    Leases(crate::fleet::LeaseError),
    /// The isolation level asked for cannot be had, or its directories cannot be prepared.
    #[error("{0}")]
    Isolation(String),
}

/// Decides the isolation level (`[isolation]`) and, at the `uid` level, gets the daemon's
/// directories ready for sessions with uids of their own: opened to traversal only, the
/// Python runner readable, and any process left in the range by a daemon that was killed
/// ended.
pub(super) fn prepare_isolation(
    config: &cellvisor_config::Config,
    dirs: &[&Path],
    run_dir: &Path,
) -> Result<
    (
        crate::isolation::IsolationStatus,
        Option<crate::isolation::RangeClaim>,
    ),
    StartupError,
> {
    let host = crate::isolation::Host::of(config);
    let status =
        crate::isolation::resolve(&config.isolation, &host).map_err(StartupError::Isolation)?;
    let Some(range) = status.range() else {
        if host.taken.is_some() && host.can_change_uids && host.serves_others {
            tracing::warn!("{}", status.line());
        }
        return Ok((status, None));
    };
    // The directories must be reachable by the sessions' uids, and the range this daemon's
    // alone (before the sweep: a range another daemon uses is never swept). `auto` stays
    // at none, saying why, where that cannot be had; `uid` refuses to start.
    let claim = match crate::isolation::open_for_sessions(dirs)
        .and_then(|()| crate::isolation::claim_range(range))
    {
        Ok(claim) => claim,
        Err(why) if config.isolation.level == cellvisor_config::IsolationLevel::Auto => {
            let status = crate::isolation::auto_without_uids(
                &host,
                &format!("{why}; sessions keep the daemon's user"),
            );
            tracing::warn!("{}", status.line());
            return Ok((status, None));
        }
        Err(why) => return Err(StartupError::Isolation(why)),
    };
    let runner = cellvisor_worker_py::install_runner(run_dir).map_err(StartupError::Isolation)?;
    cellvisor_worker_py::install_ipython_module(&runner);
    if let Some(dir) = runner.parent() {
        crate::isolation::share_runner(dir).map_err(|e| {
            StartupError::Isolation(format!(
                "cannot share the Python runner {}: {e}",
                dir.display()
            ))
        })?;
    }
    let swept = crate::isolation::sweep_range(range);
    if swept > 0 {
        tracing::warn!(
            "isolation: ended the processes of {swept} uids of {range} left by an earlier daemon"
        );
    }
    Ok((status, claim))
}

/// The bytes of a Unix socket path, its terminating NUL aside (`sun_path` holds 108).
const MAX_SOCKET_PATH: usize = 107;

/// Refuses a run directory whose longest worker socket (and its `.taken` record, one byte
/// longer) would not fit a socket address: better at start than at every worker's.
pub(super) fn check_socket_room(run_dir: &Path) -> Result<(), StartupError> {
    let longest_name = format!("w{}-py-{}.taken", u32::MAX, u64::MAX);
    let longest = run_dir.join(longest_name).as_os_str().len();
    if longest > MAX_SOCKET_PATH {
        return Err(StartupError::RuntimeDirTooLong {
            path: run_dir.to_path_buf(),
            longest,
            max: MAX_SOCKET_PATH,
        });
    }
    Ok(())
}

/// The daemon's pid in a run directory's name, `sup-<pid>-<random>`; `None` for any other
/// name.
pub(super) fn run_dir_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("sup-")?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|pid| *pid > 0)
}

/// Removes what killed supervisors left in `base`: every `sup-<pid>-*` run directory whose
/// pid is no live process (its sockets, records and sessions' temporary files). A live
/// supervisor's directory, and anything not named so, is left alone; a link is removed,
/// never followed. Returns how many were removed.
pub(super) fn remove_stale_run_dirs(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(run_dir_pid) else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            .map_or_else(|err| err != nix::errno::Errno::ESRCH, |()| true);
        if alive || pid == std::process::id() as i32 {
            continue;
        }
        let path = entry.path();
        let gone = match entry.file_type() {
            Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(err) => Err(err),
        };
        match gone {
            Ok(()) => removed += 1,
            Err(err) => tracing::warn!(
                "cannot remove {}, left by a supervisor that is gone: {err}",
                path.display()
            ),
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "removed run directories left by supervisors that are gone"
        );
    }
    removed
}

/// The snapshot directory of `config`; without one (it cannot be created), sessions keep
/// no state across their workers, and the log says why. A fleet's node (a key file, or
/// leases) cannot do without it: it refuses to start instead.
pub(super) fn open_snapshots(config: &Config) -> Result<Option<Arc<SnapshotStore>>, StartupError> {
    let dir = config
        .snapshots
        .dir
        .clone()
        .unwrap_or_else(crate::paths::snapshots_dir);
    let key_file = config.snapshots.key_file.as_deref();
    let lease_ttl = config
        .fleet
        .leases
        .is_on()
        .then_some(config.fleet.lease_ttl);
    let lock_wait = crate::snapshots::policy::tree_lock_wait(config.snapshots.timeout, lease_ttl);
    match SnapshotStore::open(&dir, key_file, &super::node::node_name(config)) {
        Ok(store) => {
            store.set_tree_lock_wait(lock_wait);
            Ok(Some(Arc::new(store)))
        }
        Err(err) if key_file.is_some() || config.fleet.leases.is_on() => {
            Err(StartupError::Snapshots(err))
        }
        Err(err) => {
            tracing::warn!("snapshots are off: {err}");
            Ok(None)
        }
    }
}

/// How long a node waits at start for an etcd member to answer.
const ETCD_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The lease book of a fleet's node (`fleet.leases`), in the snapshot directory.
pub(super) fn open_leases(
    config: &Config,
    snapshots: Option<&SnapshotStore>,
) -> Result<Option<Arc<crate::fleet::LeaseBook>>, StartupError> {
    let Some(store) = snapshots.filter(|_| config.fleet.leases.is_on()) else {
        return Ok(None);
    };
    let fleet = &config.fleet;
    if fleet.leases == cellvisor_config::schema::LeaseStore::Etcd {
        let settings = crate::fleet::etcd::EtcdSettings {
            endpoints: fleet.etcd_endpoints.clone(),
            ca_file: fleet.etcd_ca_file.clone(),
            cert_file: fleet.etcd_cert_file.clone(),
            key_file: fleet.etcd_key_file.clone(),
            user: fleet.etcd_user.clone(),
            password_file: fleet.etcd_password_file.clone(),
        };
        let etcd = crate::fleet::etcd::EtcdLeases::connect(
            &settings,
            store.node(),
            fleet.lease_ttl,
            ETCD_CONNECT_TIMEOUT,
        )
        .map_err(StartupError::Leases)?;
        let etcd = Arc::new(etcd);
        store.fence(etcd.clone());
        return Ok(Some(Arc::new(crate::fleet::LeaseBook::with_backend(etcd))));
    }
    let dir = crate::fleet::LeaseDir::open(store.root(), store.node(), fleet.lease_ttl)
        .map_err(StartupError::Leases)?;
    Ok(Some(Arc::new(crate::fleet::LeaseBook::new(dir))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_run_directories_of_dead_supervisors_are_removed() {
        assert_eq!(run_dir_pid("sup-4242-abcdef"), Some(4242));
        for other in [
            "sup-",
            "sup-4242",
            "sup-4242-",
            "sup-x1-ab",
            "sup-0-ab",
            "artifacts",
            "tmp",
        ] {
            assert_eq!(run_dir_pid(other), None, "{other}");
        }
        let base = tempfile::tempdir().expect("tempdir");
        // A pid far above any pid_max: no process has it.
        let dead = base.path().join("sup-2147483000-dead");
        let live = base.path().join(format!("sup-{}-live", std::process::id()));
        let other = base.path().join("artifacts");
        for dir in [&dead, &live, &other] {
            std::fs::create_dir_all(dir.join("tmp/s/py")).expect("mkdir");
        }
        assert_eq!(remove_stale_run_dirs(base.path()), 1);
        assert!(!dead.exists() && live.exists() && other.exists());
    }

    #[test]
    fn a_run_directory_too_long_for_worker_sockets_is_refused_with_the_figures() {
        assert!(check_socket_room(Path::new("/run/user/1000/cellvisor/sup-4242-abcdef")).is_ok());
        let long = format!("/tmp/{}/cellvisor/sup-4242-abcdef", "d".repeat(60));
        let err = check_socket_room(Path::new(&long)).unwrap_err().to_string();
        assert!(err.contains(&long) && err.contains("at most 107"), "{err}");
    }
}
