//! End-to-end: the fleet fault test (scripts/fleet_faults.py) in its CI size, against the
//! binary under test: three nodes in etcd mode, an etcd cluster of three members and a
//! real HAProxy of the test's own, clients sending cells across one fault of each kind
//! (`kill -9` of a node, a node stopped past its lease with a cell running and a request
//! queued, an etcd member restarted, HAProxy restarted with answers in flight, a full
//! disk). The script checks the invariants (every acknowledged cell's effect exactly once
//! in the final state, no session's cells took effect from two nodes at once, every failed
//! save told on its result); this test asserts that it found no violation, that each fault
//! happened, and that every process it started is gone. `scripts/fleet-faults` with no
//! arguments is the full run (10,000 cells, 30 faults). Skipped (saying so) where HAProxy
//! or etcd is missing; under CI their absence fails.

mod common;

use common::fleet::haproxy;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The invariants' own unit tests (scripts/test_fleet_audit.py): each check finds a lost
/// acknowledged cell, a duplicate, a split brain and an untold failed save, and lets pass a
/// paused node's discarded cell and a told failed save. Needs neither etcd nor HAProxy.
#[test]
fn the_fault_tests_invariants_catch_what_they_must() {
    let run = Command::new("python3")
        .arg(root().join("scripts/test_fleet_audit.py"))
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// The CI size: one fault of each kind (about a minute). It meets the pair of faults that
/// once ran a cell twice (an etcd member restart stalling a node's commits and keep-alives,
/// then a router restart cutting the client off before the answer; docs/fleet.md, "The
/// fault test").
#[test]
fn a_fleet_keeps_every_acknowledged_cell_exactly_once_across_faults() {
    if haproxy().is_none() || !common::etcd::installed() {
        return;
    }
    let python = common::net::venv_python(&[]);
    let mut child = Command::new(python)
        .arg(root().join("scripts/fleet_faults.py"))
        .args([
            "--cells",
            "400",
            "--faults",
            "5",
            "--sessions",
            "6",
            "--json",
        ])
        .args(["--binary", env!("CARGO_BIN_EXE_cellvisor")])
        .current_dir(root())
        .env_remove("VIRTUAL_ENV")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("scripts/fleet_faults.py runs");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            // SIGTERM: the script stops what it started, by pid, then exits.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
            panic!("scripts/fleet_faults.py did not end within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    eprintln!("{err}");
    let report: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}), status {status}:\n{out}\n{err}"));
    assert_eq!(report["violation_count"], 0, "{report:#}");
    assert!(status.success(), "{status}: {report:#}");

    // Each kind of fault happened (the disk's only where a tmpfs could be mounted).
    let faults = report["faults"].as_array().expect("faults");
    let kinds: Vec<&str> = faults.iter().filter_map(|f| f["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["kill", "pause", "etcd", "router", "disk"],
        "{report:#}"
    );
    let pause = &faults[1];
    assert_eq!(pause["cell_was_running"], true, "{report:#}");
    let disk = &faults[4];
    if report["disk_fault"] == "on a tmpfs" {
        assert!(
            disk["saves_told_failed"].as_u64().unwrap_or(0) > 0,
            "{report:#}"
        );
        assert!(
            report["counts"]["saves failed and told"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{report:#}"
        );
    } else {
        eprintln!("the full-disk fault was skipped: {}", report["disk_fault"]);
    }
    let counts = &report["counts"];
    assert!(
        counts["acknowledged complete"].as_u64().unwrap_or(0) >= 400,
        "{report:#}"
    );
    assert!(
        counts["cells logged"].as_u64().unwrap_or(0) > 0,
        "{report:#}"
    );
    // The kill and the pause each moved sessions that then answered elsewhere.
    for kind in ["kill", "pause"] {
        assert!(
            report["failover_median_s"][kind].as_f64().is_some(),
            "{kind}: {report:#}"
        );
    }

    // Nothing left behind.
    assert_eq!(
        report["leaked_processes"],
        serde_json::json!([]),
        "{report:#}"
    );
    let started = report["started_pids"].as_array().expect("started pids");
    assert!(
        started.len() >= 7,
        "3 nodes, 1 restarted, 3 etcd members: {report:#}"
    );
    for pid in started.iter().filter_map(Value::as_u64) {
        assert!(!alive(pid), "process {pid} it started is still alive");
    }
}
