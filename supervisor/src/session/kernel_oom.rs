//! Telling the kernel's OOM killer from other SIGKILLs, where the kernel says so.
//!
//! A process the kernel's out-of-memory killer ends dies of SIGKILL, like one anybody else
//! kills; what tells them apart is the kernel's own count of OOM kills. A worker's is read
//! when it starts ([`OomCounters::read`], one or two small files) and again only when it (or
//! its Python interpreter) died of a SIGKILL the supervisor did not send. The count read is
//! the daemon's memory cgroup's (`memory.events` under cgroup v2, `memory.oom_control` under
//! v1), which its workers share and which counts the kills of its own processes whichever
//! limit ran out; where no cgroup count can be read, the host's (`oom_kill` in
//! `/proc/vmstat`), which counts every OOM kill on the host. [`verdict`] decides from those
//! readings, as plain data.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The kernel's OOM-kill counts at one moment (`None`: could not be read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OomCounters {
    /// OOM kills in the daemon's memory cgroup (and those below it).
    pub cgroup: Option<u64>,
    /// OOM kills on the host since boot.
    pub host: Option<u64>,
}

/// Where the OOM kill that ended a worker was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomSource {
    /// In the daemon's memory cgroup, whose limit (in bytes, when it has one) is given.
    Cgroup { limit: Option<u64> },
    /// On the host (no cgroup count could be read).
    Host,
}

/// Whether the kernel's OOM killer took a worker that died of a SIGKILL the supervisor did
/// not send (`unsent_sigkill`): its counts rose between `before` (the worker's start) and
/// `after` (its death). The cgroup's count decides when both readings have it: a kill counted
/// on the host but not in the cgroup took another process. `limit` is the cgroup's memory
/// limit, for the verdict's figure.
pub fn verdict(
    unsent_sigkill: bool,
    before: &OomCounters,
    after: &OomCounters,
    limit: Option<u64>,
) -> Option<OomSource> {
    if !unsent_sigkill {
        return None;
    }
    if let (Some(before), Some(after)) = (before.cgroup, after.cgroup) {
        return (after > before).then_some(OomSource::Cgroup { limit });
    }
    match (before.host, after.host) {
        (Some(before), Some(after)) if after > before => Some(OomSource::Host),
        _ => None,
    }
}

impl OomCounters {
    /// Reads the counts now.
    pub fn read() -> OomCounters {
        let files = cgroup_files();
        OomCounters {
            cgroup: files
                .as_ref()
                .and_then(|f| std::fs::read_to_string(&f.events).ok())
                .and_then(|text| field(&text, "oom_kill")),
            host: std::fs::read_to_string("/proc/vmstat")
                .ok()
                .and_then(|text| field(&text, "oom_kill")),
        }
    }
}

/// The daemon's memory cgroup's limit, in bytes; `None` when it has none or it cannot be read.
pub fn cgroup_limit() -> Option<u64> {
    let files = cgroup_files().as_ref()?;
    parse_limit(&std::fs::read_to_string(&files.limit).ok()?)
}

/// The files of the daemon's memory cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupFiles {
    /// Where its OOM kills are counted (`oom_kill N`).
    events: PathBuf,
    /// Its memory limit.
    limit: PathBuf,
}

/// Found once: a process stays in its cgroup.
fn cgroup_files() -> &'static Option<CgroupFiles> {
    static FILES: OnceLock<Option<CgroupFiles>> = OnceLock::new();
    FILES.get_or_init(|| {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        candidates(&membership, Path::new("/sys/fs/cgroup"))
            .into_iter()
            .find(|files| files.events.is_file())
    })
}

/// The memory cgroup files `/proc/self/cgroup` (`membership`) points at under the cgroup
/// mount `root`: the v2 ones first (`0::/path`), then v1's memory hierarchy.
fn candidates(membership: &str, root: &Path) -> Vec<CgroupFiles> {
    let mut found = Vec::new();
    for line in membership.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            let dir = root.join(relative);
            found.insert(
                0,
                CgroupFiles {
                    events: dir.join("memory.events"),
                    limit: dir.join("memory.max"),
                },
            );
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(relative);
            found.push(CgroupFiles {
                events: dir.join("memory.oom_control"),
                limit: dir.join("memory.limit_in_bytes"),
            });
        }
    }
    found
}

/// The number after `name` on its own line (`oom_kill 3`).
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

/// A memory limit file: `max` (v2) or a value near `u64::MAX` (v1's "unlimited") is none.
fn parse_limit(text: &str) -> Option<u64> {
    let limit: u64 = text.trim().parse().ok()?;
    (limit < 1 << 62).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: OomCounters = OomCounters {
        cgroup: Some(2),
        host: Some(7),
    };

    #[test]
    fn only_an_unsent_sigkill_with_a_risen_count_is_the_kernels() {
        let risen = OomCounters {
            cgroup: Some(3),
            host: Some(8),
        };
        let limit = Some(512 << 20);
        assert_eq!(
            verdict(true, &BEFORE, &risen, limit),
            Some(OomSource::Cgroup { limit })
        );
        // Our own kill (max-rss, an interrupt's escalation) or another signal: not asked.
        assert_eq!(verdict(false, &BEFORE, &risen, limit), None);
        // Somebody's `kill -9`: no count moved.
        assert_eq!(verdict(true, &BEFORE, &BEFORE, limit), None);
        // An OOM kill elsewhere on the host, not in our cgroup: not ours.
        let elsewhere = OomCounters {
            cgroup: Some(2),
            host: Some(9),
        };
        assert_eq!(verdict(true, &BEFORE, &elsewhere, limit), None);
    }

    #[test]
    fn without_a_cgroup_count_the_hosts_decides() {
        let before = OomCounters {
            cgroup: None,
            host: Some(7),
        };
        let after = OomCounters {
            cgroup: None,
            host: Some(8),
        };
        assert_eq!(verdict(true, &before, &after, None), Some(OomSource::Host));
        assert_eq!(verdict(true, &before, &before, None), None);
        // Unreadable throughout: the kernel said nothing.
        let blind = OomCounters::default();
        assert_eq!(verdict(true, &blind, &blind, None), None);
        // A cgroup count that appeared only later is not compared.
        let later = OomCounters {
            cgroup: Some(1),
            host: Some(7),
        };
        assert_eq!(verdict(true, &before, &later, None), None);
    }

    #[test]
    fn cgroup_files_are_found_for_both_versions() {
        let root = Path::new("/cg");
        let v2 = candidates("0::/user.slice/daemon.service\n", root);
        assert_eq!(
            v2,
            [CgroupFiles {
                events: "/cg/user.slice/daemon.service/memory.events".into(),
                limit: "/cg/user.slice/daemon.service/memory.max".into(),
            }]
        );
        let hybrid = candidates("4:memory:/box/1\n3:cpu,cpuacct:/box/1\n0::/\n", root);
        assert_eq!(hybrid[0].events, Path::new("/cg/memory.events"));
        assert_eq!(
            hybrid[1].events,
            Path::new("/cg/memory/box/1/memory.oom_control")
        );
        assert_eq!(
            hybrid[1].limit,
            Path::new("/cg/memory/box/1/memory.limit_in_bytes")
        );
        assert!(candidates("garbage", root).is_empty());
    }

    #[test]
    fn counts_and_limits_parse() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(field(v2, "oom_kill"), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n";
        assert_eq!(field(v1, "oom_kill"), Some(5));
        assert_eq!(field("oom_kill_disable 1\n", "oom_kill"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("536870912\n"), Some(512 << 20));
    }

    #[test]
    fn this_host_has_a_count_to_read() {
        // Every kernel since 4.13 counts OOM kills in /proc/vmstat.
        assert!(OomCounters::read().host.is_some());
    }
}
