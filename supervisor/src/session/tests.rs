//! Actor tests of one session on its own (the memory cap), with a scripted worker and a
//! stand-in for the supervisor that records what the session reports.

use super::*;
use crate::cell::CellStatus;
use crate::spawn::WorkerSpec;
use crate::testing::FakeLauncher;
use cellvisor_config::Config;
use std::sync::Mutex;
use std::time::Duration;

/// Records the states a session reports.
struct Reports(Arc<Mutex<Vec<SessionState>>>);

impl Actor for Reports {
    type Context = Context<Self>;
}

impl Handler<SessionEvent> for Reports {
    type Result = ();
    fn handle(&mut self, msg: SessionEvent, _: &mut Context<Self>) {
        if let SessionEvent::Changed { state, .. } = msg {
            if let Ok(mut states) = self.0.lock() {
                states.push(state);
            }
        }
    }
}

fn start_session(fake: &Arc<FakeLauncher>, cap_mib: u64) -> (Addr<Session>, tempfile::TempDir) {
    start_session_with(fake, cap_mib, false)
}

/// A session whose snapshots go to the temporary directory (`with_snapshots`).
fn start_session_with(
    fake: &Arc<FakeLauncher>,
    cap_mib: u64,
    with_snapshots: bool,
) -> (Addr<Session>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshots = with_snapshots.then(|| {
        Arc::new(
            crate::snapshots::SnapshotStore::open(&dir.path().join("snapshots"), None, "node-a")
                .expect("snapshot directory"),
        )
    });
    let mut config = Config::default();
    config.sessions.heartbeat_interval = Duration::from_millis(20);
    config.sessions.heartbeat_timeout = Duration::from_secs(5);
    config.sessions.shutdown_grace = Duration::from_millis(50);
    config.limits.max_rss = Some(bytesize::ByteSize::mib(cap_mib));
    let reports = Reports(Arc::default()).start();
    let launcher: Arc<dyn crate::spawn::Launcher> = fake.clone();
    let session = Session::new(SessionSetup {
        fixed: Setup {
            key: SessionKey {
                session: "m".into(),
                language: Language::Lua,
            },
            config: Arc::new(config),
            spec: WorkerSpec {
                exe: "/nonexistent/cellvisor".into(),
                exe_args: Vec::new(),
                fallback: None,
                language: Language::Lua,
                run_dir: dir.path().to_path_buf(),
                cwd: None,
                env: crate::environment::WorkerEnv::default(),
                start_timeout: Duration::from_secs(5),
                rlimits: Vec::new(),
                zygote: false,
                preload: Vec::new(),
                uid: None,
                handover: None,
            },
            artifacts: crate::artifacts::ArtifactStore::new(dir.path().to_path_buf(), u64::MAX),
            launcher,
            events: reports.recipient(),
            metrics: Arc::new(crate::metrics::Metrics::new("test-node")),
        },
        notice: None,
        prestarted: None,
        pool: None,
        snapshots,
        restore: false,
    });
    (session.start(), dir)
}

async fn run(session: &Addr<Session>, code: &str) -> CellReport {
    let (job, outcome, _requester) = crate::testing::job(Language::Lua, code, Some(30.0));
    session.do_send(RunCell(job));
    outcome.await.expect("answered")
}

async fn pid(session: &Addr<Session>) -> Option<u32> {
    session.send(QueryStatus).await.expect("alive").pid
}

async fn until_pid_changes(session: &Addr<Session>, from: u32) {
    for _ in 0..400 {
        if pid(session).await != Some(from) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("worker {from} was not recycled");
}

#[actix_rt::test]
async fn a_memory_tick_over_the_cap_recycles_the_worker() {
    let fake = FakeLauncher::new();
    let (session, _dir) = start_session(&fake, 100);
    assert_eq!(run(&session, "ok:1").await.output, "1\n");
    let first = pid(&session).await.expect("a worker");

    // Under the cap, or about another worker: nothing happens.
    session.do_send(MemoryTick {
        pid: first,
        rss: 50 << 20,
    });
    session.do_send(MemoryTick {
        pid: first + 1000,
        rss: 500 << 20,
    });
    assert_eq!(run(&session, "ok:2").await.output, "2\n");
    assert_eq!(pid(&session).await, Some(first));

    // Over it between cells: recycled, free of the restart budget; the next cell is told.
    session.do_send(MemoryTick {
        pid: first,
        rss: 150 << 20,
    });
    until_pid_changes(&session, first).await;
    let next = run(&session, "ok:3").await;
    let notice = next.notice.unwrap_or_default();
    assert!(
        notice
            .contains("used 150.0 MiB of memory (RSS), over the cap of 100.0 MiB (limits.max-rss)"),
        "{notice}"
    );
    assert_eq!(session.send(QueryStatus).await.expect("alive").restarts, 1);

    // Over it under a cell: that cell is told why its worker went.
    let second = pid(&session).await.expect("a worker");
    let hanging = {
        let session = session.clone();
        actix_rt::spawn(async move { run(&session, "hang").await })
    };
    for _ in 0..400 {
        if session.send(QueryStatus).await.expect("alive").state == SessionState::Busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    session.do_send(MemoryTick {
        pid: second,
        rss: 300 << 20,
    });
    let lost = hanging.await.expect("task");
    assert_eq!(lost.status, CellStatus::Error);
    assert!(
        lost.output.contains("worker killed: it used 300.0 MiB"),
        "{}",
        lost.output
    );
    assert!(fake
        .worker(second)
        .exit()
        .unwrap_or_default()
        .contains("SIGKILL"));
}

/// Runs `hang` with a yield time: answered `running` while the cell goes on.
async fn run_in_background(session: &Addr<Session>) -> (u64, CellReport) {
    let (mut job, outcome, requester) = crate::testing::job(Language::Lua, "hang", Some(30.0));
    job.yield_time = Some(Duration::from_millis(20));
    let cell_id = job.cell_id;
    session.do_send(RunCell(job));
    let outcome = outcome.await.expect("answered");
    // The requester leaving after the yield no longer stops the cell.
    drop(requester);
    (cell_id, outcome)
}

async fn ask(
    session: &Addr<Session>,
    message: impl FnOnce(CellReply) -> Ask,
) -> Result<crate::cell::CellResult, observation::Refusal> {
    let (reply, answer) = oneshot::channel();
    match message(reply) {
        Ask::Wait(wait) => session.do_send(wait),
        Ask::Terminate(terminate) => session.do_send(terminate),
    }
    answer.await.expect("answered")
}

enum Ask {
    Wait(WaitCell),
    Terminate(TerminateCell),
}

#[actix_rt::test]
async fn a_background_cell_is_waited_on_terminated_and_its_loss_kept_for_collection() {
    let fake = FakeLauncher::new();
    let (session, _dir) = start_session(&fake, 100);
    let (cell_id, yielded) = run_in_background(&session).await;
    assert_eq!(yielded.status, CellStatus::Running);
    let status = session.send(QueryStatus).await.expect("alive");
    assert_eq!((status.cell_id, status.background), (Some(cell_id), true));

    // A wait's time passes: running, nothing new; an unknown id is refused.
    let wait = |cell_id, ms| {
        move |reply| {
            Ask::Wait(WaitCell {
                cell_id,
                yield_time: Duration::from_millis(ms),
                max_bytes: None,
                events: None,
                reply,
            })
        }
    };
    let watched = ask(&session, wait(cell_id, 10)).await.expect("a result");
    assert_eq!(
        (watched.report.status, watched.cell_id),
        (CellStatus::Running, cell_id)
    );
    assert_eq!(
        ask(&session, wait(cell_id + 1000, 10)).await.unwrap_err(),
        observation::Refusal::Unknown
    );

    // terminate: the interrupt policy; the answer is the final result.
    let ended = ask(&session, |reply| {
        Ask::Terminate(TerminateCell { cell_id, reply })
    })
    .await
    .expect("a result");
    assert_eq!(ended.report.status, CellStatus::Cancelled);

    // A background cell whose worker is lost while nobody watches: its end waits for a wait.
    let (lost_id, _) = run_in_background(&session).await;
    let worker = pid(&session).await.expect("a worker");
    session.do_send(MemoryTick {
        pid: worker,
        rss: 500 << 20,
    });
    until_pid_changes(&session, worker).await;
    let lost = ask(&session, wait(lost_id, 10_000)).await.expect("kept");
    assert_eq!(lost.report.status, CellStatus::Error);
    assert!(
        lost.report.output.contains("worker killed"),
        "{}",
        lost.report.output
    );
    assert_eq!(
        ask(&session, wait(lost_id, 10)).await.unwrap_err(),
        observation::Refusal::Unknown,
        "handed out once"
    );
}

#[actix_rt::test]
async fn an_idle_worker_over_the_cap_is_saved_replaced_and_restored() {
    let fake = FakeLauncher::new();
    let (session, _dir) = start_session_with(&fake, 100, true);
    run(&session, "ok:1").await;
    let first = pid(&session).await.expect("a worker");
    session.do_send(MemoryTick {
        pid: first,
        rss: 150 << 20,
    });
    until_pid_changes(&session, first).await;
    let next = run(&session, "ok:2").await;
    let ledger = next.state.expect("restored on the new worker");
    assert_eq!(ledger.from.reason, "memory recycle");
    let notice = next.notice.unwrap_or_default();
    assert!(notice.contains("its state was saved first"), "{notice}");
    assert!(
        notice.contains("state restored from the snapshot"),
        "{notice}"
    );
    // A planned replacement: the restart budget is untouched.
    assert_eq!(session.send(QueryStatus).await.expect("alive").restarts, 0);
    session.do_send(CloseSession {
        eviction: None,
        save: None,
        reply: None,
    });
}

#[test]
fn a_temporary_tree_is_measured_without_following_links_and_the_count_stops_past_the_cap() {
    use super::tmp::tree_bytes;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("tmp");
    std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
    std::fs::write(root.join("one"), vec![0u8; 1000]).expect("write");
    std::fs::write(root.join("a/b/two"), vec![0u8; 500]).expect("write");
    let outside = dir.path().join("outside");
    std::fs::write(&outside, vec![0u8; 100_000]).expect("write");
    std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
    assert_eq!(tree_bytes(&root, u64::MAX), Some(1500));
    assert!(tree_bytes(&root, 100).is_some_and(|n| n > 100));
    assert_eq!(tree_bytes(&dir.path().join("missing"), 10), None);
}
