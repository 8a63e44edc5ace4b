//! `cellvisor mcp` end to end with a real MCP client: the official Python SDK drives the
//! binary over stdio (tests/mcp_client.py); afterwards no process of the test may be left.

mod common;

use common::World;
use std::path::{Path, PathBuf};
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

/// Runs `tests/<script>` (an MCP client on the official SDK) with `args` against `world`'s
/// runtime, state and config; fails the test with its output unless it exits well and says
/// `passed`; answers its stdout.
fn run_sdk_script(
    python: &Path,
    world: &World,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
    passed: &str,
) -> String {
    let output = Command::new(python)
        .arg(workspace().join("tests").join(script))
        .args(args)
        .envs(env.iter().copied())
        .env("XDG_RUNTIME_DIR", world.runtime_dir())
        .env("XDG_STATE_HOME", world.dir.path().join("state"))
        .env("CELLVISOR_CONFIG", world.config_path())
        .env_remove("CELLVISOR_SOCKET")
        .env_remove("VIRTUAL_ENV")
        .current_dir(world.work_dir())
        .output()
        .unwrap_or_else(|e| panic!("run tests/{script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(passed),
        "{script} failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    stdout
}

#[test]
fn the_python_sdk_client_runs_cells_through_cellvisor_mcp() {
    let python = test_python();
    // Python cells run on the test venv's interpreter, which has matplotlib for the plot.
    let world = World::with_config(&format!(
        "[python]\ninterpreter = {:?}\n",
        python.display().to_string()
    ));
    let stdout = run_sdk_script(
        &python,
        &world,
        "mcp_client.py",
        &[env!("CARGO_BIN_EXE_cellvisor")],
        &[("CELLVISOR_TEST_PLOT", "1")],
        "all MCP checks passed",
    );
    println!("{stdout}");
    world.assert_no_processes_left(SETTLE);
}

/// A long cell held by the server (issue 26): progress while it runs, silent or printing, a
/// cancel that interrupts it and keeps the session's state, and its spilled output as an MCP
/// resource that no other session reads (tests/mcp_progress.py, two servers of one runtime
/// directory).
#[test]
fn long_cells_send_progress_honour_cancels_and_expose_their_artifacts() {
    let python = test_python();
    let world = World::with_config(&format!(
        "[python]\ninterpreter = {:?}\n",
        python.display().to_string()
    ));
    let stdout = run_sdk_script(
        &python,
        &world,
        "mcp_progress.py",
        &["stdio", env!("CARGO_BIN_EXE_cellvisor")],
        &[],
        "all MCP progress checks passed",
    );
    println!("{stdout}");
    world.assert_no_processes_left(SETTLE);
}

/// A client that goes away in the middle of a cell: the server interrupts it, stops every
/// worker and exits promptly.
#[test]
fn a_client_disconnecting_mid_cell_stops_the_server_and_its_workers() {
    let world = World::new();
    let mut server = RawMcp::start(&world);
    server.send(
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {
        "name": "eval", "arguments": {"cells": [
            {"language": "py", "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"}]}}}),
    );
    // Wait until the worker runs the cell, as the `sessions` tool reports it.
    let running = common::wait_until(Duration::from_secs(30), || {
        let answer = server.request(
            "tools/call",
            serde_json::json!({"name": "sessions", "arguments": {}}),
        );
        let answer = answer.to_string();
        answer.contains("busy").then_some(()).ok_or(answer)
    });
    assert!(running.is_ok(), "the cell never ran: {running:?}");
    // The cell sleeps for 60 s: exiting within the wait means it was interrupted, not awaited.
    let status = server.stop();
    assert!(status.success(), "exit status {status}");
    world.assert_no_processes_left(SETTLE);
}

/// `cellvisor mcp` spoken to line by line: JSON-RPC requests in, their answers out.
struct RawMcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    /// The server's output lines, read by a thread of their own so that a missing answer
    /// fails the test instead of hanging it.
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

/// How long a test waits for an answer the server owes.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

impl RawMcp {
    fn start(world: &World) -> RawMcp {
        RawMcp::start_command(world.command())
    }

    /// A server started by `command` (a world's, with its own environment).
    fn start_command(mut command: std::process::Command) -> RawMcp {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = command
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cellvisor mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.split(b'\n') {
                let Ok(line) = line else { break };
                if sender
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        let mut server = RawMcp {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let init = server.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}),
        );
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        server.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: serde_json::Value) {
        self.send_raw(message.to_string().as_bytes());
    }

    /// Sends `line` as it is, and a newline.
    fn send_raw(&mut self, line: &[u8]) {
        use std::io::Write;
        self.stdin.write_all(line).expect("write to the server");
        self.stdin.write_all(b"\n").expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// The next message of the server that is not a notification of its own (a response
    /// or an error), within [`ANSWER_WITHIN`].
    fn next_answer(&mut self) -> serde_json::Value {
        loop {
            let line = match self.lines.recv_timeout(ANSWER_WITHIN) {
                Ok(line) => line,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the server sent no answer within {ANSWER_WITHIN:?}")
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the server closed its output")
                }
            };
            let message: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
            if message.get("method").is_none() {
                return message;
            }
        }
    }

    /// The answer to one request (notifications and other answers in between are skipped).
    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let message = self.next_answer();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// `tools/call eval` of `cells`: (is_error, the text of the result).
    fn eval(&mut self, cells: serde_json::Value) -> (bool, String) {
        let answer = self.request(
            "tools/call",
            serde_json::json!({"name": "eval", "arguments": {"cells": cells}}),
        );
        let result = &answer["result"];
        let text = result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        (result["isError"] == true, text)
    }

    /// Closes the server's input (the client going away) and waits at most 10 s for it to
    /// exit; its exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        let exited = common::wait_until(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten().ok_or(())
        });
        match exited {
            Ok(status) => status,
            Err(()) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("cellvisor mcp did not exit within 10 s of its input closing");
            }
        }
    }
}

/// The one timeout rule (`host::validate`), through MCP: the same refusal and the same
/// raising to `cells.min-timeout` as the command line and the daemon.
#[test]
fn timeouts_follow_the_one_rule_through_mcp() {
    let world = World::new();
    let mut server = RawMcp::start(&world);
    let (is_error, text) =
        server.eval(serde_json::json!([{"language": "js", "code": "1", "timeout": -1}]));
    assert!(is_error, "{text}");
    assert!(
        text.contains("timeout must be a positive number of seconds, got -1")
            && text.contains("1 to 600 seconds"),
        "{text}"
    );
    let sleeper = "await new Promise((done) => setTimeout(done, 300)); 'slept'";
    let (is_error, text) =
        server.eval(serde_json::json!([{"language": "js", "code": sleeper, "timeout": 0.05}]));
    assert!(!is_error, "{text}");
    assert!(text.contains("slept"), "{text}");
    assert!(server.stop().success());
    world.assert_no_processes_left(SETTLE);
}

/// The MCP server shows a display the way the command line does (one text renderer): the
/// anchors' ranking (Markdown, then plain text, then HTML as Markdown: `plain-form` where the
/// bundle also has `html-form`), a pandas frame's HTML table with its index kept, JSON
/// pretty-printed.
#[test]
fn displays_are_rendered_as_on_the_command_line() {
    let world = World::new();
    let venv = common::test_venv(&["pandas", "IPython"]);
    let mut command = world.command();
    command.env("VIRTUAL_ENV", &venv);
    let mut server = RawMcp::start_command(command);
    let (is_error, text) = server.eval(serde_json::json!([{"language": "py", "code":
        "from IPython.display import publish_display_data\n\
         import pandas as pd\n\
         publish_display_data({'text/plain': 'plain-form', 'text/html': '<i>html-form</i>'})\n\
         publish_display_data({'text/html': '<p>Some <b>bold</b></p>'})\n\
         df = pd.DataFrame({'a': [1, 2]}, index=pd.Index(['r1', 'r2'], name='key'))\n\
         publish_display_data({'text/html': df.to_html()})\n\
         display({'k': [1]})"}]));
    assert!(!is_error, "{text}");
    assert!(text.contains("plain-form\n"), "{text}");
    assert!(!text.contains("html-form"), "{text}");
    assert!(text.contains("Some **bold**\n"), "{text}");
    assert!(!text.contains("<b>"), "{text}");
    assert!(
        text.contains("| key | a   |\n|-----|-----|\n| r1  | 1   |\n| r2  | 2   |"),
        "{text}"
    );
    assert!(text.contains("{\n  \"k\": [\n    1\n  ]\n}"), "{text}");
    assert!(server.stop().success());
    world.assert_no_processes_left(SETTLE);
}

/// Sends `line` to a fresh server and expects its refusal: `code`, `id` (present, `null`
/// included) and a message containing `part`; then a cell still runs on the same server.
fn refused_then_served(line: &[u8], code: i64, id: serde_json::Value, part: &str) {
    let world = World::new();
    let mut server = RawMcp::start(&world);
    server.send_raw(line);
    let answer = server.next_answer();
    assert_eq!(answer.get("id"), Some(&id), "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(part), "{answer}");
    assert_still_serves(&mut server);
    assert!(server.stop().success());
    world.assert_no_processes_left(SETTLE);
}

fn assert_still_serves(server: &mut RawMcp) {
    let (is_error, text) = server.eval(serde_json::json!([{"language": "lua", "code": "20 + 22"}]));
    assert!(!is_error, "{text}");
    assert!(text.contains("42"), "{text}");
}

/// A `tools/call` over the 16 MiB line limit is read to its end (not buffered) and refused
/// with its id, which comes before the big part.
#[test]
fn a_request_over_the_line_limit_is_refused_with_its_id() {
    let code = format!("x = '{}'", "a".repeat(20_000_000));
    let line = serde_json::json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params":
        {"name": "eval", "arguments": {"cells": [{"language": "py", "code": code}]}}})
    .to_string();
    let expected = format!(
        "request too large: {} bytes, the limit is 16 MiB",
        line.len()
    );
    refused_then_served(line.as_bytes(), -32600, 41.into(), &expected);
}

#[test]
fn a_line_that_is_not_json_is_a_parse_error() {
    refused_then_served(
        b"print(6*7)",
        -32700,
        serde_json::Value::Null,
        "parse error",
    );
}

#[test]
fn a_line_that_is_not_utf8_is_a_parse_error() {
    refused_then_served(
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/\xff\xfelist\"}",
        -32700,
        serde_json::Value::Null,
        "not UTF-8",
    );
}

#[test]
fn nesting_past_the_recursion_limit_is_a_parse_error() {
    refused_then_served(
        &[b'['; 100_000],
        -32700,
        serde_json::Value::Null,
        "recursion limit",
    );
}

#[test]
fn an_object_id_is_an_invalid_request_answered_to_id_null() {
    refused_then_served(
        br#"{"jsonrpc":"2.0","id":{"n":1},"method":"tools/list"}"#,
        -32600,
        serde_json::Value::Null,
        "id must be a string",
    );
}

#[test]
fn a_message_without_method_is_an_invalid_request_answered_to_its_id() {
    refused_then_served(
        br#"{"jsonrpc":"2.0","id":"no-method","params":{}}"#,
        -32600,
        "no-method".into(),
        "missing field `method`",
    );
}

#[test]
fn tools_call_without_a_name_is_invalid_params() {
    refused_then_served(
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
        -32602,
        7.into(),
        "missing field `name`",
    );
}

/// JSON-RPC answers no notification, not even a malformed one: the next answer is that of
/// the next request.
#[test]
fn a_malformed_notification_gets_no_answer() {
    let world = World::new();
    let mut server = RawMcp::start(&world);
    server.send_raw(br#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#);
    server.send_raw(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[]}"#);
    server.send(serde_json::json!({"jsonrpc": "2.0", "id": "after", "method": "ping"}));
    let answer = server.next_answer();
    assert_eq!(answer["id"], "after", "{answer}");
    assert!(answer.get("error").is_none(), "{answer}");
    assert_still_serves(&mut server);
    assert!(server.stop().success());
    world.assert_no_processes_left(SETTLE);
}

/// The eval tool's `language` enum and the reset tool's, and the eval description's words.
fn eval_languages(world: &World) -> (Vec<String>, Vec<String>, String) {
    let mut command = world.command();
    command.env_remove("VIRTUAL_ENV");
    let mut server = RawMcp::start_command(command);
    let listed = server.request("tools/list", serde_json::json!({}));
    assert!(server.stop().success());
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} tool in {listed}"))
    };
    let eval = tool("eval");
    let codes = |value: &serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .expect("an enum")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let eval_enum = codes(
        &eval["inputSchema"]["properties"]["cells"]["items"]["properties"]["language"]["enum"],
    );
    let reset_enum = codes(&tool("reset")["inputSchema"]["properties"]["language"]["enum"]);
    let description = eval["description"].as_str().unwrap_or_default().to_string();
    (eval_enum, reset_enum, description)
}

/// Issue 42 item 6: the eval tool names only the usable languages, as the anchor's tool
/// omits an unavailable backend: Python disabled, or its interpreter unusable, is left out
/// of the description and of the enums.
#[test]
fn the_tools_name_only_usable_languages() {
    let world = World::new();
    let (eval, reset, description) = eval_languages(&world);
    assert_eq!(eval, ["py", "js", "lua"]);
    assert_eq!(reset, ["py", "js", "lua"]);
    assert!(description.contains("Python (py)") && description.contains("matplotlib"));
    for config in [
        "[python]\nenabled = false\n",
        "[python]\ninterpreter = \"/nonexistent/python3\"\n",
    ] {
        let world = World::with_config(config);
        let (eval, reset, description) = eval_languages(&world);
        assert_eq!(eval, ["js", "lua"], "{config}");
        assert_eq!(reset, ["js", "lua"], "{config}");
        assert!(
            description.starts_with(
                "Run code cells in persistent JavaScript (js) and Lua (lua) runtimes."
            ) && !description.contains("Python")
                && !description.contains("matplotlib"),
            "{config}: {description}"
        );
    }
    let world = World::with_config("[python]\nenabled = false\n[lua]\nenabled = false\n");
    let (eval, _, description) = eval_languages(&world);
    assert_eq!(eval, ["js"]);
    assert!(description.starts_with("Run code cells in persistent JavaScript (js) runtime."));
}

/// Issue 42 item 6: the text view gives every cell its status and duration, as the anchor's
/// result view does (each cell with its status, duration and output).
#[test]
fn every_cell_has_its_status_and_duration_in_the_text_view() {
    let world = World::new();
    let mut server = RawMcp::start(&world);
    let (is_error, text) = server.eval(serde_json::json!([
        {"language": "lua", "code": "print('one')"},
        {"language": "js", "code": "await new Promise((done) => setTimeout(done, 1200)); 'two'"},
        {"language": "lua", "code": "error('three')"},
        {"language": "lua", "code": "print('never')"},
    ]));
    assert!(is_error, "{text}");
    let ends: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('(') && l.ends_with(')'))
        .collect();
    assert_eq!(ends.len(), 4, "{text}");
    assert!(
        ends[0].starts_with("(complete in ") && ends[0].ends_with(" ms)"),
        "{text}"
    );
    // Over a second, in seconds with a tenth.
    let seconds: f64 = ends[1]
        .trim_start_matches("(complete in ")
        .trim_end_matches(" s)")
        .parse()
        .unwrap_or_else(|_| panic!("seconds in {:?}", ends[1]));
    assert!(seconds >= 1.2, "{text}");
    assert!(ends[2].starts_with("(error after "), "{text}");
    assert_eq!(ends[3], "(skipped: an earlier cell failed)", "{text}");
    assert!(server.stop().success());
    world.assert_no_processes_left(SETTLE);
}
