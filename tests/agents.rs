//! What agents write, end to end through the daemon: rich displays, plots, the prelude
//! helpers in every language, ES modules, timers, and code mode with host tools.

mod common;

use common::daemon::{cell, Daemon};
use serde_json::{json, Value};
use std::path::Path;

fn assert_complete(result: &Value) {
    for (i, c) in result["cells"].as_array().into_iter().flatten().enumerate() {
        assert_eq!(c["status"], "complete", "cell {i}: {result:#}");
    }
}

#[test]
fn a_returned_dict_is_a_json_display() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let result = client.eval_in(
        "s",
        &work,
        json!([{"language": "py", "code": "{'rows': [1, 2], 'ok': True}"}]),
    );
    assert_complete(&result);
    let display = &cell(&result, 0)["displays"][0];
    assert_eq!(
        display["application/json"],
        json!({"rows": [1, 2], "ok": true})
    );
    assert!(display["text/plain"].is_string());
    daemon.stop();
}

/// Every prelude helper, with the same meaning in each language.
#[test]
fn prelude_helpers_work_in_every_language() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    std::fs::create_dir_all(work.join("sub/deeper")).expect("dirs");
    std::fs::write(work.join("sub/deeper/leaf.txt"), "x").expect("file");
    let py = r#"
write("notes.txt", "b\na\nb\n")
append("notes.txt", "c\n")
assert read("notes.txt") == "b\na\nb\nc\n", read("notes.txt")
assert read("notes.txt", 2, 2, numbered=True) == "     2\ta\n     3\tb\n"
assert sort("b\na\nb\n") == "a\nb\nb\n"
assert sort("b\na\nb\n", reverse=True, unique=True) == "b\na\n"
assert uniq("a\na\nb\na\n") == "a\nb\na\n"
assert list(counter(["x", "y", "x"])) [0] == ("x", 2) or list(counter(["x", "y", "x"]))[0] == ["x", 2]
assert "-a\n+b" in diff("a\n", "b\n")
assert "leaf.txt" in tree("sub")
env("CELLVISOR_TEST_VAR", "1")
assert env("CELLVISOR_TEST_VAR") == "1"
print("py ok")
"#;
    let js = r#"
await write("notes-js.txt", "b\na\n");
await append("notes-js.txt", "c\n");
const text = await read("notes-js.txt");
if (text !== "b\na\nc\n") throw new Error("read: " + JSON.stringify(text));
if (await read("notes-js.txt", {numbered: true, limit: 1}) !== "     1\tb\n") throw new Error("read numbered");
if (await sort("b\na\n") !== "a\nb\n") throw new Error("sort");
if (await uniq("a\na\nb\n") !== "a\nb\n") throw new Error("uniq");
const counts = await counter(["x", "y", "x"]);
if (counts[0][0] !== "x" || counts[0][1] !== 2) throw new Error("counter " + JSON.stringify(counts));
if (!(await diff("a\n", "b\n")).includes("-a\n+b")) throw new Error("diff");
if (!(await tree("sub")).includes("leaf.txt")) throw new Error("tree");
await env("CELLVISOR_TEST_VAR", "2");
if (await env("CELLVISOR_TEST_VAR") !== "2") throw new Error("env");
console.log("js ok");
"#;
    let lua = r#"
write("notes-lua.txt", "b\na\n")
append("notes-lua.txt", "c\n")
assert(read("notes-lua.txt") == "b\na\nc\n", read("notes-lua.txt"))
assert(read("notes-lua.txt", 2, nil, true) == "     2\ta\n     3\tc\n")
assert(sort("b\na\n") == "a\nb\n")
assert(uniq("a\na\nb\n") == "a\nb\n")
local counts = counter({"x", "y", "x"})
assert(counts[1][1] == "x" and counts[1][2] == 2)
assert(diff("a\n", "b\n"):find("-a\n+b", 1, true))
assert(tree("sub"):find("leaf.txt", 1, true))
env("CELLVISOR_TEST_VAR", "3")
assert(env("CELLVISOR_TEST_VAR") == "3")
print("lua ok")
"#;
    let result = client.eval_in(
        "s",
        &work,
        json!([
            {"language": "py", "code": py},
            {"language": "js", "code": js},
            {"language": "lua", "code": lua},
        ]),
    );
    assert_complete(&result);
    for (i, expected) in ["py ok\n", "js ok\n", "lua ok\n"].iter().enumerate() {
        assert_eq!(cell(&result, i)["output"], *expected);
        let ops: Vec<&str> = cell(&result, i)["status_events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["op"].as_str())
            .collect();
        for op in [
            "write", "append", "read", "sort", "uniq", "counter", "diff", "tree", "env",
        ] {
            assert!(
                ops.contains(&op),
                "cell {i} has no `{op}` status event: {ops:?}"
            );
        }
    }
    let read_event = cell(&result, 0)["status_events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["op"] == "read").cloned())
        .expect("a read event");
    assert_eq!(read_event["path"], "notes.txt");
    assert_eq!(read_event["lines"], 4);

    // A missing file is the language's own error, with a clear message.
    let missing = client.eval_in(
        "s",
        &work,
        json!([{"language": "py", "code": "read('no-such-file.txt')"}]),
    );
    let output = cell(&missing, 0)["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("FileNotFoundError") && output.contains("no-such-file.txt"),
        "{output}"
    );
    daemon.stop();
}

#[test]
fn output_reads_back_a_spilled_artifact() {
    let daemon = Daemon::start_with("[output]\nmax-bytes = \"2KiB\"\n");
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let big = client.eval_in(
        "s",
        &work,
        json!([{"language": "py", "code": "for i in range(2000): print(i)"}]),
    );
    let artifact = cell(&big, 0)["truncation"]["artifact_path"]
        .as_str()
        .expect("spilled")
        .to_string();
    let id = Path::new(&artifact)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("stem")
        .to_string();
    let code =
        format!("text = output({id:?})\nprint(len(text.splitlines()), text.splitlines()[-1])");
    let back = client.eval_in("s", &work, json!([{"language": "py", "code": code}]));
    assert_eq!(cell(&back, 0)["output"], "2000 1999\n", "{back:#}");
    daemon.stop();
}

#[test]
fn js_modules_are_imported_from_the_cwd_and_edits_are_picked_up() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    std::fs::write(work.join("greet.js"), "export const greeting = 'hello';\nexport default function shout(s) { return s.toUpperCase(); }\n").expect("module");
    let first = client.eval_in("s",
        &work,
        json!([{"language": "js", "code": "import shout, { greeting } from './greet.js';\nshout(greeting)"}]),
    );
    assert_eq!(cell(&first, 0)["output"], "HELLO\n", "{first:#}");
    std::fs::write(work.join("greet.js"), "export const greeting = 'changed';\nexport default function shout(s) { return s + '!'; }\n").expect("module");
    let second = client.eval_in("s",
        &work,
        json!([{"language": "js", "code": "const m = await import('./greet.js');\nm.default(m.greeting)"}]),
    );
    assert_eq!(cell(&second, 0)["output"], "changed!\n", "{second:#}");
    let missing = client.eval_in(
        "s",
        &work,
        json!([{"language": "js", "code": "await import('./nope.js')"}]),
    );
    assert_eq!(cell(&missing, 0)["status"], "error");
    assert!(cell(&missing, 0)["output"]
        .as_str()
        .unwrap_or_default()
        .contains("nope.js"));
    daemon.stop();
}

#[test]
fn timers_fire_in_order_and_the_cell_ends_when_its_promise_settles() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let code = r#"
const order = [];
setTimeout(() => order.push("b"), 20);
setTimeout(() => order.push("a"), 5);
const cancelled = setTimeout(() => order.push("never"), 10);
clearTimeout(cancelled);
await new Promise(resolve => setTimeout(resolve, 40));
order.join(",")
"#;
    let result = client.eval_in("s", &work, json!([{"language": "js", "code": code}]));
    assert_eq!(cell(&result, 0)["output"], "a,b\n", "{result:#}");
    daemon.stop();
}

#[test]
fn code_mode_helpers_exit_and_the_exec_line() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let result = client.eval_in("s",
        &work,
        json!([
            {"language": "js", "code": "text('plain');\ntext({a: 1});\nnotify('halfway');\nexit();\ntext('never')"},
            {"language": "js", "code": "// @exec: {\"max_output_tokens\": 10}\nfor (let i = 0; i < 100; i++) text('line ' + i)"},
            {"language": "js", "code": "// @exec: {\"bogus\": 1}\n1"},
        ]),
    );
    let first = cell(&result, 0);
    assert_eq!(first["status"], "complete", "{result:#}");
    let output = first["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("plain") && output.contains("{\"a\":1}"),
        "{output}"
    );
    assert!(!output.contains("never"), "exit() ends the cell: {output}");
    assert!(
        first["status_events"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["op"] == "notify" && e["message"] == "halfway"),
        "{first:#}"
    );
    let capped = cell(&result, 1);
    assert_eq!(capped["truncation"]["truncated"], true, "{capped:#}");
    // What was kept of the 790 bytes, the truncation notice (path and reference) aside.
    let kept: usize = capped["output"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.starts_with("[... "))
        .map(str::len)
        .sum();
    assert!(kept < 100, "{capped:#}");
    let bogus = cell(&result, 2);
    assert_eq!(bogus["status"], "error");
    assert!(
        bogus["output"]
            .as_str()
            .unwrap_or_default()
            .contains("bogus"),
        "{bogus:#}"
    );
    daemon.stop();
}

#[test]
fn store_survives_a_worker_kill_and_a_daemon_restart() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let saved = client.eval_in("keep",
        &work,
        json!([{"language": "js", "code": "await store('plan', {step: 3, todo: ['a', 'b']}); 'saved'"}]),
    );
    assert_complete(&saved);
    let bad = client.eval_in(
        "keep",
        &work,
        json!([{"language": "js", "code": "await store('f', () => 1)"}]),
    );
    assert_eq!(cell(&bad, 0)["status"], "error", "{bad:#}");

    let status = client.call("status", json!({})).expect("status");
    let pid = status[0]["pid"].as_u64().expect("pid");
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    let after_kill = client.eval_in(
        "keep",
        &work,
        json!([{"language": "js", "code": "JSON.stringify(await load('plan'))"}]),
    );
    assert_eq!(
        cell(&after_kill, 0)["output"],
        "{\"step\":3,\"todo\":[\"a\",\"b\"]}\n",
        "{after_kill:#}"
    );

    let world = daemon.stop_keep_world();
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let after_restart = client.eval_in(
        "keep",
        &work,
        json!([{"language": "js", "code": "(await load('plan')).step"}]),
    );
    assert_eq!(
        cell(&after_restart, 0)["output"],
        "3\n",
        "{after_restart:#}"
    );
    daemon.stop();
}

#[test]
fn a_js_cell_calls_host_tools_through_the_python_example_host() {
    let daemon = Daemon::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tool_host_example.py");
    let output = std::process::Command::new("python3")
        .arg(script)
        .arg("--socket")
        .arg(&daemon.socket)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("\\\"sum\\\":5") || stdout.contains("\"sum\":5"),
        "{stdout}"
    );
    assert!(stdout.contains("cannot divide by zero"), "{stdout}");
    assert!(
        stdout.contains("add") && stdout.contains("divide"),
        "ALL_TOOLS: {stdout}"
    );
    daemon.stop();
}

#[test]
fn python_cells_call_host_tools_too() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let id = client.send(
        "eval",
        json!({
            "session": "py-tools",
            "tools": [{"name": "lookup", "description": "finds a value"}],
            "cells": [{"language": "py", "code": "print(tool.lookup(key='k'))\ntry:\n    tool.lookup(key='missing')\nexcept ToolError as e:\n    print('failed:', e)"}],
        }),
    );
    let response = loop {
        let message = client.read().expect("connection open");
        if message["method"] == "tool/call" {
            let key = message["params"]["arguments"]["key"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let answer = if key == "k" {
                json!({"jsonrpc": "2.0", "id": message["id"], "result": {"value": 42}})
            } else {
                json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": 1, "message": "no such key"}})
            };
            client.send_line(&answer.to_string());
        } else if message["id"] == json!(id) {
            break message;
        }
    };
    let output = response["result"]["cells"][0]["output"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains("{'value': 42}"), "{response:#}");
    assert!(
        output.contains("failed:") && output.contains("no such key"),
        "{response:#}"
    );
    daemon.stop();
}

#[test]
fn a_matplotlib_plot_arrives_as_a_png() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = std::process::Command::new(root.join("scripts/test-venv"))
        .arg("matplotlib")
        .output()
        .expect("scripts/test-venv runs");
    assert!(
        venv.status.success(),
        "{}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = String::from_utf8_lossy(&venv.stdout).trim().to_string();
    let daemon = Daemon::start_with(&format!("[python]\ninterpreter = {python:?}\n"));
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('three points')";
    let result = client.eval_in("plot", &work, json!([{"language": "py", "code": code}]));
    assert_complete(&result);
    let pngs: Vec<&str> = cell(&result, 0)["displays"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["image/png"].as_str())
        .collect();
    assert_eq!(pngs.len(), 1, "{result:#}");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(pngs[0])
        .expect("base64");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG signature");
    assert!(png.len() > 2000, "a real picture, {} bytes", png.len());
    daemon.stop();
}

#[test]
fn each_request_runs_in_its_own_cwd_in_every_language() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let base = daemon.world.work_dir();
    for name in ["one", "two"] {
        std::fs::create_dir_all(base.join(name)).expect("dir");
        std::fs::write(base.join(name).join("marker.txt"), name).expect("file");
    }
    for name in ["one", "two"] {
        let result = client.eval_in(
            "same",
            &base.join(name),
            json!([
                {"language": "py", "code": "print(open('marker.txt').read())"},
                {"language": "js", "code": "text((await read('marker.txt')).trim())"},
                {"language": "lua", "code": "print(io.open('marker.txt'):read('a'))"},
            ]),
        );
        assert_complete(&result);
        assert_eq!(
            cell(&result, 0)["output"],
            format!("{name}\n"),
            "{result:#}"
        );
        assert!(
            cell(&result, 1)["output"]
                .as_str()
                .unwrap_or_default()
                .ends_with(&format!("{name}\n")),
            "{result:#}"
        );
        assert_eq!(
            cell(&result, 2)["output"],
            format!("{name}\n"),
            "{result:#}"
        );
    }
    daemon.stop();
}
