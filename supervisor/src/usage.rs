//! Memory and CPU of workers, from the OS (sysinfo). A worker's figures include the
//! processes it started (the Python interpreter under its shim, children of cells).

use std::collections::HashMap;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// What a worker and its descendants use.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub rss_bytes: u64,
    /// Percent of one core since the previous sample (0 on the first).
    pub cpu_percent: f32,
}

/// Keeps the previous sample so CPU use can be measured between two calls.
pub struct UsageSampler {
    system: System,
}

impl Default for UsageSampler {
    fn default() -> Self {
        UsageSampler {
            system: System::new(),
        }
    }
}

impl UsageSampler {
    /// Samples every process once and sums each root's tree.
    pub fn sample(&mut self, roots: &[u32]) -> HashMap<u32, Usage> {
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing().with_memory().with_cpu(),
        );
        let mut children: HashMap<Pid, Vec<Pid>> = HashMap::new();
        for (pid, process) in self.system.processes() {
            if let Some(parent) = process.parent() {
                children.entry(parent).or_default().push(*pid);
            }
        }
        roots
            .iter()
            .map(|root| {
                let mut usage = Usage::default();
                let mut stack = vec![Pid::from_u32(*root)];
                let mut seen = 0usize;
                while let Some(pid) = stack.pop() {
                    seen += 1;
                    if seen > 100_000 {
                        break;
                    }
                    if let Some(process) = self.system.process(pid) {
                        usage.rss_bytes += process.memory();
                        usage.cpu_percent += process.cpu_usage();
                    }
                    if let Some(kids) = children.get(&pid) {
                        stack.extend(kids);
                    }
                }
                (*root, usage)
            })
            .collect()
    }
}

/// The resident memory of one process tree, sampled now.
pub fn rss_of_tree(root: u32) -> Option<u64> {
    let mut sampler = UsageSampler::default();
    sampler
        .sample(&[root])
        .get(&root)
        .map(|u| u.rss_bytes)
        .filter(|rss| *rss > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_has_memory() {
        let me = std::process::id();
        let usage = UsageSampler::default().sample(&[me]);
        assert!(usage[&me].rss_bytes > 1024 * 1024);
    }
}
