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
        self.trees.retain(|root, _| roots.contains(root));
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
        self.status_cpu.retain(|root, _| roots.contains(root));
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

#[cfg(test)]
mod tests {
    use super::*;

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
