//! Supervision policies end to end: a supervisor embedded through the library, real worker
//! processes (the cellvisor binary, python3, QuickJS, Lua), and a test config with short
//! intervals. Every test proves that no process it started is left behind.

mod common;

use cellvisor::{CellResult, CellSpec, CellStatus, Cellvisor, Config, EvalRequest, Language};
use common::{wait_until, World};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

struct Harness {
    world: World,
    cv: Cellvisor,
}

impl Harness {
    fn new(configure: impl FnOnce(&mut Config)) -> Harness {
        let world = World::new();
        let cv = world.supervisor(configure);
        Harness { world, cv }
    }

    async fn cell(&self, session: &str, language: Language, code: &str) -> CellResult {
        self.cell_with_timeout(session, language, code, None).await
    }

    async fn cell_with_timeout(
        &self,
        session: &str,
        language: Language,
        code: &str,
        timeout: Option<f64>,
    ) -> CellResult {
        let request = EvalRequest {
            session: session.into(),
            cwd: None,
            cells: vec![CellSpec {
                language,
                code: code.into(),
                title: None,
                timeout,
                reset: false,
                yield_time_ms: None,
            }],
            tools: Vec::new(),
            ..Default::default()
        };
        let mut result = self.cv.eval(request, None).await.expect("request accepted");
        result.cells.remove(0)
    }

    async fn pid_of(&self, session: &str, language: Language) -> u32 {
        let rows = self.cv.status().await.expect("status");
        rows.iter()
            .find(|r| r.session == session && r.language == language)
            .and_then(|r| r.pid)
            .unwrap_or_else(|| panic!("no live {language} worker for {session}: {rows:#?}"))
    }

    async fn finish(self) {
        self.cv.shutdown().await;
        self.world.assert_no_processes_left(SETTLE);
    }
}

fn kill(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

fn assert_ok(cell: &CellResult, output: &str) {
    assert_eq!(cell.report.status, CellStatus::Complete, "{cell:#?}");
    assert_eq!(cell.report.output, output, "{cell:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_that_kills_itself_is_replaced_then_the_budget_fails_the_session() {
    let h = Harness::new(|_| {});
    let py = Language::Python;
    assert_ok(&h.cell("s", py, "x = 1\nprint(x)").await, "1\n");

    let crash = h
        .cell(
            "s",
            py,
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        )
        .await;
    assert_eq!(crash.report.status, CellStatus::Error, "{crash:#?}");
    assert!(
        crash.report.output.contains("worker crashed"),
        "{}",
        crash.report.output
    );
    assert!(
        crash.report.output.contains("SIGKILL"),
        "{}",
        crash.report.output
    );
    assert!(
        crash
            .report
            .output
            .contains("session restarted, state lost"),
        "{}",
        crash.report.output
    );

    let after = h.cell("s", py, "print('x' in globals())").await;
    assert_ok(&after, "False\n");
    assert!(
        after
            .report
            .notice
            .as_deref()
            .unwrap_or_default()
            .contains("state is lost"),
        "{after:#?}"
    );

    // Two crashes with no success in between use up the budget of 1.
    let kill_self = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)";
    h.cell("s", py, kill_self).await;
    let second = h.cell("s", py, kill_self).await;
    assert!(
        second.report.output.contains("restart budget"),
        "{}",
        second.report.output
    );
    let refused = h.cell("s", py, "print(1)").await;
    assert_eq!(refused.report.status, CellStatus::Error);
    assert!(
        refused.report.output.contains("restart-budget = 1"),
        "{}",
        refused.report.output
    );
    assert!(
        refused.report.output.contains("reset"),
        "{}",
        refused.report.output
    );

    assert_eq!(h.cv.reset("s", Some(py)).await.expect("reset"), 1);
    assert_ok(&h.cell("s", py, "print(2)").await, "2\n");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_and_lua_workers_killed_from_outside_are_replaced() {
    let h = Harness::new(|_| {});
    for (language, set, get) in [
        (Language::JavaScript, "var kept = 5", "typeof kept"),
        (Language::Lua, "kept = 5", "type(kept)"),
    ] {
        assert_eq!(
            h.cell("s", language, set).await.report.status,
            CellStatus::Complete
        );
        let pid = h.pid_of("s", language).await;
        kill(pid, "KILL");
        let after = h.cell("s", language, get).await;
        let expected = if language == Language::Lua {
            "nil\n"
        } else {
            "undefined\n"
        };
        assert_ok(&after, expected);
        assert!(
            after
                .report
                .notice
                .as_deref()
                .unwrap_or_default()
                .contains("SIGKILL"),
            "{after:#?}"
        );
        assert_ne!(h.pid_of("s", language).await, pid);
    }
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segfault_is_named_and_other_sessions_keep_their_state() {
    let h = Harness::new(|_| {});
    let py = Language::Python;
    h.cell("other", py, "kept = 'still here'").await;
    let crash = h
        .cell("victim", py, "import ctypes\nctypes.string_at(0)")
        .await;
    assert_eq!(crash.report.status, CellStatus::Error);
    assert!(
        crash.report.output.contains("SIGSEGV"),
        "{}",
        crash.report.output
    );
    assert_ok(&h.cell("other", py, "print(kept)").await, "still here\n");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_loops_time_out_and_keep_state() {
    let h = Harness::new(|_| {});
    let cases = [
        (
            Language::Python,
            "before = 7",
            "while True: pass",
            "print(before)",
            "7\n",
        ),
        (
            Language::JavaScript,
            "var before = 7",
            "while(true){}",
            "before",
            "7\n",
        ),
        (
            Language::Lua,
            "before = 7",
            "while true do end",
            "before",
            "7\n",
        ),
        (
            Language::Lua,
            "before = 8",
            "pcall(function() while true do end end)",
            "before",
            "8\n",
        ),
    ];
    for (language, set, spin, get, expected) in cases {
        h.cell("s", language, set).await;
        let spun = h.cell_with_timeout("s", language, spin, Some(1.0)).await;
        assert_eq!(
            spun.report.status,
            CellStatus::Cancelled,
            "{language}: {spun:#?}"
        );
        assert!(
            spun.report
                .output
                .contains("Command timed out after 1 seconds"),
            "{}",
            spun.report.output
        );
        assert_ok(&h.cell("s", language, get).await, expected);
    }
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_that_ignores_sigint_is_killed_after_the_grace() {
    let h = Harness::new(|_| {});
    let py = Language::Python;
    h.cell("s", py, "x = 1").await;
    let stuck = h
        .cell_with_timeout(
            "s",
            py,
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
            Some(1.0),
        )
        .await;
    assert_eq!(stuck.report.status, CellStatus::Cancelled, "{stuck:#?}");
    assert!(
        stuck
            .report
            .output
            .contains("Command timed out after 1 seconds"),
        "{}",
        stuck.report.output
    );
    assert!(
        stuck.report.output.contains("interrupt-grace"),
        "{}",
        stuck.report.output
    );
    assert!(
        stuck.report.output.contains("state lost"),
        "{}",
        stuck.report.output
    );
    let next = h.cell("s", py, "print('x' in globals())").await;
    assert_ok(&next, "False\n");
    assert!(next.report.notice.is_some());
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_evicts_the_least_recently_used_idle_session_or_waits() {
    let h = Harness::new(|c| c.sessions.max_sessions = 2);
    let js = Language::JavaScript;
    h.cell("a", js, "var v = 'a'").await;
    h.cell("b", js, "var v = 'b'").await;
    h.cell("a", js, "v").await; // b is now the least recently used
    h.cell("c", js, "var v = 'c'").await;
    let rows = h.cv.status().await.expect("status");
    let live: Vec<&str> = rows.iter().map(|r| r.session.as_str()).collect();
    assert_eq!(live, ["a", "c"], "{rows:#?}");
    // Its namespace was saved before it went, and comes back with a ledger.
    let back = h.cell("b", js, "v").await;
    assert_ok(&back, "b\n");
    let ledger = back.report.state.as_ref().expect("restored");
    assert_eq!(ledger.from.reason, "lru eviction", "{back:#?}");

    // Both live sessions busy: a third waits for its timeout, then is told about the cap.
    let cv = &h.cv;
    let spin = |session: &'static str| async move {
        let request = EvalRequest {
            session: session.into(),
            cwd: None,
            cells: vec![CellSpec {
                language: js,
                code: "while(true){}".into(),
                title: None,
                timeout: Some(4.0),
                reset: false,
                yield_time_ms: None,
            }],
            tools: Vec::new(),
            ..Default::default()
        };
        cv.eval(request, None).await
    };
    let waiting = async {
        // Once both are busy (status polled, not a guess at timing), d must wait.
        loop {
            let rows = h.cv.status().await.expect("status");
            let busy = rows
                .iter()
                .filter(|r| r.state == cellvisor::SessionState::Busy)
                .count();
            if busy == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        h.cell_with_timeout("d", js, "1", Some(1.0)).await
    };
    let (_, _, refused) = tokio::join!(spin("b"), spin("c"), waiting);
    assert_eq!(refused.report.status, CellStatus::Error, "{refused:#?}");
    assert!(
        refused.report.output.contains("max-sessions = 2"),
        "{}",
        refused.report.output
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_evicted_and_the_next_cell_is_told() {
    // Without snapshots, the state is gone and the next cell is told why (with them, it
    // comes back: tests/snapshots.rs).
    let h = Harness::new(|c| {
        c.sessions.idle_timeout = Duration::from_secs(1);
        c.snapshots.when = cellvisor_config::SnapshotWhen::Never;
    });
    let lua = Language::Lua;
    h.cell("s", lua, "x = 1").await;
    let evicted = wait_until(Duration::from_secs(10), || {
        let rows = common::block_on(h.cv.status()).unwrap_or_default();
        if rows.is_empty() {
            Ok(())
        } else {
            Err(rows)
        }
    });
    assert!(evicted.is_ok(), "still live: {evicted:?}");
    let next = h.cell("s", lua, "x").await;
    assert_ok(&next, "nil\n");
    assert!(
        next.report
            .notice
            .as_deref()
            .unwrap_or_default()
            .contains("idle"),
        "{next:#?}"
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_while_idle_is_caught_by_the_next_cells_heartbeat_and_replaced() {
    let h = Harness::new(|_| {});
    let js = Language::JavaScript;
    h.cell("s", js, "var x = 1").await;
    let pid = h.pid_of("s", js).await;
    kill(pid, "STOP");
    // An idle session is not pinged (it costs the daemon nothing); the next cell's heartbeat
    // finds the worker silent and kills it, and the cell, which it never took, runs once on
    // the replacement.
    let next = h.cell("s", js, "typeof x").await;
    assert_ok(&next, "undefined\n");
    assert!(
        next.report
            .notice
            .as_deref()
            .unwrap_or_default()
            .contains("heartbeat"),
        "{next:#?}"
    );
    assert_ne!(h.pid_of("s", js).await, pid);
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_cells_die_with_close_and_eviction() {
    let h = Harness::new(|c| c.sessions.max_sessions = 1);
    let py = Language::Python;
    let spawn = "import subprocess\np = subprocess.Popen(['sleep', '1000'])\nprint(p.pid)";
    let child: u32 = h
        .cell("a", py, spawn)
        .await
        .report
        .output
        .trim()
        .parse()
        .expect("pid");
    assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
    h.cv.close("a", None).await.expect("close");
    assert!(
        wait_until(SETTLE, || gone(child)).is_ok(),
        "child {child} survived close"
    );

    let child: u32 = h
        .cell("b", py, spawn)
        .await
        .report
        .output
        .trim()
        .parse()
        .expect("pid");
    // max-sessions = 1: session c evicts b, and b's child goes with it.
    assert_ok(&h.cell("c", py, "print(3)").await, "3\n");
    assert!(
        wait_until(SETTLE, || gone(child)).is_ok(),
        "child {child} survived eviction"
    );
    h.finish().await;
}

fn gone(pid: u32) -> Result<(), ()> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    if stat.is_empty() || stat.contains(") Z ") {
        Ok(())
    } else {
        Err(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rss_is_enforced_while_a_cell_runs_not_only_on_heartbeats() {
    let h = Harness::new(|c| {
        c.limits.max_rss = Some(bytesize::ByteSize::mib(200));
        // Heartbeats far apart: only the sampling while a cell runs can catch this.
        c.sessions.heartbeat_interval = Duration::from_secs(5);
        c.sessions.heartbeat_timeout = Duration::from_secs(10);
    });
    let hog = "chunks = []\nfor i in range(30):\n    chunks.append(b'x' * (50 << 20))\n\
               print('never killed')";
    let cell = h
        .cell_with_timeout("s", Language::Python, hog, Some(60.0))
        .await;
    assert_eq!(cell.report.status, CellStatus::Error, "{cell:#?}");
    assert!(
        cell.report
            .output
            .contains("over the cap of 200.0 MiB (limits.max-rss)"),
        "{}",
        cell.report.output
    );
    // "used 249.3 MiB of memory": how far past the cap it got before the kill.
    let used: Vec<&str> = cell
        .report
        .output
        .split("used ")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .take(2)
        .collect();
    let mib = match used[..] {
        [number, "MiB"] => number.parse::<f64>().unwrap_or(f64::MAX),
        [number, "GiB"] => number.parse::<f64>().unwrap_or(f64::MAX) * 1024.0,
        _ => f64::MAX,
    };
    assert!(
        mib < 1024.0,
        "killed only at {used:?}: {}",
        cell.report.output
    );
    h.finish().await;
}

/// Waits until the prewarm pool holds one worker; answers its pid (the Python worker no
/// session owns).
async fn pooled_python_worker(h: &Harness, owned: &[u32]) -> u32 {
    let found = wait_until(Duration::from_secs(20), || {
        let ready = common::block_on(h.cv.prewarmed()).unwrap_or(0);
        let free: Vec<u32> = h
            .world
            .processes_running("__worker\0py\0")
            .into_iter()
            .filter(|pid| !owned.contains(pid))
            .collect();
        match free.as_slice() {
            [pid] if ready == 1 => Ok(*pid),
            _ => Err((ready, free)),
        }
    });
    found.unwrap_or_else(|(ready, free)| {
        panic!("one prewarmed Python worker: {ready} ready, unowned {free:?}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_python_worker_is_replaced_by_the_prewarmed_one_with_the_sessions_variables() {
    let h = Harness::new(|config| config.python.prewarm = 1);
    let py = Language::Python;
    let first = pooled_python_worker(&h, &[]).await;
    let whoami = "import os\nprint(os.environ.get('CELLVISOR_SESSION'), \
                  os.path.basename(os.environ.get('CELLVISOR_STORE_DIR', '')))";
    // A new session takes the prewarmed worker, which learns whose it is with the first cell.
    assert_ok(&h.cell("agent-7", py, whoami).await, "agent-7 agent-7\n");
    assert_eq!(h.pid_of("agent-7", py).await, first);
    assert_ok(&h.cell("agent-7", py, "kept = 5").await, "");

    // The pool refills; the killed worker's replacement is that refilled worker.
    let spare = pooled_python_worker(&h, &[first]).await;
    kill(first, "KILL");
    let after = h
        .cell("agent-7", py, "print(1 + 1, 'kept' in globals())")
        .await;
    assert_ok(&after, "2 False\n");
    assert!(
        after
            .report
            .notice
            .as_deref()
            .unwrap_or_default()
            .contains("SIGKILL"),
        "{after:#?}"
    );
    assert_eq!(h.pid_of("agent-7", py).await, spare, "the prewarmed worker");
    assert_ok(&h.cell("agent-7", py, whoami).await, "agent-7 agent-7\n");
    h.finish().await;
}
