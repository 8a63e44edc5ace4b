//! Memory and CPU of workers: one sampler per supervisor, serving both `status` and the
//! `limits.max-rss` cap. A worker's figures include every process under it (the Python
//! interpreter under its shim, children of cells).
//!
//! Only the workers' process trees are read, from `/proc`, opened and closed per read: no
//! descriptor stays open, and no other process of the host is measured. Finding a tree may
//! take a scan of `/proc` (on kernels without per-task children lists), so between
//! discoveries the sampler rereads just the members it knows.

use cellvisor_client::usage::CellUsage;
use cellvisor_os::process_tree::{self, ProcStat};
use std::collections::HashMap;
use std::time::Instant;

/// What a worker and its descendants use.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub rss_bytes: u64,
    /// Percent of one core since the previous sample of this worker (0 on the first).
    pub cpu_percent: f32,
}

/// One sample of a worker's tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeSample {
    pub rss_bytes: u64,
    /// User plus system CPU time of the live members, in clock ticks.
    pub cpu_ticks: u64,
}

/// Remembers each worker's tree between samples, and its CPU time at the last `status`.
#[derive(Default)]
pub struct ProcessSampler {
    /// The members of each worker's tree at the last discovery.
    trees: HashMap<u32, Vec<u32>>,
    /// CPU ticks of each worker's tree at the last [`ProcessSampler::usage`], and when.
    status_cpu: HashMap<u32, (u64, Instant)>,
}

impl ProcessSampler {
    /// Samples the trees of `roots`. With `discover`, each tree is found afresh (new
    /// children included); otherwise the known members are reread, and only a worker not
    /// seen before is discovered.
    pub fn sample(&mut self, roots: &[u32], discover: bool) -> HashMap<u32, TreeSample> {
        // A set, not `roots.contains` per tree: a node with a thousand sessions would pay a
        // million comparisons per sample.
        let live: std::collections::HashSet<u32> = roots.iter().copied().collect();
        self.trees.retain(|root, _| live.contains(root));
        let unknown: Vec<u32> = if discover {
            roots.to_vec()
        } else {
            roots
                .iter()
                .copied()
                .filter(|r| !self.trees.contains_key(r))
                .collect()
        };
        let mut found = process_tree::trees(&unknown);
        roots
            .iter()
            .map(|root| {
                let members: Vec<ProcStat> = match found.remove(root) {
                    Some(members) => members,
                    None => self
                        .trees
                        .get(root)
                        .into_iter()
                        .flatten()
                        .filter_map(|pid| process_tree::stat(*pid))
                        .collect(),
                };
                let sample = members.iter().filter(|p| !p.is_dead()).fold(
                    TreeSample::default(),
                    |sum, p| TreeSample {
                        rss_bytes: sum.rss_bytes + p.rss_bytes,
                        cpu_ticks: sum.cpu_ticks + p.cpu_ticks,
                    },
                );
                self.trees
                    .insert(*root, members.iter().map(|p| p.pid).collect());
                (*root, sample)
            })
            .collect()
    }

    /// Memory and CPU of each tree for `status`: trees found afresh, CPU since the previous
    /// `status` (0 the first time a worker is seen).
    pub fn usage(&mut self, roots: &[u32]) -> HashMap<u32, Usage> {
        let live: std::collections::HashSet<u32> = roots.iter().copied().collect();
        self.status_cpu.retain(|root, _| live.contains(root));
        let now = Instant::now();
        let per_second = process_tree::ticks_per_second() as f64;
        self.sample(roots, true)
            .into_iter()
            .map(|(root, sample)| {
                let cpu_percent = match self.status_cpu.insert(root, (sample.cpu_ticks, now)) {
                    Some((before, at)) if now > at => {
                        let used = sample.cpu_ticks.saturating_sub(before) as f64 / per_second;
                        (used / now.duration_since(at).as_secs_f64() * 100.0) as f32
                    }
                    _ => 0.0,
                };
                let usage = Usage {
                    rss_bytes: sample.rss_bytes,
                    cpu_percent,
                };
                (root, usage)
            })
            .collect()
    }
}

/// A worker tree's CPU and memory at one moment: read when a cell ends (and once when the
/// worker starts), so a cell's CPU is the difference from the reading before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeReading {
    /// CPU time of every member, and of the children they waited for, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident memory of the live members.
    pub rss_bytes: u64,
}

impl TreeReading {
    /// Reads the tree under `root` once, and the members found, for
    /// [`TreeReading::of_members`] to reread. Where the kernel lists no children this scans
    /// all of `/proc`. Members that ended but were not yet reaped still count their CPU: the
    /// kernel keeps it until then, which is how a lost worker's last cell still has its CPU.
    pub fn discover(root: u32) -> (TreeReading, Vec<u32>) {
        let members = process_tree::trees(&[root])
            .remove(&root)
            .unwrap_or_default();
        let pids = members.iter().map(|p| p.pid).collect();
        (Self::sum(&members), pids)
    }

    /// The tree as known members make it up: one `stat` read each. A process that ended
    /// and was reaped still counts, in its parent's children's CPU.
    pub fn of_members(members: &[u32]) -> TreeReading {
        let stats: Vec<ProcStat> = members
            .iter()
            .filter_map(|p| process_tree::stat(*p))
            .collect();
        Self::sum(&stats)
    }

    fn sum(members: &[ProcStat]) -> TreeReading {
        members
            .iter()
            .fold(TreeReading::default(), |sum, p| TreeReading {
                cpu_ticks: sum.cpu_ticks + p.cpu_ticks + p.children_cpu_ticks,
                rss_bytes: sum.rss_bytes + if p.is_dead() { 0 } else { p.rss_bytes },
            })
    }

    /// The usage of a cell that ran from `before` to this reading, whose tree's memory was
    /// also sampled at `peak_sampled` bytes at most while it ran (0: not sampled).
    pub fn usage_since(
        self,
        before: TreeReading,
        peak_sampled: u64,
        wall_ms: f64,
        output_bytes: u64,
    ) -> CellUsage {
        let ticks = self.cpu_ticks.saturating_sub(before.cpu_ticks);
        CellUsage {
            cpu_ms: ticks as f64 * 1000.0 / process_tree::ticks_per_second() as f64,
            peak_rss_bytes: self.rss_bytes.max(peak_sampled),
            wall_ms,
            output_bytes,
            processes_seen: None,
        }
    }
}

/// The worker's tree read before and after one cell (before: at the end of the worker's
/// previous cell, or at its start; an idle worker uses next to nothing in between).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellReadings {
    pub before: TreeReading,
    pub after: TreeReading,
}

impl CellReadings {
    /// The cell's usage (see [`TreeReading::usage_since`]).
    pub fn usage(self, peak_sampled: u64, wall_ms: f64, output_bytes: u64) -> CellUsage {
        self.after
            .usage_since(self.before, peak_sampled, wall_ms, output_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_reading_counts_cpu_spent_between_two_readings() {
        let me = std::process::id();
        let before = TreeReading::discover(me).0;
        assert!(before.rss_bytes > 1024 * 1024);
        let spin = Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(120) {}
        let after = TreeReading::discover(me).0;
        let usage = after.usage_since(before, 0, 120.0, 3);
        assert!(usage.cpu_ms >= 10.0, "{usage:?}");
        assert_eq!(usage.peak_rss_bytes, after.rss_bytes);
        assert_eq!(
            after.usage_since(before, u64::MAX, 0.0, 0).peak_rss_bytes,
            u64::MAX
        );
        // A later reading that is lower (a member left) is no negative time.
        assert_eq!(before.usage_since(after, 0, 0.0, 0).cpu_ms, 0.0);
    }

    #[test]
    fn our_own_process_has_memory_and_cpu() {
        let me = std::process::id();
        let mut sampler = ProcessSampler::default();
        let usage = sampler.usage(&[me]);
        assert!(usage[&me].rss_bytes > 1024 * 1024);
        let again = sampler.sample(&[me], false);
        assert!(again[&me].rss_bytes > 1024 * 1024);
        let spin = Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {}
        assert!(sampler.usage(&[me])[&me].cpu_percent > 0.0);
    }

    #[test]
    fn a_gone_worker_is_forgotten() {
        let mut sampler = ProcessSampler::default();
        let me = std::process::id();
        sampler.usage(&[me]);
        sampler.usage(&[]);
        assert!(sampler.trees.is_empty() && sampler.status_cpu.is_empty());
    }
}
