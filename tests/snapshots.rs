//! State that survives, end to end through the daemon and real workers: a session evicted
//! for idleness, or a daemon stopped and started again, finds its namespace on its next cell
//! in Python, JavaScript and Lua, and the result's ledger says what came back and what did
//! not; `every-cell` survives a SIGKILL; the boundaries hold (a snapshot over max-size is not
//! written, a tampered one or another session's is refused unrun, close and reset forget,
//! the sweep prunes, the sandbox lets a session reach only its own).

mod common;

use common::daemon::{cell, Client, Daemon};
use common::{path_str, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The short intervals with an idle timeout of `idle`, then `extra`.
fn config(idle: &str, extra: &str) -> String {
    let sessions = SHORT_INTERVALS.replace(
        "idle-timeout = \"0s\"",
        &format!("idle-timeout = \"{idle}\""),
    );
    format!("{sessions}{extra}")
}

fn daemon(idle: &str, extra: &str) -> Daemon {
    Daemon::start_in(World::with_config(&config(idle, extra)))
}

fn eval(client: &mut Client, request: Value) -> Value {
    client.call("eval", request).expect("eval answered")
}

/// Runs one cell of `language` in `session`; its result.
fn run(client: &mut Client, session: &str, language: &str, code: &str) -> Value {
    let result = eval(
        client,
        json!({"session": session, "cells": [{"language": language, "code": code}]}),
    );
    cell(&result, 0).clone()
}

/// Waits until `session` has no live worker (evicted).
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

fn snapshot_file(world: &World, session: &str, language: &str) -> PathBuf {
    world
        .dir
        .path()
        .join("state/cellvisor/snapshots")
        .join(session)
        .join(language)
        .join("latest.snap")
}

fn restored(result: &Value) -> Vec<String> {
    result["state"]["restored"]
        .as_array()
        .unwrap_or_else(|| panic!("no ledger: {result:#}"))
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

fn skipped(result: &Value) -> Vec<(String, String)> {
    result["state"]["skipped"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                    (text("name"), text("why"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A virtual environment with nothing installed (no cloudpickle, no dill).
fn bare_venv(world: &World) -> PathBuf {
    let venv = world.dir.path().join("bare-venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .expect("python3 -m venv runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    venv
}

const PY_DEFINE: &str =
    "import socket\nimport json as j\nx = 41\nitems = {'a': [1, 2], 'b': None}\n\
def clean(v):\n    return v * 2\n\
class Box:\n    def __init__(self, v):\n        self.v = v\n\
box = Box(5)\nsquare = lambda n: n * n\nconn = socket.socket()\ngen = (i for i in range(3))\n";
const PY_USE: &str = "print(x + 1, items['a'], clean(3), box.v, square(4), j.dumps([1]))";
const PY_USED: &str = "42 [1, 2] 6 5 16 [1]\n";

/// Python values, a function, a lambda, a class and its instance, a module alias and two
/// names that cannot be saved: evicted, then found on the next cell, `venv` being the
/// session's interpreter.
fn python_survives_idle_eviction(
    venv: &Path,
    extra_define: &str,
    extra_use: &str,
    extra_out: &str,
) {
    let daemon = daemon("1s", "");
    let mut client = daemon.client();
    let define = format!("{PY_DEFINE}{extra_define}");
    let first = eval(
        &mut client,
        json!({"session": "py-s", "virtual_env": venv, "cells": [{"language": "py", "code": define}]}),
    );
    assert_eq!(first["is_error"], false, "{first:#}");
    wait_evicted(&daemon, "py-s");
    let code = format!("{PY_USE}\n{extra_use}");
    let next = eval(
        &mut client,
        json!({"session": "py-s", "virtual_env": venv, "cells": [{"language": "py", "code": code}]}),
    );
    let next = cell(&next, 0);
    assert_eq!(next["output"], format!("{PY_USED}{extra_out}"), "{next:#}");
    let names = restored(next);
    for name in ["x", "items", "clean", "Box", "box", "square", "j (module)"] {
        assert!(names.contains(&name.to_string()), "{name} not in {names:?}");
    }
    let skipped = skipped(next);
    let why = |name: &str| {
        skipped
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.clone())
            .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
    };
    assert!(why("conn").contains("socket"), "{skipped:?}");
    assert!(why("gen").contains("generator"), "{skipped:?}");
    assert_eq!(next["state"]["from"]["reason"], "idle eviction", "{next:#}");
    assert!(
        next["notice"]
            .as_str()
            .is_some_and(|n| n.contains("state restored")),
        "{next:#}"
    );
    daemon.stop();
}

#[test]
fn python_state_with_numpy_pandas_and_cloudpickle_survives_idle_eviction() {
    python_survives_idle_eviction(
        &common::test_venv(&["numpy", "pandas", "cloudpickle"]),
        "import numpy as np\nimport pandas as pd\narr = np.arange(10)\ndf = pd.DataFrame({'a': [1, 2, 3]})\n",
        "print(int(arr.sum()), int(df.a.sum()), np.__name__, pd.__name__)",
        "45 6 numpy pandas\n",
    );
}

#[test]
fn python_functions_and_classes_survive_by_source_without_cloudpickle() {
    let world = World::new();
    let venv = bare_venv(&world);
    python_survives_idle_eviction(&venv, "", "", "");
    drop(world);
}

#[test]
fn javascript_and_lua_state_survives_idle_eviction() {
    let daemon = daemon("1s", "");
    let mut client = daemon.client();
    let js = run(
        &mut client,
        "s",
        "js",
        "var x = 41; var when = new Date(0); var m = new Map([[1, 'a']]); var s = new Set([2]);\n\
         var a = {n: 1}; a.self = a; var shared = [1]; var pair = {p: shared, q: shared};\n\
         function clean(v) { return v * 2 }\nclass Box { constructor(v) { this.v = v } }\n\
         var pending = new Promise(() => {});",
    );
    assert_eq!(js["status"], "complete", "{js:#}");
    let lua = run(
        &mut client,
        "s",
        "lua",
        "x = 41\nt = {1, 2}\nt.self = t\nsparse = {[1] = 1, [1000000] = 2}\n\
         function clean(v) return v * 2 end\nco = coroutine.create(function() end)",
    );
    assert_eq!(lua["status"], "complete", "{lua:#}");
    wait_evicted(&daemon, "s");
    let js = run(
        &mut client,
        "s",
        "js",
        "console.log(x + 1, when.getTime(), m.get(1), s.has(2), a.self === a, pair.p === pair.q, clean(3), new Box(5).v)",
    );
    assert_eq!(js["output"], "42 0 a true true true 6 5\n", "{js:#}");
    assert!(
        skipped(&js)
            .iter()
            .any(|(n, why)| n == "pending" && why.contains("Promise")),
        "{js:#}"
    );
    let lua = run(
        &mut client,
        "s",
        "lua",
        "print(x + 1, #t, t.self == t, math.type(next(sparse)), sparse[1000000], clean(3))",
    );
    assert_eq!(lua["output"], "42\t2\ttrue\tinteger\t2\t6\n", "{lua:#}");
    assert!(skipped(&lua).iter().any(|(n, _)| n == "co"), "{lua:#}");
    for result in [&js, &lua] {
        assert_eq!(
            result["state"]["from"]["reason"], "idle eviction",
            "{result:#}"
        );
    }
    daemon.stop();
}

#[test]
fn a_stopped_daemon_s_sessions_find_their_state_in_the_next_daemon() {
    let daemon = daemon("0s", "");
    let mut client = daemon.client();
    run(&mut client, "s", "py", "x = 41");
    run(&mut client, "s", "js", "var x = 41");
    run(&mut client, "s", "lua", "x = 41");
    let world = daemon.stop_keep_world();
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    for (language, code) in [
        ("py", "print(x + 1)"),
        ("js", "console.log(x + 1)"),
        ("lua", "print(x + 1)"),
    ] {
        let result = run(&mut client, "s", language, code);
        assert_eq!(result["output"], "42\n", "{language}: {result:#}");
        assert_eq!(
            result["state"]["from"]["reason"], "daemon stop",
            "{result:#}"
        );
    }
    daemon.stop();
}

#[test]
fn every_cell_keeps_the_state_of_the_last_good_cell_through_a_sigkill() {
    let daemon = daemon("0s", "[snapshots]\nwhen = \"every-cell\"\n");
    let mut client = daemon.client();
    run(&mut client, "s", "py", "x = 1");
    // The save after the cell runs once its result is out; the next cell waits for it.
    daemon.wait_for_state("s", "idle");
    assert!(snapshot_file(&daemon.world, "s", "py").exists());
    let mut killer = daemon.client();
    client.send(
        "eval",
        json!({"session": "s", "cells": [{"language": "py", "code": "x = 2\nprint('x set', flush=True)\nimport time\ntime.sleep(60)"}]}),
    );
    // `x = 2` has run once its line after it is streamed.
    loop {
        let message = client.read().expect("the cell's events");
        assert!(message.get("id").is_none(), "answered early: {message:#}");
        if message["params"]["event"] == "output" && message["params"]["text"] == "x set\n" {
            break;
        }
    }
    let rows = killer.call("status", json!({})).expect("status");
    let pid = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["session"] == "s"))
        .and_then(|r| r["pid"].as_u64())
        .expect("a worker pid");
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let lost = loop {
        let message = client.read().expect("the killed cell is answered");
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(lost["result"]["cells"][0]["status"], "error", "{lost:#}");
    let next = run(&mut killer, "s", "py", "print(x)");
    assert_eq!(
        next["output"], "1\n",
        "the killed cell's effect is not restored: {next:#}"
    );
    assert_eq!(next["state"]["from"]["reason"], "after cell", "{next:#}");
    assert_eq!(next["state"]["from"]["cells_since"], 1, "{next:#}");
    daemon.stop();
}

#[test]
fn a_snapshot_over_max_size_is_not_written_and_the_notice_says_so() {
    let daemon = daemon("1s", "[snapshots]\nmax-size = \"4KiB\"\n");
    let mut client = daemon.client();
    run(&mut client, "big", "py", "big = 'x' * 100000");
    wait_evicted(&daemon, "big");
    assert!(!snapshot_file(&daemon.world, "big", "py").exists());
    let next = run(&mut client, "big", "py", "print('big' in globals())");
    assert_eq!(next["output"], "False\n");
    let notice = next["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("was not saved") && notice.contains("max-size"),
        "{next:#}"
    );
    daemon.stop();
}

#[test]
fn a_tampered_snapshot_or_another_session_s_is_refused_and_nothing_of_it_runs() {
    let daemon = daemon("1s", "");
    let mut client = daemon.client();
    run(&mut client, "a", "py", "x = 41\nflag = 'restored'");
    run(&mut client, "c", "py", "x = 41");
    wait_evicted(&daemon, "a");
    wait_evicted(&daemon, "c");
    let file = snapshot_file(&daemon.world, "a", "py");
    let mut bytes = std::fs::read(&file).expect("a's snapshot");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&file, &bytes).expect("tamper");
    let next = run(&mut client, "a", "py", "print('x' in globals())");
    assert_eq!(next["output"], "False\n", "{next:#}");
    let notice = next["notice"].as_str().unwrap_or_default();
    assert!(notice.contains("integrity check"), "{next:#}");
    // Session b given c's (untouched) snapshot: made under c's key, refused under b's.
    let theirs = snapshot_file(&daemon.world, "b", "py");
    std::fs::create_dir_all(theirs.parent().expect("dir")).expect("b's dir");
    std::fs::copy(snapshot_file(&daemon.world, "c", "py"), &theirs).expect("copy");
    let stolen = run(&mut client, "b", "py", "print('x' in globals())");
    assert_eq!(stolen["output"], "False\n", "{stolen:#}");
    assert!(
        stolen["notice"]
            .as_str()
            .unwrap_or_default()
            .contains("integrity check"),
        "{stolen:#}"
    );
    // c's own is still good.
    assert_eq!(
        run(&mut client, "c", "py", "print(x + 1)")["output"],
        "42\n"
    );
    daemon.stop();
}

#[test]
fn close_and_reset_forget_and_the_sweep_prunes_expired_snapshots() {
    let daemon = daemon("1s", "");
    let mut client = daemon.client();
    run(&mut client, "s", "lua", "x = 1");
    wait_evicted(&daemon, "s");
    let file = snapshot_file(&daemon.world, "s", "lua");
    assert!(file.exists());
    client
        .call("close", json!({"session": "s"}))
        .expect("close");
    assert!(!file.exists(), "close forgets");
    run(&mut client, "s", "lua", "x = 1");
    wait_evicted(&daemon, "s");
    assert!(file.exists());
    client
        .call("reset", json!({"session": "s"}))
        .expect("reset");
    assert!(!file.exists(), "reset forgets");
    assert_eq!(run(&mut client, "s", "lua", "print(x)")["output"], "nil\n");
    daemon.stop();

    let daemon = daemon_with_ttl();
    let mut client = daemon.client();
    run(&mut client, "t", "js", "var x = 1");
    wait_evicted(&daemon, "t");
    let file = snapshot_file(&daemon.world, "t", "js");
    let pruned = wait_until(Duration::from_secs(20), || {
        (!file.exists()).then_some(()).ok_or(())
    });
    assert!(pruned.is_ok(), "the expired snapshot was never pruned");
    daemon.stop();
}

fn daemon_with_ttl() -> Daemon {
    daemon("1s", "[snapshots]\nttl = \"2s\"\n")
}

#[test]
fn a_sandboxed_session_restores_its_own_snapshot_and_cannot_read_another_s() {
    let daemon = daemon("1s", "[sandbox]\nenabled = true\n");
    let mut client = daemon.client();
    run(&mut client, "mine", "py", "x = 41");
    run(&mut client, "theirs", "py", "secret = 'THEIRS'");
    wait_evicted(&daemon, "mine");
    wait_evicted(&daemon, "theirs");
    let next = run(&mut client, "mine", "py", "print(x + 1)");
    assert_eq!(next["output"], "42\n", "{next:#}");
    let theirs = snapshot_file(&daemon.world, "theirs", "py");
    let code = format!(
        "try:\n    open({:?}, 'rb').read()\n    print('read')\nexcept PermissionError:\n    print('refused')",
        path_str(&theirs)
    );
    assert_eq!(run(&mut client, "mine", "py", &code)["output"], "refused\n");
    daemon.stop();
}

#[test]
fn checkpoint_then_break_then_restore_gives_the_checkpointed_state_in_every_language() {
    let daemon = daemon("0s", "");
    let mut client = daemon.client();
    let cases = [
        (
            "py",
            "x = 41\ndef f(v):\n    return v + 1",
            "x = 'broken'\ndel f",
            "print(f(x))",
        ),
        (
            "js",
            "var x = 41; function f(v) { return v + 1 }",
            "x = 'broken'; f = null",
            "console.log(f(x))",
        ),
        (
            "lua",
            "x = 41\nfunction f(v) return v + 1 end",
            "x = 'broken'\nf = nil",
            "print(f(x))",
        ),
    ];
    for (language, define, breaks, uses) in cases {
        run(&mut client, "s", language, define);
        let saved = client
            .call(
                "checkpoint",
                json!({"session": "s", "language": language, "name": "before"}),
            )
            .expect("checkpoint answered");
        assert_eq!(saved[0]["name"], "before", "{saved:#}");
        assert!(
            saved[0]["bytes"].as_u64().is_some_and(|b| b > 0),
            "{saved:#}"
        );
        run(&mut client, "s", language, breaks);
        let restored = client
            .call(
                "restore",
                json!({"session": "s", "language": language, "name": "before"}),
            )
            .expect("restore answered");
        let ledger = &restored[0]["ledger"];
        assert_eq!(ledger["from"]["checkpoint"], "before", "{restored:#}");
        assert!(
            ledger["restored"].to_string().contains("\"x\""),
            "{restored:#}"
        );
        assert_eq!(
            run(&mut client, "s", language, uses)["output"],
            "42\n",
            "{language}"
        );
    }
    let listed = client
        .call("checkpoints", json!({"session": "s"}))
        .expect("checkpoints");
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed:#}");
    let names = client
        .call("names", json!({"session": "s", "language": "py"}))
        .expect("names");
    let x = names["names"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == "x"))
        .unwrap_or_else(|| panic!("x listed: {names:#}"));
    assert_eq!(
        (x["kind"].as_str(), x["saveable"].as_bool()),
        (Some("int"), Some(true))
    );
    // Bad names and unknown checkpoints are refused, saying what is allowed.
    let bad = client
        .call("checkpoint", json!({"session": "s", "name": "../escape"}))
        .expect_err("a path is no checkpoint name");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("A-Z a-z 0-9"),
        "{bad:#}"
    );
    let unknown = client
        .call("restore", json!({"session": "s", "name": "never"}))
        .expect_err("no such checkpoint");
    assert!(
        unknown["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no checkpoint"),
        "{unknown:#}"
    );
    // Another session has none of them.
    let other = client
        .call("restore", json!({"session": "other", "name": "before"}))
        .expect_err("checkpoints are per session");
    assert!(
        other["message"]
            .as_str()
            .unwrap_or_default()
            .contains("other"),
        "{other:#}"
    );
    daemon.stop();
}

#[test]
fn the_cli_checkpoints_restores_and_lists() {
    let daemon = daemon("0s", "");
    let socket = path_str(&daemon.socket).to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["--socket", socket.as_str()];
        all.extend_from_slice(args);
        daemon.world.run(&all)
    };
    cli(&["eval", "-s", "c", "x = 41"]).assert_code(0);
    let saved = cli(&["checkpoint", "good", "-s", "c", "-l", "py"]);
    saved.assert_code(0);
    assert!(
        saved.stdout.contains("saved checkpoint \"good\""),
        "{}",
        saved.stdout
    );
    cli(&["eval", "-s", "c", "x = 0"]).assert_code(0);
    let restored = cli(&["restore", "good", "-s", "c"]);
    restored.assert_code(0);
    assert!(
        restored.stdout.contains("restored x"),
        "{}",
        restored.stdout
    );
    assert_eq!(cli(&["eval", "-s", "c", "print(x + 1)"]).stdout, "42\n");
    let listed = cli(&["checkpoints", "-s", "c"]);
    assert!(listed.stdout.contains("good"), "{}", listed.stdout);
    let names = cli(&["names", "-s", "c", "-l", "py"]);
    assert!(
        names.stdout.contains("x") && names.stdout.contains("int"),
        "{}",
        names.stdout
    );
    cli(&["restore", "missing", "-s", "c"]).assert_code(1);
    daemon.stop();
}
