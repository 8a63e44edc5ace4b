//! Actor tests of one session on its own (the memory cap), with a scripted worker and a
//! stand-in for the supervisor that records what the session reports.

use super::*;
use crate::cell::CellStatus;
use crate::testing::FakeLauncher;
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
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.sessions.heartbeat_interval = Duration::from_millis(20);
    config.sessions.heartbeat_timeout = Duration::from_secs(5);
    config.sessions.shutdown_grace = Duration::from_millis(50);
    config.limits.max_rss = Some(bytesize::ByteSize::mib(cap_mib));
    let reports = Reports(Arc::default()).start();
    let launcher: Arc<dyn crate::spawn::Launcher> = fake.clone();
    let session = Session::new(SessionSetup {
        key: SessionKey {
            session: "m".into(),
            language: Language::Lua,
        },
        config: Arc::new(config),
        spec: WorkerSpec {
            exe: "/nonexistent/cellvisor".into(),
            language: Language::Lua,
            run_dir: dir.path().to_path_buf(),
            cwd: None,
            env: Vec::new(),
            start_timeout: Duration::from_secs(5),
            rlimits: Vec::new(),
        },
        artifacts: crate::artifacts::ArtifactStore::new(dir.path().to_path_buf(), u64::MAX),
        launcher,
        events: reports.recipient(),
        notice: None,
        prestarted: None,
        pool: None,
    });
    (session.start(), dir)
}

async fn run(session: &Addr<Session>, code: &str) -> CellOutcome {
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
