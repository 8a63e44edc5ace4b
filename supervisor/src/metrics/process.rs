//! The daemon process's own memory and CPU time, read from `/proc/self` (through
//! `cellvisor_os::proc`) at each scrape.

/// What `/proc/self` says of this process; `None` where it could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnUsage {
    pub rss_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

/// This process's resident memory and user + system CPU seconds.
pub fn own_usage() -> OwnUsage {
    let ticks = cellvisor_os::process_tree::ticks_per_second();
    OwnUsage {
        rss_bytes: cellvisor_os::proc::memory(None).map(|m| m.resident_bytes),
        cpu_seconds: cellvisor_os::proc::own_stat().map(|s| s.cpu_ticks as f64 / ticks as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu() {
        let own = own_usage();
        assert!(own.rss_bytes.is_some_and(|b| b > 0));
        assert!(own.cpu_seconds.is_some());
    }
}
