//! Actor tests of the supervision policies: the real `Supervisor` and `Session` actors with
//! scripted workers ([`crate::testing`]) that speak the real frames, short intervals, and
//! events ordered by polling `status` (no wait longer than 5 ms at a time).

use super::*;
use crate::cell::CellStatus;
use crate::session::{CellReport, SessionStatus};
use crate::testing::FakeLauncher;
use cellvisor_ipc::ToWorker;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

fn fast_config() -> Config {
    let mut config = Config::default();
    config.sessions.heartbeat_interval = Duration::from_millis(20);
    config.sessions.heartbeat_timeout = Duration::from_millis(150);
    config.sessions.sweep_interval = Duration::from_millis(20);
    config.sessions.idle_timeout = Duration::ZERO;
    config.sessions.interrupt_grace = Duration::from_millis(50);
    config.sessions.shutdown_grace = Duration::from_millis(50);
    config.cells.min_timeout = Duration::from_millis(10);
    config
}

/// A supervisor whose workers are fakes.
#[derive(Clone)]
pub(super) struct Rig {
    pub(super) addr: Addr<Supervisor>,
    pub(super) fake: Arc<FakeLauncher>,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    _dir: Arc<tempfile::TempDir>,
}

impl Rig {
    pub(super) fn start(configure: impl FnOnce(&mut Config)) -> Rig {
        Rig::start_with(false, configure)
    }

    /// A rig whose supervisor has a snapshot directory (`with_snapshots`).
    pub(super) fn start_with(with_snapshots: bool, configure: impl FnOnce(&mut Config)) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let snapshots = with_snapshots.then(|| {
            Arc::new(
                crate::snapshots::SnapshotStore::open(
                    &dir.path().join("snapshots"),
                    None,
                    "node-a",
                )
                .expect("snapshot directory"),
            )
        });
        let mut config = fast_config();
        configure(&mut config);
        let leases = config.fleet.leases.is_on().then(|| {
            let dir = crate::fleet::LeaseDir::open(
                &dir.path().join("snapshots"),
                "node-a",
                config.fleet.lease_ttl,
            )
            .expect("lease directory");
            Arc::new(crate::fleet::LeaseBook::new(dir))
        });
        let base = WorkerBase {
            ended: Default::default(),
            workspaces: std::env::temp_dir().join("cellvisor-test-workspaces"),
            programs: crate::spawn::WorkerPrograms::beside(PathBuf::from("/nonexistent/cellvisor")),
            run_dir: dir.path().to_path_buf(),
            artifacts: crate::artifacts::ArtifactStore::new(dir.path().join("artifacts"), u64::MAX),
            store_dir: dir.path().join("store"),
            snapshots,
            metrics: Arc::new(crate::metrics::Metrics::new("test-node")),
            leases,
            isolation: crate::isolation::IsolationStatus {
                level: "none",
                uids: None,
                landlock: None,
                reason: "test".into(),
            },
        };
        let metrics = Arc::clone(&base.metrics);
        let fake = FakeLauncher::new();
        let launcher: Arc<dyn Launcher> = fake.clone();
        let addr = Supervisor::with_launcher(Arc::new(config), base, launcher).start();
        Rig {
            addr,
            fake,
            metrics,
            _dir: Arc::new(dir),
        }
    }

    pub(super) async fn run(&self, session: &str, code: &str, timeout: Option<f64>) -> CellReport {
        let (job, outcome, _requester) = crate::testing::job(Language::Python, code, timeout);
        let request = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
        let key = SessionKey {
            session: session.into(),
            language: Language::Python,
        };
        self.addr
            .send(Submit {
                key,
                cwd: None,
                job,
                request,
            })
            .await
            .expect("supervisor alive");
        let outcome = outcome.await.expect("the cell is answered");
        self.addr.do_send(RequestDone { request });
        outcome
    }

    pub(super) async fn control(&self, session: &str, action: ControlAction) -> usize {
        self.addr
            .send(Control {
                session: session.into(),
                language: None,
                action,
            })
            .await
            .expect("supervisor alive")
    }

    pub(super) async fn status(&self) -> Vec<SessionStatus> {
        self.addr.send(Status).await.expect("supervisor alive")
    }

    pub(super) async fn row(&self, session: &str) -> Option<SessionStatus> {
        self.status()
            .await
            .into_iter()
            .find(|r| r.session == session)
    }

    async fn pid(&self, session: &str) -> u32 {
        self.row(session)
            .await
            .and_then(|r| r.pid)
            .unwrap_or_else(|| panic!("{session} has no worker"))
    }

    /// Polls `status` until `check` holds (for at most 2 s).
    pub(super) async fn until(&self, what: &str, check: impl Fn(&[SessionStatus]) -> bool) {
        for _ in 0..400 {
            if check(&self.status().await) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never happened: {what}: {:#?}", self.status().await);
    }

    /// The latest snapshot of Python session `session`, if there is one.
    pub(super) fn latest_snapshot(&self, session: &str) -> Option<String> {
        let path = self
            ._dir
            .path()
            .join("snapshots")
            .join(session)
            .join("py/latest.snap");
        std::fs::read_to_string(path).ok()
    }

    /// Where the rig's snapshots (and a fleet's leases) live.
    pub(super) fn snapshots_dir(&self) -> PathBuf {
        self._dir.path().join("snapshots")
    }

    pub(super) async fn stop(self) {
        self.addr.send(ShutdownAll).await.expect("supervisor alive");
        // A pool worker whose start finished after the shutdown began is discarded as it
        // arrives: give it a moment rather than racing it.
        for _ in 0..200 {
            if self.fake.launched().iter().all(|w| w.exit().is_some()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for worker in self.fake.launched() {
            assert!(
                worker.exit().is_some(),
                "fake {} left running",
                worker.pid()
            );
        }
    }
}

fn pid_of(rows: &[SessionStatus], session: &str) -> Option<u32> {
    rows.iter()
        .find(|r| r.session == session)
        .and_then(|r| r.pid)
}

fn set(flag: &std::sync::atomic::AtomicBool, value: bool) {
    flag.store(value, Ordering::SeqCst);
}

#[actix_rt::test]
async fn an_idle_worker_is_not_pinged_and_a_silent_one_is_left_alone_while_idle() {
    let rig = Rig::start(|_| {});
    assert_eq!(rig.run("s", "ok:1", None).await.output, "1\n");
    let first = rig.pid("s").await;
    let worker = rig.fake.worker(first);
    // Ten heartbeat intervals: any ping sent while the cell ran has been read by now, and
    // the heartbeat's first tick with no cell running has stopped it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let settled = worker.pings();
    set(&rig.fake.script.answer_pings, false);
    // Two heartbeat timeouts, idle: no ping goes out, so the silence costs it nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(worker.pings(), settled, "an idle worker was pinged");
    assert_eq!(rig.pid("s").await, first);
    assert_eq!(worker.exit(), None);
    set(&rig.fake.script.answer_pings, true);
    assert_eq!(rig.run("s", "ok:2", None).await.output, "2\n");
    assert_eq!(rig.pid("s").await, first);
    rig.stop().await;
}

#[actix_rt::test]
async fn missed_pongs_under_a_cell_fail_it_and_restart_the_worker() {
    let rig = Rig::start(|_| {});
    rig.run("s", "ok:warm", None).await;
    let first = rig.pid("s").await;
    set(&rig.fake.script.answer_pings, false);
    let lost = rig.run("s", "hang", Some(30.0)).await;
    set(&rig.fake.script.answer_pings, true);
    assert_eq!(lost.status, CellStatus::Error, "{}", lost.output);
    assert!(
        lost.output.contains(
            "worker killed: it missed heartbeats (no answer for 150ms, heartbeat-timeout); \
             session restarted, state lost"
        ),
        "{}",
        lost.output
    );
    // A cell ran on it: the replacement starts at once.
    rig.until("a new worker", |rows| {
        pid_of(rows, "s").is_some_and(|p| p != first)
    })
    .await;
    rig.stop().await;
}

#[actix_rt::test]
async fn the_budget_fails_a_session_and_a_success_or_a_reset_refills_it() {
    let rig = Rig::start(|c| c.sessions.restart_budget = 1);
    let crash = rig.run("s", "crash", None).await;
    assert_eq!(crash.status, CellStatus::Error);
    assert!(
        crash.output.contains(
            "worker crashed: killed by signal 11 (SIGSEGV); session restarted, state lost"
        ),
        "{}",
        crash.output
    );
    // A success refills the budget: the next crash restarts again.
    assert_eq!(
        rig.run("s", "ok:fine", None).await.status,
        CellStatus::Complete
    );
    let again = rig.run("s", "crash", None).await;
    assert!(
        again.output.contains("session restarted"),
        "{}",
        again.output
    );
    // Two crashes in a row spend it.
    let spent = rig.run("s", "crash", None).await;
    assert!(
        spent
            .output
            .contains("restart budget used up (restart-budget = 1)"),
        "{}",
        spent.output
    );
    let refused = rig.run("s", "ok:no", None).await;
    assert_eq!(refused.status, CellStatus::Error);
    assert!(
        refused.output.contains("restart-budget = 1"),
        "{}",
        refused.output
    );
    assert!(refused.output.contains("reset it"), "{}", refused.output);
    rig.until("failed", |rows| {
        rows.iter().any(|r| r.state == SessionState::Failed)
    })
    .await;
    assert_eq!(rig.control("s", ControlAction::Reset).await, 1);
    let after = rig.run("s", "ok:back", None).await;
    assert_eq!(after.output, "back\n");
    assert!(after.notice.unwrap_or_default().contains("reset"));
    rig.stop().await;
}

#[actix_rt::test]
async fn a_worker_that_dies_before_every_cell_spends_the_budget_instead_of_looping() {
    let rig = Rig::start(|c| c.sessions.restart_budget = 1);
    let outcome = rig.run("s", "die-unstarted", None).await;
    assert_eq!(outcome.status, CellStatus::Error);
    assert!(
        outcome.output.contains("restart-budget = 1"),
        "{}",
        outcome.output
    );
    rig.until("failed", |rows| {
        rows.iter().any(|r| r.state == SessionState::Failed)
    })
    .await;
    rig.stop().await;
}

#[actix_rt::test]
async fn a_deadline_interrupts_and_after_the_grace_kills() {
    let rig = Rig::start(|_| {});
    rig.run("s", "ok:warm", None).await;
    let first = rig.pid("s").await;

    // Honoured: cancelled, the same worker goes on.
    let cancelled = rig.run("s", "hang", Some(0.2)).await;
    assert_eq!(cancelled.status, CellStatus::Cancelled);
    assert_eq!(cancelled.output, "Command timed out after 0.2 seconds\n");
    // What the worker says it ended with the cell reaches the result.
    assert_eq!(
        cancelled.processes_ended,
        Some(crate::testing::SCRIPTED_PROCESSES_ENDED)
    );
    assert_eq!(rig.pid("s").await, first);
    let seen = rig.fake.worker(first).seen();
    assert!(
        matches!(seen.last(), Some(ToWorker::Interrupt { .. })),
        "{seen:?}"
    );

    // Ignored: killed after interrupt-grace, and restarted.
    set(&rig.fake.script.honour_interrupts, false);
    let killed = rig.run("s", "hang", Some(0.2)).await;
    assert_eq!(killed.status, CellStatus::Cancelled);
    assert_eq!(killed.processes_ended, None);
    assert_eq!(
        killed.output,
        "Command timed out after 0.2 seconds\nworker did not stop within interrupt-grace \
         (50ms) after the interrupt; killed it; session restarted, state lost\n"
    );
    let exit = rig.fake.worker(first).exit().unwrap_or_default();
    assert!(exit.contains("SIGKILL"), "{exit}");
    assert!(matches!(
        rig.fake.worker(first).seen().last(),
        Some(ToWorker::Interrupt { .. })
    ));
    set(&rig.fake.script.honour_interrupts, true);

    // The host's interrupt takes the same way.
    let waiting = {
        let rig = rig.clone();
        actix_rt::spawn(async move { rig.run("s", "hang", Some(30.0)).await })
    };
    rig.until("busy", |rows| {
        rows.iter().any(|r| r.state == SessionState::Busy)
    })
    .await;
    assert_eq!(rig.control("s", ControlAction::Interrupt).await, 1);
    let interrupted = waiting.await.expect("task");
    assert_eq!(interrupted.status, CellStatus::Cancelled);
    assert_eq!(interrupted.output, "Interrupted\n");
    rig.stop().await;
}

#[actix_rt::test]
async fn the_least_recently_used_idle_session_is_evicted_and_told() {
    let rig = Rig::start(|c| c.sessions.max_sessions = 2);
    rig.run("a", "ok:a", None).await;
    rig.run("b", "ok:b", None).await;
    rig.run("a", "ok:a", None).await; // b is now the least recently used
    rig.run("c", "ok:c", None).await;
    let live: Vec<String> = rig.status().await.into_iter().map(|r| r.session).collect();
    assert_eq!(live, ["a", "c"]);
    let back = rig.run("b", "ok:b", None).await;
    let notice = back.notice.unwrap_or_default();
    assert!(
        notice.contains(
            "session b/py was evicted to make room for another py session \
             (max-sessions = 2)"
        ),
        "{notice}"
    );
    rig.stop().await;
}

#[actix_rt::test]
async fn a_busy_session_is_never_evicted_and_a_waiting_cell_is_told_the_cap() {
    let rig = Rig::start(|c| c.sessions.max_sessions = 1);
    let busy = {
        let rig = rig.clone();
        actix_rt::spawn(async move { rig.run("a", "hang", Some(30.0)).await })
    };
    rig.until("a busy", |rows| {
        rows.iter().any(|r| r.state == SessionState::Busy)
    })
    .await;
    let pid = rig.pid("a").await;
    let refused = rig.run("b", "ok:b", Some(0.1)).await;
    assert_eq!(refused.status, CellStatus::Error);
    assert!(
        refused.output.starts_with(
            "no room for session b/py: all 1 py sessions are busy (max-sessions = 1 in \
             [sessions]) and none became free within 100ms."
        ),
        "{}",
        refused.output
    );
    let row = rig.row("a").await.expect("a is still live");
    assert_eq!((row.pid, row.state), (Some(pid), SessionState::Busy));
    assert_eq!(rig.control("a", ControlAction::Interrupt).await, 1);
    assert_eq!(busy.await.expect("task").status, CellStatus::Cancelled);
    rig.stop().await;
}

#[actix_rt::test]
async fn a_reload_changes_the_heartbeat_and_the_sweep_at_once() {
    let hour = Duration::from_secs(3600);
    let rig = Rig::start(|c| {
        c.sessions.heartbeat_interval = hour;
        c.sessions.heartbeat_timeout = hour;
        c.sessions.sweep_interval = hour;
    });
    rig.run("s", "ok:1", None).await;
    let first = rig.pid("s").await;

    // A shorter heartbeat applies at once: the silent worker under a cell is caught.
    set(&rig.fake.script.answer_pings, false);
    let hanging = {
        let rig = rig.clone();
        actix_rt::spawn(async move { rig.run("s", "hang", Some(30.0)).await })
    };
    rig.until("busy", |rows| {
        rows.iter().any(|r| r.state == SessionState::Busy)
    })
    .await;
    let mut config = fast_config();
    config.sessions.sweep_interval = hour;
    rig.addr.do_send(ReloadConfig(Arc::new(config.clone())));
    rig.until("caught by the new heartbeat", |rows| {
        pid_of(rows, "s") != Some(first)
    })
    .await;
    let lost = hanging.await.expect("task");
    assert_eq!(lost.status, CellStatus::Error, "{}", lost.output);
    assert!(rig
        .fake
        .worker(first)
        .exit()
        .unwrap_or_default()
        .contains("SIGKILL"));
    set(&rig.fake.script.answer_pings, true);
    rig.run("s", "ok:2", None).await;

    // A shorter sweep applies at once too: the idle session is evicted.
    config.sessions.sweep_interval = Duration::from_millis(20);
    config.sessions.idle_timeout = Duration::from_millis(30);
    rig.addr.do_send(ReloadConfig(Arc::new(config)));
    rig.until("evicted by the new sweep", |rows| rows.is_empty())
        .await;
    let next = rig.run("s", "ok:3", None).await;
    assert!(
        next.notice.unwrap_or_default().contains("idle-timeout"),
        "the next cell is told"
    );
    rig.stop().await;
}
