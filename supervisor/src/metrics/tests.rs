//! The metrics' text: every family is there from the start, counters move, gauges follow the
//! registry, and a connection counts while its guard lives.

use super::*;

fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[test]
fn a_fresh_supervisor_names_every_family_and_its_node() {
    let metrics = Metrics::new("node-a");
    let text = metrics.encode().expect("encodes");
    for family in [
        "# TYPE cellvisor_sessions gauge",
        "# TYPE cellvisor_cells counter",
        "# TYPE cellvisor_cell_duration_seconds histogram",
        "# TYPE cellvisor_worker_starts counter",
        "# TYPE cellvisor_worker_crashes counter",
        "# TYPE cellvisor_worker_kills counter",
        "# TYPE cellvisor_evictions counter",
        "# TYPE cellvisor_output_bytes counter",
        "# TYPE cellvisor_connections gauge",
        "# TYPE cellvisor_process_resident_memory_bytes gauge",
        "# TYPE cellvisor_process_cpu_seconds gauge",
        "# TYPE cellvisor_draining gauge",
        "# TYPE cellvisor_node gauge",
    ] {
        assert!(text.contains(family), "{family} missing from\n{text}");
    }
    assert!(text.contains("cellvisor_node{node=\"node-a\"} 1"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Capacity comes from the configuration, at the first scrape.
    assert!(!text.contains("cellvisor_sessions_max{"));
}

#[test]
fn cells_workers_and_evictions_are_counted_by_their_labels() {
    let metrics = Metrics::new("n");
    metrics.cell_ended(Language::Python, CellStatus::Complete, 0.01, 6);
    metrics.cell_ended(Language::Python, CellStatus::Complete, 0.02, 4);
    metrics.cell_ended(Language::Lua, CellStatus::Error, 3.0, 0);
    metrics.worker_started(Language::JavaScript);
    metrics.worker_crashed(Language::JavaScript);
    metrics.worker_killed(
        Language::Python,
        &KillReason::OverMemory { rss: 10, cap: 5 },
    );
    metrics.evicted(Language::Python, EvictionReason::Drain);
    let text = metrics.encode().expect("encodes");
    for expected in [
        "cellvisor_cells_total{language=\"py\",status=\"complete\"} 2",
        "cellvisor_cells_total{language=\"lua\",status=\"error\"} 1",
        "cellvisor_cell_duration_seconds_count{language=\"py\"} 2",
        "cellvisor_output_bytes_total{language=\"py\"} 10",
        "cellvisor_worker_starts_total{language=\"js\"} 1",
        "cellvisor_worker_crashes_total{language=\"js\"} 1",
        "cellvisor_worker_kills_total{language=\"py\",reason=\"memory\"} 1",
        "cellvisor_evictions_total{language=\"py\",reason=\"drain\"} 1",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }
}

#[test]
fn gauges_follow_the_registry_at_each_refresh() {
    let metrics = Metrics::new("n");
    metrics.refresh(&RegistryGauges {
        sessions: vec![(Language::Python, SessionState::Busy, 3)],
        capacity: vec![(Language::Python, 8)],
        draining: true,
    });
    let text = metrics.encode().expect("encodes");
    assert!(text.contains("cellvisor_sessions{language=\"py\",state=\"busy\"} 3"));
    assert!(text.contains("cellvisor_sessions{language=\"lua\",state=\"idle\"} 0"));
    assert!(text.contains("cellvisor_sessions_max{language=\"py\"} 8"));
    assert!(line(&text, "cellvisor_sessions_max{language=\"js\"}").is_none());
    assert!(text.contains("cellvisor_draining 1"));
    let rss = line(&text, "cellvisor_process_resident_memory_bytes ").expect("rss");
    assert_ne!(rss, "cellvisor_process_resident_memory_bytes 0");
    metrics.refresh(&RegistryGauges::default());
    let text = metrics.encode().expect("encodes");
    assert!(text.contains("cellvisor_sessions{language=\"py\",state=\"busy\"} 0"));
    assert!(text.contains("cellvisor_draining 0"));
}

#[test]
fn a_connection_counts_while_its_guard_lives() {
    let metrics = Metrics::new("n");
    let first = metrics.connection_opened("unix");
    let _second = metrics.connection_opened("unix");
    let _third = metrics.connection_opened("websocket");
    let text = metrics.encode().expect("encodes");
    assert!(
        text.contains("cellvisor_connections{transport=\"unix\"} 2"),
        "{text}"
    );
    assert!(text.contains("cellvisor_connections{transport=\"websocket\"} 1"));
    drop(first);
    let text = metrics.encode().expect("encodes");
    assert!(
        text.contains("cellvisor_connections{transport=\"unix\"} 1"),
        "{text}"
    );
}
