//! End-to-end: the fleet harness in `scripts/` (scripts/fleet.py, scripts/bench_fleet.py)
//! against the binary under test, so that it cannot rot. `scripts/bench-fleet --quick` must
//! report figures, keep each session on one node, bring a killed node's session back with its
//! state on another node, and stop everything it started; `scripts/fleet` must serve a fleet
//! until Ctrl-C and then leave nothing behind. Behaviour only, never speed. Skipped (saying
//! so) where HAProxy is missing; under CI its absence fails.

mod common;

use common::fleet::haproxy;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// Waits for `child` for at most `within`; past it, kills it (by its pid) and fails.
fn wait_or_kill(child: &mut Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_quick_benchmark_reports_figures_keeps_sessions_put_and_restores_a_killed_nodes_session() {
    if haproxy().is_none() {
        return;
    }
    let mut child = Command::new(root().join("scripts/bench-fleet"))
        .args([
            "--quick",
            "--json",
            "--binary",
            env!("CARGO_BIN_EXE_cellvisor"),
        ])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("scripts/bench-fleet runs");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = wait_or_kill(
        &mut child,
        Duration::from_secs(240),
        "scripts/bench-fleet --quick",
    );
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(
        status.success(),
        "bench-fleet failed ({status}):\n{err}\n{out}"
    );
    let report: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}\n{err}"));
    eprintln!("{err}");

    // (a) figures for 1 node reached directly and 3 nodes through HAProxy, each session on
    // one node, and HAProxy spreading the sessions.
    let rows = report["throughput"].as_array().expect("throughput rows");
    assert_eq!(rows.len(), 2, "{report}");
    for row in rows {
        assert!(row["cells"].as_u64().unwrap_or(0) > 0, "{row}");
        assert!(
            row["cells_per_second"].as_f64().unwrap_or(0.0) > 0.0,
            "{row}"
        );
        assert_eq!(
            row["sessions_on_more_than_one_node"],
            serde_json::json!([]),
            "{row}"
        );
        let placed: u64 = row["sessions_per_node"]
            .as_object()
            .expect("sessions per node")
            .values()
            .map(|v| v.as_u64().unwrap_or(0))
            .sum();
        assert_eq!(Some(placed), row["threads"].as_u64(), "{row}");
    }
    assert_eq!(rows[0]["haproxy"], false, "{report}");
    assert_eq!(rows[1]["nodes"], 3, "{report}");
    assert_eq!(rows[1]["haproxy"], true, "{report}");
    let nodes_used = rows[1]["sessions_per_node"]
        .as_object()
        .map_or(0, |m| m.len());
    assert!(nodes_used >= 2, "HAProxy spread the sessions: {}", rows[1]);
    assert!(
        report["ratio_3_nodes_haproxy_to_1_direct"]
            .as_f64()
            .is_some(),
        "{report}"
    );

    // (b) each killed node's live session answered on another node with its state, restored
    // from the snapshot the dead node wrote after its last cell; others stayed put.
    let failover = &report["failover"];
    let runs = failover["runs"].as_array().expect("failover runs");
    assert!(!runs.is_empty(), "{report}");
    for run in runs {
        assert_eq!(run["state_restored"], true, "{run}");
        assert_ne!(run["answered_by"], run["killed"], "{run}");
        assert_eq!(run["restored_from"], run["killed"], "{run}");
        assert_eq!(run["restored_reason"], "after cell", "{run}");
        assert!(run["seconds"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
        if let Some(bystander) = run.get("bystander") {
            assert_eq!(bystander["stayed"], true, "{run}");
        }
    }
    assert!(failover["median_seconds"].as_f64().is_some(), "{report}");

    // Nothing left: no leftovers it had to kill, and every process it started is gone.
    assert_eq!(
        report["leaked_processes"],
        serde_json::json!([]),
        "{report}"
    );
    let started: Vec<u32> = report["started_pids"]
        .as_array()
        .expect("started pids")
        .iter()
        .filter_map(|p| p.as_u64().map(|p| p as u32))
        .collect();
    assert!(!started.is_empty(), "{report}");
    let left: Vec<u32> = started.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
}

#[test]
fn the_fleet_program_serves_through_haproxy_until_ctrl_c_and_leaves_nothing() {
    if haproxy().is_none() {
        return;
    }
    // Two nodes: HAProxy runs a copy of the shipped config with generated server lines.
    let mut child = Command::new(root().join("scripts/fleet"))
        .args(["--nodes", "2", "--binary", env!("CARGO_BIN_EXE_cellvisor")])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("scripts/fleet runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("a line");
        let done = line.starts_with("Ctrl-C");
        printed.push(line);
        if done {
            break;
        }
    }
    let value = |key: &str| {
        printed
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` in what scripts/fleet printed: {printed:#?}"))
            .trim()
            .to_string()
    };
    let (url, token_file) = (value("url "), value("token-file "));
    let pids: Vec<u32> = printed
        .iter()
        .filter_map(|l| l.split("  pid ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "two nodes and HAProxy: {printed:#?}");

    // The CLI through HAProxy: one session keeps its state across commands (and nodes).
    let eval = |code: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_cellvisor"))
            .args([
                "eval",
                "--connect",
                &url,
                "--token-file",
                &token_file,
                "--session",
                "demo",
            ])
            .args(["-l", "py", code])
            .env_remove("CELLVISOR_SOCKET")
            .stdin(Stdio::null())
            .output()
            .expect("cellvisor eval runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        said
    };
    eval("x = 41");
    assert_eq!(eval("x + 1").trim(), "42");

    // Ctrl-C: it stops every process it started and exits.
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    // Whatever happens, the nodes and HAProxy it named do not outlive the test.
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_or_kill(
            &mut child,
            Duration::from_secs(60),
            "scripts/fleet after Ctrl-C",
        )
    }));
    let left: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    for pid in &left {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    let status = stopped.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert!(status.success(), "scripts/fleet after Ctrl-C: {status}");
    assert!(
        left.is_empty(),
        "processes left running after Ctrl-C: {left:?}"
    );
    assert!(
        !Path::new(&token_file).exists(),
        "the fleet's directory is removed"
    );
}
