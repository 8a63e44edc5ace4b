//! Who a cell is (`[isolation]`): at the `uid` level every worker of a session runs as a uid
//! and gid leased to the session for its life, so the daemon's files, other sessions' files
//! and processes, and the zygote are out of its reach by the kernel's ordinary permission
//! checks; at `none` workers run as the daemon's user.
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
    /// `uid` or `none`.
    pub level: &'static str,
    /// The leased range, at the `uid` level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uids: Option<String>,
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
        match &self.uids {
            Some(uids) => format!(
                "isolation: uid (sessions run as uids {uids}): {}",
                self.reason
            ),
            None => format!(
                "isolation: none (cells run as the daemon's user): {}",
                self.reason
            ),
        }
    }
}

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

/// The level `config` asks for on a daemon that `can` (or cannot) change uids; an error
/// when `uid` is required and impossible.
pub fn resolve(config: &IsolationConfig, can: bool) -> Result<IsolationStatus, String> {
    let uid = |range: UidRange, reason: String| IsolationStatus {
        level: "uid",
        uids: Some(range.to_string()),
        reason,
    };
    let none = |reason: &str| IsolationStatus {
        level: "none",
        uids: None,
        reason: reason.to_string(),
    };
    match (config.level, config.uids) {
        (IsolationLevel::None, _) => Ok(none("isolation.level = \"none\"")),
        (IsolationLevel::Uid, Some(range)) if can => {
            Ok(uid(range, "isolation.level = \"uid\"".into()))
        }
        (IsolationLevel::Uid, Some(_)) => Err(
            "isolation.level = \"uid\" but this daemon may not change uids (it needs root, or \
             CAP_SETUID and CAP_SETGID): run it as root, give it those capabilities, or set \
             isolation.level = \"auto\" or \"none\""
                .into(),
        ),
        (IsolationLevel::Uid, None) => {
            Err("isolation.level = \"uid\" needs isolation.uids (like \"61000-61999\")".into())
        }
        (IsolationLevel::Auto, Some(range)) if can => Ok(uid(
            range,
            "isolation.level = \"auto\", and this daemon may change uids".into(),
        )),
        (IsolationLevel::Auto, Some(_)) => Ok(none(
            "isolation.level = \"auto\", but this daemon may not change uids (it needs root, \
             or CAP_SETUID and CAP_SETGID)",
        )),
        (IsolationLevel::Auto, None) => Ok(none(
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
        assert_eq!(resolve(&with, true).unwrap().level, "uid");
        assert_eq!(
            resolve(&with, true).unwrap().range(),
            UidRange::parse("61000-61999").ok()
        );
        let cannot = resolve(&with, false).unwrap();
        assert_eq!(cannot.level, "none");
        assert!(cannot.reason.contains("CAP_SETUID"), "{}", cannot.reason);
        assert_eq!(
            resolve(&config(IsolationLevel::Auto, None), true)
                .unwrap()
                .level,
            "none"
        );
        assert_eq!(
            resolve(&config(IsolationLevel::None, Some("61000-61999")), true)
                .unwrap()
                .level,
            "none"
        );
    }

    #[test]
    fn uid_required_but_impossible_is_an_error_saying_what_is_needed() {
        let err = resolve(&config(IsolationLevel::Uid, Some("61000-61999")), false).unwrap_err();
        assert!(err.contains("CAP_SETUID and CAP_SETGID"), "{err}");
        let err = resolve(&config(IsolationLevel::Uid, None), true).unwrap_err();
        assert!(err.contains("isolation.uids"), "{err}");
    }

    #[test]
    fn the_line_names_the_level_and_range() {
        let status = resolve(&config(IsolationLevel::Uid, Some("61000-61009")), true).unwrap();
        assert!(status
            .line()
            .starts_with("isolation: uid (sessions run as uids 61000-61009)"));
    }
}
