//! End-to-end: a fleet's nodes in etcd mode (`fleet.leases = "etcd"`), each the real binary
//! with real workers, sharing one snapshot directory and a real etcd of the test's own. A
//! session runs on one node under a fenced lease; a node stopped (`SIGSTOP`) past its lease
//! cannot commit what it saves once it wakes and answers `LEASED_ELSEWHERE`, while the other
//! node serves the session from its committed state; a copied older blob is never restored;
//! an unreachable etcd is a clear error at start; a request retried after its node died
//! partway runs only the cells not in the committed state.

mod common;

use common::daemon::{output, Daemon};
use common::etcd::{self, Cluster, Etcd};
use common::{path_str, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const LEASED_ELSEWHERE: i64 = -32005;

/// A fleet's shared storage: its snapshot directory and key file, and its etcd.
struct Shared {
    dir: tempfile::TempDir,
    etcd: Etcd,
}

impl Shared {
    fn new() -> Shared {
        let dir = tempfile::tempdir().expect("tempdir");
        // Open to traversal: as root the nodes give their sessions uids of their own.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        let key = dir.path().join("fleet.key");
        std::fs::write(&key, [0x5a; 32]).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        Shared {
            dir,
            etcd: Etcd::start(),
        }
    }

    fn snapshots(&self) -> PathBuf {
        self.dir.path().join("snapshots")
    }

    fn config(&self, node: &str, endpoints: &str) -> String {
        format!(
            "[daemon]\nnode = \"{node}\"\n[snapshots]\nwhen = \"every-cell\"\ndir = \"{}\"\n\
             key-file = \"{}\"\n[fleet]\nleases = \"etcd\"\nlease-ttl = \"2s\"\n\
             etcd-endpoints = [\"{endpoints}\"]\n",
            path_str(&self.snapshots()),
            path_str(&self.dir.path().join("fleet.key")),
        )
    }

    /// A node of this fleet; its heartbeats are slow enough that a worker whose cell ran
    /// through the node's pause is not declared dead when the node wakes.
    fn node(&self, node: &str) -> Daemon {
        self.node_with(node, "", "2s")
    }

    /// A node of this fleet with `snapshots` keys added to its `[snapshots]` section and
    /// leases of `ttl`.
    fn node_with(&self, node: &str, snapshots: &str, ttl: &str) -> Daemon {
        let sessions = SHORT_INTERVALS
            .replace(
                "heartbeat-interval = \"200ms\"",
                "heartbeat-interval = \"5s\"",
            )
            .replace("heartbeat-timeout = \"1s\"", "heartbeat-timeout = \"60s\"");
        let config = self
            .config(node, &self.etcd.url)
            .replace("[snapshots]\n", &format!("[snapshots]\n{snapshots}"))
            .replace("lease-ttl = \"2s\"", &format!("lease-ttl = \"{ttl}\""));
        Daemon::start_in(World::with_config(&format!("{sessions}{config}")))
    }

    /// A node of this fleet that speaks to the etcd members at `endpoints`, in that order.
    fn node_on(&self, node: &str, endpoints: &[String]) -> Daemon {
        let sessions = SHORT_INTERVALS
            .replace(
                "heartbeat-interval = \"200ms\"",
                "heartbeat-interval = \"5s\"",
            )
            .replace("heartbeat-timeout = \"1s\"", "heartbeat-timeout = \"60s\"");
        let config = self.config(node, &endpoints.join("\", \""));
        Daemon::start_in(World::with_config(&format!("{sessions}{config}")))
    }

    /// The session's committed pointer in Python, from etcd.
    fn pointer(&self, session: &str) -> Option<Value> {
        let text = self.etcd.get(&format!("cellvisor/pointer/{session}/py"))?;
        serde_json::from_str(&text).ok()
    }

    /// The path of the blob `pointer` names.
    fn blob(&self, session: &str, pointer: &Value) -> PathBuf {
        self.snapshots()
            .join(session)
            .join("py/blobs")
            .join(pointer["blob"].as_str().unwrap_or_default())
    }

    /// Waits until `node` committed the session's pointer after its `cells`-th cell there.
    fn committed(&self, session: &str, node: &str, cells: u64) -> Value {
        wait_until(Duration::from_secs(15), || match self.pointer(session) {
            Some(p) if p["cells"] == json!(cells) && p["node"] == node => Ok(p),
            other => Err(other),
        })
        .expect("the pointer is committed")
    }
}

fn py(code: &str) -> Value {
    json!([{"language": "py", "code": code}])
}

fn eval(daemon: &Daemon, session: &str, code: &str) -> Result<Value, Value> {
    daemon
        .client()
        .call("eval", json!({"session": session, "cells": py(code)}))
}

fn signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{name} {pid}");
}

#[test]
fn a_paused_node_cannot_commit_and_steps_down_while_the_other_serves_the_committed_state() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");

    let first = eval(&a, "s", "x = 1").expect("runs on node-a");
    assert_eq!(first["node"], "node-a", "{first}");
    let refused = eval(&b, "s", "x").expect_err("node-a holds it");
    assert_eq!(refused["code"], json!(LEASED_ELSEWHERE), "{refused}");
    assert_eq!(refused["data"]["node"], "node-a", "{refused}");
    eval(&a, "s", "x = 2").expect("on node-a");
    let committed = shared.committed("s", "node-a", 2);
    let token_a = committed["token"].as_i64().expect("token");
    assert_eq!(committed["node"], "node-a");

    // A cell that outlives the pause, and node-a stopped with it running.
    let a_pid = a.pid();
    let slow = {
        let mut client = a.client();
        std::thread::spawn(move || {
            client.call(
                "eval",
                json!({"session": "s", "cells": py("import time\ntime.sleep(4)\nx = 50")}),
            )
        })
    };
    a.wait_for_state("s", "busy");
    signal(a_pid, "STOP");
    let paused = Instant::now();

    // node-b takes the session once node-a's lease ran out, from the committed state.
    let moved = wait_until(Duration::from_secs(20), || match eval(&b, "s", "x") {
        Ok(result) => Ok(result),
        Err(err) => {
            assert_eq!(err["code"], json!(LEASED_ELSEWHERE), "{err}");
            std::thread::sleep(Duration::from_millis(25));
            Err(err)
        }
    })
    .expect("node-b serves the session");
    let failover = paused.elapsed();
    eprintln!("failover of a paused node: {} ms", failover.as_millis());
    assert_eq!(output(&moved, 0).trim(), "2", "{moved:#}");
    assert_eq!(
        moved["cells"][0]["state"]["from"]["node"], "node-a",
        "{moved:#}"
    );
    eval(&b, "s", "x = 3").expect("on node-b");
    let from_b = shared.committed("s", "node-b", 2);
    assert_eq!(from_b["node"], "node-b", "{from_b}");
    let token_b = from_b["token"].as_i64().expect("token");
    assert!(token_b > token_a, "{token_a} then {token_b}");

    // node-a wakes: its cell ends and is saved, but its commit is refused, and what it is
    // asked next it sends elsewhere.
    signal(a_pid, "CONT");
    let slow = slow.join().expect("the slow cell's client");
    eprintln!("the cell that ran through the pause: {slow:?}");
    // Its state was never committed, so it is never answered as complete and saved: it was
    // stopped (cancelled), refused (LEASED_ELSEWHERE), or says `saved: false` and why.
    if let Ok(answered) = &slow {
        let cell = &answered["cells"][0];
        assert!(
            cell["status"] != "complete" || cell["saved"]["saved"] == json!(false),
            "an uncommitted cell answered as saved: {answered:#}"
        );
    }
    let stepped_down = wait_until(Duration::from_secs(10), || match eval(&a, "s", "x = 100") {
        Err(err) if err["code"] == json!(LEASED_ELSEWHERE) => Ok(err),
        other => Err(other),
    })
    .expect("node-a answers LEASED_ELSEWHERE");
    assert_eq!(stepped_down["data"]["node"], "node-b", "{stepped_down}");
    std::thread::sleep(Duration::from_millis(500));
    let current = shared.pointer("s").expect("pointer");
    assert_eq!(
        current["node"], "node-b",
        "node-a's save was never committed: {current}"
    );
    assert_eq!(current["token"], json!(token_b));
    let state = eval(&b, "s", "x").expect("on node-b");
    assert_eq!(output(&state, 0).trim(), "3", "{state:#}");
    b.stop();
    a.stop();
}

/// Runs a cell that sleeps 1.5 s then sets `x = 2` on `node`, stopping etcd while it runs;
/// answers its result, with etcd still stopped. The node's lease outlives the cell (a
/// `lease-ttl` of 10 s stays provable for 8 s after its last acknowledged keep-alive).
fn cell_while_etcd_stops(shared: &Shared, node: &Daemon, session: &str) -> Value {
    let slow = {
        let mut client = node.client();
        let session = session.to_string();
        std::thread::spawn(move || {
            client.call(
                "eval",
                json!({"session": session, "cells": py("import time\ntime.sleep(1.5)\nx = 2")}),
            )
        })
    };
    node.wait_for_state(session, "busy");
    signal(shared.etcd.pid(), "STOP");
    let answered = slow.join().expect("the slow cell's client");
    answered.expect("the cell is answered")
}

#[test]
fn an_answer_waits_for_its_commit_and_a_commit_that_fails_is_told_on_its_cell() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node_with("node-a", "", "10s");
    for n in 1..=3u64 {
        let result = eval(&a, "w", &format!("x = {n}")).expect("runs");
        assert_eq!(
            result["cells"][0]["saved"],
            json!({"saved": true}),
            "{result:#}"
        );
        // Read at once, no waiting: the answer came after the commit.
        let pointer = shared.pointer("w").expect("committed before the answer");
        assert_eq!(pointer["cells"], json!(n), "{pointer}");
        assert_eq!(pointer["node"], "node-a", "{pointer}");
    }
    // etcd stops while a cell runs: its snapshot is written, its commit cannot be.
    let told = cell_while_etcd_stops(&shared, &a, "w");
    signal(shared.etcd.pid(), "CONT");
    let cell = &told["cells"][0];
    assert_eq!(cell["status"], "complete", "{told:#}");
    assert_eq!(cell["saved"]["saved"], json!(false), "{told:#}");
    let why = cell["saved"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("not committed"), "{told:#}");
    let notice = cell["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("this cell's state was not saved"),
        "{told:#}"
    );
    // The session goes on once etcd answers again (here or after its lease is taken anew).
    let again = wait_until(Duration::from_secs(20), || match eval(&a, "w", "x") {
        Ok(result) => Ok(result),
        Err(err) => {
            assert_eq!(err["code"], json!(LEASED_ELSEWHERE), "{err}");
            std::thread::sleep(Duration::from_millis(100));
            Err(err)
        }
    })
    .expect("the session answers again");
    let x = output(&again, 0);
    assert!(["2", "3"].contains(&x.trim()), "{again:#}");
    a.stop();
}

#[test]
fn with_async_answers_a_cell_is_answered_before_its_commit() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node_with("node-a", "every-cell-answer = \"async\"\n", "10s");
    eval(&a, "y", "x = 1").expect("runs");
    shared.committed("y", "node-a", 1);
    // etcd stops while a cell runs: its answer goes out when its blob is written, before
    // any commit could be made (the loss window docs/fleet.md describes).
    let answered = cell_while_etcd_stops(&shared, &a, "y");
    signal(shared.etcd.pid(), "CONT");
    let cell = &answered["cells"][0];
    assert_eq!(cell["status"], "complete", "{answered:#}");
    assert_eq!(cell["saved"], json!({"saved": true}), "{answered:#}");
    a.stop();
}

fn eval_once(daemon: &Daemon, session: &str, id: &str, code: &str) -> Result<Value, Value> {
    daemon.client().call(
        "eval",
        json!({"session": session, "request_id": id, "cells": py(code)}),
    )
}

#[test]
fn a_retried_request_id_is_answered_on_the_next_node_from_the_committed_memory() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");
    eval(&a, "r", "runs = []").expect("on node-a");
    let append = "runs.append('R')\nprint(len(runs))";
    let first = eval_once(&a, "r", "R", append).expect("R runs on node-a");
    assert_eq!(output(&first, 0).trim(), "1", "{first:#}");
    // The memory of R is committed under node-a's token before R's answer went out.
    let memory: Value = serde_json::from_str(
        &shared
            .etcd
            .get("cellvisor/pointer/r/requests")
            .expect("the memory's pointer is committed"),
    )
    .expect("json");
    assert_eq!(memory["node"], "node-a", "{memory}");

    // node-a dies; the client, which never saw R's answer, retries it on node-b.
    let _world = a.signal_and_wait("KILL");
    let retried = wait_until(Duration::from_secs(20), || {
        match eval_once(&b, "r", "R", append) {
            Ok(result) => Ok(result),
            Err(err) => {
                assert_eq!(err["code"], json!(LEASED_ELSEWHERE), "{err}");
                std::thread::sleep(Duration::from_millis(100));
                Err(err)
            }
        }
    })
    .expect("node-b answers the retry");
    assert_eq!(retried["replayed"], json!(true), "{retried:#}");
    assert_eq!(
        retried["node"], "node-a",
        "the first run's answer: {retried:#}"
    );
    assert_eq!(output(&retried, 0).trim(), "1", "{retried:#}");
    let state = eval(&b, "r", "print(runs)").expect("on node-b");
    assert_eq!(output(&state, 0).trim(), "['R']", "R ran once: {state:#}");

    // node-b's own requests are remembered under its token, and the older file goes.
    let second = eval_once(&b, "r", "S", append).expect("S runs on node-b");
    assert_eq!(output(&second, 0).trim(), "2", "{second:#}");
    let memory: Value = serde_json::from_str(
        &shared
            .etcd
            .get("cellvisor/pointer/r/requests")
            .expect("pointer"),
    )
    .expect("json");
    assert_eq!(memory["node"], "node-b", "{memory}");
    let again = eval_once(&b, "r", "R", append).expect("R again");
    assert_eq!(again["replayed"], json!(true), "{again:#}");
    let files: Vec<String> = std::fs::read_dir(shared.snapshots().join("r/requests.d"))
        .expect("requests.d")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files,
        [memory["file"].as_str().unwrap_or_default()],
        "{files:?}"
    );
    b.stop();
}

/// Sends `params` to `node` until it answers with something other than `LEASED_ELSEWHERE`
/// (the dead node's lease still running).
fn once_the_lease_moved(node: &Daemon, params: &Value) -> Result<Value, Value> {
    let answered = wait_until(Duration::from_secs(30), || {
        match node.client().call("eval", params.clone()) {
            Err(err) if err["code"] == json!(LEASED_ELSEWHERE) => {
                std::thread::sleep(Duration::from_millis(100));
                Err(err)
            }
            other => Ok(other),
        }
    });
    answered.expect("the lease moves within its time to live")
}

/// The request progress committed with `session`'s Python state, from etcd.
fn progress(shared: &Shared, session: &str) -> Option<Value> {
    let text = shared
        .etcd
        .get(&format!("cellvisor/pointer/{session}/py/progress"))?;
    serde_json::from_str(&text).ok()
}

#[test]
fn a_node_killed_between_two_cells_of_a_request_leaves_the_retry_only_the_second_to_run() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");
    let gate = shared.dir.path().join("gate");
    let started = shared.dir.path().join("second-started");
    eval(&a, "two", "runs = []").expect("on node-a");
    let second = format!(
        "import os, time\nopen({started:?}, 'w').close()\n\
         while not os.path.exists({gate:?}):\n    time.sleep(0.02)\n\
         runs.append('second')\nprint(runs)",
        started = path_str(&started),
        gate = path_str(&gate),
    );
    let request = json!({
        "session": "two",
        "request_id": "R2",
        "cells": [
            {"language": "py", "code": "runs.append('first')\nprint(len(runs))"},
            {"language": "py", "code": second},
        ],
    });
    // R2 on node-a: its first cell runs and is committed, its second blocks on the gate.
    let mut client = a.client();
    client.send("eval", request.clone());
    // Its answer, if one ever comes (events are skipped).
    let lost = std::thread::spawn(move || loop {
        match client.read() {
            Some(message) if message.get("id").is_none() => {}
            answer => break answer,
        }
    });
    wait_until(Duration::from_secs(30), || {
        match (started.exists(), progress(&shared, "two")) {
            (true, Some(p))
                if p["id"] == "R2" && p["cells"].as_array().map(Vec::len) == Some(1) =>
            {
                Ok(p)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .expect("the first cell's state is committed with R2's progress, the second blocks");
    let dead = a.signal_and_wait("KILL");
    let lost = lost.join().expect("the client thread");
    assert_eq!(lost, None, "node-a died before answering");
    drop(dead);
    std::fs::write(&gate, b"").expect("open the gate");

    // The client retries R2 on node-b: the first cell is answered from the committed
    // progress, only the second runs.
    let retried = once_the_lease_moved(&b, &request).expect("node-b answers R2");
    assert_eq!(retried["replayed_cells"], json!(1), "{retried:#}");
    assert!(
        retried.get("replayed").is_none(),
        "the second cell ran: {retried:#}"
    );
    assert_eq!(retried["cells"][0]["node"], "node-a", "{retried:#}");
    assert_eq!(output(&retried, 0).trim(), "1", "{retried:#}");
    assert_eq!(retried["cells"][1]["node"], "node-b", "{retried:#}");
    assert_eq!(retried["cells"][1]["status"], "complete", "{retried:#}");
    assert_eq!(
        output(&retried, 1).trim(),
        "['first', 'second']",
        "the first cell's entry once, the second cell once: {retried:#}"
    );
    // Remembered now: a further retry runs nothing.
    let again = b.client().call("eval", request.clone()).expect("again");
    assert_eq!(again["replayed"], json!(true), "{again:#}");
    let state = eval(&b, "two", "print(runs)").expect("on node-b");
    assert_eq!(output(&state, 0).trim(), "['first', 'second']", "{state:#}");
    b.stop();
}

#[test]
fn across_languages_the_retry_runs_only_the_cells_not_in_their_languages_committed_state() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");
    let gate = shared.dir.path().join("gate");
    let started = shared.dir.path().join("py-started");
    // A JavaScript cell, then a Python cell that blocks on the gate.
    let request = json!({
        "session": "mixed",
        "request_id": "M",
        "cells": [
            {"language": "js", "code": "globalThis.runs = (globalThis.runs || []).concat(['js']);\nconsole.log(globalThis.runs.length)"},
            {"language": "py", "code": format!(
                "import os, time\nopen({started:?}, 'w').close()\n\
                 while not os.path.exists({gate:?}):\n    time.sleep(0.02)\nprint('py ran')",
                started = path_str(&started),
                gate = path_str(&gate),
            )},
        ],
    });
    let mut client = a.client();
    client.send("eval", request.clone());
    let lost = std::thread::spawn(move || loop {
        match client.read() {
            Some(message) if message.get("id").is_none() => {}
            answer => break answer,
        }
    });
    wait_until(Duration::from_secs(30), || {
        let text = shared.etcd.get("cellvisor/pointer/mixed/js/progress");
        match (started.exists(), text) {
            (true, Some(text)) if text.contains("\"M\"") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .expect("the JavaScript cell's state is committed with M's progress, the Python one blocks");
    let dead = a.signal_and_wait("KILL");
    assert_eq!(lost.join().expect("the client thread"), None);
    drop(dead);
    std::fs::write(&gate, b"").expect("open the gate");

    let retried = once_the_lease_moved(&b, &request).expect("node-b answers M");
    assert_eq!(retried["replayed_cells"], json!(1), "{retried:#}");
    assert_eq!(output(&retried, 0).trim(), "1", "{retried:#}");
    assert_eq!(retried["cells"][0]["node"], "node-a", "{retried:#}");
    assert_eq!(output(&retried, 1).trim(), "py ran", "{retried:#}");
    assert_eq!(retried["cells"][1]["node"], "node-b", "{retried:#}");
    let js = b
        .client()
        .call(
            "eval",
            json!({"session": "mixed", "cells": [{"language": "js", "code": "console.log(JSON.stringify(globalThis.runs))"}]}),
        )
        .expect("on node-b");
    assert_eq!(
        output(&js, 0).trim(),
        "[\"js\"]",
        "the JavaScript cell ran once: {js:#}"
    );
    b.stop();
}

#[test]
fn a_request_whose_every_cell_was_committed_before_its_memory_is_answered_not_run() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");
    eval(&a, "whole", "runs = []").expect("on node-a");
    let request = json!({
        "session": "whole",
        "request_id": "W",
        "cells": [
            {"language": "py", "code": "runs.append('one')"},
            {"language": "py", "code": "runs.append('two')\nprint(runs)"},
        ],
    });
    let first = a
        .client()
        .call("eval", request.clone())
        .expect("W on node-a");
    assert_eq!(output(&first, 1).trim(), "['one', 'two']", "{first:#}");
    // node-a dies as if between its last state's commit and its memory's: the memory's
    // pointer is gone, the progress says both cells are in the state.
    let _dead = a.signal_and_wait("KILL");
    shared.etcd.delete("cellvisor/pointer/whole/requests");
    let retried = once_the_lease_moved(&b, &request).expect("node-b answers W");
    assert_eq!(retried["replayed"], json!(true), "{retried:#}");
    assert_eq!(retried["replayed_cells"], json!(2), "{retried:#}");
    assert_eq!(output(&retried, 1).trim(), "['one', 'two']", "{retried:#}");
    let state = eval(&b, "whole", "print(runs)").expect("on node-b");
    assert_eq!(
        output(&state, 0).trim(),
        "['one', 'two']",
        "ran once: {state:#}"
    );
    b.stop();
}

#[test]
fn a_per_call_request_id_is_remembered_under_its_named_sessions_lease() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let b = shared.node("node-b");
    let lines = shared.dir.path().join("lines");
    // Open to the sessions' own uids.
    std::fs::write(&lines, b"").expect("lines");
    std::fs::set_permissions(&lines, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let request = json!({
        "session": "calls",
        "fresh": true,
        "request_id": "P",
        "cells": py(&format!(
            "open({:?}, 'a').write('ran\\n')\nprint('done')",
            path_str(&lines)
        )),
    });
    let first = a
        .client()
        .call("eval", request.clone())
        .expect("P on node-a");
    assert_eq!(output(&first, 0).trim(), "done", "{first:#}");
    let notice = first["cells"][0]["notice"].as_str().unwrap_or_default();
    assert!(!notice.contains("could not be kept"), "{first:#}");
    let memory = shared
        .etcd
        .get("cellvisor/pointer/calls/requests")
        .expect("P is remembered under the named session's lease");
    assert!(memory.contains("node-a"), "{memory}");
    // node-a lets the lease go once the request ended; node-b answers the retry from the
    // committed memory.
    let retried = once_the_lease_moved(&b, &request).expect("node-b answers P");
    assert_eq!(retried["replayed"], json!(true), "{retried:#}");
    assert_eq!(retried["node"], "node-a", "{retried:#}");
    assert_eq!(
        std::fs::read_to_string(&lines).expect("lines"),
        "ran\n",
        "the cell ran once"
    );
    a.stop();
    b.stop();
}

#[test]
fn a_checkpoint_is_restored_only_as_committed_and_a_copied_older_one_is_refused() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    let checkpoint = |name: &str| {
        a.client().call(
            "checkpoint",
            json!({"session": "k", "language": "py", "name": name}),
        )
    };
    let restore = |name: &str| {
        a.client().call(
            "restore",
            json!({"session": "k", "language": "py", "name": name}),
        )
    };
    let file = shared.snapshots().join("k/py/checkpoints/cp.snap");
    eval(&a, "k", "x = 'one'").expect("on node-a");
    checkpoint("cp").expect("the first checkpoint");
    let aside = shared.dir.path().join("cp-one.snap");
    std::fs::copy(&file, &aside).expect("the first checkpoint aside");
    eval(&a, "k", "x = 'two'").expect("on node-a");
    checkpoint("cp").expect("the second checkpoint");
    let committed: Value = serde_json::from_str(
        &shared
            .etcd
            .get("cellvisor/pointer/k/py/checkpoint/cp")
            .expect("the checkpoint's pointer"),
    )
    .expect("json");
    assert_eq!(committed["node"], "node-a", "{committed}");

    eval(&a, "k", "x = 'three'").expect("on node-a");
    restore("cp").expect("the committed checkpoint is restored");
    let state = eval(&a, "k", "print(x)").expect("runs");
    assert_eq!(output(&state, 0).trim(), "two", "{state:#}");

    // The first checkpoint copied over the second: a rollback, refused.
    std::fs::copy(&aside, &file).expect("copy over");
    let refused = restore("cp").expect_err("a copied checkpoint is refused");
    let message = refused.to_string();
    assert!(
        message.contains("not the one etcd names as current"),
        "{refused}"
    );
    let state = eval(&a, "k", "print(x)").expect("runs");
    assert_eq!(
        output(&state, 0).trim(),
        "two",
        "nothing restored: {state:#}"
    );
    let unknown = restore("never").expect_err("no such checkpoint");
    assert!(!unknown.to_string().is_empty(), "{unknown}");
    a.stop();
}

#[test]
fn a_copied_older_blob_is_never_restored() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let a = shared.node("node-a");
    eval(&a, "c", "secret = 'old'").expect("on node-a");
    let old = shared.committed("c", "node-a", 1);
    let aside = shared.dir.path().join("old.snap");
    std::fs::copy(shared.blob("c", &old), &aside).expect("copy the old blob aside");
    eval(&a, "c", "secret = 'new'").expect("on node-a");
    a.stop();
    let current = shared.pointer("c").expect("pointer");
    assert_ne!(current["blob"], old["blob"]);
    assert!(
        !shared.blob("c", &old).exists(),
        "the unreferenced blob was collected"
    );
    // The older snapshot copied over the current blob's name: a rollback, refused.
    std::fs::copy(&aside, shared.blob("c", &current)).expect("copy over");

    let b = shared.node("node-b");
    let result = eval(&b, "c", "print(globals().get('secret'))").expect("runs");
    assert_eq!(output(&result, 0).trim(), "None", "{result:#}");
    let notice = result["cells"][0]["notice"].to_string();
    assert!(
        notice.contains("not the one etcd names as current"),
        "{result:#}"
    );
    // Closing a session forgets it: its pointer goes too.
    b.client()
        .call("close", json!({"session": "c"}))
        .expect("closed");
    wait_until(Duration::from_secs(10), || match shared.pointer("c") {
        None => Ok(()),
        Some(p) => Err(p),
    })
    .expect("the pointer is deleted");
    b.stop();
}

#[test]
fn an_unreachable_etcd_is_a_clear_error_at_start() {
    let shared_dir = tempfile::tempdir().expect("tempdir");
    let url = format!("http://127.0.0.1:{}", common::net::free_port());
    let world = World::with_config(&format!(
        "[snapshots]\ndir = \"{}\"\n[fleet]\nleases = \"etcd\"\netcd-endpoints = [\"{url}\"]\n",
        path_str(&shared_dir.path().join("snapshots"))
    ));
    let socket = world.runtime_dir().join("etcd-test.sock");
    let run = world
        .command()
        .args(["serve", "--socket"])
        .arg(&socket)
        .output()
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("no etcd member answered at {url}")),
        "{stderr}"
    );
    world.assert_no_processes_left(Duration::from_secs(5));
}

/// Whether `result`'s first cell says its state was committed.
fn saved(result: &Value) -> bool {
    result["cells"][0]["saved"]["saved"] == json!(true)
}

#[test]
fn a_stopped_etcd_member_costs_no_lease_and_a_request_retried_elsewhere_runs_once() {
    if !etcd::installed() {
        return;
    }
    let shared = Shared::new();
    let cluster = Cluster::start(3);
    let leader = cluster.leader().expect("a leader");
    // node-a speaks to a follower first, the member that is stopped below; node-b to the
    // others first.
    let stopped = (leader + 1) % 3;
    let others: Vec<String> = (0..3)
        .filter(|&i| i != stopped)
        .map(|i| cluster.urls[i].clone())
        .collect();
    let a_order: Vec<String> = std::iter::once(cluster.urls[stopped].clone())
        .chain(others.iter().cloned())
        .collect();
    let b_order: Vec<String> = others
        .iter()
        .cloned()
        .chain(std::iter::once(cluster.urls[stopped].clone()))
        .collect();
    let a = shared.node_on("node-a", &a_order);
    let b = shared.node_on("node-b", &b_order);
    let first = eval(&a, "m", "runs = []").expect("on node-a");
    assert!(saved(&first), "{first:#}");
    let (holder, token) = cluster.get("cellvisor/lease/m").expect("the lease key");
    assert_eq!(holder, "node-a");

    // The member node-a's keep-alives and commits went to stops (SIGSTOP: its connections
    // stay open and nothing is answered). Its keep-alives move to another member within
    // their deadline: three times the lease's time to live later node-a holds the lease
    // it held, under the same token.
    signal(cluster.pid(stopped), "STOP");
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        cluster.get("cellvisor/lease/m"),
        Some(("node-a".to_string(), token)),
        "node-a kept its lease through the stopped member"
    );
    let append = |id: &str| format!("runs.append({id:?})\nprint(runs)");
    let m1 = eval_once(&a, "m", "M1", &append("M1")).expect("M1 on node-a");
    assert!(
        saved(&m1),
        "its commit went to a member that answers: {m1:#}"
    );
    assert_eq!(output(&m1, 0).trim(), "['M1']", "{m1:#}");

    // M2 is sent to node-a and its client cut before reading the answer; node-a dies once
    // M2's state is committed. The client sends M2 again, through node-b.
    let request = json!({"session": "m", "request_id": "M2", "cells": py(&append("M2"))});
    let mut client = a.client();
    client.send("eval", request.clone());
    let m2_progress = || {
        let (text, _) = cluster.get("cellvisor/pointer/m/py/progress")?;
        serde_json::from_str::<Value>(&text).ok()
    };
    wait_until(Duration::from_secs(30), || match m2_progress() {
        Some(p) if p["id"] == "M2" => Ok(p),
        other => Err(format!("{other:?}")),
    })
    .expect("M2's state is committed with its progress");
    drop(client);
    let _dead = a.signal_and_wait("KILL");
    let retried = once_the_lease_moved(&b, &request).expect("node-b answers M2");
    assert!(
        retried["replayed"] == json!(true) || retried["replayed_cells"] == json!(1),
        "M2 is answered from what node-a committed, not run again: {retried:#}"
    );
    assert_eq!(retried["cells"][0]["node"], "node-a", "{retried:#}");
    assert_eq!(output(&retried, 0).trim(), "['M1', 'M2']", "{retried:#}");
    let state = eval(&b, "m", "print(runs)").expect("on node-b");
    assert_eq!(
        output(&state, 0).trim(),
        "['M1', 'M2']",
        "each ran once: {state:#}"
    );
    signal(cluster.pid(stopped), "CONT");
    let again = b.client().call("eval", request).expect("M2 once more");
    assert_eq!(again["replayed"], json!(true), "{again:#}");
    let state = eval(&b, "m", "print(runs)").expect("on node-b");
    assert_eq!(output(&state, 0).trim(), "['M1', 'M2']", "{state:#}");
    b.stop();
}
