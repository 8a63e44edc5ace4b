//! Actor tests of state that survives: which stops save a snapshot, the restore before the
//! next cell and its ledger, and what `close` forgets; with scripted workers whose saves
//! write the reason they were given (see `crate::testing`).

use super::tests::Rig;
use super::*;
use crate::cell::CellStatus;
use cellvisor_config::SnapshotWhen;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn evicting(when: SnapshotWhen) -> impl FnOnce(&mut Config) {
    move |config| {
        config.sessions.idle_timeout = Duration::from_millis(60);
        config.snapshots.when = when;
    }
}

async fn evicted(rig: &Rig, session: &str) {
    rig.until("the session is evicted", |rows| {
        !rows.iter().any(|r| r.session == session)
    })
    .await;
}

#[actix_rt::test]
async fn an_idle_eviction_saves_and_the_next_cell_restores_with_a_ledger() {
    let rig = Rig::start_with(true, evicting(SnapshotWhen::OnStop));
    assert_eq!(rig.run("s", "ok:1", None).await.output, "1\n");
    evicted(&rig, "s").await;
    assert_eq!(rig.latest_snapshot("s").as_deref(), Some("idle eviction"));
    let next = rig.run("s", "ok:2", None).await;
    assert_eq!(next.output, "2\n");
    let ledger = next.state.expect("a ledger");
    assert_eq!(ledger.restored, ["x"]);
    assert_eq!(ledger.skipped[0].name, "conn");
    assert_eq!(
        (ledger.from.reason.as_str(), ledger.from.cells_since),
        ("idle eviction", 0)
    );
    let notice = next.notice.expect("a notice");
    assert!(
        notice.contains("state restored from the snapshot"),
        "{notice}"
    );
    assert!(!notice.contains("earlier state is gone"), "{notice}");
    // Told once: the cell after has no ledger.
    assert!(rig.run("s", "ok:3", None).await.state.is_none());
    rig.stop().await;
}

#[actix_rt::test]
async fn with_never_nothing_is_saved_and_the_eviction_says_the_state_is_gone() {
    let rig = Rig::start_with(true, evicting(SnapshotWhen::Never));
    rig.run("s", "ok:1", None).await;
    evicted(&rig, "s").await;
    assert_eq!(rig.latest_snapshot("s"), None);
    let next = rig.run("s", "ok:2", None).await;
    assert!(next.state.is_none());
    assert!(next
        .notice
        .expect("a notice")
        .contains("earlier state is gone"));
    rig.stop().await;
}

#[actix_rt::test]
async fn a_refused_save_is_named_in_the_eviction_notice() {
    let rig = Rig::start_with(true, evicting(SnapshotWhen::OnStop));
    rig.fake.script.refuse_saves.store(true, Ordering::SeqCst);
    rig.run("s", "ok:1", None).await;
    evicted(&rig, "s").await;
    let next = rig.run("s", "ok:2", None).await;
    let notice = next.notice.expect("a notice");
    assert!(notice.contains("its state was not saved"), "{notice}");
    assert!(notice.contains("snapshots.max-size"), "{notice}");
    assert!(next.state.is_none());
    rig.stop().await;
}

#[actix_rt::test]
async fn the_daemon_stop_saves_every_idle_session() {
    let rig = Rig::start_with(true, |config| config.snapshots.when = SnapshotWhen::OnStop);
    rig.run("a", "ok:1", None).await;
    rig.run("b", "ok:1", None).await;
    let (a, b) = (rig.clone(), rig.clone());
    rig.stop().await;
    assert_eq!(a.latest_snapshot("a").as_deref(), Some("daemon stop"));
    assert_eq!(b.latest_snapshot("b").as_deref(), Some("daemon stop"));
}

#[actix_rt::test]
async fn every_cell_saves_after_each_success_and_a_crash_restores_that() {
    let rig = Rig::start_with(true, |config| {
        config.snapshots.when = SnapshotWhen::EveryCell
    });
    rig.run("s", "ok:1", None).await;
    rig.until("the snapshot after the cell", |_| {
        rig.latest_snapshot("s").as_deref() == Some("after cell")
    })
    .await;
    let crashed = rig.run("s", "crash", None).await;
    assert_eq!(crashed.status, CellStatus::Error);
    let next = rig.run("s", "ok:3", None).await;
    let ledger = next.state.expect("restored after the crash");
    assert_eq!(
        (ledger.from.reason.as_str(), ledger.from.cells_since),
        ("after cell", 1)
    );
    let notice = next.notice.expect("a notice");
    assert!(
        notice.contains("from the session's last snapshot"),
        "{notice}"
    );
    rig.stop().await;
}

#[actix_rt::test]
async fn on_stop_does_not_save_after_cells() {
    let rig = Rig::start_with(true, |config| config.snapshots.when = SnapshotWhen::OnStop);
    rig.run("s", "ok:1", None).await;
    rig.run("s", "ok:2", None).await;
    assert_eq!(rig.latest_snapshot("s"), None);
    rig.stop().await;
}

#[actix_rt::test]
async fn close_and_reset_forget_the_snapshots() {
    let rig = Rig::start_with(true, evicting(SnapshotWhen::OnStop));
    rig.run("s", "ok:1", None).await;
    evicted(&rig, "s").await;
    assert!(rig.latest_snapshot("s").is_some());
    rig.control("s", ControlAction::Close).await;
    assert_eq!(rig.latest_snapshot("s"), None);
    assert!(rig.run("s", "ok:2", None).await.state.is_none());
    evicted(&rig, "s").await;
    assert!(rig.latest_snapshot("s").is_some());
    rig.control("s", ControlAction::Reset).await;
    assert_eq!(rig.latest_snapshot("s"), None);
    rig.stop().await;
}
