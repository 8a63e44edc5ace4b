//! The daemon end to end: `cellvisor serve` driven over its socket by a test client, and the
//! CLI as its client.

mod common;

use common::daemon::{Client, Daemon};
use common::World;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

fn eval_params(session: &str, cells: Value) -> Value {
    json!({"session": session, "cells": cells})
}

#[test]
fn initialize_then_streamed_eval_then_status() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let init = client.call("initialize", json!({})).expect("initialize");
    assert_eq!(init["protocol_version"], 1);
    assert_eq!(init["languages"], json!(["py", "js", "lua"]));

    let (events, response) = client.call_collect(
        "eval",
        eval_params(
            "s1",
            json!([{"language": "py", "code": "print('one', flush=True)\nprint('two')\ndisplay({'k': 1})"}]),
        ),
    );
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["params"]["event"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds.first(), Some(&"cell_started"), "{events:#?}");
    assert_eq!(kinds.last(), Some(&"cell_done"), "{events:#?}");
    assert!(
        kinds.contains(&"output") && kinds.contains(&"display"),
        "{events:#?}"
    );
    let streamed: String = events
        .iter()
        .filter(|e| e["params"]["event"] == "output")
        .map(|e| e["params"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, "one\ntwo\n");
    assert!(events
        .iter()
        .all(|e| e["method"] == "eval/event" && e["params"]["request_id"] == response["id"]));
    assert_eq!(response["result"]["cells"][0]["output"], "one\ntwo\n");

    let status = client.call("status", json!({})).expect("status");
    let row = &status[0];
    assert_eq!(row["session"], "s1");
    assert_eq!(row["state"], "idle");
    assert!(row["rss_bytes"].as_u64().unwrap_or(0) > 1_000_000, "{row}");
    daemon.stop();
}

#[test]
fn two_clients_run_concurrently_in_their_own_sessions() {
    let daemon = Daemon::start();
    let flag = daemon.world.work_dir().join("flag");
    let waiter_code = format!(
        "import os, time\nwhile not os.path.exists({:?}): time.sleep(0.01)\nprint('released')",
        flag.display().to_string()
    );
    let mut a = daemon.client();
    let socket = daemon.socket.clone();
    let waiter = std::thread::spawn(move || {
        a.call(
            "eval",
            eval_params(
                "a",
                json!([{"language": "py", "code": waiter_code, "timeout": 30}]),
            ),
        )
    });
    let mut b = Client::connect(&socket);
    let setter = format!("open({:?}, 'w').close()", flag.display().to_string());
    b.call(
        "eval",
        eval_params("b", json!([{"language": "py", "code": setter}])),
    )
    .expect("b runs while a waits");
    let a_result = waiter.join().expect("thread").expect("a completes");
    assert_eq!(a_result["cells"][0]["output"], "released\n");
    daemon.stop();
}

#[test]
fn bad_input_gets_its_error_and_the_daemon_survives() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client.send_line("{this is not json");
    let error = client.read().expect("answer");
    assert_eq!(error["error"]["code"], -32700, "{error}");
    assert_eq!(error["id"], Value::Null);

    let unknown = client
        .call("frobnicate", json!({}))
        .expect_err("unknown method");
    assert_eq!(unknown["code"], -32601);

    let bad = client
        .call("eval", json!({"session": "s"}))
        .expect_err("missing cells");
    assert_eq!(bad["code"], -32602);
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cells"),
        "{bad}"
    );

    let bad = client
        .call(
            "eval",
            eval_params("s", json!([{"language": "cobol", "code": "1"}])),
        )
        .expect_err("bad language");
    assert_eq!(bad["code"], -32602);
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cobol"),
        "{bad}"
    );

    let bad = client
        .call(
            "eval",
            eval_params("no/slashes", json!([{"language": "py", "code": "1"}])),
        )
        .expect_err("bad session");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("session name"),
        "{bad}"
    );

    // The connection is still usable after all that.
    let ok = client
        .call(
            "eval",
            eval_params("s", json!([{"language": "lua", "code": "1 + 1"}])),
        )
        .expect("still usable");
    assert_eq!(ok["cells"][0]["output"], "2\n");

    // A line over the limit: an error, then that connection is closed; others are fine.
    let mut greedy = daemon.client();
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eval\",\"params\":\"{}\"}}",
        "x".repeat(17 * 1024 * 1024)
    );
    let _ = greedy.writer.write_all(huge.as_bytes());
    let answer = greedy.read().expect("an error before closing");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(greedy.read().is_none(), "connection closed");
    let ok = client.call("status", json!({})).expect("daemon unaffected");
    assert_eq!(ok.as_array().map(Vec::len), Some(1));
    daemon.stop();
}

/// The session names `status` lists.
fn listed(client: &mut Client) -> Vec<String> {
    let rows = client.call("status", json!({})).expect("status");
    rows.as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["session"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// `own` ties a session to the calling connection: when the connection closes (its client
/// is gone, here with a cell running), the daemon closes the session; a session it did not
/// own stays. Bad params are refused naming what is wrong.
#[test]
fn a_session_owned_by_a_connection_is_closed_when_the_connection_closes() {
    let daemon = Daemon::start();
    let mut owner = daemon.client();
    let mut other = daemon.client();
    for (client, session) in [(&mut owner, "owned"), (&mut other, "kept")] {
        client
            .call(
                "eval",
                eval_params(session, json!([{"language": "py", "code": "x = 1"}])),
            )
            .expect("setup");
    }
    let owned = owner.call("own", json!({"session": "owned", "language": "py"}));
    assert_eq!(owned, Ok(json!({"owned": 1})));
    // Owning it again is owning it once.
    let again = owner.call("own", json!({"session": "owned", "language": "py"}));
    assert_eq!(again, Ok(json!({"owned": 1})));
    let bad = owner
        .call("own", json!({"session": "owned", "languages": "py"}))
        .expect_err("an unknown field");
    assert_eq!(bad["code"], -32602, "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("languages"),
        "{bad}"
    );
    // The other connection's request names the owned session, without owning it.
    let shared = other.call(
        "eval",
        eval_params("owned", json!([{"language": "py", "code": "x"}])),
    );
    assert_eq!(shared.expect("eval")["cells"][0]["output"], "1\n");
    owner.send(
        "eval",
        eval_params(
            "owned",
            json!([{"language": "py", "code": "import time\ntime.sleep(600)"}]),
        ),
    );
    let started = owner.read().expect("cell_started event");
    assert_eq!(started["params"]["event"], "cell_started");
    assert!(listed(&mut other).contains(&"owned".to_string()));
    drop(owner);
    let gone = common::wait_until(SETTLE * 6, || {
        let sessions = listed(&mut other);
        if sessions.contains(&"owned".to_string()) {
            Err(sessions)
        } else {
            Ok(sessions)
        }
    });
    let sessions = gone.expect("the owned session was closed");
    assert!(sessions.contains(&"kept".to_string()), "{sessions:?}");
    daemon.stop();
}

#[test]
fn a_client_that_disconnects_mid_cell_gets_it_interrupted() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client
        .call(
            "eval",
            eval_params("s", json!([{"language": "py", "code": "x = 5"}])),
        )
        .expect("setup");
    client.send(
        "eval",
        eval_params(
            "s",
            json!([{"language": "py", "code": "while True: pass", "timeout": 600}]),
        ),
    );
    let started = client.read().expect("cell_started event");
    assert_eq!(started["params"]["event"], "cell_started");
    drop(client);
    let mut other = daemon.client();
    let result = other
        .call(
            "eval",
            eval_params(
                "s",
                json!([{"language": "py", "code": "print(x)", "timeout": 30}]),
            ),
        )
        .expect("session usable");
    assert_eq!(result["cells"][0]["output"], "5\n", "{result:#}");
    daemon.stop();
}

#[test]
fn socket_and_directory_are_private_and_a_live_daemon_is_not_stolen() {
    let daemon = Daemon::start();
    let dir_mode = std::fs::metadata(daemon.socket.parent().expect("dir"))
        .expect("dir")
        .permissions()
        .mode();
    let socket_mode = std::fs::metadata(&daemon.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert_eq!(socket_mode & 0o777, 0o600);

    let second = daemon
        .world
        .command()
        .args(["serve", "--socket"])
        .arg(&daemon.socket)
        .output()
        .expect("second serve");
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("already listening"), "{stderr}");
    daemon.stop();
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let world = World::new();
    let socket = world.runtime_dir().join("cellvisor").join("stale.sock");
    std::fs::create_dir_all(socket.parent().expect("dir")).expect("dir");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind a socket nobody serves"));
    assert!(socket.exists());
    let socket_arg = socket.to_string_lossy().into_owned();
    let run = world.run(&["--socket", &socket_arg, "eval", "-l", "lua", "print(7)"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "7\n");
    world.run(&["--socket", &socket_arg, "stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn the_cli_shares_state_through_an_auto_started_daemon() {
    let world = World::new();
    world.run(&["eval", "x = 41"]).assert_code(0);
    let run = world.run(&["eval", "x + 1"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "42\n");
    world.run(&["eval", "-l", "js", "var j = 1"]).assert_code(0);

    let status = world.run(&["status"]);
    status.assert_code(0);
    assert!(
        status.stdout.contains("SESSION") && status.stdout.contains("default"),
        "{}",
        status.stdout
    );
    let view: Value = serde_json::from_str(&world.run(&["status", "--json"]).stdout).expect("json");
    assert_eq!(view["sessions"].as_array().map(Vec::len), Some(2));

    world
        .run(&["reset", "-s", "default", "-l", "py"])
        .assert_code(0);
    let run = world.run(&["eval", "print('x' in globals())"]);
    assert_eq!(run.stdout, "False\n");
    world.run(&["close", "-s", "default"]).assert_code(0);
    world
        .run(&["reset", "-s", "default", "-l", "ruby"])
        .assert_code(2);

    let stop = world.run(&["stop"]);
    stop.assert_code(0);
    world.assert_no_processes_left(SETTLE);
    let again = world.run(&["stop"]);
    assert!(again.stdout.contains("no daemon"), "{}", again.stdout);
}

#[test]
fn the_python_example_client_speaks_the_protocol() {
    let daemon = Daemon::start();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cellvisor_client.py");
    let output = std::process::Command::new("python3")
        .arg(script)
        .arg("--socket")
        .arg(&daemon.socket)
        .args([
            "--session",
            "demo",
            "py",
            "x = 41",
            "py",
            "print(x + 1)",
            "lua",
            "print('hi')",
        ])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("--- [2] py\n42\n--- complete"), "{stdout}");
    assert!(stdout.contains("hi\n"), "{stdout}");
    daemon.stop();
}

/// The one timeout rule (`host::validate`), through the daemon: a timeout that is not a
/// positive number is refused with what is allowed, and the session survives; a positive one
/// below `cells.min-timeout` is raised to it.
#[test]
fn timeouts_follow_the_one_rule_through_the_daemon() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for bad in [json!(0), json!(-2.5)] {
        let refused = client
            .call(
                "eval",
                eval_params(
                    "t",
                    json!([{"language": "js", "code": "1", "timeout": bad}]),
                ),
            )
            .expect_err("refused");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("timeout must be a positive number of seconds")
                && message.contains("1 to 600 seconds"),
            "{refused}"
        );
    }
    let sleeper = "await new Promise((done) => setTimeout(done, 300)); 'slept'";
    let result = client
        .call(
            "eval",
            eval_params(
                "t",
                json!([{"language": "js", "code": sleeper, "timeout": 0.05}]),
            ),
        )
        .expect("eval");
    assert_eq!(result["cells"][0]["status"], "complete", "{result}");
    assert_eq!(result["cells"][0]["output"], "slept\n", "{result}");
    daemon.stop();
}

/// The daemon processes (not their workers) whose command line names `socket`: the ones this
/// test started, found by the test's own private path.
fn daemons_serving(socket: &std::path::Path) -> Vec<u32> {
    let needle = socket.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

/// A Rust host is not cellvisor: `connect_or_start` runs the program it is given, not the
/// host's own executable (this test binary), and refuses clearly when that program is absent.
#[test]
fn a_rust_host_starts_the_daemon_program_it_names() {
    use cellvisor::daemon::client::{Client as HostClient, ClientError};
    let world = World::new();
    let socket = world.runtime_dir().join("cellvisor").join("host.sock");
    let log = world.dir.path().join("host-daemon.log");
    let config = world.config_path();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let missing = world.dir.path().join("no-such-cellvisor");
    let refused = runtime.block_on(HostClient::connect_or_start(
        &socket,
        &missing,
        Some(&config),
        Some(&log),
    ));
    match refused {
        Err(ClientError::Start(message)) => assert!(
            message.contains("no-such-cellvisor"),
            "the refusal names the program: {message}"
        ),
        Err(other) => panic!("expected a start error, got {other}"),
        Ok(_) => panic!("a missing program started a daemon"),
    }

    let program = std::path::Path::new(env!("CARGO_BIN_EXE_cellvisor"));
    let answered = runtime.block_on(async {
        let mut client =
            HostClient::connect_or_start(&socket, program, Some(&config), Some(&log)).await?;
        let rows = client.call("status", json!({})).await?;
        client.call("shutdown", json!({})).await?;
        Ok::<_, ClientError>(rows)
    });
    let started = daemons_serving(&socket);
    let gone = common::wait_until(SETTLE, || {
        let left = daemons_serving(&socket);
        left.is_empty().then_some(()).ok_or(left)
    });
    if gone.is_err() {
        for pid in &started {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .status();
        }
    }
    let rows = answered.unwrap_or_else(|err| {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        panic!("the named program did not serve: {err}\n{log}")
    });
    assert_eq!(rows, json!([]), "a fresh daemon has no sessions");
    assert!(gone.is_ok(), "the daemon outlived its shutdown: {gone:?}");
}

#[test]
fn a_reload_that_shortens_idle_exit_applies_at_once() {
    // An hour: without the reload this daemon outlives the test.
    let daemon = Daemon::start_with("[daemon]\nidle-exit = \"1h\"\n");
    std::fs::write(
        daemon.world.config_path(),
        format!("{}[daemon]\nidle-exit = \"1s\"\n", common::SHORT_INTERVALS),
    )
    .expect("config");
    let reloaded = daemon
        .client()
        .call("config/reload", json!({}))
        .expect("reloaded");
    assert!(
        reloaded["changes"].as_array().is_some_and(|changes| changes
            .iter()
            .any(|c| c.as_str().is_some_and(|c| c.contains("idle-exit")))),
        "{reloaded}"
    );
    // No session, no client: it exits by itself (and removes its socket) within seconds.
    let exited = common::wait_until(Duration::from_secs(15), || {
        if daemon.socket.exists() {
            Err(())
        } else {
            Ok(())
        }
    });
    assert!(exited.is_ok(), "the daemon kept the hour it started with");
    daemon.world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_runtime_directory_too_long_for_worker_sockets_is_refused_at_start() {
    let world = World::new();
    // Short enough for the daemon's own socket, too long for a worker's under it.
    let long = world.dir.path().join(format!("run-{}", "r".repeat(70)));
    std::fs::create_dir_all(&long).unwrap();
    let socket = world.dir.path().join("d.sock");
    let run = world
        .command()
        .env("XDG_RUNTIME_DIR", &long)
        .args(["serve", "--socket"])
        .arg(&socket)
        .output()
        .expect("run serve");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "the daemon started: {stderr}");
    assert!(
        stderr.contains("too long for worker sockets") && stderr.contains("at most 107"),
        "{stderr}"
    );
    assert!(stderr.contains(&long.display().to_string()), "{stderr}");
    assert!(!socket.exists(), "no socket is left behind");
    world.assert_no_processes_left(SETTLE);
}

/// The event kinds of `eval/event` notifications, in order.
fn event_kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e["method"], "eval/event", "{e}");
            e["params"]["event"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// `events` on `eval`: `all` (the default) streams every event, `output` only what the cells
/// show, `none` nothing but the answer; any other value is refused naming the three.
#[test]
fn an_eval_chooses_which_events_it_gets() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    // Output, a display and a helper's status event.
    let code = "console.log('one'); display({k: 1}); await write('f.txt', 'x'); console.log('two')";
    let run = |client: &mut Client, events: Option<&str>| {
        let mut params = eval_params("ev", json!([{"language": "js", "code": code}]));
        if let Some(events) = events {
            params["events"] = json!(events);
        }
        let (notifications, response) = client.call_collect("eval", params);
        assert_eq!(
            response["result"]["cells"][0]["output"], "one\ntwo\n",
            "{response}"
        );
        // Nothing of this request comes after its answer.
        let (later, _) = client.call_collect("status", json!({}));
        assert!(later.is_empty(), "after the answer: {later:?}");
        event_kinds(&notifications)
    };
    let all = run(&mut client, Some("all"));
    assert_eq!(all, run(&mut client, None), "`all` is the default");
    assert_eq!(all.first().map(String::as_str), Some("cell_started"));
    assert_eq!(all.last().map(String::as_str), Some("cell_done"));
    for kind in ["output", "display", "status"] {
        assert!(all.iter().any(|k| k == kind), "{kind} in {all:?}");
    }
    let output = run(&mut client, Some("output"));
    assert_eq!(
        output,
        all.iter()
            .filter(|k| *k == "output" || *k == "display")
            .cloned()
            .collect::<Vec<_>>(),
        "only what the cell shows, in order"
    );
    assert!(
        output.iter().any(|k| k == "output") && output.iter().any(|k| k == "display"),
        "{output:?}"
    );
    assert_eq!(run(&mut client, Some("none")), Vec::<String>::new());
    // `values`: every event, and a trailing value's bundle (from a worker asked for them)
    // before its text, which the other choices never send.
    let ask = "__import__('cellvisor_prelude').send_values()";
    let cells = json!([{"language": "py", "code": ask}, {"language": "py", "code": "x = [1]\nx"}]);
    let values = |client: &mut Client, events: &str| {
        let mut params = eval_params("values", cells.clone());
        params["events"] = json!(events);
        let (notifications, response) = client.call_collect("eval", params);
        assert_eq!(
            response["result"]["cells"][1]["output"], "[1]\n",
            "{response}"
        );
        notifications
    };
    let with_values = values(&mut client, "values");
    let value = with_values
        .iter()
        .map(|n| &n["params"])
        .find(|p| p["event"] == "value")
        .unwrap_or_else(|| panic!("a value event: {with_values:#?}"));
    assert_eq!(value["index"], 1);
    assert_eq!(value["bundle"]["text/plain"], "[1]");
    assert_eq!(value["bundle"]["application/json"], json!([1]));
    let kinds = event_kinds(&with_values);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k != "value")
            .cloned()
            .collect::<Vec<_>>(),
        event_kinds(&values(&mut client, "all")),
        "the same events as `all` besides the value"
    );
    for bad in [
        json!("loud"),
        json!(""),
        json!(1),
        json!(null),
        json!(["all"]),
    ] {
        let mut params = eval_params("ev", json!([{"language": "js", "code": "1"}]));
        params["events"] = bad.clone();
        let error = client.call("eval", params).expect_err("refused");
        assert_eq!(error["code"], -32602, "{bad}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(r#"events must be "all", "values", "output" or "none""#),
            "{bad}: {message}"
        );
    }
    daemon.stop();
}

/// `events` on `wait`: a background cell watched with `output` streams its output alone,
/// with `none` nothing.
#[test]
fn a_wait_chooses_which_events_it_gets() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let background = |client: &mut Client| -> u64 {
        let code = "// @exec: {\"yield_time_ms\": 200}\nconsole.log('a');\n\
                    const t = Date.now(); while (Date.now() - t < 800) {}\nconsole.log('b');";
        let result = client.eval("ew", json!([{"language": "js", "code": code}]));
        assert_eq!(result["cells"][0]["status"], "running", "{result}");
        result["cells"][0]["cell_id"].as_u64().unwrap_or_default()
    };
    let watch = |client: &mut Client, cell_id: u64, events: &str| {
        let params =
            json!({"session": "ew", "cell_id": cell_id, "yield_time_ms": 20_000, "events": events});
        let (notifications, response) = client.call_collect("wait", params);
        assert_eq!(response["result"]["status"], "complete", "{response}");
        assert_eq!(response["result"]["output"], "b\n", "{response}");
        notifications
    };
    let cell_id = background(&mut client);
    let output = watch(&mut client, cell_id, "output");
    assert_eq!(event_kinds(&output), ["output"], "{output:?}");
    assert_eq!(output[0]["params"]["text"], "b\n");
    let cell_id = background(&mut client);
    assert!(watch(&mut client, cell_id, "none").is_empty());
    let params = json!({"session": "ew", "cell_id": 1, "events": "some"});
    let error = client.call("wait", params).expect_err("refused");
    assert_eq!(error["code"], -32602, "{error}");
    daemon.stop();
}

/// Issue 42 item 6: a cell's call of a host tool is a status event (`{"op": "tool", "name"}`),
/// live and in the cell's `status_events`, as the anchor reports its tools' calls.
#[test]
fn host_tool_calls_are_status_events() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let id = client.send(
        "eval",
        json!({"session": "tool-status", "events": "all",
               "tools": [{"name": "lookup", "description": "Looks a word up"}],
               "cells": [{"language": "js", "code": "text(JSON.stringify(await tools.lookup({word: 'x'})))"}]}),
    );
    let mut live = Vec::new();
    let result = loop {
        let message = client.read().expect("connection open");
        if message["method"] == "tool/call" {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"found": true}});
            client.send_line(&answer.to_string());
        } else if message["id"] == json!(id) {
            break message["result"].clone();
        } else {
            live.push(message.clone());
        }
    };
    let cell = &result["cells"][0];
    assert_eq!(cell["status"], "complete", "{result:#}");
    assert_eq!(cell["output"], "{\"found\":true}\n", "{result:#}");
    assert_eq!(
        cell["status_events"],
        json!([{"op": "tool", "name": "lookup"}]),
        "{result:#}"
    );
    assert!(
        live.iter()
            .any(|m| m.to_string().contains("\"op\":\"tool\"")),
        "the status event streamed live: {live:#?}"
    );
    daemon.stop();
}
