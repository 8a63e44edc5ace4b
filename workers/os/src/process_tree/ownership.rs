//! Which processes under a worker are a cell's: the decision, as plain data.
//!
//! A process is the cell's when it started after the cell began and every process between
//! it and the engine (the worker, or the engine's own child such as the Python interpreter)
//! is the cell's too. So a long-lived child of an earlier cell stays that cell's, and so do
//! the processes it starts while a later cell runs; a process started during the cell whose
//! parent died and which the worker (a subreaper) adopted counts as the cell's, since its
//! origin can no longer be read (one of an earlier cell's children's grandchildren orphaned
//! during the cell is the one case this counts wrong, towards ending too much).
//!
//! "Started after the cell began" compares start times, which the kernel keeps in clock ticks
//! (10 ms); a process started in the cell's first tick is told apart by its pid against the
//! last pid the kernel had handed out when the cell began ([`CellStart::last_pid`]): pids are
//! handed out in increasing order, wrapping at `pid_max`, and far fewer than half of them in
//! one tick. Without that reading a process of the cell's first tick counts as the cell's.

use super::ProcStat;
use std::collections::{HashMap, HashSet};

/// When a cell began, as precisely as its processes can be compared with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellStart {
    /// The clock tick it began in ([`super::ticks_since_boot`]).
    pub ticks: u64,
    /// The last pid handed out when it began, read after `ticks`; `None` if unreadable.
    pub last_pid: Option<u32>,
}

impl CellStart {
    /// Whether `process` started after the cell began. `pid_max` is the kernel's
    /// (`/proc/sys/kernel/pid_max`), where pids wrap.
    pub fn precedes(&self, process: &ProcStat, pid_max: u32) -> bool {
        match process.start_ticks.cmp(&self.ticks) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => self
                .last_pid
                .is_none_or(|last| handed_out_after(last, process.pid, pid_max)),
        }
    }
}

/// Whether `pid` was handed out after `last`, pids going up from `last` and wrapping at
/// `pid_max`: it is after when it lies within the half of the pid space that follows `last`.
pub fn handed_out_after(last: u32, pid: u32, pid_max: u32) -> bool {
    let max = u64::from(pid_max.max(2));
    let (last, pid) = (u64::from(last) % max, u64::from(pid) % max);
    let forward = (pid + max - last) % max;
    forward != 0 && forward <= max / 2
}

/// The pids in one look at a worker's tree (`seen`, the dead included) that are the cell's
/// begun at `start`. `roots` are where a cell's processes hang from: the worker and the
/// engine's own children; they are never the cell's. A process whose parent is neither a
/// root nor in `seen` (its parent left between two reads) is judged by its start alone.
pub fn cell_processes(
    seen: &[ProcStat],
    roots: &[u32],
    start: &CellStart,
    pid_max: u32,
) -> HashSet<u32> {
    let by_pid: HashMap<u32, &ProcStat> = seen.iter().map(|p| (p.pid, p)).collect();
    let mut decided: HashMap<u32, bool> = roots.iter().map(|r| (*r, false)).collect();
    for process in seen {
        // The chain from this process up to the first one already decided (or a root).
        let mut chain = Vec::new();
        let mut at = Some(*process);
        let verdict = loop {
            let Some(current) = at else { break true };
            if let Some(known) = decided.get(&current.pid) {
                break *known;
            }
            if !start.precedes(&current, pid_max) {
                decided.insert(current.pid, false);
                break false;
            }
            // A torn read can show a loop of parents: what closes it is judged by its start.
            if chain.len() > seen.len() || chain.contains(&current.pid) {
                break true;
            }
            chain.push(current.pid);
            if roots.contains(&current.ppid) {
                break true;
            }
            at = by_pid.get(&current.ppid).copied().copied();
        };
        for pid in chain {
            decided.insert(pid, verdict);
        }
    }
    seen.iter()
        .map(|p| p.pid)
        .filter(|pid| decided.get(pid) == Some(&true))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: u32 = 100;
    const PYTHON: u32 = 101;
    const PID_MAX: u32 = 32768;

    fn process(pid: u32, ppid: u32, start_ticks: u64) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            state: 'S',
            cpu_ticks: 0,
            children_cpu_ticks: 0,
            rss_bytes: 0,
            start_ticks,
        }
    }

    fn sorted(set: HashSet<u32>) -> Vec<u32> {
        let mut pids: Vec<u32> = set.into_iter().collect();
        pids.sort_unstable();
        pids
    }

    /// The cell began in tick 50, when the last pid handed out was 500.
    const START: CellStart = CellStart {
        ticks: 50,
        last_pid: Some(500),
    };

    #[test]
    fn a_table_of_processes_decides_which_are_the_cells() {
        let seen = [
            process(WORKER, 1, 1),
            process(PYTHON, WORKER, 2),
            // An earlier cell's long-lived child, started in this cell's first tick but
            // before it (a lower pid), and what it forks during this cell.
            process(498, PYTHON, 50),
            process(510, 498, 51),
            // An earlier cell's child from long ago, and its child started in the cell.
            process(300, PYTHON, 10),
            process(520, 300, 60),
            // The cell's own child (same tick, a later pid), its child and grandchild.
            process(501, PYTHON, 50),
            process(502, 501, 50),
            process(530, 502, 70),
            // An orphan adopted by the worker, started during the cell: the cell's.
            process(540, WORKER, 80),
            // An orphan adopted by the worker, started before the cell: not the cell's.
            process(490, WORKER, 40),
            // A dead child of the cell still counts as the cell's.
            ProcStat {
                state: 'Z',
                ..process(550, PYTHON, 90)
            },
        ];
        let owned = cell_processes(&seen, &[WORKER, PYTHON], &START, PID_MAX);
        assert_eq!(sorted(owned), [501, 502, 530, 540, 550]);
    }

    #[test]
    fn without_the_last_pid_the_first_tick_counts_as_the_cells() {
        let start = CellStart {
            last_pid: None,
            ..START
        };
        let seen = [process(498, PYTHON, 50), process(401, PYTHON, 49)];
        let owned = cell_processes(&seen, &[WORKER, PYTHON], &start, PID_MAX);
        assert_eq!(sorted(owned), [498]);
    }

    #[test]
    fn pids_are_compared_across_the_wrap() {
        assert!(handed_out_after(500, 501, PID_MAX));
        assert!(!handed_out_after(500, 500, PID_MAX));
        assert!(!handed_out_after(500, 499, PID_MAX));
        // Handed out past pid_max, the counter starts again from the bottom.
        assert!(handed_out_after(32760, 301, PID_MAX));
        assert!(!handed_out_after(301, 32760, PID_MAX));
        assert!(handed_out_after(4_194_300, 310, 4_194_304));
        // A process of the cell's first tick, after the wrap, is the cell's.
        let start = CellStart {
            ticks: 50,
            last_pid: Some(32766),
        };
        let seen = [process(302, PYTHON, 50), process(32765, PYTHON, 50)];
        let owned = cell_processes(&seen, &[WORKER, PYTHON], &start, PID_MAX);
        assert_eq!(sorted(owned), [302]);
    }

    #[test]
    fn the_roots_are_never_the_cells_and_a_torn_loop_ends() {
        // The interpreter restarted during the cell is still the engine's.
        let seen = [
            process(PYTHON, WORKER, 90),
            process(600, 601, 90),
            process(601, 600, 90),
            // Its parent left between two reads: judged by its start.
            process(610, 9999, 95),
        ];
        let owned = cell_processes(&seen, &[WORKER, PYTHON], &START, PID_MAX);
        assert_eq!(sorted(owned), [600, 601, 610]);
    }
}
