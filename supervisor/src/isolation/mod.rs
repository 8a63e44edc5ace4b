//! Who a cell is (`[isolation]`): at the `uid` level every worker of a session runs as a uid
//! and gid leased to the session for its life, so the daemon's files, other sessions' files
//! and processes, and the zygote are out of its reach by the kernel's ordinary permission
//! checks; at `landlock` workers run as the daemon's user, confined by Landlock away from
//! the daemon's directories and secret files (every session, or those served on the
//! network); at `none` workers run as the daemon's user.
//!
//! - `leases`: which uid each live session holds (plain data).
//! - `procs`: the processes of a uid, and ending them all at once.
//! - `dirs`: a session's directories given to its uid, the daemon's opened to traversal.

pub mod dirs;
pub mod leases;
pub mod procs;

use cellvisor_config::{IsolationConfig, IsolationLevel, UidRange};
use std::path::Path;

/// The isolation level in force, decided once at start.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IsolationStatus {
    /// `uid`, `landlock` or `none`.
    pub level: &'static str,
    /// The leased range, at the `uid` level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uids: Option<String>,
    /// At the `landlock` level, which sessions are confined: `network` (those served on a
    /// network listener) or `all`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock: Option<&'static str>,
    /// Why this level: what was asked for and what the daemon may do.
    pub reason: String,
}

impl IsolationStatus {
    /// The leased range, at the `uid` level.
    pub fn range(&self) -> Option<UidRange> {
        self.uids.as_deref().and_then(|t| UidRange::parse(t).ok())
    }

    /// One line for the log and `status`.
    pub fn line(&self) -> String {
        match (&self.uids, self.landlock) {
            (Some(uids), _) => format!(
                "isolation: uid (sessions run as uids {uids}): {}",
                self.reason
            ),
            (None, Some(LANDLOCK_NETWORK)) => format!(
                "isolation: landlock for network sessions (confined away from the daemon's \
                 files; local ones run unconfined as the daemon's user): {}",
                self.reason
            ),
            (None, Some(_)) => format!(
                "isolation: landlock (every session confined away from the daemon's files, as \
                 the daemon's user): {}",
                self.reason
            ),
            (None, None) => format!(
                "isolation: none (cells run as the daemon's user): {}",
                self.reason
            ),
        }
    }

    /// Whether a session's cells run confined by the `landlock` level: every session's, or
    /// only those served on the network (`network`).
    pub fn confines(&self, network: bool) -> bool {
        match self.landlock {
            Some(LANDLOCK_NETWORK) => network,
            Some(_) => true,
            None => false,
        }
    }
}

/// [`IsolationStatus::landlock`] when only network sessions are confined.
const LANDLOCK_NETWORK: &str = "network";

/// Whether this process may change uids: root, or `CAP_SETUID` and `CAP_SETGID` in its
/// effective set.
pub fn can_change_uids() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    const CAP_SETGID: u32 = 6;
    const CAP_SETUID: u32 = 7;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SETUID) != 0 && caps & (1 << CAP_SETGID) != 0)
}

/// The level `config` asks for on a daemon that `can` (or cannot) change uids, on this
/// kernel; an error when `uid` is required and impossible.
pub fn resolve(config: &IsolationConfig, can: bool) -> Result<IsolationStatus, String> {
    resolve_on(
        config,
        can,
        crate::sandbox::KernelSupport::detect().landlock_abi,
    )
}

/// [`resolve`] on a kernel with Landlock ABI `landlock_abi` (0: none).
pub fn resolve_on(
    config: &IsolationConfig,
    can: bool,
    landlock_abi: u32,
) -> Result<IsolationStatus, String> {
    let uid = |range: UidRange, reason: String| IsolationStatus {
        level: "uid",
        uids: Some(range.to_string()),
        landlock: None,
        reason,
    };
    let none = |reason: &str| IsolationStatus {
        level: "none",
        uids: None,
        landlock: None,
        reason: reason.to_string(),
    };
    // Without uids: Landlock where the kernel has it, for `which` sessions.
    let landlock = |which: &'static str, reason: &str| {
        if landlock_abi == 0 {
            return none(&format!(
                "{reason}, but this kernel has no Landlock (too old, or not among the LSMs it \
                 was booted with): cells run unconfined"
            ));
        }
        IsolationStatus {
            level: "landlock",
            uids: None,
            landlock: Some(which),
            reason: format!("{reason} (Landlock ABI {landlock_abi})"),
        }
    };
    match (config.level, config.uids) {
        (IsolationLevel::None, _) => Ok(none("isolation.level = \"none\"")),
        (IsolationLevel::Landlock, _) => Ok(landlock("all", "isolation.level = \"landlock\"")),
        (IsolationLevel::Uid, Some(range)) if can => {
            Ok(uid(range, "isolation.level = \"uid\"".into()))
        }
        (IsolationLevel::Uid, Some(_)) => Err(
            "isolation.level = \"uid\" but this daemon may not change uids (it needs root, or \
             CAP_SETUID and CAP_SETGID): run it as root, give it those capabilities, or set \
             isolation.level = \"auto\", \"landlock\" or \"none\""
                .into(),
        ),
        (IsolationLevel::Uid, None) => {
            Err("isolation.level = \"uid\" needs isolation.uids (like \"61000-61999\")".into())
        }
        (IsolationLevel::Auto, Some(range)) if can => Ok(uid(
            range,
            "isolation.level = \"auto\", and this daemon may change uids".into(),
        )),
        (IsolationLevel::Auto, Some(_)) => Ok(landlock(
            LANDLOCK_NETWORK,
            "isolation.level = \"auto\", but this daemon may not change uids (it needs root, \
             or CAP_SETUID and CAP_SETGID)",
        )),
        (IsolationLevel::Auto, None) => Ok(landlock(
            LANDLOCK_NETWORK,
            "isolation.level = \"auto\" and no isolation.uids range is set",
        )),
    }
}

/// Gets the daemon's directories ready for sessions with uids of their own: each opened to
/// traversal (0711), after checking that other users can reach it at all.
pub fn open_for_sessions(dirs: &[&Path]) -> Result<(), String> {
    for dir in dirs {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        dirs::reachable_by_others(dir)?;
        dirs::traversable(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        // A name in a traversable directory can be opened by anyone who guesses it: the
        // daemon's files there (its log beside its socket, ...) become its own alone.
        dirs::private_files(dir)
            .map_err(|e| format!("cannot make the files of {} private: {e}", dir.display()))?;
    }
    Ok(())
}

/// Makes every file under the installed runner's directory readable (its modules are code
/// every session runs, no secret) and its directories enterable.
pub fn share_runner(runner_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(runner_dir)?.flatten() {
        let meta = entry.metadata()?;
        if meta.is_dir() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o755))?;
            share_runner(&entry.path())?;
        } else if meta.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))?;
        }
    }
    std::fs::set_permissions(runner_dir, std::fs::Permissions::from_mode(0o755))
}

/// Ends every process running as a uid of `range`: what a daemon killed before it could
/// close its sessions left (all of them are this daemon's by definition of the range).
pub fn sweep_range(range: UidRange) -> usize {
    let mut uids: Vec<u32> = procs::processes_where(|uid| range.contains(uid))
        .into_iter()
        .map(|(_, uid)| uid)
        .collect();
    uids.sort_unstable();
    uids.dedup();
    for uid in &uids {
        procs::end_all(*uid, std::time::Duration::from_secs(5));
    }
    uids.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(level: IsolationLevel, uids: Option<&str>) -> IsolationConfig {
        IsolationConfig {
            level,
            uids: uids.map(|t| UidRange::parse(t).unwrap()),
        }
    }

    #[test]
    fn auto_takes_uids_only_where_it_can_and_a_range_is_set() {
        let with = config(IsolationLevel::Auto, Some("61000-61999"));
        assert_eq!(resolve_on(&with, true, 7).unwrap().level, "uid");
        assert_eq!(
            resolve_on(&with, true, 7).unwrap().range(),
            UidRange::parse("61000-61999").ok()
        );
        let cannot = resolve_on(&with, false, 7).unwrap();
        assert_eq!(cannot.level, "landlock");
        assert_eq!(cannot.landlock, Some("network"));
        assert!(cannot.reason.contains("CAP_SETUID"), "{}", cannot.reason);
        assert_eq!(
            resolve_on(&config(IsolationLevel::None, Some("61000-61999")), true, 7)
                .unwrap()
                .level,
            "none"
        );
    }

    #[test]
    fn without_uids_auto_confines_network_sessions_and_landlock_every_session() {
        let auto = resolve_on(&config(IsolationLevel::Auto, None), true, 7).unwrap();
        assert_eq!((auto.level, auto.landlock), ("landlock", Some("network")));
        assert!(auto.confines(true) && !auto.confines(false));
        assert!(
            auto.line().contains("landlock for network sessions"),
            "{}",
            auto.line()
        );
        assert!(auto.reason.contains("Landlock ABI 7"), "{}", auto.reason);
        let all = resolve_on(&config(IsolationLevel::Landlock, None), false, 7).unwrap();
        assert_eq!((all.level, all.landlock), ("landlock", Some("all")));
        assert!(all.confines(true) && all.confines(false));
        let none = resolve_on(&config(IsolationLevel::None, None), false, 7).unwrap();
        assert!(!none.confines(true) && !none.confines(false));
        let uid = resolve_on(&config(IsolationLevel::Uid, Some("61000-61009")), true, 7).unwrap();
        assert!(!uid.confines(true), "uids keep sessions apart on their own");
    }

    #[test]
    fn a_kernel_without_landlock_falls_back_to_none_saying_why() {
        for level in [IsolationLevel::Auto, IsolationLevel::Landlock] {
            let status = resolve_on(&config(level, None), false, 0).unwrap();
            assert_eq!(status.level, "none");
            assert!(!status.confines(true));
            assert!(
                status.reason.contains("this kernel has no Landlock"),
                "{}",
                status.reason
            );
            assert!(
                status.line().starts_with("isolation: none"),
                "{}",
                status.line()
            );
        }
    }

    #[test]
    fn uid_required_but_impossible_is_an_error_saying_what_is_needed() {
        let err =
            resolve_on(&config(IsolationLevel::Uid, Some("61000-61999")), false, 7).unwrap_err();
        assert!(err.contains("CAP_SETUID and CAP_SETGID"), "{err}");
        let err = resolve_on(&config(IsolationLevel::Uid, None), true, 7).unwrap_err();
        assert!(err.contains("isolation.uids"), "{err}");
    }

    #[test]
    fn the_line_names_the_level_and_range() {
        let status =
            resolve_on(&config(IsolationLevel::Uid, Some("61000-61009")), true, 7).unwrap();
        assert!(status
            .line()
            .starts_with("isolation: uid (sessions run as uids 61000-61009)"));
    }
}
