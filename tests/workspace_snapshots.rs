//! Files travel with the state, end to end through the daemon and real workers: a session's
//! checkpoint records its workspace and `restore` brings the files back (the ledger lists
//! them); after an eviction and after a daemon restart on a node that lost the workspace
//! the files are back; a tampered blob or a swapped manifest is refused (a tampered latest
//! recording once, then deleted); a caller's own directory is never recorded.

mod common;

use common::daemon::{cell, Client, Daemon};
use common::{wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn daemon(idle: &str) -> Daemon {
    let sessions = SHORT_INTERVALS.replace(
        "idle-timeout = \"0s\"",
        &format!("idle-timeout = \"{idle}\""),
    );
    Daemon::start_in(World::with_config(&sessions))
}

/// Runs one Python cell in `session` (no `cwd`: the session works in its workspace).
fn py(client: &mut Client, session: &str, code: &str) -> Value {
    let result = client
        .call(
            "eval",
            json!({"session": session, "cells": [{"language": "py", "code": code}]}),
        )
        .unwrap_or_else(|e| panic!("eval refused: {e}"));
    let first = cell(&result, 0).clone();
    assert_eq!(first["status"], "complete", "{first:#}");
    first
}

fn state_dir(world: &World) -> PathBuf {
    world.dir.path().join("state/cellvisor")
}

fn workspace(world: &World, session: &str) -> PathBuf {
    state_dir(world).join("workspaces/local").join(session)
}

fn trees(world: &World, session: &str) -> PathBuf {
    state_dir(world)
        .join("snapshots")
        .join(session)
        .join("workspace")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

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

const WRITE: &str = "import os\nos.makedirs('data', exist_ok=True)\n\
open('data/table.csv', 'w').write('a,b\\n1,2\\n')\nopen('notes.txt', 'w').write('keep me')\nx = 1";
const CHECK: &str =
    "import os\nprint(open('data/table.csv').read().strip(), open('notes.txt').read(), \
os.path.exists('new.txt'), x)";
const CHECKED: &str = "a,b\n1,2 keep me False 1\n";

#[test]
fn restoring_a_checkpoint_brings_back_changed_and_deleted_files_and_the_ledger_lists_them() {
    let daemon = daemon("0s");
    let mut client = daemon.client();
    py(&mut client, "w", WRITE);
    let saved = client
        .call("checkpoint", json!({"session": "w", "name": "before"}))
        .expect("checkpoint answered");
    assert_eq!(saved[0]["workspace"]["files"], 2, "{saved:#}");
    assert_eq!(saved[0]["workspace"]["bytes"], 15, "{saved:#}");
    py(
        &mut client,
        "w",
        "import os\nopen('data/table.csv', 'w').write('a,b\\n9,9\\n')\nos.remove('notes.txt')\n\
open('new.txt', 'w').write('made since')\nx = 2",
    );
    let restored = client
        .call("restore", json!({"session": "w", "name": "before"}))
        .expect("restore answered");
    let files = &restored[0]["ledger"]["files"];
    assert_eq!(
        strings(&files["restored"]),
        ["data/table.csv"],
        "{restored:#}"
    );
    assert_eq!(strings(&files["added"]), ["notes.txt"], "{restored:#}");
    assert_eq!(strings(&files["removed"]), ["new.txt"], "{restored:#}");
    assert_eq!(py(&mut client, "w", CHECK)["output"], CHECKED);

    // A second checkpoint stores only what changed: the unchanged file is shared.
    py(&mut client, "w", "open('notes.txt', 'w').write('changed')");
    let again = client
        .call("checkpoint", json!({"session": "w", "name": "after"}))
        .expect("checkpoint answered");
    assert_eq!(again[0]["workspace"]["new_bytes"], 7, "{again:#}");

    // A session run in the caller's own directory: nothing of it is recorded.
    let own = daemon.world.work_dir();
    std::fs::write(own.join("mine.txt"), "the caller's").expect("write");
    client.eval_in("c", &own, json!([{"language": "py", "code": "y = 1"}]));
    let saved = client
        .call("checkpoint", json!({"session": "c", "name": "x"}))
        .expect("checkpoint answered");
    assert!(saved[0].get("workspace").is_none(), "{saved:#}");
    assert!(!trees(&daemon.world, "c").exists());
    daemon.stop();
}

#[test]
fn after_an_eviction_and_after_a_restart_that_lost_the_workspace_the_files_are_back() {
    let daemon = daemon("1s");
    let mut client = daemon.client();
    py(&mut client, "w", WRITE);
    wait_evicted(&daemon, "w");
    let next = py(&mut client, "w", CHECK);
    assert_eq!(next["output"], CHECKED, "{next:#}");
    assert_eq!(next["state"]["from"]["reason"], "idle eviction", "{next:#}");
    assert!(
        trees(&daemon.world, "w").join("latest.tree").is_file(),
        "the eviction recorded the workspace"
    );

    // The daemon stops (saving the workspace), and its node loses the workspace's disk.
    py(
        &mut client,
        "w",
        "open('later.txt', 'w').write('after the eviction')",
    );
    let world = daemon.stop_keep_world();
    std::fs::remove_dir_all(workspace(&world, "w")).expect("lose the workspace");
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let back = py(
        &mut client,
        "w",
        &format!("{CHECK}\nprint(open('later.txt').read())"),
    );
    assert_eq!(
        back["output"],
        format!("{CHECKED}after the eviction\n"),
        "{back:#}"
    );
    let mut added = strings(&back["state"]["files"]["added"]);
    added.sort();
    assert_eq!(
        added,
        ["data/table.csv", "later.txt", "notes.txt"],
        "{back:#}"
    );
    assert_eq!(back["state"]["from"]["reason"], "daemon stop", "{back:#}");
    daemon.stop();
}

/// The one blob file under `dir` holding `content`.
fn blob_holding(dir: &Path, content: &[u8]) -> PathBuf {
    let mut found = Vec::new();
    for fan in std::fs::read_dir(dir).expect("blobs").flatten() {
        for blob in std::fs::read_dir(fan.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if std::fs::read(blob.path()).is_ok_and(|b| b == content) {
                found.push(blob.path());
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

#[test]
fn a_tampered_blob_or_a_swapped_manifest_is_refused_and_nothing_is_restored() {
    let daemon = daemon("0s");
    let mut client = daemon.client();
    py(&mut client, "w", "open('f.txt', 'w').write('one')\nx = 1");
    client
        .call("checkpoint", json!({"session": "w", "name": "one"}))
        .expect("checkpoint");
    py(&mut client, "w", "open('f.txt', 'w').write('two')\nx = 2");
    client
        .call("checkpoint", json!({"session": "w", "name": "two"}))
        .expect("checkpoint");
    py(&mut client, "w", "open('f.txt', 'w').write('now')\nx = 3");
    let dir = trees(&daemon.world, "w");

    // Checkpoint "two"'s manifest replaced by "one"'s: its authentication names "one".
    let two = dir.join("checkpoints/two.tree");
    let kept = std::fs::read(&two).expect("two");
    std::fs::copy(dir.join("checkpoints/one.tree"), &two).expect("swap");
    let err = client
        .call("restore", json!({"session": "w", "name": "two"}))
        .expect_err("a swapped manifest is refused");
    assert!(err.to_string().contains("integrity check failed"), "{err}");
    std::fs::write(&two, kept).expect("put back");

    // A blob altered in place: its content no longer hashes to its name.
    std::fs::write(blob_holding(&dir.join("blobs"), b"one"), b"evil").expect("tamper");
    let err = client
        .call("restore", json!({"session": "w", "name": "one"}))
        .expect_err("a tampered blob is refused");
    assert!(err.to_string().contains("fails its SHA-256 check"), "{err}");
    assert!(err.to_string().contains("f.txt"), "{err}");
    let untouched = py(&mut client, "w", "print(open('f.txt').read(), x)");
    assert_eq!(
        untouched["output"], "now 3\n",
        "nothing restored: {untouched:#}"
    );

    // The intact checkpoint still restores.
    client
        .call("restore", json!({"session": "w", "name": "two"}))
        .expect("restore two");
    let two = py(&mut client, "w", "print(open('f.txt').read(), x)");
    assert_eq!(two["output"], "two 2\n", "{two:#}");

    // The latest recording altered while the daemon was down, on a node without the
    // workspace: refused once, said, deleted; the session goes on with an empty workspace.
    let world = daemon.stop_keep_world();
    let latest = trees(&world, "w").join("latest.tree");
    let mut bytes = std::fs::read(&latest).expect("latest recorded at the stop");
    bytes[0] ^= 1;
    std::fs::write(&latest, bytes).expect("tamper");
    std::fs::remove_dir_all(workspace(&world, "w")).expect("lose the workspace");
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let after = py(&mut client, "w", "import os\nprint(os.listdir('.'), x)");
    assert_eq!(after["output"], "[] 2\n", "{after:#}");
    let notice = after["notice"].as_str().unwrap_or_default();
    assert!(notice.contains("integrity check failed"), "{after:#}");
    assert!(!latest.exists(), "refused once, deleted");
    daemon.stop();
}

/// A latest recording whose blob is missing (a paused node's late collection, a volume that
/// lost a file) refuses the request that would bring the files back, and lets go of the
/// workspace it made: once the blob is back, the next request brings the files back rather
/// than running in an empty workspace that hides them.
#[test]
fn a_refused_bring_back_leaves_no_empty_workspace_behind() {
    let daemon = daemon("0s");
    let mut client = daemon.client();
    py(&mut client, "w", WRITE);
    let world = daemon.stop_keep_world();
    std::fs::remove_dir_all(workspace(&world, "w")).expect("lose the workspace");
    let blob = blob_holding(&trees(&world, "w").join("blobs"), b"keep me");
    let aside = world.dir.path().join("aside");
    std::fs::rename(&blob, &aside).expect("the blob goes missing");
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let err = client
        .call(
            "eval",
            json!({"session": "w", "cells": [{"language": "py", "code": "1"}]}),
        )
        .expect_err("refused: a blob is missing");
    assert!(err.to_string().contains("missing"), "{err}");
    assert!(
        !workspace(&daemon.world, "w").exists(),
        "no empty workspace left"
    );
    std::fs::rename(&aside, &blob).expect("the blob is back");
    let back = py(&mut client, "w", CHECK);
    assert_eq!(back["output"], CHECKED, "{back:#}");
    daemon.stop();
}

#[test]
fn a_drain_saves_the_workspace_with_the_session() {
    let config = format!("{SHORT_INTERVALS}[daemon]\ndrain-idle = \"500ms\"\n");
    let daemon = Daemon::start_in(World::with_config(&config));
    let mut client = daemon.client();
    py(&mut client, "w", WRITE);
    let socket = daemon.socket.to_string_lossy().into_owned();
    daemon
        .world
        .run(&["--socket", &socket, "drain", "--wait", "--timeout", "60s"])
        .assert_code(0);
    assert!(
        trees(&daemon.world, "w").join("latest.tree").is_file(),
        "the drain recorded the workspace"
    );
    // The node's disk is lost before the session comes back (here, after an undrain).
    std::fs::remove_dir_all(workspace(&daemon.world, "w")).expect("lose the workspace");
    daemon
        .world
        .run(&["--socket", &socket, "undrain"])
        .assert_code(0);
    let back = py(&mut client, "w", CHECK);
    assert_eq!(back["output"], CHECKED, "{back:#}");
    assert_eq!(back["state"]["from"]["reason"], "drain", "{back:#}");
    assert_eq!(
        back["state"]["files"]["added"],
        json!(["data/table.csv", "notes.txt"]),
        "{back:#}"
    );
    daemon.stop();
}
