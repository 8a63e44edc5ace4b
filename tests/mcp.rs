//! `cellvisor mcp` end to end with a real MCP client: the official Python SDK drives the
//! binary over stdio (tests/mcp_client.py); afterwards no process of the test may be left.

mod common;

use common::World;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/test-venv/bin/python` with the `mcp` SDK and matplotlib installed
/// (scripts/test-venv).
fn test_python() -> PathBuf {
    let root = workspace();
    let output = Command::new(root.join("scripts/test-venv"))
        .arg("matplotlib")
        .current_dir(&root)
        .output()
        .expect("run scripts/test-venv");
    assert!(
        output.status.success(),
        "scripts/test-venv failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    root.join("target/test-venv/bin/python")
}

#[test]
fn the_python_sdk_client_runs_cells_through_cellvisor_mcp() {
    let python = test_python();
    // Python cells run on the test venv's interpreter, which has matplotlib for the plot.
    let world = World::with_config(&format!(
        "[python]\ninterpreter = {:?}\n",
        python.display().to_string()
    ));
    let output = Command::new(&python)
        .arg(workspace().join("tests/mcp_client.py"))
        .arg(env!("CARGO_BIN_EXE_cellvisor"))
        .env("CELLVISOR_TEST_PLOT", "1")
        .env("XDG_RUNTIME_DIR", world.runtime_dir())
        .env("CELLVISOR_CONFIG", world.config_path())
        .env_remove("CELLVISOR_SOCKET")
        .env_remove("VIRTUAL_ENV")
        .current_dir(world.work_dir())
        .output()
        .expect("run tests/mcp_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "mcp_client.py failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("all MCP checks passed"),
        "{stdout}\n{stderr}"
    );
    println!("{stdout}");
    world.assert_no_processes_left(SETTLE);
}

/// A client that goes away in the middle of a cell: the server interrupts it, stops every
/// worker and exits promptly.
#[test]
fn a_client_disconnecting_mid_cell_stops_the_server_and_its_workers() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let world = World::new();
    let mut child = world
        .command()
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cellvisor mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |message: serde_json::Value| {
        writeln!(stdin, "{message}").expect("write to the server");
        stdin.flush().expect("flush");
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}),
    );
    let mut line = String::new();
    stdout.read_line(&mut line).expect("initialize response");
    assert!(line.contains("\"serverInfo\""), "{line}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "eval", "arguments": {"cells": [
            {"language": "py", "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"}]}}}),
    );
    // Wait until the worker runs the cell, as the `sessions` tool reports it.
    let mut next_id = 3;
    let running = common::wait_until(Duration::from_secs(30), || {
        let id = next_id;
        next_id += 1;
        send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "sessions", "arguments": {}}}),
        );
        let answer = loop {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("sessions response");
            let message: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
            if message["id"] == id {
                break line;
            }
        };
        answer.contains("busy").then_some(()).ok_or(answer)
    });
    assert!(running.is_ok(), "the cell never ran: {running:?}");
    drop(stdin);
    let status = common::wait_until(Duration::from_secs(10), || {
        child.try_wait().ok().flatten().ok_or(())
    });
    // The cell sleeps for 60 s: exiting within the wait means it was interrupted, not awaited.
    let Ok(status) = status else {
        let _ = child.kill();
        panic!("cellvisor mcp did not exit within 10 s of its client disconnecting");
    };
    assert!(status.success(), "exit status {status}");
    world.assert_no_processes_left(SETTLE);
}
