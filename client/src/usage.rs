//! A cell's resource verdict: what it used ([`CellUsage`]) and, when memory ended it, which
//! limit it ran into and with what figures ([`OutOfMemory`]). Typed, so hosts and agents read
//! "out of memory: 512 MiB limit ([limits] max-rss), 530 MiB used" from fields instead of
//! parsing a signal number out of the output.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a cell used, measured on its worker's process tree (the worker and every process
/// under it) from the cell's start to its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellUsage {
    /// User plus system CPU time of the worker's tree during the cell, processes that ended
    /// during it included (their parents collected it), in milliseconds. Read from the
    /// kernel's per-process clock-tick counters, so it moves in steps of the tick (10 ms).
    pub cpu_ms: f64,
    /// The largest resident memory of the worker's tree seen during the cell: at its end, and
    /// at every memory sample taken while it ran (every 50 ms when `[limits] max-rss` is set).
    pub peak_rss_bytes: u64,
    /// Wall-clock time of the cell, in milliseconds (as `duration_ms`).
    pub wall_ms: f64,
    /// Everything the cell wrote, in bytes (as `truncation.total_bytes`).
    pub output_bytes: u64,
    /// How many processes of the cell its worker saw: those still there when it ended (the
    /// exited ones not yet collected included) or ended with it when it was cancelled, plus
    /// its orphans the worker collected while it ran. Not every process the cell started: one
    /// that starts and is collected while the cell runs (`subprocess.run(["true"])`) leaves
    /// no trace to count. A cell's processes are those started after it began whose parents
    /// up to the engine are the cell's too. Absent when the worker was lost with the cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_seen: Option<u32>,
}

/// The limit a cell's memory ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryLimit {
    /// The worker's process tree passed `[limits] max-rss`: the supervisor killed it.
    MaxRss,
    /// The QuickJS heap reached `[js] memory-limit`: the cell raised.
    JsHeap,
    /// The Lua heap reached `[lua] memory-limit` (or the worker's default): the cell raised.
    LuaHeap,
    /// The kernel's OOM killer ended the worker (or its Python interpreter): it died of a
    /// SIGKILL the supervisor did not send while the kernel counted an OOM kill, in the
    /// daemon's memory cgroup (or on the host, where no cgroup count can be read).
    KernelOom,
}

impl MemoryLimit {
    /// Where the limit is set, as the configuration names it.
    pub fn setting(self) -> &'static str {
        match self {
            MemoryLimit::MaxRss => "[limits] max-rss",
            MemoryLimit::JsHeap => "[js] memory-limit",
            MemoryLimit::LuaHeap => "[lua] memory-limit",
            MemoryLimit::KernelOom => "the memory cgroup's limit",
        }
    }
}

/// A cell ended by memory: which limit, what it was, and what was used when it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OutOfMemory {
    /// Which limit was reached.
    pub limit: MemoryLimit,
    /// The limit, in bytes (for `kernel_oom`, the memory cgroup's limit when the kill was
    /// counted there and it has one; 0 when the limit is not known).
    pub limit_bytes: u64,
    /// What was in use when the limit was reached (the tree's RSS for `max_rss`, the engine's
    /// heap for the engines' limits), in bytes; for `kernel_oom`, the most the worker's tree
    /// was seen using during the cell (0 when it was never measured).
    pub used_bytes: u64,
}

impl fmt::Display for OutOfMemory {
    /// The verdict in one line: `out of memory: 512 MiB limit ([limits] max-rss), 530 MiB
    /// used`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.limit == MemoryLimit::KernelOom {
            f.write_str("out of memory: killed by the kernel's OOM killer")?;
            if self.limit_bytes > 0 {
                write!(
                    f,
                    " at {} ({})",
                    human_bytes(self.limit_bytes),
                    self.limit.setting()
                )?;
            }
            if self.used_bytes > 0 {
                write!(
                    f,
                    ", {} used when last measured",
                    human_bytes(self.used_bytes)
                )?;
            }
            return Ok(());
        }
        write!(
            f,
            "out of memory: {} limit ({}), {} used",
            human_bytes(self.limit_bytes),
            self.limit.setting(),
            human_bytes(self.used_bytes)
        )
    }
}

/// Bytes in binary units, whole when exact (`512 MiB`), else to one decimal (`1.5 GiB`,
/// `530.2 MiB`); under a KiB as bytes.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{} {}", rounded as u64, UNITS[unit])
    } else {
        format!("{rounded:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_reads_in_one_line_with_its_figures() {
        let verdict = OutOfMemory {
            limit: MemoryLimit::MaxRss,
            limit_bytes: 512 << 20,
            used_bytes: 530 << 20,
        };
        assert_eq!(
            verdict.to_string(),
            "out of memory: 512 MiB limit ([limits] max-rss), 530 MiB used"
        );
        let js = OutOfMemory {
            limit: MemoryLimit::JsHeap,
            limit_bytes: 64 << 20,
            used_bytes: (64 << 20) - 100,
        };
        assert_eq!(
            js.to_string(),
            "out of memory: 64 MiB limit ([js] memory-limit), 64 MiB used"
        );
        assert_eq!(
            serde_json::to_value(js).ok(),
            Some(serde_json::json!({
                "limit": "js_heap",
                "limit_bytes": 67108864,
                "used_bytes": 67108764
            }))
        );
    }

    #[test]
    fn the_kernels_verdict_says_what_is_known() {
        let mut kernel = OutOfMemory {
            limit: MemoryLimit::KernelOom,
            limit_bytes: 1 << 30,
            used_bytes: 1_110_000_000,
        };
        assert_eq!(
            kernel.to_string(),
            "out of memory: killed by the kernel's OOM killer at 1 GiB (the memory cgroup's \
             limit), 1 GiB used when last measured"
        );
        kernel.limit_bytes = 0;
        assert_eq!(
            kernel.to_string(),
            "out of memory: killed by the kernel's OOM killer, 1 GiB used when last measured"
        );
        kernel.used_bytes = 0;
        assert_eq!(
            kernel.to_string(),
            "out of memory: killed by the kernel's OOM killer"
        );
        assert_eq!(
            serde_json::to_value(kernel).ok(),
            Some(serde_json::json!({"limit": "kernel_oom", "limit_bytes": 0, "used_bytes": 0}))
        );
    }

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(1_110_000_000), "1 GiB");
        assert_eq!(human_bytes(1_200_000_000), "1.1 GiB");
    }
}
