//! End-to-end: nodes of a fleet sharing one snapshot directory and key file, through the
//! real binary and real workers. A session runs on one node at a time under its lease,
//! another node refuses it naming the holder, it moves when its node stops (or dies and its
//! lease expires) with its state and its workspace's files restored and the ledger naming
//! the old node, and `resume` never starts an empty namespace.

mod common;

use common::daemon::{output, Daemon};
use common::{path_str, wait_until, World};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LEASED_ELSEWHERE: i64 = -32005;
const SESSION_UNKNOWN: i64 = -32006;

/// The shared storage of a fleet: its snapshot directory and its key file.
struct Shared {
    dir: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("fleet.key");
        std::fs::write(&key, [0x5a; 32]).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        Shared { dir }
    }

    fn snapshots(&self) -> PathBuf {
        self.dir.path().join("snapshots")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("fleet.key")
    }

    /// A node of this fleet named `node`, its leases lasting `ttl`.
    fn node(&self, node: &str, ttl: &str) -> Daemon {
        Daemon::start_with(&self.config(node, ttl, &self.key()))
    }

    fn config(&self, node: &str, ttl: &str, key: &Path) -> String {
        format!(
            "[daemon]\nnode = \"{node}\"\n[snapshots]\nwhen = \"every-cell\"\ndir = \"{}\"\n\
             key-file = \"{}\"\n[fleet]\nleases = true\nlease-ttl = \"{ttl}\"\n",
            path_str(&self.snapshots()),
            path_str(key)
        )
    }
}

fn py(code: &str) -> Value {
    json!([{"language": "py", "code": code}])
}

fn eval(daemon: &Daemon, params: Value) -> Result<Value, Value> {
    daemon.client().call("eval", params)
}

#[test]
fn a_session_runs_on_one_node_moves_when_it_stops_and_resume_never_starts_it_empty() {
    let shared = Shared::new();
    let a = shared.node("node-a", "30s");
    let b = shared.node("node-b", "30s");

    let first = eval(&a, json!({"session": "agent", "cells": py("x = 41")})).expect("on a");
    assert_eq!(first["node"], "node-a", "{first}");

    // While node-a holds it, node-b refuses it and names node-a.
    let refused =
        eval(&b, json!({"session": "agent", "cells": py("x + 1")})).expect_err("held by node-a");
    assert_eq!(refused["code"], json!(LEASED_ELSEWHERE), "{refused}");
    assert_eq!(refused["data"]["node"], "node-a", "{refused}");
    assert!(refused["data"]["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 0 && ms <= 30_000));
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("node node-a"));

    // A session that never existed is not started empty when the host expects its state.
    let unknown = eval(
        &b,
        json!({"session": "never", "resume": true, "cells": py("1")}),
    )
    .expect_err("unknown");
    assert_eq!(unknown["code"], json!(SESSION_UNKNOWN), "{unknown}");

    // node-a stops (an upgrade's drain, a scale-down): the session saves and moves.
    a.stop();
    let moved = eval(
        &b,
        json!({"session": "agent", "resume": true, "cells": py("x + 1")}),
    )
    .expect("moved to node-b");
    assert_eq!(output(&moved, 0).trim(), "42");
    assert_eq!(moved["node"], "node-b", "{moved}");
    let from = &moved["cells"][0]["state"]["from"];
    assert_eq!(
        from["node"], "node-a",
        "the ledger names the old node: {moved}"
    );
    let notice = moved["cells"][0]["notice"].to_string();
    assert!(notice.contains("on node node-a"), "{notice}");
    b.stop();
}

#[test]
fn a_dead_nodes_session_is_restored_elsewhere_once_its_lease_expires() {
    let shared = Shared::new();
    let a = shared.node("node-a", "1s");
    let b = shared.node("node-b", "1s");
    eval(
        &a,
        json!({"session": "s", "cells": py("import os; total = 40 + 2\nopen('data.csv', 'w').write('a,b')")}),
    )
    .expect("on a");
    // The save after the cell follows its answer, the workspace's after the namespace's:
    // node-a dies once both are on disk. Its workspace is on its own disk only.
    let latest = shared.snapshots().join("s").join("py").join("latest.snap");
    let files = shared.snapshots().join("s/workspace/latest.tree");
    wait_until(Duration::from_secs(10), || {
        (latest.is_file() && files.is_file())
            .then_some(())
            .ok_or(())
    })
    .expect("saved after the cell");
    let _world = a.signal_and_wait("KILL");

    // Refused with node-a's name until its lease runs out, then restored here.
    let mut refusals = 0;
    let moved = wait_until(Duration::from_secs(20), || {
        match eval(
            &b,
            json!({"session": "s", "cells": py("print(total, open('data.csv').read())")}),
        ) {
            Ok(result) => Ok(result),
            Err(err) => {
                assert_eq!(err["code"], json!(LEASED_ELSEWHERE), "{err}");
                assert_eq!(err["data"]["node"], "node-a", "{err}");
                refusals += 1;
                std::thread::sleep(Duration::from_millis(100));
                Err(err)
            }
        }
    })
    .expect("restored on node-b");
    let listing: Vec<_> = std::fs::read_dir(latest.parent().expect("dir"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(
        output(&moved, 0).trim(),
        "42 a,b",
        "after {refusals} refusals: {moved:#}; files: {listing:?}"
    );
    assert_eq!(moved["cells"][0]["state"]["from"]["node"], "node-a");
    assert_eq!(
        moved["cells"][0]["state"]["files"]["added"],
        json!(["data.csv"]),
        "{moved:#}"
    );
    assert_eq!(moved["cells"][0]["state"]["from"]["cells_since"], 0);
    assert!(refusals <= 200);
    b.stop();
}

/// A node paused while it recorded a session's files (SIGSTOP, a frozen VM) keeps that
/// recording's lock, a file in the shared directory, until it runs again. The node that
/// takes the session over answers anyway: it waits for the lock at most a lease's time to
/// live, brings the files back without it (every blob is checked), and its own recording
/// after each cell gives up at the same bound instead of holding the session. Here the
/// test holds the lock as the paused node would, and pauses that node.
#[test]
fn a_session_moves_and_answers_while_its_paused_node_holds_its_files_lock() {
    use nix::fcntl::{Flock, FlockArg};
    let shared = Shared::new();
    let a = shared.node("node-a", "1s");
    let b = shared.node("node-b", "1s");
    eval(
        &a,
        json!({"session": "s", "cells": py("total = 40 + 2\nopen('data.csv', 'w').write('a,b')")}),
    )
    .expect("on a");
    let trees = shared.snapshots().join("s/workspace");
    let latest = shared.snapshots().join("s/py/latest.snap");
    wait_until(Duration::from_secs(10), || {
        (latest.is_file() && trees.join("latest.tree").is_file())
            .then_some(())
            .ok_or(())
    })
    .expect("saved after the cell");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(trees.join(".lock"))
        .expect("the recording's lock file");
    let held = Flock::lock(file, FlockArg::LockExclusive).expect("the lock, as node-a holds it");
    let pid = a.pid().to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {name} {pid}");
    };
    signal("-STOP");

    // node-b: refused while node-a's lease runs (a second at most), then it must answer.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut client = b.client();
    std::thread::spawn(move || {
        let answered = wait_until(Duration::from_secs(30), || {
            let r = client.call(
                "eval",
                json!({"session": "s", "cells": py("print(total, open('data.csv').read())")}),
            );
            if r.is_err() {
                std::thread::sleep(Duration::from_millis(100));
            }
            r
        });
        let _ = tx.send(answered);
    });
    let answered = rx.recv_timeout(Duration::from_secs(90));
    let moved = match answered {
        Ok(Ok(moved)) => moved,
        other => {
            signal("-CONT");
            panic!(
                "node-b never answered while node-a held the lock: {other:?}\n{}",
                b.log_tail(40)
            )
        }
    };
    assert_eq!(output(&moved, 0).trim(), "42 a,b", "{moved:#}");
    assert_eq!(moved["node"], "node-b", "{moved}");
    assert_eq!(
        moved["cells"][0]["state"]["files"]["added"],
        json!(["data.csv"]),
        "{moved:#}"
    );
    // The session is not held by its recording's wait: its next cell answers too.
    let next = eval(&b, json!({"session": "s", "cells": py("total + 1")})).expect("next");
    assert_eq!(output(&next, 0).trim(), "43", "{next:#}");
    drop(held);
    signal("-CONT");
    b.stop();
    a.stop();
}

#[test]
fn a_node_with_another_fleets_key_restores_nothing_it_did_not_sign() {
    let shared = Shared::new();
    let a = shared.node("node-a", "30s");
    eval(&a, json!({"session": "s", "cells": py("secret = 7")})).expect("on a");
    a.stop();
    let other_key = shared.dir.path().join("other.key");
    std::fs::write(&other_key, [0x11; 32]).expect("key");
    std::fs::set_permissions(&other_key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let c = Daemon::start_with(&shared.config("node-c", "30s", &other_key));
    let result = eval(
        &c,
        json!({"session": "s", "cells": py("'secret' in dir()")}),
    )
    .expect("runs, without the state");
    assert_eq!(output(&result, 0).trim(), "False", "{result}");
    c.stop();
}

#[test]
fn a_key_file_others_can_read_is_refused_at_start_naming_it() {
    let shared = Shared::new();
    std::fs::set_permissions(shared.key(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let world = World::with_config(&shared.config("node-a", "30s", &shared.key()));
    let socket = world.runtime_dir().join("fleet-test.sock");
    let run = world
        .command()
        .args(["serve", "--socket"])
        .arg(&socket)
        .output()
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("snapshots.key-file") && stderr.contains("mode 644"),
        "{stderr}"
    );
    world.assert_no_processes_left(Duration::from_secs(5));
}

/// A node of `shared` whose idle sessions are evicted after `idle` (releasing their lease).
fn evicting_node(shared: &Shared, node: &str, idle: &str) -> Daemon {
    let sessions = common::SHORT_INTERVALS.replace(
        "idle-timeout = \"0s\"",
        &format!("idle-timeout = \"{idle}\""),
    );
    let config = format!("{sessions}{}", shared.config(node, "30s", &shared.key()));
    Daemon::start_in(World::with_config(&config))
}

/// Waits until `session` is live on no worker of `daemon` (evicted, its lease released).
fn wait_evicted(daemon: &Daemon, session: &str) {
    let mut client = daemon.client();
    let gone = wait_until(Duration::from_secs(30), || {
        let rows = client.call("status", json!({})).unwrap_or_default();
        let live = rows
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["session"] == session));
        (!live).then_some(()).ok_or(rows)
    });
    assert!(gone.is_ok(), "{session} was never evicted: {gone:?}");
}

#[test]
fn a_request_id_answered_on_one_node_is_answered_not_run_on_the_next() {
    let shared = Shared::new();
    let a = evicting_node(&shared, "node-a", "1s");
    let b = evicting_node(&shared, "node-b", "1s");
    let file = shared.dir.path().join("appended.txt");
    let cells = py(&format!(
        "with open({p:?}, 'a') as f:\n    f.write('ran\\n')\nprint(len(open({p:?}).readlines()))",
        p = path_str(&file)
    ));
    let lines = || std::fs::read_to_string(&file).map_or(0, |t| t.lines().count());
    let request = |id: &str| json!({"session": "moving", "request_id": id, "cells": cells});

    let first = eval(&a, request("r-1")).expect("on node-a");
    assert_eq!(output(&first, 0), "1\n");
    // Refused while node-a holds it: a refusal is not remembered, nothing ran.
    let refused = eval(&b, request("r-1")).expect_err("held by node-a");
    assert_eq!(refused["code"], json!(LEASED_ELSEWHERE), "{refused}");

    // The session moves to node-b (node-a evicts it, saving it and releasing its lease): the
    // retry of r-1 there is answered with node-a's result, and runs nothing.
    wait_evicted(&a, "moving");
    let retry = eval(&b, request("r-1")).expect("on node-b");
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(retry["node"], "node-a", "the first run's answer: {retry}");
    assert_eq!(lines(), 1);
    let second = eval(&b, request("r-2")).expect("a new id runs on node-b");
    assert_eq!(output(&second, 0), "2\n");

    // And back to node-a, which saw the session before: it reads what node-b wrote.
    wait_evicted(&b, "moving");
    let back = eval(&a, request("r-2")).expect("back on node-a");
    assert_eq!(back["replayed"], true, "{back}");
    assert_eq!(back["node"], "node-b", "{back}");
    assert_eq!(lines(), 2, "nothing ran twice across the nodes");
    a.stop();
    b.stop();
}
