//! A process and everything under it, read from `/proc` (through [`crate::proc`]) on demand:
//! finding a tree, measuring it, and ending it.
//!
//! Workers are child subreapers, so every process a cell started stays under its worker even
//! when it called `setsid()`, `setpgid()` or was double-forked: walking the tree by parent
//! reaches what a process-group signal no longer does.
//!
//! Where the kernel offers `/proc/<pid>/task/<tid>/children` a tree is read from its root
//! down; elsewhere one scan of `/proc` gives every parent link at once.

mod ending;
pub mod last_pid;
mod ownership;

pub use ending::Ended;
pub use ownership::{cell_processes, CellStart};

use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

pub use crate::proc::{stat, ProcStat};

/// Now, in clock ticks since boot: the clock of [`ProcStat::start_ticks`]. A vDSO read, no
/// system call.
pub fn ticks_since_boot() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    let ticks = ticks_per_second();
    let secs = u64::try_from(now.tv_sec).unwrap_or_default();
    let nanos = u64::try_from(now.tv_nsec).unwrap_or_default();
    secs * ticks + nanos * ticks / 1_000_000_000
}

/// Clock ticks per second, the unit of [`ProcStat::cpu_ticks`].
pub fn ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
    })
}

/// Whether this kernel lists each task's children (`CONFIG_PROC_CHILDREN`).
fn children_files() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let me = std::process::id();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The direct children of `pid`, from its tasks' children files.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                list.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    children
}

/// Every process on the host, by parent (one pass over `/proc`).
fn children_by_parent() -> HashMap<u32, Vec<ProcStat>> {
    let mut by_parent: HashMap<u32, Vec<ProcStat>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return by_parent;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(stat) = stat(pid) {
            by_parent.entry(stat.ppid).or_default().push(stat);
        }
    }
    by_parent
}

/// Bounds a walk, so a fork bomb cannot make it endless.
const MAX_TREE: usize = 100_000;

/// The trees under each of `roots`, roots included, at most one scan of `/proc` for all.
pub fn trees(roots: &[u32]) -> HashMap<u32, Vec<ProcStat>> {
    let mut found = HashMap::new();
    if children_files() {
        for root in roots {
            let mut members = Vec::new();
            let mut stack = vec![*root];
            while let Some(pid) = stack.pop() {
                if members.len() >= MAX_TREE {
                    break;
                }
                if let Some(stat) = stat(pid) {
                    members.push(stat);
                    stack.extend(children_of(pid));
                }
            }
            found.insert(*root, members);
        }
        return found;
    }
    if roots.is_empty() {
        return found;
    }
    let by_parent = children_by_parent();
    for root in roots {
        found.insert(*root, tree_from(*root, &by_parent));
    }
    found
}

/// The tree under `root`, root included, from one scan of all of `/proc`: slower than the
/// children lists, but it sees every process that lasts through the scan even while the
/// tree changes (a children list read while it changes can skip entries).
pub fn tree_by_scan(root: u32) -> Vec<ProcStat> {
    tree_from(root, &children_by_parent())
}

fn tree_from(root: u32, by_parent: &HashMap<u32, Vec<ProcStat>>) -> Vec<ProcStat> {
    let mut members: Vec<ProcStat> = stat(root).into_iter().collect();
    let mut next = 0;
    while next < members.len() && members.len() < MAX_TREE {
        if let Some(children) = by_parent.get(&members[next].pid) {
            members.extend(children.iter().filter(|c| c.pid != root));
        }
        next += 1;
    }
    members
}

/// Every live process under `root` (not `root` itself).
#[cfg(test)]
fn descendants(root: u32) -> Vec<ProcStat> {
    trees(&[root])
        .remove(&root)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.pid != root && !p.is_dead())
        .collect()
}

/// Kills (SIGKILL) every process under `root` except those in `spare` (whose own children
/// are still killed); answers how many were killed. `root` must stay alive meanwhile, so
/// orphans land on it (a subreaper) and stay in reach: a caller ending someone else's tree
/// stops the root first.
pub fn end_descendants(root: u32, spare: &[u32]) -> usize {
    let all_but_spared = |seen: &[ProcStat]| -> HashSet<u32> {
        (seen.iter())
            .map(|p| p.pid)
            .filter(|pid| !spare.contains(pid))
            .collect()
    };
    end_descendants_chosen(root, all_but_spared).count
}

/// Like [`end_descendants`], for the processes `choose` picks from each look at the tree
/// (the walk still goes through those it spares; a choice can depend on the whole look, as a
/// cell's processes do on their parents). The tree is frozen first (SIGSTOP), so it cannot
/// grow while it is killed, then killed and read again until none is left, within
/// [`ending::BOUND`]; the processes killed that are the caller's children are reaped (see
/// [`ending`]).
pub fn end_descendants_chosen(root: u32, choose: impl Fn(&[ProcStat]) -> HashSet<u32>) -> Ended {
    ending::end_tree(root, choose, ending::BOUND)
}

/// Makes this process the reaper of every orphan among its descendants
/// (`PR_SET_CHILD_SUBREAPER`), so none escapes its tree by `setsid` or a double fork.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One child of ours that has exited and waits to be reaped, without reaping it.
pub fn peek_zombie_child() -> Option<u32> {
    // SAFETY: waitid fills the zeroed siginfo; WNOWAIT leaves the child waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_ALL, 0, &mut info, flags) != 0 {
            return None;
        }
        u32::try_from(info.si_pid()).ok().filter(|pid| *pid > 0)
    }
}

/// Reaps child `pid` if it has exited.
pub fn reap(pid: u32) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = nix::sys::wait::waitpid(
            Pid::from_raw(raw),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn start_times_and_now_share_a_clock() {
        let me = stat(std::process::id()).expect("our own stat");
        let now = ticks_since_boot();
        assert!(me.start_ticks <= now, "{} > {now}", me.start_ticks);
    }

    #[test]
    fn a_tree_is_found_and_ended_down_to_grandchildren() {
        // sh starts a grandchild in a new session (out of our group) and waits on it.
        let mut child = Command::new("sh")
            .args(["-c", "setsid sleep 1000 & wait"])
            .spawn()
            .expect("sh runs");
        let me = std::process::id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let grandchild = loop {
            let mine = descendants(me);
            if let Some(sleep) = mine.iter().find(|p| p.ppid == child.id()) {
                break sleep.pid;
            }
            assert!(Instant::now() < deadline, "no grandchild in {mine:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        let tree = trees(&[child.id()]).remove(&child.id()).unwrap_or_default();
        assert!(tree.iter().any(|p| p.pid == grandchild), "{tree:?}");
        assert!(tree.iter().any(|p| p.rss_bytes > 0), "{tree:?}");
        assert!(end_descendants(child.id(), &[]) >= 1);
        child.kill().expect("kill sh");
        child.wait().expect("reap sh");
        let gone = stat(grandchild).is_none_or(|p| p.is_dead());
        assert!(gone, "grandchild {grandchild} survived");
    }
}
