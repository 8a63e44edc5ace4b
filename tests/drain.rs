//! End-to-end: draining a daemon for a rolling upgrade (`cellvisor drain`, SIGUSR1) through
//! the real binary and real workers over its Unix socket, and the metrics a supervisor's
//! scrape gives as cells run, crash and are evicted.

mod common;

use cellvisor::cell::{CellSpec, EvalRequest};
use cellvisor::Language;
use common::daemon::{output, Daemon};
use common::{wait_until, World};
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;

const DRAINING: i64 = -32003;

/// A daemon whose drain stops a busy-at-the-start session after 1.5 s of idleness.
fn draining_daemon() -> Daemon {
    Daemon::start_with("[daemon]\ndrain-idle = \"1500ms\"\n[snapshots]\nwhen = \"on-stop\"\n")
}

fn py(code: &str) -> Value {
    json!([{"language": "py", "code": code}])
}

fn sessions(daemon: &Daemon) -> Vec<String> {
    let rows = daemon.client().call("status", json!({})).expect("status");
    rows.as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["session"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn refused_as_draining(daemon: &Daemon, session: &str) {
    let refused = daemon
        .client()
        .call("eval", json!({"session": session, "cells": py("print(1)")}))
        .expect_err("a new session is refused while draining");
    assert_eq!(refused["code"], json!(DRAINING), "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("is draining"), "{message}");
}

#[test]
fn drain_wait_refuses_new_sessions_serves_live_ones_and_returns_when_none_is_left() {
    let daemon = draining_daemon();
    let socket = daemon.socket.display().to_string();
    let mut client = daemon.client();
    let kept = client.eval("idle", py("x = 41"));
    assert_eq!(
        kept["node"].as_str().map(str::is_empty),
        Some(false),
        "{kept}"
    );
    // An agent's cell runs when the drain begins.
    let mut agent = daemon.client();
    agent.send(
        "eval",
        json!({"session": "agent", "cells": py("import time; time.sleep(1.0); print('first')")}),
    );
    daemon.wait_for_state("agent", "busy");
    let drain = daemon
        .world
        .command()
        .args(["--socket", &socket, "drain", "--wait", "--timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn drain");
    // The idle session is stopped at once; the busy one is served.
    let stopped = wait_until(Duration::from_secs(15), || {
        let live = sessions(&daemon);
        (!live.contains(&"idle".to_string()))
            .then_some(())
            .ok_or(live)
    });
    assert!(
        stopped.is_ok(),
        "the idle session was not stopped: {stopped:?}"
    );
    refused_as_draining(&daemon, "new");
    let first = loop {
        let message = agent.read().expect("the agent's cell answers");
        if message.get("id").is_some() {
            break message;
        }
    };
    let first = &first["result"];
    assert_eq!(output(first, 0), "first\n", "{first}");
    // The agent's next cell still runs on this node.
    let next = agent.eval("agent", py("print('next')"));
    assert_eq!(output(&next, 0), "next\n", "{next}");
    let status = daemon.world.run(&["--socket", &socket, "status"]);
    assert!(status.stdout.contains("is draining"), "{}", status.stdout);
    // Then, idle for drain-idle, it stops too, and the drain returns.
    let finished = drain.wait_with_output().expect("drain runs");
    let said = String::from_utf8_lossy(&finished.stdout);
    assert!(finished.status.success(), "{said} {:?}", finished.stderr);
    assert!(said.contains("drained: no session is live"), "{said}");
    assert!(sessions(&daemon).is_empty());
    // Undrained, new sessions are taken, and the idle one comes back from its snapshot.
    daemon
        .world
        .run(&["--socket", &socket, "undrain"])
        .assert_code(0);
    let back = client.eval("idle", py("print(x + 1)"));
    assert_eq!(output(&back, 0), "42\n", "{back}");
    let fresh = client.eval("new", py("print('fresh')"));
    assert_eq!(output(&fresh, 0), "fresh\n", "{fresh}");
    daemon.stop();
}

#[test]
fn sigusr1_drains_and_sigusr2_undrains() {
    let daemon = draining_daemon();
    let mut client = daemon.client();
    let hello = client.call("initialize", json!({})).expect("initialize");
    assert_eq!(hello["draining"], json!(false));
    let pid = hello["pid"].as_u64().expect("pid").to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
    };
    signal("-USR1");
    let drained = wait_until(Duration::from_secs(15), || {
        let hello = client.call("initialize", json!({})).expect("initialize");
        (hello["draining"] == json!(true))
            .then_some(())
            .ok_or(hello)
    });
    assert!(drained.is_ok(), "{drained:?}");
    refused_as_draining(&daemon, "s");
    signal("-USR2");
    let undrained = wait_until(Duration::from_secs(15), || {
        let hello = client.call("initialize", json!({})).expect("initialize");
        (hello["draining"] == json!(false))
            .then_some(())
            .ok_or(hello)
    });
    assert!(undrained.is_ok(), "{undrained:?}");
    assert_eq!(output(&client.eval("s", py("print(2)")), 0), "2\n");
    daemon.stop();
}

/// The value of the sample `series` (name and labels, exactly) in OpenMetrics `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn request(session: &str, code: &str) -> EvalRequest {
    EvalRequest {
        session: session.into(),
        cells: vec![CellSpec::new(Language::Python, code)],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counters_of_a_scrape_move_as_cells_run_crash_and_are_evicted() {
    let world = World::new();
    let cv = world.supervisor(|c| c.sessions.max_sessions = 1);
    {
        let before = cv.scrape().await.expect("scrape");
        assert!(before.ends_with("# EOF\n"), "{before}");
        let cells = "cellvisor_cells_total{language=\"py\",status=\"complete\"}";
        assert_eq!(sample(&before, cells), 0.0);
        cv.eval(request("a", "print('hi')"), None)
            .await
            .expect("eval");
        cv.eval(request("a", "raise ValueError('no')"), None)
            .await
            .expect("eval");
        cv.eval(request("a", "import os; os._exit(3)"), None)
            .await
            .expect("eval");
        // Room for b under max-sessions = 1: a is evicted.
        cv.eval(request("b", "print('b')"), None)
            .await
            .expect("eval");
        let after = cv.scrape().await.expect("scrape");
        assert_eq!(sample(&after, cells), 2.0, "{after}");
        let errors = "cellvisor_cells_total{language=\"py\",status=\"error\"}";
        assert_eq!(sample(&after, errors), 2.0, "{after}");
        let crashes = "cellvisor_worker_crashes_total{language=\"py\"}";
        assert_eq!(sample(&after, crashes), 1.0, "{after}");
        let lru = "cellvisor_evictions_total{language=\"py\",reason=\"lru\"}";
        assert_eq!(sample(&after, lru), 1.0, "{after}");
        let starts = "cellvisor_worker_starts_total{language=\"py\"}";
        assert!(sample(&after, starts) >= 2.0, "{after}");
        // b is live: idle, or still busy for the instant after its answer went out.
        let live = ["idle", "busy"]
            .map(|state| format!("cellvisor_sessions{{language=\"py\",state=\"{state}\"}}"))
            .iter()
            .map(|name| sample(&after, name))
            .sum::<f64>();
        assert_eq!(live, 1.0, "{after}");
        assert_eq!(
            sample(&after, "cellvisor_sessions_max{language=\"py\"}"),
            1.0
        );
        assert!(sample(&after, "cellvisor_process_resident_memory_bytes") > 0.0);
        let node = format!("cellvisor_node{{node=\"{}\"}}", cv.node());
        assert_eq!(sample(&after, &node), 1.0, "{after}");
        assert!(cv.health().await.healthy);
        assert!(cv.readiness().await.ready);
        cv.drain().await.expect("drain");
        let not_ready = cv.readiness().await;
        assert!(!not_ready.ready && not_ready.reason.is_some_and(|r| r.contains("draining")));
        let drained = cv.scrape().await.expect("scrape");
        assert_eq!(sample(&drained, "cellvisor_draining"), 1.0);
        let left = cv.drain_wait(Duration::from_secs(15)).await.expect("wait");
        assert_eq!(left.live, 0);
        let by_drain = "cellvisor_evictions_total{language=\"py\",reason=\"drain\"}";
        assert_eq!(sample(&cv.scrape().await.expect("scrape"), by_drain), 1.0);
        cv.shutdown().await;
    }
    world.assert_no_processes_left(Duration::from_secs(5));
}
