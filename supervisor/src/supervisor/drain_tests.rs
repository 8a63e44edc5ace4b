//! Actor tests of the drain, the readiness probe and the metrics the actors move, with
//! scripted workers.

use super::tests::Rig;
use super::*;
use crate::cell::CellStatus;
use cellvisor_config::SnapshotWhen;
use std::time::Duration;

fn count(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[actix_rt::test]
async fn a_drain_stops_idle_sessions_with_a_snapshot_and_refuses_new_ones_until_undrained() {
    let rig = Rig::start_with(true, |c| c.snapshots.when = SnapshotWhen::OnStop);
    rig.run("idle", "ok:1", None).await;
    assert_eq!(rig.addr.send(ReadinessCheck).await.expect("alive"), Ok(()));
    rig.addr.send(SetDraining(true)).await.expect("alive");
    rig.until("the idle session stops", |rows| rows.is_empty())
        .await;
    assert_eq!(rig.latest_snapshot("idle").as_deref(), Some("drain"));
    let refused = rig.run("new", "ok:2", None).await;
    assert_eq!(refused.status, CellStatus::Error);
    assert!(refused.output.contains("draining"), "{}", refused.output);
    let not_ready = rig.addr.send(ReadinessCheck).await.expect("alive");
    assert!(not_ready.is_err_and(|r| r.contains("draining")));
    rig.addr.send(SetDraining(false)).await.expect("alive");
    assert_eq!(rig.run("new", "ok:3", None).await.output, "3\n");
    let text = rig.metrics.encode().expect("encodes");
    assert_eq!(
        count(
            &text,
            "cellvisor_evictions_total{language=\"py\",reason=\"drain\"}"
        ),
        1
    );
    rig.stop().await;
}

#[actix_rt::test]
async fn a_session_busy_at_the_drain_runs_its_next_cell_and_stops_once_idle_long_enough() {
    let rig = Rig::start(|c| c.daemon.drain_idle = Duration::from_millis(300));
    let busy = {
        let rig = rig.clone();
        actix_rt::spawn(async move { rig.run("agent", "hang", Some(0.2)).await })
    };
    rig.until("agent busy", |rows| {
        rows.iter().any(|r| r.state == SessionState::Busy)
    })
    .await;
    rig.addr.send(SetDraining(true)).await.expect("alive");
    assert_eq!(busy.await.expect("task").status, CellStatus::Cancelled);
    // Its next cell still runs here: the session is held.
    assert_eq!(rig.run("agent", "ok:next", None).await.output, "next\n");
    assert_eq!(rig.status().await.len(), 1);
    rig.until("the agent's session stops", |rows| rows.is_empty())
        .await;
    rig.stop().await;
}

#[actix_rt::test]
async fn a_full_node_is_not_ready_until_a_session_can_be_evicted() {
    let rig = Rig::start(|c| {
        c.sessions.max_sessions = 1;
        c.js.enabled = false;
        c.lua.enabled = false;
    });
    let busy = {
        let rig = rig.clone();
        actix_rt::spawn(async move { rig.run("a", "hang", Some(0.3)).await })
    };
    rig.until("a busy", |rows| {
        rows.iter().any(|r| r.state == SessionState::Busy)
    })
    .await;
    let reason = rig.addr.send(ReadinessCheck).await.expect("alive");
    assert!(reason.is_err_and(|r| r.contains("py 1/1")));
    busy.await.expect("task");
    rig.until("a idle", |rows| {
        rows.iter().all(|r| r.state == SessionState::Idle)
    })
    .await;
    assert_eq!(rig.addr.send(ReadinessCheck).await.expect("alive"), Ok(()));
    rig.stop().await;
}

#[actix_rt::test]
async fn the_actors_count_cells_crashes_starts_and_evictions() {
    let rig = Rig::start(|c| c.sessions.max_sessions = 1);
    rig.run("a", "ok:hello", None).await;
    rig.run("a", "fail", None).await;
    rig.run("a", "crash", None).await;
    rig.run("b", "ok:b", None).await; // evicts a
    let gauges = rig.addr.send(GaugesQuery).await.expect("alive");
    rig.metrics.refresh(&gauges);
    let text = rig.metrics.encode().expect("encodes");
    let py = |series: &str| count(&text, &format!("{series}{{language=\"py\"{}", "}"));
    assert_eq!(
        count(
            &text,
            "cellvisor_cells_total{language=\"py\",status=\"complete\"}"
        ),
        2
    );
    // `fail` and the cell its worker crashed under.
    assert_eq!(
        count(
            &text,
            "cellvisor_cells_total{language=\"py\",status=\"error\"}"
        ),
        2
    );
    assert_eq!(py("cellvisor_worker_crashes_total"), 1);
    assert!(py("cellvisor_worker_starts_total") >= 2);
    assert_eq!(
        count(
            &text,
            "cellvisor_evictions_total{language=\"py\",reason=\"lru\"}"
        ),
        1
    );
    // The two cells' prints, and the texts of the failure and the crash.
    assert!(py("cellvisor_output_bytes_total") > "hello\nb\n".len() as u64);
    assert_eq!(py("cellvisor_cell_duration_seconds_count"), 4);
    assert_eq!(py("cellvisor_sessions_max"), 1);
    assert_eq!(
        count(&text, "cellvisor_sessions{language=\"py\",state=\"idle\"}"),
        1
    );
    rig.stop().await;
}
