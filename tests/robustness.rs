//! Hard cases found in review: slow hosts, reloads under load, abandoned requests, cells that
//! end their worker at once, and absurd input. Each must leave every other session intact.

mod common;

use cellvisor::{CellSpec, CellStatus, Cellvisor, Config, EvalRequest, Language};
use common::daemon::Daemon;
use common::{wait_until, World};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

fn start(world: &World, configure: impl FnOnce(&mut Config)) -> Cellvisor {
    world.supervisor(configure)
}

fn request(session: &str, cells: &[(Language, &str)]) -> EvalRequest {
    EvalRequest {
        session: session.into(),
        cwd: None,
        cells: cells
            .iter()
            .map(|(language, code)| CellSpec {
                language: *language,
                code: (*code).into(),
                title: None,
                timeout: Some(20.0),
                reset: false,
                yield_time_ms: None,
            })
            .collect(),
        tools: Vec::new(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_host_holds_the_worker_back_without_getting_it_killed() {
    let world = World::new();
    let cv = Arc::new(start(&world, |_| {}));
    let js = Language::JavaScript;
    let (events, mut received) = tokio::sync::mpsc::channel(1);
    let running = {
        let cv = Arc::clone(&cv);
        tokio::spawn(async move {
            let code = "for (let i = 0; i < 20000; i++) print('line ' + i)";
            cv.eval(request("s", &[(js, code)]), Some(events)).await
        })
    };
    // The host reads nothing for longer than heartbeat-timeout (1 s).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let drain = tokio::spawn(async move { while received.recv().await.is_some() {} });
    let result = running.await.expect("task").expect("eval");
    drain.await.expect("drain");
    assert_eq!(
        result.cells[0].report.status,
        CellStatus::Complete,
        "{:#?}",
        result.cells[0].report.notice
    );
    assert!(result.cells[0].report.output.ends_with("line 19999\n"));
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_shorter_heartbeat_keeps_live_workers() {
    let world = World::new();
    let cv = start(&world, |c| {
        c.sessions.heartbeat_interval = Duration::from_secs(2);
        c.sessions.heartbeat_timeout = Duration::from_secs(4);
    });
    let js = Language::JavaScript;
    cv.eval(request("s", &[(js, "globalThis.x = 41")]), None)
        .await
        .expect("eval");
    let mut newer = Config::default();
    newer.sessions.heartbeat_interval = Duration::from_millis(100);
    newer.sessions.heartbeat_timeout = Duration::from_millis(500);
    newer.sessions.idle_timeout = Duration::ZERO;
    newer.env.set.insert(
        "XDG_RUNTIME_DIR".into(),
        world.runtime_dir().to_string_lossy().into_owned(),
    );
    cv.reload(newer).await.expect("reload");
    // Past the old interval's next tick.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let result = cv
        .eval(request("s", &[(js, "x + 1")]), None)
        .await
        .expect("eval");
    assert_eq!(
        result.cells[0].report.output, "42\n",
        "{:#?}",
        result.cells[0]
    );
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_keeps_its_session_between_its_cells_even_at_the_cap() {
    let world = World::new();
    let cv = Arc::new(start(&world, |c| c.sessions.max_sessions = 1));
    let js = Language::JavaScript;
    let first = {
        let cv = Arc::clone(&cv);
        tokio::spawn(async move {
            let busy = "globalThis.x = 1; const t = Date.now(); while (Date.now() - t < 1000) {}";
            cv.eval(request("a", &[(js, busy), (js, "x + 1")]), None)
                .await
        })
    };
    // Once the first request runs (status polled), the second must not evict its session.
    let running = wait_until(Duration::from_secs(10), || {
        let rows = common::block_on(cv.status()).unwrap_or_default();
        rows.iter()
            .any(|r| r.session == "a" && r.state == cellvisor::SessionState::Busy)
            .then_some(())
            .ok_or(rows)
    });
    assert!(running.is_ok(), "{running:?}");
    let other = cv
        .eval(request("b", &[(js, "1")]), None)
        .await
        .expect("eval");
    assert_eq!(other.cells[0].report.status, CellStatus::Complete);
    let first = first.await.expect("task").expect("eval");
    assert_eq!(first.cells[1].report.output, "2\n", "{:#?}", first.cells[1]);
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_ends_its_worker_at_once_is_not_run_again() {
    let world = World::new();
    let cv = start(&world, |_| {});
    let lua = Language::Lua;
    for i in 0..20 {
        let session = format!("s{i}");
        cv.eval(request(&session, &[(lua, "x = 1")]), None)
            .await
            .expect("eval");
        // `os.exit` ends only the cell (code mode); a shell the cell starts kills the worker.
        let result = cv
            .eval(
                request(&session, &[(lua, "os.execute('kill -9 $PPID')")]),
                None,
            )
            .await
            .expect("eval");
        assert!(
            result.cells[0]
                .report
                .output
                .contains("worker crashed: killed by signal 9 (SIGKILL); session restarted"),
            "run {i}: {}",
            result.cells[0].report.output
        );
        cv.close(&session, None).await.expect("close");
    }
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_client_leaving_does_not_interrupt_another_clients_cell() {
    let daemon = Daemon::start();
    let mut first = daemon.client();
    let first_id = first.send(
        "eval",
        json!({"session": "shared", "cells": [{"language": "js",
            "code": "const t = Date.now(); while (Date.now() - t < 1500) {} 'first done'"}]}),
    );
    daemon.wait_for_state("shared", "busy");
    {
        let mut second = daemon.client();
        second.send(
            "eval",
            json!({"session": "shared", "cells": [{"language": "js", "code": "'second'"}]}),
        );
        std::thread::sleep(Duration::from_millis(200));
        // The second client goes away while its request waits behind the first.
    }
    let response = loop {
        let message = first.read().expect("connection open");
        if message["id"] == json!(first_id) {
            break message;
        }
    };
    let cell = &response["result"]["cells"][0];
    assert_eq!(cell["status"], "complete", "{cell:#}");
    assert_eq!(cell["output"], "first done\n");
    daemon.stop();
}

#[test]
fn a_client_that_stops_reading_does_not_block_shutdown() {
    let daemon = Daemon::start();
    let mut stuck = daemon.client();
    stuck.send(
        "eval",
        json!({"session": "s", "cells": [{"language": "js",
            "code": "for (let i = 0; i < 2000000; i++) print('x'.repeat(100) + i)", "timeout": 2}]}),
    );
    // The client never reads; its cell times out meanwhile and the session moves on.
    daemon.wait_for_state("s", "busy");
    daemon.wait_for_state("s", "idle");
    let mut other = daemon.client();
    other
        .call("shutdown", json!({}))
        .expect("shutdown answered");
    let socket = daemon.socket.clone();
    let exited = wait_until(Duration::from_secs(20), || {
        if socket.exists() {
            Err(())
        } else {
            Ok(())
        }
    });
    drop(stuck);
    assert!(exited.is_ok(), "the daemon did not finish shutting down");
    daemon.world.assert_no_processes_left(SETTLE);
}

#[test]
fn an_absurd_timeout_is_clamped_and_harms_nobody() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client
        .call(
            "eval",
            json!({"session": "other", "cells": [{"language": "js", "code": "globalThis.k = 7"}]}),
        )
        .expect("eval");
    // Three more sessions: with "other", the cap of 4 is reached but not passed.
    for i in 0..3 {
        let result = client
            .call("eval", json!({"session": format!("b{i}"), "cells": [{"language": "js", "code": "1", "timeout": 1e300}]}))
            .expect("eval");
        assert_eq!(result["cells"][0]["status"], "complete");
    }
    let bad = client
        .call(
            "eval",
            json!({"session": "x", "cells": [{"language": "js", "code": "1", "timeout": -1}]}),
        )
        .expect_err("refused");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("timeout"),
        "{bad}"
    );
    let after = client
        .call(
            "eval",
            json!({"session": "other", "cells": [{"language": "js", "code": "k"}]}),
        )
        .expect("eval");
    assert_eq!(after["cells"][0]["output"], "7\n");
    daemon.stop();
}
