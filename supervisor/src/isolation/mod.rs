//! Who a cell is (`[isolation]`): at the `uid` level every worker of a session runs as a uid
//! and gid leased to the session for its life, so the daemon's files, other sessions' files
//! and processes, and the zygote are out of its reach by the kernel's ordinary permission
//! checks; at `landlock` workers run as the daemon's user, confined by Landlock away from
//! the daemon's directories and secret files (every session, or those served on the
//! network); at `none` workers run as the daemon's user.
//!
//! - `accounts`: whether the machine's accounts leave the range free.
//! - `claim`: the machine-wide lock that keeps two daemons' ranges apart.
//! - `leases`: which uid each live session holds (plain data).
//! - `procs`: the processes of a uid, and ending them all at once.
//! - `dirs`: a session's directories given to its uid, the daemon's opened to traversal.
//! - `turns`: those walks off the supervisor's thread, one session's in its order.

pub mod accounts;
pub mod claim;
pub mod dirs;
pub mod leases;
pub mod procs;
pub mod turns;

pub use claim::{claim_range, RangeClaim};

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
    cellvisor_os::proc::status(None).is_some_and(|status| {
        let caps = status.effective_caps;
        caps & (1 << CAP_SETUID) != 0 && caps & (1 << CAP_SETGID) != 0
    })
}

/// What decides the level besides the config, read once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    /// Whether the daemon may change uids (see [`can_change_uids`]).
    pub can_change_uids: bool,
    /// Whether it serves clients other than its own user: network listeners
    /// (`daemon.listen`) or tenants (`daemon.tenants-file`). A daemon with only its Unix
    /// socket (0600, its own user's) serves that user alone.
    pub serves_others: bool,
    /// An account or group of the machine holding an id of `isolation.uids`, described.
    pub taken: Option<String>,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: u32,
}

impl Host {
    /// This daemon's situation under `config`.
    pub fn of(config: &cellvisor_config::Config) -> Host {
        let asks = config.isolation.level != IsolationLevel::None;
        Host {
            can_change_uids: can_change_uids(),
            serves_others: !config.daemon.listen.is_empty() || config.daemon.tenants_file.is_some(),
            taken: asks
                .then(|| accounts::first_taken_on_this_machine(config.isolation.uids))
                .flatten(),
            landlock_abi: crate::sandbox::KernelSupport::detect().landlock_abi,
        }
    }
}

/// Without uids: Landlock where the kernel has it (ABI `abi`), for `which` sessions
/// (`network` or `all`); else none, saying why.
pub fn landlock_or_none(abi: u32, which: &'static str, reason: &str) -> IsolationStatus {
    if abi == 0 {
        return IsolationStatus {
            level: "none",
            uids: None,
            landlock: None,
            reason: format!(
                "{reason}, but this kernel has no Landlock (too old, or not among the LSMs it \
                 was booted with): cells run unconfined"
            ),
        };
    }
    IsolationStatus {
        level: "landlock",
        uids: None,
        landlock: Some(which),
        reason: format!("{reason} (Landlock ABI {abi})"),
    }
}

/// The level of `auto` where the uid level cannot be had for `why`: Landlock for the
/// sessions served on the network.
pub fn auto_without_uids(host: &Host, why: &str) -> IsolationStatus {
    landlock_or_none(
        host.landlock_abi,
        LANDLOCK_NETWORK,
        &format!("isolation.level = \"auto\", but {why}"),
    )
}

/// The level `config` asks for on a daemon in `host`'s situation; an error when `uid` is
/// required and impossible.
pub fn resolve(config: &IsolationConfig, host: &Host) -> Result<IsolationStatus, String> {
    let range = config.uids;
    let uid = |reason: &str| IsolationStatus {
        level: "uid",
        uids: Some(range.to_string()),
        landlock: None,
        reason: reason.to_string(),
    };
    const NEEDS: &str = "it needs root, or CAP_SETUID and CAP_SETGID";
    match config.level {
        IsolationLevel::None => Ok(IsolationStatus {
            level: "none",
            uids: None,
            landlock: None,
            reason: "isolation.level = \"none\"".into(),
        }),
        IsolationLevel::Landlock => Ok(landlock_or_none(
            host.landlock_abi,
            "all",
            "isolation.level = \"landlock\"",
        )),
        IsolationLevel::Uid if !host.can_change_uids => Err(format!(
            "isolation.level = \"uid\" but this daemon may not change uids ({NEEDS}): run it \
             as root, give it those capabilities, or set isolation.level = \"auto\", \
             \"landlock\" or \"none\""
        )),
        IsolationLevel::Uid => match &host.taken {
            Some(taken) => Err(format!(
                "isolation.uids = \"{range}\" holds the id of {taken}: a session leased it would \
                 own that account's files; set isolation.uids to a range no account or group \
                 uses"
            )),
            None => Ok(uid("isolation.level = \"uid\"")),
        },
        IsolationLevel::Auto if !host.can_change_uids => Ok(auto_without_uids(
            host,
            &format!("this daemon may not change uids ({NEEDS})"),
        )),
        IsolationLevel::Auto if !host.serves_others => Ok(auto_without_uids(
            host,
            "this daemon serves only its own user (no daemon.listen, no daemon.tenants-file): \
             its local cells run as that user, in the caller's directory; set isolation.level = \
             \"uid\" to give its sessions uids of their own",
        )),
        IsolationLevel::Auto => match &host.taken {
            Some(taken) => Ok(auto_without_uids(
                host,
                &format!(
                    "isolation.uids = \"{range}\" holds the id of {taken}, so sessions keep the \
                     daemon's user; set isolation.uids to a range no account or group uses"
                ),
            )),
            None => Ok(uid(
                "isolation.level = \"auto\": this daemon may change uids and serves clients \
                 over the network or as tenants",
            )),
        },
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

    fn config(level: IsolationLevel, uids: &str) -> IsolationConfig {
        IsolationConfig {
            level,
            uids: UidRange::parse(uids).unwrap(),
        }
    }

    /// A root daemon with a network listener on a machine whose accounts leave the range
    /// free.
    fn served() -> Host {
        Host {
            can_change_uids: true,
            serves_others: true,
            taken: None,
            landlock_abi: 7,
        }
    }

    #[test]
    fn auto_takes_uids_where_it_can_and_serves_others_with_the_default_range() {
        let auto = IsolationConfig::default();
        let status = resolve(&auto, &served()).unwrap();
        assert_eq!(status.level, "uid");
        assert_eq!(status.range(), Some(UidRange::DEFAULT));
        let cannot = Host {
            can_change_uids: false,
            ..served()
        };
        let status = resolve(&auto, &cannot).unwrap();
        assert_eq!(
            (status.level, status.landlock),
            ("landlock", Some("network"))
        );
        assert!(status.reason.contains("CAP_SETUID"), "{}", status.reason);
        let none = config(IsolationLevel::None, "61000-61999");
        assert_eq!(resolve(&none, &served()).unwrap().level, "none");
    }

    #[test]
    fn auto_keeps_a_daemon_that_serves_only_its_own_user_off_uids_saying_why() {
        let local = Host {
            serves_others: false,
            ..served()
        };
        let status = resolve(&IsolationConfig::default(), &local).unwrap();
        assert_eq!(status.level, "landlock");
        assert!(!status.confines(false), "its local sessions run unconfined");
        assert!(
            status.reason.contains("serves only its own user"),
            "{}",
            status.reason
        );
        // Asked for explicitly, the uid level is had without listeners.
        let uid = config(IsolationLevel::Uid, "61000-61999");
        assert_eq!(resolve(&uid, &local).unwrap().level, "uid");
    }

    #[test]
    fn a_range_an_account_uses_is_skipped_by_auto_and_refused_by_uid() {
        let taken = Host {
            taken: Some("account \"svc\" (uid 60800) in /etc/passwd".into()),
            ..served()
        };
        let status = resolve(&IsolationConfig::default(), &taken).unwrap();
        assert_eq!(status.level, "landlock");
        assert!(
            status.reason.contains("account \"svc\" (uid 60800)")
                && status.reason.contains("isolation.uids = \"60706-61183\""),
            "{}",
            status.reason
        );
        let err = resolve(&config(IsolationLevel::Uid, "60706-61183"), &taken).unwrap_err();
        assert!(
            err.contains("account \"svc\"") && err.contains("no account or group uses"),
            "{err}"
        );
    }

    #[test]
    fn without_uids_auto_confines_network_sessions_and_landlock_every_session() {
        let cannot = Host {
            can_change_uids: false,
            ..served()
        };
        let auto = resolve(&IsolationConfig::default(), &cannot).unwrap();
        assert_eq!((auto.level, auto.landlock), ("landlock", Some("network")));
        assert!(auto.confines(true) && !auto.confines(false));
        assert!(
            auto.line().contains("landlock for network sessions"),
            "{}",
            auto.line()
        );
        assert!(auto.reason.contains("Landlock ABI 7"), "{}", auto.reason);
        let all = resolve(&config(IsolationLevel::Landlock, "61000-61999"), &cannot).unwrap();
        assert_eq!((all.level, all.landlock), ("landlock", Some("all")));
        assert!(all.confines(true) && all.confines(false));
        let none = resolve(&config(IsolationLevel::None, "61000-61999"), &cannot).unwrap();
        assert!(!none.confines(true) && !none.confines(false));
        let uid = resolve(&config(IsolationLevel::Uid, "61000-61009"), &served()).unwrap();
        assert!(!uid.confines(true), "uids keep sessions apart on their own");
    }

    #[test]
    fn a_kernel_without_landlock_falls_back_to_none_saying_why() {
        let old = Host {
            can_change_uids: false,
            landlock_abi: 0,
            ..served()
        };
        for level in [IsolationLevel::Auto, IsolationLevel::Landlock] {
            let status = resolve(&config(level, "61000-61999"), &old).unwrap();
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
        let cannot = Host {
            can_change_uids: false,
            ..served()
        };
        let err = resolve(&config(IsolationLevel::Uid, "61000-61999"), &cannot).unwrap_err();
        assert!(err.contains("CAP_SETUID and CAP_SETGID"), "{err}");
    }

    #[test]
    fn the_line_names_the_level_and_range() {
        let status = resolve(&config(IsolationLevel::Uid, "61000-61009"), &served()).unwrap();
        assert!(status
            .line()
            .starts_with("isolation: uid (sessions run as uids 61000-61009)"));
    }
}
