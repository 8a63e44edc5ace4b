//! Background cells end to end through the daemon, with real workers: a cell returns
//! `running` when its `yield_time_ms` passes or it calls `yield_control()`, goes on, and is
//! collected with `wait` or stopped with `terminate`; through the CLI as well.

mod common;

use common::daemon::{cell, Client, Daemon};
use common::wait_until;
use serde_json::{json, Value};
use std::time::Duration;

fn wait(client: &mut Client, session: &str, cell_id: &Value, yield_ms: u64) -> Value {
    client
        .call(
            "wait",
            json!({"session": session, "cell_id": cell_id, "yield_time_ms": yield_ms}),
        )
        .expect("wait answered")
}

/// Waits until the cell ends, gathering what each wait returned: (all output, final cell).
fn collect(client: &mut Client, session: &str, cell_id: &Value) -> (String, Value) {
    let mut text = String::new();
    for _ in 0..30 {
        let answer = wait(client, session, cell_id, 2000);
        text.push_str(answer["output"].as_str().unwrap_or_default());
        if answer["status"] != "running" {
            return (text, answer);
        }
    }
    panic!("cell {cell_id} never ended; output so far: {text:?}");
}

/// Prints `a`, sleeps about a second, prints `b`, in each language.
const A_SLEEP_B: [(&str, &str); 3] = [
    (
        "py",
        "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')",
    ),
    (
        "js",
        "text('a'); await new Promise((resolve) => setTimeout(resolve, 1000)); text('b')",
    ),
    (
        "lua",
        "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 1 do end\nprint('b')",
    ),
];

#[test]
fn yield_time_returns_running_with_the_output_so_far_and_wait_collects_the_rest() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for (language, code) in A_SLEEP_B {
        let session = format!("yield-{language}");
        let started = std::time::Instant::now();
        let yielded = client.eval(
            &session,
            json!([{"language": language, "code": code, "yield_time_ms": 300},
                   {"language": language, "code": "print('later cell')"}]),
        );
        let first = cell(&yielded, 0);
        assert_eq!(first["status"], "running", "{language}: {yielded:#}");
        assert_eq!(first["output"], "a\n", "{language}: {yielded:#}");
        assert_eq!(yielded["is_error"], false, "{language}: {yielded:#}");
        eprintln!("{language}: running after {:?}", started.elapsed());
        // The request returned at the yield; its later cell is skipped, naming the cell.
        let id = first["cell_id"].clone();
        let later = cell(&yielded, 1);
        assert_eq!(later["status"], "skipped", "{language}: {yielded:#}");
        let why = later["output"].as_str().unwrap_or_default();
        assert!(why.contains(&format!("cell {id} ")), "{language}: {why}");
        assert_ne!(later["cell_id"], id, "every cell has its own id");

        // The session is busy with it meanwhile.
        let row = status_row(&mut client, &session);
        assert_eq!(row["state"], "busy", "{language}: {row:#}");
        assert_eq!(row["cell_id"], id, "{language}: {row:#}");
        assert_eq!(row["background"], true, "{language}: {row:#}");

        let (rest, last) = collect(&mut client, &session, &id);
        assert_eq!(rest, "b\n", "{language}: {last:#}");
        assert_eq!(last["status"], "complete", "{language}: {last:#}");
        assert_eq!(last["cell_id"], id, "{language}: {last:#}");
        // Collected once: then the id is unknown.
        let again = client
            .call("wait", json!({"session": session, "cell_id": id}))
            .expect_err("a collected cell is gone");
        assert!(
            again["message"]
                .as_str()
                .is_some_and(|m| m.contains("no background cell")),
            "{again:#}"
        );
    }
    daemon.stop();
}

#[test]
fn yield_control_returns_the_output_so_far_and_the_cell_goes_on() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    // The second yield finds nobody (or a wait) looking: what came before it is kept either way.
    let cases = [
        (
            "py",
            "import time\nprint('before')\nyield_control()\nprint('middle')\nyield_control()\ntime.sleep(0.5)\nprint('after')",
        ),
        (
            "js",
            "text('before'); yield_control(); text('middle'); yield_control(); \
             await new Promise((r) => setTimeout(r, 500)); text('after')",
        ),
        (
            "lua",
            "print('before')\nyield_control()\nprint('middle')\nyield_control()\nlocal t = os.clock()\nwhile os.clock() - t < 0.5 do end\nprint('after')",
        ),
    ];
    for (language, code) in cases {
        let session = format!("control-{language}");
        let yielded = client.eval(&session, json!([{"language": language, "code": code}]));
        let first = cell(&yielded, 0);
        assert_eq!(first["status"], "running", "{language}: {yielded:#}");
        assert_eq!(first["output"], "before\n", "{language}: {yielded:#}");
        let (rest, last) = collect(&mut client, &session, &first["cell_id"]);
        assert_eq!(rest, "middle\nafter\n", "{language}: {last:#}");
        assert_eq!(last["status"], "complete", "{language}: {last:#}");
    }
    daemon.stop();
}

#[test]
fn one_observer_at_a_time_and_only_from_the_cells_own_session() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval(
        "owner",
        json!([{"language": "py", "yield_time_ms": 200,
                "code": "import time\nprint('go')\ntime.sleep(3)\nprint('done')"}]),
    );
    let id = cell(&yielded, 0)["cell_id"].clone();
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");

    // Another session cannot see it.
    let foreign = client
        .call("wait", json!({"session": "intruder", "cell_id": id}))
        .expect_err("another session's cell");
    assert!(
        foreign["message"]
            .as_str()
            .is_some_and(|m| m.contains("session intruder has no background cell")),
        "{foreign:#}"
    );
    let foreign = client
        .call("terminate", json!({"session": "intruder", "cell_id": id}))
        .expect_err("another session's cell");
    assert!(foreign["message"].is_string(), "{foreign:#}");

    // A long wait on one connection; a second wait meanwhile is refused.
    let mut first = daemon.client();
    let first_id = first.send(
        "wait",
        json!({"session": "owner", "cell_id": id, "yield_time_ms": 10_000}),
    );
    let watched = wait_until(Duration::from_secs(20), || {
        let row = status_row(&mut client, "owner");
        (row["observed"] == true).then_some(()).ok_or(row)
    });
    assert!(watched.is_ok(), "the first wait watches: {watched:?}");
    let refused = client
        .call(
            "wait",
            json!({"session": "owner", "cell_id": id, "yield_time_ms": 0}),
        )
        .expect_err("a second concurrent wait is refused");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("already being waited on")),
        "{refused:#}"
    );
    // The first wait gets the final result when the cell ends.
    let answer = loop {
        let message = first.read().expect("connection open");
        if message["id"] == json!(first_id) {
            break message;
        }
    };
    assert_eq!(answer["result"]["status"], "complete", "{answer:#}");
    assert!(
        answer["result"]["output"]
            .as_str()
            .is_some_and(|o| o.ends_with("done\n")),
        "{answer:#}"
    );
    daemon.stop();
}

#[test]
fn a_wait_whose_client_left_does_not_block_the_next_one() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval(
        "left",
        json!([{"language": "py", "yield_time_ms": 200,
                "code": "import time\nprint('go')\ntime.sleep(30)"}]),
    );
    let id = cell(&yielded, 0)["cell_id"].clone();
    let mut leaving = daemon.client();
    leaving.send(
        "wait",
        json!({"session": "left", "cell_id": id, "yield_time_ms": 60_000}),
    );
    let watched = wait_until(Duration::from_secs(20), || {
        let row = status_row(&mut client, "left");
        (row["observed"] == true).then_some(()).ok_or(row)
    });
    assert!(watched.is_ok(), "the first wait watches: {watched:?}");
    drop(leaving);
    // Well before the first wait's minute is up, another wait is let in.
    let answer = wait_until(Duration::from_secs(20), || {
        client.call(
            "wait",
            json!({"session": "left", "cell_id": id, "yield_time_ms": 0}),
        )
    })
    .expect("a wait after the first one's client left");
    assert_eq!(answer["status"], "running", "{answer:#}");
    let ended = client
        .call("terminate", json!({"session": "left", "cell_id": id}))
        .expect("terminate answered");
    assert_eq!(ended["status"], "cancelled", "{ended:#}");
    daemon.stop();
}

#[test]
fn terminate_stops_a_background_busy_loop_and_the_session_state_survives() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let set = client.eval("term", json!([{"language": "py", "code": "x = 41"}]));
    assert_eq!(cell(&set, 0)["status"], "complete", "{set:#}");
    let yielded = client.eval("term",
        json!([{"language": "py", "yield_time_ms": 300,
                "code": "import subprocess\nsubprocess.Popen(['sleep', '977'])\nprint('spinning', flush=True)\nwhile True:\n    pass"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    let id = cell(&yielded, 0)["cell_id"].clone();
    assert!(
        !daemon.world.processes_running("sleep\u{0}977").is_empty(),
        "the cell's child runs"
    );
    // A cell queued behind the background one waits for it.
    let mut queued = daemon.client();
    let queued_id = queued.send(
        "eval",
        json!({"session": "term", "cells": [{"language": "py", "code": "print(x + 1)"}]}),
    );
    let ended = client
        .call("terminate", json!({"session": "term", "cell_id": id}))
        .expect("terminate answered");
    assert_eq!(ended["status"], "cancelled", "{ended:#}");
    let next = loop {
        let message = queued.read().expect("connection open");
        if message["id"] == json!(queued_id) {
            break message;
        }
    };
    assert_eq!(next["result"]["cells"][0]["output"], "42\n", "{next:#}");
    let left = wait_until(Duration::from_secs(10), || {
        let left = daemon.world.processes_running("sleep\u{0}977");
        left.is_empty().then_some(()).ok_or(left)
    });
    assert!(
        left.is_ok(),
        "the terminated cell's process is gone: {left:?}"
    );
    daemon.stop();
}

#[test]
fn a_terminated_js_cell_takes_its_pending_timers_with_it() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval("timers",
        json!([{"language": "js",
                "code": "// @exec: {\"yield_time_ms\": 200}\nsetTimeout(() => text('stray'), 1500); setInterval(() => {}, 20); text('waiting')"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    assert_eq!(cell(&yielded, 0)["output"], "waiting\n", "{yielded:#}");
    let id = cell(&yielded, 0)["cell_id"].clone();
    let ended = client
        .call("terminate", json!({"session": "timers", "cell_id": id}))
        .expect("terminate answered");
    assert_eq!(ended["status"], "cancelled", "{ended:#}");
    let next = client.eval(
        "timers",
        json!([{"language": "js",
                "code": "await new Promise((resolve) => setTimeout(resolve, 2000)); 'clean'"}]),
    );
    assert_eq!(cell(&next, 0)["output"], "clean\n", "{next:#}");
    daemon.stop();
}

/// Also the window at a `yield_control()`: however late the daemon cuts there (on a loaded
/// machine the cell may have printed all its 5,000 later lines by then), the eval's answer
/// holds the output up to the yield exactly, and the rest comes with the waits.
#[test]
fn a_terminated_background_cell_leaves_no_file_but_the_artifacts_it_reported() {
    let daemon = Daemon::start_with("[output]\nmax-bytes = \"1KiB\"\n");
    let mut client = daemon.client();
    // Each window spills: the one up to the yield, and the ones `wait` returns.
    let yielded = client.eval("files",
        json!([{"language": "py", "timeout": 300,
                "code": "for i in range(200):\n    print('line', i)\nyield_control()\nfor i in range(5000):\n    print('more', i)\nprint('done', flush=True)\nwhile True:\n    pass"}]),
    );
    let mut answers = vec![cell(&yielded, 0).clone()];
    assert_eq!(answers[0]["status"], "running", "{yielded:#}");
    // 200 lines of `line <i>`, 1,690 bytes: spilled, and not one byte from after the yield.
    let at_yield = &answers[0]["truncation"];
    assert_eq!(
        (&at_yield["total_lines"], &at_yield["total_bytes"]),
        (&json!(200), &json!(1690)),
        "{yielded:#}"
    );
    let id = answers[0]["cell_id"].clone();
    // `print` writes the word and its newline apart, so a window may end between them, and
    // a window over 1 KiB shows only its head and tail: look for the word across every
    // window so far, spilled parts included.
    let mut seen = String::new();
    while !seen.contains("done") {
        let answer = wait(&mut client, "files", &id, 500);
        assert_eq!(answer["status"], "running", "{answer:#}");
        seen.push_str(answer["output"].as_str().unwrap_or_default());
        if let Some(spilled) = answer["truncation"]["artifact_path"].as_str() {
            seen.push_str(&std::fs::read_to_string(spilled).unwrap_or_default());
        }
        answers.push(answer);
    }
    let ended = client
        .call("terminate", json!({"session": "files", "cell_id": id}))
        .expect("terminate answered");
    assert_eq!(ended["status"], "cancelled", "{ended:#}");
    answers.push(ended);
    let mut reported: Vec<std::path::PathBuf> = answers
        .iter()
        .filter_map(|c| c["truncation"]["artifact_path"].as_str())
        .map(std::path::PathBuf::from)
        .collect();
    assert!(reported.len() >= 2, "the windows spilled: {answers:#?}");
    let dir = reported[0].parent().expect("artifact dir").to_path_buf();
    let mut present: Vec<_> = std::fs::read_dir(&dir)
        .expect("artifact dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    present.sort();
    reported.sort();
    assert_eq!(present, reported, "no other file in {}", dir.display());
    daemon.stop();
}

#[test]
fn the_cli_prints_the_cell_id_then_waits_and_terminates() {
    let daemon = Daemon::start();
    let socket = daemon.socket.to_string_lossy().into_owned();
    let cli = |args: &[&str]| {
        let mut all = vec!["--socket", &socket];
        all.extend_from_slice(args);
        daemon.world.run(&all)
    };
    let yielded = cli(&[
        "eval",
        "-l",
        "py",
        "-s",
        "cli",
        "--yield-time-ms",
        "300",
        "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b')",
    ]);
    yielded.assert_code(0);
    assert_eq!(yielded.stdout, "a\n", "{}", yielded.stderr);
    let id = yielded
        .stderr
        .split_whitespace()
        .skip_while(|w| *w != "cell")
        .nth(1)
        .expect("the cell id is printed")
        .to_string();
    assert!(
        yielded.stderr.contains("still running"),
        "{}",
        yielded.stderr
    );
    assert!(
        yielded
            .stderr
            .contains(&format!("cellvisor wait {id} --session cli")),
        "{}",
        yielded.stderr
    );
    let mut rest = String::new();
    for _ in 0..10 {
        let waited = cli(&["wait", &id, "--session", "cli", "--yield-time-ms", "2000"]);
        waited.assert_code(0);
        rest.push_str(&waited.stdout);
        if !waited.stderr.contains("still running") {
            break;
        }
    }
    assert_eq!(rest, "b\n");

    let spinning = cli(&[
        "eval",
        "-l",
        "js",
        "-s",
        "cli",
        "--yield-time-ms",
        "200",
        "text('spin'); while (true) {}",
    ]);
    spinning.assert_code(0);
    let id = spinning
        .stderr
        .split_whitespace()
        .skip_while(|w| *w != "cell")
        .nth(1)
        .expect("the cell id is printed")
        .to_string();
    let terminated = cli(&["terminate", &id, "--session", "cli", "--json"]);
    terminated.assert_code(1);
    assert_eq!(
        terminated.json()["status"],
        "cancelled",
        "{}",
        terminated.stderr
    );
    let unknown = cli(&["wait", &id, "--session", "cli"]);
    unknown.assert_code(2);
    assert!(
        unknown.stderr.contains("no background cell"),
        "{}",
        unknown.stderr
    );
    daemon.stop();
}

#[test]
fn max_tokens_cuts_what_a_wait_returns_with_head_and_tail() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval("cap",
        json!([{"language": "py",
                "code": "yield_control()\nfor i in range(100):\n    print('row', i)\nprint('end', flush=True)\nimport time\ntime.sleep(30)"}]),
    );
    let id = cell(&yielded, 0)["cell_id"].clone();
    // However the rows fall into windows, each window over 40 bytes comes back cut.
    let mut cut = 0;
    for _ in 0..20 {
        let answer = client
            .call(
                "wait",
                json!({"session": "cap", "cell_id": id, "yield_time_ms": 500, "max_tokens": 10}),
            )
            .expect("wait answered");
        if answer["truncation"]["total_bytes"].as_u64().unwrap_or(0) > 40 {
            let text = answer["output"].as_str().unwrap_or_default();
            assert!(text.contains("bytes omitted"), "{answer:#}");
            assert_eq!(answer["truncation"]["truncated"], true, "{answer:#}");
            cut += 1;
        }
        if answer["output"]
            .as_str()
            .is_some_and(|o| o.ends_with("end\n"))
        {
            break;
        }
    }
    assert!(cut > 0, "some window was cut");
    let refused = client
        .call(
            "wait",
            json!({"session": "cap", "cell_id": id, "max_tokens": 0}),
        )
        .expect_err("max_tokens 0");
    assert_eq!(
        refused["message"], "max_tokens must be at least 1",
        "{refused:#}"
    );
    let ended = client
        .call("terminate", json!({"session": "cap", "cell_id": id}))
        .expect("terminate answered");
    assert_eq!(ended["status"], "cancelled", "{ended:#}");
    daemon.stop();
}

#[test]
fn cells_whose_workers_end_with_the_request_run_to_their_end() {
    let code = "import time\nprint('a', flush=True)\ntime.sleep(0.6)\nyield_control()\nprint('b')";
    // A fresh request's workers are discarded with it: no background.
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let fresh = client
        .call(
            "eval",
            json!({"session": "f", "fresh": true,
                   "cells": [{"language": "py", "code": code, "yield_time_ms": 100}]}),
        )
        .expect("eval answered");
    assert_eq!(cell(&fresh, 0)["status"], "complete", "{fresh:#}");
    assert_eq!(cell(&fresh, 0)["output"], "a\nb\n", "{fresh:#}");
    let world = daemon.stop_keep_world();
    // `eval --no-daemon` waits a background cell out before its supervisor goes.
    let run = world.run_cells(&json!([{"language": "py", "code": code, "yield_time_ms": 100}]));
    run.assert_code(0);
    let result = run.json();
    assert_eq!(cell(&result, 0)["status"], "complete", "{result:#}");
    assert_eq!(cell(&result, 0)["output"], "a\nb\n", "{result:#}");
    world.assert_no_processes_left(Duration::from_secs(5));
}

fn status_row(client: &mut Client, session: &str) -> Value {
    let rows = client.call("status", json!({})).expect("status answered");
    rows.as_array()
        .and_then(|rows| rows.iter().find(|r| r["session"] == session).cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn a_cell_id_from_before_a_daemon_restart_is_not_found_and_never_reaches_a_newer_cell() {
    let first = Daemon::start();
    let mut client = first.client();
    let yielded = client.eval(
        "restart",
        json!([{"language": "lua", "yield_time_ms": 100,
                "code": "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 30 do end"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    let old = cell(&yielded, 0)["cell_id"].as_u64().expect("a cell id");
    first.stop();

    let second = Daemon::start();
    let mut client = second.client();
    let refused = client
        .call("wait", json!({"session": "restart", "cell_id": old}))
        .expect_err("the old id is gone");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("has no background cell"), "{message}");
    let fresh = client.eval("restart", json!([{"language": "lua", "code": "1"}]));
    let new = cell(&fresh, 0)["cell_id"].as_u64().expect("a cell id");
    assert!(
        new > old,
        "a newer cell {new} must not reuse the id space of {old}"
    );
    second.stop();
}

/// Asserts that `wait` and `terminate` on `id` in `session` answer "not found" at once.
fn assert_not_found(client: &mut Client, session: &str, id: &Value) {
    for method in ["wait", "terminate"] {
        let started = std::time::Instant::now();
        let refused = client
            .call(method, json!({"session": session, "cell_id": id}))
            .expect_err("an id from before the reset is not found");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("session {session} has no background cell {id}")),
            "{method}: {refused:#}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{method} answered at once, not after {:?}",
            started.elapsed()
        );
    }
}

/// After a reset (issue 28, item 14) a background cell id from before it is "not found" at
/// once: a running cell's id as soon as the reset answers (never its cancelled result), and
/// an ended cell's uncollected result is gone with the state.
#[test]
fn a_cell_id_from_before_a_reset_is_not_found_at_once() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval(
        "wiped",
        json!([{"language": "py", "yield_time_ms": 200,
                "code": "import time\nprint('a', flush=True)\ntime.sleep(30)"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    let running = cell(&yielded, 0)["cell_id"].clone();
    let reset = client
        .call("reset", json!({"session": "wiped"}))
        .expect("reset answered");
    assert_eq!(reset["sessions"], 1, "{reset:#}");
    assert_not_found(&mut client, "wiped", &running);

    // A cell that ended while nobody waited keeps its result for a `wait`, until a reset.
    let yielded = client.eval(
        "wiped",
        json!([{"language": "lua", "yield_time_ms": 100,
                "code": "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 0.5 do end"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    let ended = cell(&yielded, 0)["cell_id"].clone();
    let idle = wait_until(Duration::from_secs(20), || {
        let rows = client.call("status", json!({})).expect("status answered");
        let lua = rows.as_array().and_then(|rows| {
            rows.iter()
                .find(|r| r["session"] == "wiped" && r["language"] == "lua")
                .cloned()
        });
        lua.filter(|row| row["state"] == "idle")
            .map(|_| ())
            .ok_or(rows)
    });
    assert!(idle.is_ok(), "the lua cell ended: {idle:?}");
    client
        .call("reset", json!({"session": "wiped", "language": "lua"}))
        .expect("reset answered");
    assert_not_found(&mut client, "wiped", &ended);

    // The same through a request's `reset` (and a cell's own): the reset of the cell's
    // language forgets it.
    let yielded = client.eval(
        "wiped",
        json!([{"language": "js", "yield_time_ms": 100,
                "code": "text('a'); await new Promise((resolve) => setTimeout(resolve, 300))"}]),
    );
    let js = cell(&yielded, 0)["cell_id"].clone();
    let after = client
        .call(
            "eval",
            json!({"session": "wiped", "reset": true,
                   "cells": [{"language": "js", "code": "typeof globalThis.nothing"}]}),
        )
        .expect("a request-level reset is accepted");
    assert_eq!(cell(&after, 0)["status"], "complete", "{after:#}");
    assert_not_found(&mut client, "wiped", &js);

    // The session works on, on fresh workers.
    let fresh = client.eval("wiped", json!([{"language": "py", "code": "print(6*7)"}]));
    assert_eq!(cell(&fresh, 0)["output"], "42\n", "{fresh:#}");
    daemon.stop();
}

/// Issue 28 item 13: past `cells.max-uncollected` results the oldest is dropped, and the
/// next `wait` for it says so (which cap, the key to raise) instead of "no background cell".
#[test]
fn a_dropped_uncollected_result_is_named_by_the_next_wait() {
    let daemon = Daemon::start_with("[cells]\nmax-uncollected = 2\n");
    let mut client = daemon.client();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let yielded = client.eval(
            "capped",
            json!([{"language": "lua", "yield_time_ms": 50,
                    "code": "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 0.3 do end\nprint('b')"}]),
        );
        assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
        ids.push(cell(&yielded, 0)["cell_id"].clone());
        let idle = wait_until(Duration::from_secs(20), || {
            let row = status_row(&mut client, "capped");
            (row["state"] == "idle").then_some(()).ok_or(row)
        });
        assert!(idle.is_ok(), "the cell ended: {idle:?}");
    }
    let dropped = client
        .call("wait", json!({"session": "capped", "cell_id": ids[0]}))
        .expect_err("the oldest result was dropped");
    let message = dropped["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "the result of background cell {} was dropped uncollected",
            ids[0]
        )),
        "{dropped:#}"
    );
    assert!(message.contains("at most 2 results"), "{message}");
    assert!(message.contains("raise cells.max-uncollected"), "{message}");
    // Said once; after that the id is unknown like any collected one.
    assert_not_found(&mut client, "capped", &ids[0]);
    for id in &ids[1..] {
        let kept = wait(&mut client, "capped", id, 1000);
        assert_eq!(kept["status"], "complete", "{kept:#}");
        assert_eq!(kept["output"], "b\n", "{kept:#}");
    }
    daemon.stop();
}

/// Issue 27 item 7: a client waiting on a background cell when the daemon stops is told that
/// the daemon stopped, not that the session was reset or closed.
#[test]
fn a_wait_cut_short_by_a_daemon_stop_says_the_daemon_stopped() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let yielded = client.eval(
        "stopping",
        json!([{"language": "py", "yield_time_ms": 200,
                "code": "import time\nprint('a', flush=True)\ntime.sleep(60)"}]),
    );
    assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
    let id = cell(&yielded, 0)["cell_id"].clone();
    let mut waiting = daemon.client();
    let asked = waiting.send(
        "wait",
        json!({"session": "stopping", "cell_id": id, "yield_time_ms": 60_000}),
    );
    let watched = wait_until(Duration::from_secs(20), || {
        let row = status_row(&mut client, "stopping");
        (row["observed"] == true).then_some(()).ok_or(row)
    });
    assert!(watched.is_ok(), "the wait watches the cell: {watched:?}");
    daemon.stop();
    let answer = std::iter::from_fn(|| waiting.read())
        .find(|message| message["id"] == json!(asked))
        .expect("the wait is answered before the daemon goes");
    let result = &answer["result"];
    assert_eq!(result["status"], "cancelled", "{answer:#}");
    let text = result["output"].as_str().unwrap_or_default();
    assert!(text.contains("Interrupted: the daemon stopped"), "{text:?}");
    assert!(!text.contains("reset or closed"), "{text:?}");
}

/// Issue 28 item 12: a `wait` streams the cell's events while it watches, as `eval` does: a
/// `notify` (and output) made during the wait reaches the client at once, as `eval/event`
/// notifications carrying the wait's own id, before the cell ends; the answer still holds
/// the output.
#[test]
fn a_wait_streams_the_cells_events_while_it_watches() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let dir = tempfile::tempdir().expect("tempdir");
    let (armed, go) = (dir.path().join("armed"), dir.path().join("go"));
    let code = format!(
        "import os, time\n\
         while not os.path.exists({armed:?}): time.sleep(0.02)\n\
         notify('halfway')\n\
         print('half')\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         'done'",
        armed = armed.display().to_string(),
        go = go.display().to_string(),
    );
    let started = client.eval(
        "streamed-wait",
        json!([{"language": "py", "code": code, "yield_time_ms": 100}]),
    );
    let first = cell(&started, 0);
    assert_eq!(first["status"], "running", "{started:#}");
    let id = client.send(
        "wait",
        json!({"session": "streamed-wait", "cell_id": first["cell_id"], "yield_time_ms": 60000}),
    );
    std::fs::write(&armed, "").expect("arm the cell");
    // The cell cannot end before `go` exists: what arrives now came while the wait watched.
    let mut streamed = Vec::new();
    while !(streamed.iter().any(|e: &Value| e["event"] == "status")
        && streamed.iter().any(|e: &Value| e["event"] == "output"))
    {
        let message = client.read().expect("the connection stays open");
        assert_ne!(
            message["id"],
            json!(id),
            "answered before its events: {message:#}"
        );
        assert_eq!(message["method"], "eval/event", "{message:#}");
        assert_eq!(message["params"]["request_id"], json!(id), "{message:#}");
        streamed.push(message["params"].clone());
    }
    let status = streamed
        .iter()
        .find(|e| e["event"] == "status")
        .expect("status");
    assert_eq!(status["status"]["message"], "halfway", "{streamed:#?}");
    let output = streamed
        .iter()
        .find(|e| e["event"] == "output")
        .expect("output");
    assert_eq!(output["text"], "half\n", "{streamed:#?}");
    std::fs::write(&go, "").expect("let the cell end");
    let answer = loop {
        let message = client.read().expect("the answer");
        if message["id"] == json!(id) {
            break message["result"].clone();
        }
    };
    assert_eq!(answer["status"], "complete", "{answer:#}");
    assert!(
        answer["output"]
            .as_str()
            .unwrap_or_default()
            .contains("half\n"),
        "{answer:#}"
    );
    daemon.stop();
}
