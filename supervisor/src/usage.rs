//! Memory and CPU of workers: one sampler per supervisor, serving both `status` and the
//! `limits.max-rss` cap. A worker's figures include every process under it (the Python
//! interpreter under its shim, children of cells).
//!
//! Only the workers' process trees are read, from `/proc`, opened and closed per read: no
//! descriptor stays open, and no other process of the host is measured. Finding a tree may
//! take a scan of `/proc` (on kernels without per-task children lists), so between
//! discoveries the sampler rereads just the members it knows.

use cellvisor_workers::process_tree::{self, ProcStat};
use std::collections::HashMap;
use std::time::Instant;

/// What a worker and its descendants use.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub rss_bytes: u64,
    /// Percent of one core since the previous sample of this worker (0 on the first).
    pub cpu_percent: f32,
}

/// Remembers each worker's tree and CPU time between samples.
#[derive(Default)]
pub struct ProcessSampler {
    /// The members of each worker's tree at the last discovery.
    trees: HashMap<u32, Vec<u32>>,
    /// CPU ticks of each worker's tree at its last sample, and when.
    cpu: HashMap<u32, (u64, Instant)>,
}

impl ProcessSampler {
    /// Samples the trees of `roots`. With `discover`, each tree is found afresh (new
    /// children included); otherwise the known members are reread, and only a worker not
    /// seen before is discovered.
    pub fn sample(&mut self, roots: &[u32], discover: bool) -> HashMap<u32, Usage> {
        self.trees.retain(|root, _| roots.contains(root));
        self.cpu.retain(|root, _| roots.contains(root));
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
        let now = Instant::now();
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
                let live = members.iter().filter(|p| !p.is_dead());
                let (rss_bytes, ticks) = live.fold((0, 0), |(rss, ticks), p| {
                    (rss + p.rss_bytes, ticks + p.cpu_ticks)
                });
                self.trees
                    .insert(*root, members.iter().map(|p| p.pid).collect());
                let cpu_percent = match self.cpu.insert(*root, (ticks, now)) {
                    Some((before, at)) => {
                        let seconds = now.duration_since(at).as_secs_f64();
                        let used = ticks.saturating_sub(before) as f64
                            / process_tree::ticks_per_second() as f64;
                        if seconds > 0.0 {
                            (used / seconds * 100.0) as f32
                        } else {
                            0.0
                        }
                    }
                    None => 0.0,
                };
                (
                    *root,
                    Usage {
                        rss_bytes,
                        cpu_percent,
                    },
                )
            })
            .collect()
    }
}

/// How many descriptors this process has open (for measurements and tests).
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_has_memory() {
        let me = std::process::id();
        let mut sampler = ProcessSampler::default();
        let usage = sampler.sample(&[me], true);
        assert!(usage[&me].rss_bytes > 1024 * 1024);
        let again = sampler.sample(&[me], false);
        assert!(again[&me].rss_bytes > 1024 * 1024);
    }

    #[test]
    fn a_gone_worker_is_forgotten() {
        let mut sampler = ProcessSampler::default();
        let me = std::process::id();
        sampler.sample(&[me], true);
        sampler.sample(&[], false);
        assert!(sampler.trees.is_empty() && sampler.cpu.is_empty());
    }
}
