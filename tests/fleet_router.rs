//! End-to-end: a fleet of three nodes behind a real HAProxy running the shipped
//! `deploy/haproxy/haproxy.cfg` (tests/common/fleet.rs). Over WebSockets: each session's
//! cells all run on one node and every node gets sessions; a `kill -9` of a node moves its
//! sessions, state restored from their last snapshot, while the other nodes' sessions stay
//! where they are; a draining node gets no new session and keeps serving its own. Over MCP's
//! streamable HTTP with the official Python SDK: each MCP session's calls all run on one
//! node. Skipped (saying so) where HAProxy is missing; under CI its absence fails.

mod common;

use common::fleet::{haproxy, shipped_config, Fleet};
use common::net::TOKEN;
use common::{path_str, wait_until};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The nodes' `[sessions]` for the placement tests: room for every session of a language a
/// node can get (14 of the 40 WebSocket sessions are Python's), so none is evicted (and
/// then restored from its snapshot) before a node dies and placement alone is measured.
const ROOMY: &str = "max-sessions = 16\n";

#[test]
fn the_shipped_haproxy_config_is_valid() {
    let Some(haproxy) = haproxy() else {
        return;
    };
    let check = Command::new(haproxy)
        .args(["-c", "-L", "local", "-f"])
        .arg(shipped_config())
        .output()
        .expect("haproxy -c runs");
    let said = String::from_utf8_lossy(&check.stderr).into_owned()
        + &String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert!(!said.contains("WARNING"), "{said}");
}

fn node_of(result: &Value) -> String {
    result["node"].as_str().unwrap_or_default().to_string()
}

fn text(result: &Value) -> String {
    result["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A session's language, a cell that sets its counter, and one that reads it back.
fn cells_of(index: usize) -> (&'static str, String, &'static str) {
    match index % 3 {
        0 => ("py", format!("n = {index}"), "n"),
        1 => ("js", format!("globalThis.n = {index}; undefined"), "n"),
        _ => ("lua", format!("n = {index}"), "n"),
    }
}

#[test]
fn sessions_stay_on_their_node_move_when_it_dies_and_avoid_a_draining_one() {
    let Some(haproxy) = haproxy() else {
        return;
    };
    let fleet = Fleet::start(haproxy, ROOMY);
    const SESSIONS: usize = 40;
    const CELLS: usize = 20;
    // Placement: each session's cells on one node, over fresh connections each time.
    let placing = Instant::now();
    let mut home: HashMap<String, String> = HashMap::new();
    for round in 0..CELLS {
        for index in 0..SESSIONS {
            let session = format!("s{index}");
            let (language, set, _) = cells_of(index);
            let result = fleet
                .eval(&session, language, &set)
                .expect("a cell through HAProxy");
            let node = node_of(&result);
            let first = home.entry(session.clone()).or_insert_with(|| node.clone());
            assert_eq!(*first, node, "{session} moved in round {round}: {result}");
        }
    }
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for node in home.values() {
        *per_node.entry(node.as_str()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "every node gets sessions: {per_node:?}");
    eprintln!(
        "{} cells of {SESSIONS} sessions placed in {:?}: {per_node:?}",
        SESSIONS * CELLS,
        placing.elapsed()
    );

    // A node dies: its sessions come back elsewhere with their state; others stay put.
    let dead = "node-1";
    let killed_at = Instant::now();
    let mut fleet = fleet;
    let node = fleet.nodes[1].take().expect("node-1");
    let _ = node.daemon.signal_and_wait("KILL");
    let mut first_answer = None;
    for index in 0..SESSIONS {
        let session = format!("s{index}");
        let (language, _, read) = cells_of(index);
        let result = wait_until(Duration::from_secs(30), || {
            let r = fleet.eval(&session, language, read);
            if std::env::var_os("FLEET_DEBUG").is_some() {
                eprintln!("{:?} {session}: {r:?}", killed_at.elapsed());
            }
            r
        })
        .unwrap_or_else(|e| panic!("{session} never answered after the death: {e}"));
        assert_eq!(text(&result), index.to_string(), "{session}: {result}");
        let now = node_of(&result);
        if home[&session] == dead {
            // Live there at its death (nothing was evicted: `ROOMY`), it waited for the
            // dead node's lease to run out and came back from its last cell's snapshot.
            assert_eq!(
                result["cells"][0]["state"]["from"]["reason"], "after cell",
                "{result}"
            );
            first_answer.get_or_insert_with(|| killed_at.elapsed());
            assert_ne!(now, dead, "{result}");
            assert_eq!(
                result["cells"][0]["state"]["from"]["node"], dead,
                "{result}"
            );
            home.insert(session, now);
        } else {
            assert_eq!(
                now, home[&session],
                "{session} was not on the dead node: {result}"
            );
        }
    }
    eprintln!(
        "node death to the first answer elsewhere of a session live on it: {:?}",
        first_answer
    );

    // Drain node-0: new sessions land elsewhere; its own keep answering there.
    let drained = "node-0";
    let status = fleet
        .node(0)
        .ws(Some(TOKEN), None)
        .and_then(|mut c| c.call("drain", json!({})).map_err(|e| e.to_string()));
    assert!(status.is_ok(), "{status:?}");
    std::thread::sleep(Duration::from_millis(2500)); // two agent checks
    for index in 0..6 {
        let session = format!("new{index}");
        let result = wait_until(Duration::from_secs(10), || fleet.eval(&session, "py", "1"))
            .expect("a new session");
        assert_ne!(node_of(&result), drained, "{result}");
    }
    // Its sessions were idle, so the drain stopped them with a snapshot: their next cell
    // is refused there (503) and HAProxy sends it on, where the state comes back.
    for index in 0..SESSIONS {
        let session = format!("s{index}");
        if home[&session] != drained {
            continue;
        }
        let (language, _, read) = cells_of(index);
        let result = wait_until(Duration::from_secs(15), || {
            fleet.eval(&session, language, read)
        })
        .unwrap_or_else(|e| panic!("{session} never answered after the drain: {e}"));
        assert_eq!(text(&result), index.to_string(), "{session}: {result}");
        assert_ne!(node_of(&result), drained, "{result}");
    }
}

#[test]
fn an_mcp_session_over_http_stays_on_one_node_through_haproxy() {
    let Some(haproxy) = haproxy() else {
        return;
    };
    let python = common::net::venv_python(&[]);
    let fleet = Fleet::start(haproxy, ROOMY);
    const SESSIONS: usize = 6;
    const CALLS: usize = 5;
    // The SDK's streamable HTTP client through HAProxy: SESSIONS MCP sessions open at once,
    // each running CALLS `eval`s that build on its own `x`, each saying where it ran. An
    // MCP tool result does not name its node (a WebSocket result's `node` does), so each
    // cell prints its worker's XDG_RUNTIME_DIR: every node's processes have their own.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp_http_client.py");
    let output = Command::new(&python)
        .arg(script)
        .arg(fleet.url("/mcp"))
        .arg(TOKEN)
        .args(["--placement", &SESSIONS.to_string(), &CALLS.to_string()])
        .env_remove("VIRTUAL_ENV")
        .current_dir(fleet.node(0).daemon.world.work_dir())
        .output()
        .expect("run tests/mcp_http_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("all MCP placement checks passed"),
        "mcp_http_client.py --placement failed ({}):\n--- stdout ---\n{stdout}\n\
         --- stderr ---\n{stderr}",
        output.status
    );
    let rows: Vec<Value> = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(rows.len(), SESSIONS * CALLS, "{stdout}");

    // Every call of an MCP session ran on one node, on its live worker (no restore).
    let mut home: HashMap<String, String> = HashMap::new();
    for row in &rows {
        let name = row["name"]
            .as_str()
            .expect("the session's name")
            .to_string();
        let node = fleet
            .node_running_in(row["where"].as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("a cell ran on no node of the fleet: {row}"));
        assert_eq!(row["restored"], false, "{row}");
        let first = home.entry(name.clone()).or_insert_with(|| node.clone());
        assert_eq!(*first, node, "{name} moved: {row}");
    }
    assert_eq!(home.len(), SESSIONS, "{home:?}");
    // leastconn: a new MCP session goes to a node with the fewest connections (among
    // equals in turn), so sessions opened one after another do not all land on one node.
    let nodes: HashSet<&String> = home.values().collect();
    assert!(
        nodes.len() > 1,
        "the MCP sessions all landed on one node: {home:?}"
    );

    // Each session's DELETE (through HAProxy too) reached its node: no MCP session's
    // cellvisor session is left anywhere.
    for (i, node) in fleet.nodes.iter().enumerate() {
        let node = node.as_ref().expect("a live node");
        let left = wait_until(Duration::from_secs(10), || {
            let rows = node
                .daemon
                .client()
                .call("status", json!({}))
                .expect("status");
            let mcp: Vec<Value> = rows
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["session"].as_str().is_some_and(|s| s.starts_with("mcp-")))
                .cloned()
                .collect();
            mcp.is_empty().then_some(()).ok_or(mcp)
        });
        assert!(left.is_ok(), "node-{i} kept ended MCP sessions: {left:?}");
    }
}

#[test]
fn the_kubernetes_manifests_validate_and_their_haproxy_config_checks() {
    let python = common::net::venv_python(&["kubernetes_validate"]);
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
    let files: Vec<PathBuf> = std::fs::read_dir(&manifests)
        .expect("deploy/kubernetes")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    let validate = Command::new(&python)
        .args(["-m", "kubernetes_validate", "--strict", "--quiet"])
        .args(&files)
        .output()
        .expect("kubernetes-validate runs");
    assert!(
        validate.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );
    let Some(haproxy) = haproxy() else {
        return;
    };
    // The HAProxy config the manifests ship, out of its ConfigMap.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("haproxy.cfg");
    let extract = Command::new(&python)
        .args([
            "-c",
            "import sys, yaml\n\
             for doc in yaml.safe_load_all(open(sys.argv[1])):\n\
             \x20   if doc and doc['kind'] == 'ConfigMap' and 'haproxy.cfg' in doc['data']:\n\
             \x20       open(sys.argv[2], 'w').write(doc['data']['haproxy.cfg'])",
        ])
        .arg(manifests.join("haproxy.yaml"))
        .arg(&config)
        .status()
        .expect("python runs");
    assert!(extract.success() && config.is_file());
    let check = Command::new(haproxy)
        .args(["-c", "-f"])
        .arg(&config)
        .output()
        .expect("haproxy -c runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// Through a router the peer check sees only the router, so the defence is that a cell can
/// read no token: at the `uid` level the token and key files are root's, and without uids
/// the `landlock` level carves its daemon's secret files out of a network session's reach.
/// A cell that tries its node's token file and the fleet's key, then calls its own daemon
/// through HAProxy and straight on its node's port, is refused each time.
#[test]
fn a_cell_cannot_drive_its_daemon_through_haproxy() {
    let Some(haproxy) = haproxy() else {
        return;
    };
    let fleet = Fleet::start(haproxy, ROOMY);
    // The cell tries every node's token file (it learns where it ran only from the answer)
    // and the key all of them share.
    let tokens: Vec<String> = (0..3)
        .map(|i| path_str(&fleet.node(i).files.path().join("token")).to_string())
        .collect();
    let ports: Vec<u16> = (0..3).map(|i| fleet.node(i).port).collect();
    let code = format!(
        r#"
import os, urllib.request, urllib.error
def read(path):
    try:
        open(path, "rb").read()
        return "read"
    except OSError as error:
        return "refused " + type(error).__name__
for i, path in enumerate({tokens:?}):
    print("token", i, read(path))
print("key", read({key:?}))
def status(url):
    try:
        urllib.request.urlopen(url, timeout=30)
        return "served"
    except urllib.error.HTTPError as error:
        return "status %d" % error.code
print("routed", status({routed:?}))
for i, port in enumerate({ports:?}):
    print("direct", i, status("http://127.0.0.1:%d/v1/sessions/intruder/files" % port))
"#,
        key = path_str(&fleet.key_file()),
        routed = fleet.url("/v1/sessions/intruder/files"),
    );
    let result = fleet.eval("intruder", "py", &code).expect("the cell runs");
    let out = text(&result);
    let node = node_of(&result);
    let own = node.trim_start_matches("node-");
    assert!(
        out.contains(&format!("token {own} refused PermissionError")),
        "{node}: {result}"
    );
    // At the uid level (as root) no node's token is a session's to read; under Landlock
    // (an ordinary user) each node hides its own daemon's files.
    if nix::unistd::geteuid().is_root() {
        for i in 0..3 {
            assert!(
                out.contains(&format!("token {i} refused PermissionError")),
                "{out}"
            );
        }
    }
    assert!(out.contains("key refused PermissionError"), "{out}");
    assert!(out.contains("routed status 401"), "{out}");
    for i in 0..3 {
        assert!(out.contains(&format!("direct {i} status 401")), "{out}");
    }
}

/// A stopped node (SIGSTOP) accepts bytes and answers nothing. HAProxy's health checks
/// time out and mark it down, and the open WebSocket of a session on it is cut
/// (`on-marked-down shutdown-sessions`) long before the tunnel's timeout (11 minutes), so
/// its client can send its request again; the session then answers from another node with
/// its saved state, once the stopped node's lease ran out.
#[test]
fn haproxy_cuts_a_stopped_nodes_connections_and_its_session_answers_elsewhere() {
    let Some(haproxy) = haproxy() else {
        return;
    };
    let fleet = Fleet::start(haproxy, ROOMY);
    let mut ws = common::net::connect_ws(fleet.port, None, Some(TOKEN), Some("frozen"), None)
        .expect("a WebSocket through HAProxy");
    // A quiet cell longer than the upgrade's timeout (3 s): that bound is the upgrade's
    // alone, an open tunnel waits for its answer.
    let first = ws
        .call(
            "eval",
            json!({"session": "frozen", "cells": [{"language": "py", "code": "import time\ntime.sleep(4)\nx = 7"}]}),
        )
        .expect("the first cell, through a quiet tunnel");
    let home = node_of(&first);
    let index: usize = home
        .trim_start_matches("node-")
        .parse()
        .expect("a node's name");
    let pid = fleet.node(index).daemon.pid();
    // A bound on this test's wait only: the connection must be cut, not time out here.
    ws.set_read_timeout(Duration::from_secs(120));
    let kill = |signal: &str| {
        let sent = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {signal} {pid}");
    };
    kill("-STOP");
    let stopped = Instant::now();
    ws.send(
        "eval",
        json!({"session": "frozen", "cells": [{"language": "py", "code": "x"}]}),
    );
    let answer = ws.read();
    let cut_after = stopped.elapsed();
    let moved = wait_until(Duration::from_secs(60), || {
        let attempt = fleet.eval("frozen", "py", "print(x)");
        if let Err(refused) = &attempt {
            eprintln!("{:?} after the stop: {refused}", stopped.elapsed());
            if refused.contains("no answer") {
                eprintln!("{}", fleet.logs());
            }
        }
        attempt
    });
    kill("-CONT");
    assert!(answer.is_none(), "a stopped node answered: {answer:?}");
    assert!(
        cut_after < Duration::from_secs(100),
        "the connection was not cut: the read gave up after {cut_after:?}"
    );
    eprintln!("a stopped node's connection was cut after {cut_after:?}");
    let moved = moved.unwrap_or_else(|e| {
        panic!(
            "the session never answered from another node: {e}\n{}",
            fleet.logs()
        )
    });
    assert_eq!(text(&moved), "7", "{moved}");
    assert_ne!(node_of(&moved), home, "{moved}");
}
