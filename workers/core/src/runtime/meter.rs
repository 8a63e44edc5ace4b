//! The worker's measure of itself when a cell ends, sent in the cell's `Done`
//! ([`DoneUsage`]): its process tree's CPU and memory, and the descriptors of the process that
//! runs the cells. The worker reads them so that the supervisor, which serves every session,
//! reads no `/proc` per cell; what it costs here is paid by the session that ran the cell.

use crate::locking::lock;
use crate::process_tree;
use cellvisor_ipc::DoneUsage;
use cellvisor_os::proc::{DescriptorDir, ProcStat, StatFile};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A quick cell rereads the members found last time (one `pread` each, through their
/// `stat` files kept open: the worker and its interpreter); after a longer stretch the tree
/// is found afresh, so a process a longer cell left running is counted (one a quick cell
/// starts is counted from the next longer one on, and any it reaped counts in its
/// parent's).
const REDISCOVER_AFTER: Duration = Duration::from_millis(50);

/// Shared by every clone of the outbox: any thread that sends a `Done` reads through it.
#[derive(Clone, Default)]
pub(crate) struct Meter(Arc<MeterState>);

#[derive(Default)]
struct MeterState {
    /// The process whose descriptors a cell uses (Python's interpreter); 0: this process.
    cells_process: AtomicU32,
    tree: Mutex<KnownTree>,
}

#[derive(Default)]
struct KnownTree {
    /// This process, once read (`getpid` is a system call each time).
    root: u32,
    members: Vec<StatFile>,
    read_at: Option<Instant>,
    /// The descriptor listing of the cells' process, kept open while it stays the same.
    descriptors: Option<(u32, DescriptorDir)>,
}

impl Meter {
    /// Names the process that runs the cells, when it is not this one.
    pub fn set_cells_process(&self, pid: Option<u32>) {
        self.0
            .cells_process
            .store(pid.unwrap_or(0), Ordering::Relaxed);
    }

    /// The tree and descriptors now.
    pub fn read(&self) -> DoneUsage {
        let mut tree = lock(&self.0.tree);
        if tree.root == 0 {
            tree.root = std::process::id();
        }
        let root = tree.root;
        let quick = tree
            .read_at
            .is_some_and(|at| at.elapsed() < REDISCOVER_AFTER);
        tree.read_at = Some(Instant::now());
        let members: Vec<ProcStat> = if quick && !tree.members.is_empty() {
            tree.members.iter().filter_map(StatFile::read).collect()
        } else {
            let found = process_tree::trees(&[root])
                .remove(&root)
                .unwrap_or_default();
            tree.members = found.iter().filter_map(|p| StatFile::open(p.pid)).collect();
            found
        };
        let mut usage = members
            .iter()
            .fold(DoneUsage::default(), |sum, p| DoneUsage {
                cpu_ticks: sum.cpu_ticks + p.cpu_ticks + p.children_cpu_ticks,
                rss_bytes: sum.rss_bytes + if p.is_dead() { 0 } else { p.rss_bytes },
                ..sum
            });
        let cells = match self.0.cells_process.load(Ordering::Relaxed) {
            0 => root,
            pid => pid,
        };
        if let Some((open, limit)) = tree.descriptors(cells, cells == root) {
            usage.descriptors_open = open;
            usage.descriptors_limit = limit;
        }
        usage
    }
}

impl KnownTree {
    /// The open descriptors of `pid` and its soft descriptor limit; `None` when they cannot
    /// be read (the process is gone) or the limit is unlimited.
    fn descriptors(&mut self, pid: u32, is_self: bool) -> Option<(u64, u64)> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let pid_t = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: prlimit with a null new limit only fills `limit`, which outlives the call.
        let read =
            unsafe { libc::prlimit(pid_t, libc::RLIMIT_NOFILE, std::ptr::null(), &mut limit) };
        if read != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        let kept = (self.descriptors.as_mut())
            .filter(|(of, _)| *of == pid)
            .and_then(|(_, listing)| listing.count())
            .filter(|listed| *listed > 0);
        let listed = match kept {
            Some(listed) => listed,
            None => {
                // First, another process, or a listing that outlived its process (which
                // lists nothing): listed afresh, after the old one is closed.
                self.descriptors = None;
                let mut listing = DescriptorDir::open(pid)?;
                let listed = listing.count()?;
                self.descriptors = Some((pid, listing));
                listed
            }
        };
        // Our own listing holds the descriptors this meter keeps open: the listing's and
        // the members' stat files.
        let open = if is_self {
            listed.saturating_sub(1 + self.members.len() as u64)
        } else {
            listed
        };
        Some((open, limit.rlim_cur))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_sees_this_process_and_the_cells_process_descriptors() {
        let meter = Meter::default();
        let mine = meter.read();
        assert!(mine.rss_bytes > 1024 * 1024, "{mine:?}");
        assert!(
            mine.descriptors_limit > 0 && mine.descriptors_open > 0,
            "{mine:?}"
        );
        // Another process: its descriptors are counted, not ours (a `sleep` holding its
        // standard three, and whatever the test harness's other threads left inheritable).
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let listed = || {
            std::fs::read_dir(format!("/proc/{}/fd", child.id()))
                .unwrap()
                .count() as u64
        };
        meter.set_cells_process(Some(child.id()));
        // Until it settles: a program just started may still hold files of its own start.
        let mut theirs = meter.read();
        for _ in 0..500 {
            if theirs.descriptors_open == listed() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            theirs = meter.read();
        }
        let expected = listed();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(theirs.descriptors_open, expected, "{theirs:?}");
        assert!(theirs.descriptors_open >= 3, "{theirs:?}");
        assert!(theirs.descriptors_limit > 0);
    }

    #[test]
    fn a_process_that_is_gone_reports_no_descriptors() {
        let meter = Meter::default();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        meter.set_cells_process(Some(pid));
        let usage = meter.read();
        assert_eq!((usage.descriptors_open, usage.descriptors_limit), (0, 0));
        assert!(usage.rss_bytes > 0);
    }
}
