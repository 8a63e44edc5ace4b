//! The supervisor's metrics, in OpenMetrics text (`Cellvisor::scrape`): counters and a
//! histogram the actors move where things happen (an atomic increment, no message), and
//! gauges of the registry's state refreshed at each scrape. No label carries a session id:
//! the number of series stays bounded whatever the sessions are called.
//!
//! - `process`: the daemon process's own RSS and CPU time, from `/proc/self`.

mod process;
#[cfg(test)]
mod tests;

use crate::session::outcome::{Eviction, KillReason};
use cellvisor_client::cell::CellStatus;
use cellvisor_client::status::SessionState;
use cellvisor_ipc::Language;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The content type of [`Metrics::encode`]'s text, for an HTTP answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every state a session row can be in, for the `cellvisor_sessions` gauge (a state with no
/// session reads 0 rather than vanishing).
pub const STATES: [SessionState; 5] = [
    SessionState::Starting,
    SessionState::Idle,
    SessionState::Busy,
    SessionState::Stopping,
    SessionState::Failed,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LanguageLabel {
    language: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    language: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    language: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    language: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabel {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

/// Why a session was stopped by the supervisor, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionReason {
    /// Idle past `sessions.idle-timeout`.
    Idle,
    /// Least recently used, to make room under `max-sessions`.
    Lru,
    /// Stopped by a drain.
    Drain,
    /// A host's `close`.
    Closed,
}

impl EvictionReason {
    fn label(self) -> &'static str {
        match self {
            EvictionReason::Idle => "idle",
            EvictionReason::Lru => "lru",
            EvictionReason::Drain => "drain",
            EvictionReason::Closed => "closed",
        }
    }

    /// The label of a typed eviction.
    pub fn of(eviction: &Eviction) -> EvictionReason {
        match eviction {
            Eviction::Closed { .. } => EvictionReason::Closed,
            Eviction::ForRoom { .. } => EvictionReason::Lru,
            Eviction::Idle { .. } => EvictionReason::Idle,
            Eviction::Drained { .. } => EvictionReason::Drain,
        }
    }
}

fn kill_label(reason: &KillReason) -> &'static str {
    match reason {
        KillReason::MissedHeartbeats { .. } => "heartbeat",
        KillReason::IgnoredInterrupt { .. } => "interrupt_grace",
        KillReason::OverMemory { .. } => "memory",
    }
}

fn language_label(language: Language) -> &'static str {
    language.short_name()
}

fn status_label(status: CellStatus) -> &'static str {
    match status {
        CellStatus::Complete => "complete",
        CellStatus::Error => "error",
        CellStatus::Cancelled => "cancelled",
        CellStatus::Skipped => "skipped",
        CellStatus::Running => "running",
    }
}

fn state_label(state: SessionState) -> &'static str {
    match state {
        SessionState::Starting => "starting",
        SessionState::Idle => "idle",
        SessionState::Busy => "busy",
        SessionState::Stopping => "stopping",
        SessionState::Failed => "failed",
    }
}

/// The registry's state at a scrape, as the supervisor actor counts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegistryGauges {
    /// Live sessions per (language, state).
    pub sessions: Vec<(Language, SessionState, usize)>,
    /// `max-sessions` per enabled language (a disabled language has none).
    pub capacity: Vec<(Language, usize)>,
    /// The node is draining.
    pub draining: bool,
}

/// The metric families of one supervisor. Shared (`Arc`) by the host, the supervisor and
/// its sessions; every update is a few atomic operations.
pub struct Metrics {
    registry: Registry,
    sessions: Family<StateLabels, Gauge>,
    capacity: Family<LanguageLabel, Gauge>,
    cells: Family<StatusLabels, Counter>,
    cell_duration: Family<LanguageLabel, Histogram>,
    worker_starts: Family<LanguageLabel, Counter>,
    worker_crashes: Family<LanguageLabel, Counter>,
    worker_kills: Family<ReasonLabels, Counter>,
    evictions: Family<ReasonLabels, Counter>,
    output_bytes: Family<LanguageLabel, Counter>,
    connections: Family<TransportLabel, Gauge>,
    rss: Gauge,
    cpu: Gauge<f64, AtomicU64>,
    draining: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn duration_histogram() -> Histogram {
    // 5 ms to about 80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Metrics {
    /// The families of a supervisor on node `node`, all at zero.
    pub fn new(node: &str) -> Metrics {
        let mut registry = Registry::default();
        let sessions = Family::<StateLabels, Gauge>::default();
        let capacity = Family::<LanguageLabel, Gauge>::default();
        let cells = Family::<StatusLabels, Counter>::default();
        let cell_duration = Family::<LanguageLabel, Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        let worker_starts = Family::<LanguageLabel, Counter>::default();
        let worker_crashes = Family::<LanguageLabel, Counter>::default();
        let worker_kills = Family::<ReasonLabels, Counter>::default();
        let evictions = Family::<ReasonLabels, Counter>::default();
        let output_bytes = Family::<LanguageLabel, Counter>::default();
        let connections = Family::<TransportLabel, Gauge>::default();
        let rss = Gauge::default();
        let cpu = Gauge::<f64, AtomicU64>::default();
        let draining = Gauge::default();
        let node_info = Family::<NodeLabel, Gauge>::default();
        registry.register(
            "cellvisor_sessions",
            "Live sessions (one per session and language) by language and state",
            sessions.clone(),
        );
        registry.register(
            "cellvisor_sessions_max",
            "The most live sessions of a language (sessions.max-sessions), per enabled language",
            capacity.clone(),
        );
        registry.register(
            "cellvisor_cells",
            "Cells that ended, by language and status",
            cells.clone(),
        );
        registry.register(
            "cellvisor_cell_duration_seconds",
            "How long cells ran, by language",
            cell_duration.clone(),
        );
        registry.register(
            "cellvisor_worker_starts",
            "Workers that started, by language",
            worker_starts.clone(),
        );
        registry.register(
            "cellvisor_worker_crashes",
            "Workers that ended without being asked to (not killed for a policy), by language",
            worker_crashes.clone(),
        );
        registry.register(
            "cellvisor_worker_kills",
            "Workers killed for a policy, by language and reason (heartbeat, interrupt_grace, memory)",
            worker_kills.clone(),
        );
        registry.register(
            "cellvisor_evictions",
            "Sessions stopped by the supervisor or a host, by language and reason (idle, lru, drain, closed)",
            evictions.clone(),
        );
        registry.register(
            "cellvisor_output_bytes",
            "Bytes of cell output handed to hosts, by language",
            output_bytes.clone(),
        );
        registry.register(
            "cellvisor_connections",
            "Open client connections, by transport",
            connections.clone(),
        );
        registry.register(
            "cellvisor_process_resident_memory_bytes",
            "The daemon process's resident memory (its workers not included)",
            rss.clone(),
        );
        registry.register(
            "cellvisor_process_cpu_seconds",
            "CPU time the daemon process has used (user and system; its workers not included)",
            cpu.clone(),
        );
        registry.register(
            "cellvisor_draining",
            "1 while the node drains (takes no new sessions), else 0",
            draining.clone(),
        );
        registry.register(
            "cellvisor_node",
            "This node's name (daemon.node or the host name), as a label; always 1",
            node_info.clone(),
        );
        // Every series a language can have exists from the start (at zero), so a dashboard's
        // rate() sees the first increment and a scrape names every family.
        for language in Language::ALL.map(language_label) {
            let one = LanguageLabel { language };
            for status in ["complete", "error", "cancelled"] {
                let _ = cells.get_or_create(&StatusLabels { language, status });
            }
            let _ = cell_duration.get_or_create(&one);
            let _ = worker_starts.get_or_create(&one);
            let _ = worker_crashes.get_or_create(&one);
            let _ = output_bytes.get_or_create(&one);
            for reason in ["heartbeat", "interrupt_grace", "memory"] {
                let _ = worker_kills.get_or_create(&ReasonLabels { language, reason });
            }
            for reason in ["idle", "lru", "drain", "closed"] {
                let _ = evictions.get_or_create(&ReasonLabels { language, reason });
            }
            for state in STATES.map(state_label) {
                let _ = sessions.get_or_create(&StateLabels { language, state });
            }
        }
        let _ = connections.get_or_create(&TransportLabel { transport: "unix" });
        node_info
            .get_or_create(&NodeLabel {
                node: node.to_string(),
            })
            .set(1);
        Metrics {
            registry,
            sessions,
            capacity,
            cells,
            cell_duration,
            worker_starts,
            worker_crashes,
            worker_kills,
            evictions,
            output_bytes,
            connections,
            rss,
            cpu,
            draining,
        }
    }

    /// A cell ended with `status` after `seconds`, handing `output_bytes` of output on.
    pub fn cell_ended(
        &self,
        language: Language,
        status: CellStatus,
        seconds: f64,
        output_bytes: usize,
    ) {
        let language = language_label(language);
        self.cells
            .get_or_create(&StatusLabels {
                language,
                status: status_label(status),
            })
            .inc();
        self.cell_duration
            .get_or_create(&LanguageLabel { language })
            .observe(seconds.max(0.0));
        self.output_bytes
            .get_or_create(&LanguageLabel { language })
            .inc_by(u64::try_from(output_bytes).unwrap_or(u64::MAX));
    }

    /// A worker of `language` started.
    pub fn worker_started(&self, language: Language) {
        self.worker_starts
            .get_or_create(&LanguageLabel {
                language: language_label(language),
            })
            .inc();
    }

    /// A worker of `language` ended without being asked to or killed.
    pub fn worker_crashed(&self, language: Language) {
        self.worker_crashes
            .get_or_create(&LanguageLabel {
                language: language_label(language),
            })
            .inc();
    }

    /// A worker of `language` was killed for a policy.
    pub fn worker_killed(&self, language: Language, reason: &KillReason) {
        self.worker_kills
            .get_or_create(&ReasonLabels {
                language: language_label(language),
                reason: kill_label(reason),
            })
            .inc();
    }

    /// A session of `language` is being stopped for `reason`.
    pub fn evicted(&self, language: Language, reason: EvictionReason) {
        self.evictions
            .get_or_create(&ReasonLabels {
                language: language_label(language),
                reason: reason.label(),
            })
            .inc();
    }

    /// A client connection over `transport` (`unix`, `websocket`, `mcp`) opened; it counts
    /// until the guard is dropped.
    pub fn connection_opened(&self, transport: &'static str) -> ConnectionGuard {
        let gauge = self
            .connections
            .get_or_create(&TransportLabel { transport })
            .clone();
        gauge.inc();
        ConnectionGuard { gauge }
    }

    /// Sets the gauges of the registry's state and of the process, just before an encode.
    pub fn refresh(&self, gauges: &RegistryGauges) {
        for language in Language::ALL {
            for state in STATES {
                let count = gauges
                    .sessions
                    .iter()
                    .find(|(l, s, _)| *l == language && *s == state)
                    .map_or(0, |(_, _, n)| *n);
                self.sessions
                    .get_or_create(&StateLabels {
                        language: language_label(language),
                        state: state_label(state),
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            let label = LanguageLabel {
                language: language_label(language),
            };
            match gauges.capacity.iter().find(|(l, _)| *l == language) {
                Some((_, cap)) => {
                    self.capacity
                        .get_or_create(&label)
                        .set(i64::try_from(*cap).unwrap_or(i64::MAX));
                }
                None => {
                    self.capacity.remove(&label);
                }
            }
        }
        self.draining.set(i64::from(gauges.draining));
        let own = process::own_usage();
        if let Some(rss) = own.rss_bytes {
            self.rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        if let Some(cpu) = own.cpu_seconds {
            self.cpu.set(cpu);
        }
    }

    /// Every family as OpenMetrics text (ending in `# EOF`).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Counts one open connection in `cellvisor_connections` until dropped.
#[derive(Debug)]
pub struct ConnectionGuard {
    gauge: Gauge,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}
