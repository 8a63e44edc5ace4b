//! The clients of a daemon on the network, through the real binary with real workers: the
//! Rust client crate over `wss://` (streaming events, a tool call, a background cell and
//! `wait`, in py, js and lua, compared with the same over the Unix socket), the CLI's
//! `--connect`, and the Python client.

mod common;

use cellvisor_client::daemon::{Client, ClientError, Remote, Token, ToolCall};
use cellvisor_client::EvalRequest;
use common::net::NetDaemon;
use common::{Run, World};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A cell printing two lines, one that calls the tool `add`, one that prints `a`, runs about
/// a second and prints `b`, per language.
const CELLS: [(&str, &str, &str, &str); 3] = [
    (
        "py",
        "print('one', flush=True)\nprint('two')",
        "print(tool.add(a=2, b=3))",
        "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')",
    ),
    (
        "js",
        "text('one'); text('two')",
        "text(await tool.add({a: 2, b: 3}))",
        "text('a'); await new Promise((resolve) => setTimeout(resolve, 1000)); text('b')",
    ),
    (
        "lua",
        "print('one')\nprint('two')",
        "print(tool.add{a = 2, b = 3})",
        "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 1 do end\nprint('b')",
    ),
];

/// Keys whose values differ between any two runs (ids, timings, the node).
const VARYING: &[&str] = &["cell_id", "duration_ms", "request_id", "node"];

/// `value` without the [`VARYING`] keys, at any depth.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !VARYING.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// What a stream of `eval/event` params says, independent of how output was chunked: the
/// event kinds in order (consecutive outputs as one) and all the output.
fn event_summary(events: &[Value]) -> Value {
    let mut kinds: Vec<String> = Vec::new();
    let mut text = String::new();
    for event in events {
        let kind = event["event"].as_str().unwrap_or("?").to_string();
        if kind == "output" {
            text.push_str(event["text"].as_str().unwrap_or_default());
        }
        if kinds.last() != Some(&kind) || kind != "output" {
            kinds.push(kind);
        }
    }
    json!({"kinds": kinds, "text": text})
}

fn request(session: &str, cells: Value, tools: Value) -> EvalRequest {
    serde_json::from_value(json!({"session": session, "cells": cells, "tools": tools}))
        .expect("a request")
}

fn add(call: &ToolCall) -> Result<Value, String> {
    match (call.arguments["a"].as_f64(), call.arguments["b"].as_f64()) {
        (Some(a), Some(b)) if call.name == "add" => Ok(json!(a + b)),
        _ => Err(format!("add takes numbers a and b, not {}", call.arguments)),
    }
}

/// The three things a host does, in one language: what came back, without ids and timings.
async fn scenario(client: &mut Client, session: &str, language: &str) -> Value {
    let (_, stream, tool, background) = CELLS
        .iter()
        .find(|c| c.0 == language)
        .copied()
        .expect("a language");
    let cell = |code: &str| json!([{"language": language, "code": code}]);

    let mut events = Vec::new();
    let streamed = client
        .eval(&request(session, cell(stream), json!([])), |e| {
            events.push(e.clone())
        })
        .await
        .expect("a streamed eval");
    let mut streamed = serde_json::to_value(streamed).expect("JSON");
    without_usage(&mut streamed);
    assert_eq!(
        streamed["cells"][0]["output"], "one\ntwo\n",
        "{language}: {streamed:#}"
    );
    let summary = event_summary(&events);
    assert_eq!(summary["text"], "one\ntwo\n", "{language}: {events:#?}");

    let mut calls = Vec::new();
    let tools = json!([{"name": "add", "description": "Adds two numbers",
        "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]);
    let tooled = client
        .eval_with_tools(
            &request(session, cell(tool), tools),
            |_| {},
            |call| {
                calls.push(call.arguments.clone());
                add(call)
            },
        )
        .await
        .expect("an eval with a tool");
    let mut tooled = serde_json::to_value(tooled).expect("JSON");
    without_usage(&mut tooled);
    let output = tooled["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(
        output == "5\n" || output == "5.0\n",
        "{language}: {tooled:#}"
    );
    assert_eq!(calls, vec![json!({"a": 2, "b": 3})], "{language}");

    let yielded = client
        .eval(
            &request(
                session,
                json!([{"language": language, "code": background, "yield_time_ms": 300}]),
                json!([]),
            ),
            |_| {},
        )
        .await
        .expect("a background cell");
    let first = &yielded.cells[0];
    assert_eq!(
        first.report.status,
        cellvisor_client::CellStatus::Running,
        "{language}: {yielded:?}"
    );
    let mut output = first.report.output.clone();
    let last = loop {
        let answer = client
            .call(
                "wait",
                json!({"session": session, "cell_id": first.cell_id, "yield_time_ms": 5000}),
            )
            .await
            .expect("wait");
        output.push_str(answer["output"].as_str().unwrap_or_default());
        if answer["status"] != "running" {
            break answer;
        }
    };
    assert_eq!(output, "a\nb\n", "{language}: {last:#}");
    json!({
        "streamed": normalized(&streamed),
        "events": summary,
        "tool": normalized(&tooled),
        "background": {"first": first.report.status, "output": output,
                       "last": normalized(&last)["status"]},
    })
}

fn token_file(net: &NetDaemon) -> PathBuf {
    net.files.path().join("token")
}

fn ca(net: &NetDaemon) -> &Path {
    &net.tls.as_ref().expect("a TLS daemon").cert
}

fn remote(net: &NetDaemon) -> Remote {
    let mut remote = Remote::new(&format!("wss://127.0.0.1:{}", net.port)).expect("a URL");
    remote.token = Some(Token::from_file(&token_file(net), None).expect("the token"));
    remote.ca_file = Some(ca(net).to_path_buf());
    remote
}

/// A result without its cells' `usage`: CPU and wall time differ from run to run, whatever
/// the transport.
fn without_usage(result: &mut Value) {
    for cell in result["cells"].as_array_mut().into_iter().flatten() {
        if let Some(cell) = cell.as_object_mut() {
            cell.remove("usage");
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn the_rust_client_over_wss_gets_what_the_unix_socket_gets() {
    let net = NetDaemon::start(true, "", "");
    runtime().block_on(async {
        let mut ws = Client::connect_remote(&remote(&net))
            .await
            .expect("connected over wss");
        let mut unix = Client::connect(&net.daemon.socket)
            .await
            .expect("connected to the socket");
        for (language, ..) in CELLS {
            let over_ws = scenario(&mut ws, &format!("ws-{language}"), language).await;
            let over_unix = scenario(&mut unix, &format!("unix-{language}"), language).await;
            assert_eq!(over_ws, over_unix, "{language}: the two transports differ");
        }

        // A connection bound to a session serves it and refuses another.
        let mut bound = remote(&net);
        bound.session = Some("ws-py".into());
        let mut bound = Client::connect_remote(&bound).await.expect("bound");
        let cell = json!([{"language": "py", "code": "print('bound')"}]);
        let served = bound
            .eval(&request("ws-py", cell.clone(), json!([])), |_| {})
            .await
            .expect("its own session");
        assert_eq!(served.cells[0].report.output, "bound\n");
        match bound.eval(&request("other", cell, json!([])), |_| {}).await {
            Err(ClientError::Rpc(error)) => assert_eq!(error.code, -32004, "{error:?}"),
            other => panic!("another session on a bound connection: {other:?}"),
        }

        // A wrong token and an untrusted certificate say so.
        let mut wrong = remote(&net);
        wrong.token = Some(Token::new("not-the-token", "the test's wrong token"));
        let refused = Client::connect_remote(&wrong).await.err().expect("refused");
        assert!(
            matches!(&refused, ClientError::Unauthorized { token: Some(t), .. } if t == "the test's wrong token"),
            "{refused:?}"
        );
        let mut untrusted = remote(&net);
        let other_ca = net.files.path().join("other");
        std::fs::create_dir_all(&other_ca).expect("dir");
        untrusted.ca_file = Some(common::net::TestCert::make(&other_ca).cert);
        let refused = Client::connect_remote(&untrusted)
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(&refused, ClientError::Tls { .. }) && refused.to_string().contains("not trusted"),
            "{refused}"
        );
    });
    net.daemon.stop();
}

/// `cellvisor ARGS` in `world`, with no network variables from the caller's environment.
fn cli<S: AsRef<std::ffi::OsStr>>(world: &World, args: &[S], env: &[(&str, &str)]) -> Run {
    let mut command = world.command();
    for name in [
        "CELLVISOR_CONNECT",
        "CELLVISOR_TOKEN_FILE",
        "CELLVISOR_TLS_CA",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    Run::from(command.args(args).output().expect("run cellvisor"))
}

#[test]
fn the_cli_with_connect_runs_eval_status_and_wait_on_the_remote_daemon() {
    let net = NetDaemon::start(true, "", "");
    let url = format!("wss://127.0.0.1:{}", net.port);
    let token = token_file(&net).display().to_string();
    let cert = ca(&net).display().to_string();
    let flags = ["--connect", &url, "--token-file", &token, "--tls-ca", &cert];
    let with = |args: &[&str]| -> Vec<String> {
        flags.iter().chain(args).map(|a| a.to_string()).collect()
    };
    // A world of its own, without a daemon: a command that fell back to the local socket
    // would start one here.
    let here = World::new();

    let eval = cli(
        &here,
        &with(&["eval", "-s", "cli", "x = 6 * 7\nprint(x)"]),
        &[],
    );
    eval.assert_code(0);
    assert_eq!(eval.stdout, "42\n");

    let background = cli(
        &here,
        &with(&[
            "eval",
            "-s",
            "cli",
            "--yield-time-ms",
            "300",
            "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint(x + 1)",
        ]),
        &[],
    );
    background.assert_code(0);
    assert_eq!(background.stdout, "a\n", "{}", background.stderr);
    let id = background
        .stderr
        .split("`cellvisor wait ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no cell id in {:?}", background.stderr))
        .to_string();

    let status = cli(&here, &with(&["status", "--json"]), &[]);
    status.assert_code(0);
    let view = status.json();
    let rows = &view["sessions"];
    let row = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["session"] == "cli"))
        .unwrap_or_else(|| panic!("no row for session cli: {rows:#}"));
    assert_eq!(row["state"], "busy", "{row:#}");

    let wait = cli(&here, &with(&["wait", &id, "-s", "cli"]), &[]);
    wait.assert_code(0);
    assert_eq!(wait.stdout, "43\n", "{}", wait.stderr);

    // The same through the environment variables.
    let by_env = cli(
        &here,
        &["status"],
        &[
            ("CELLVISOR_CONNECT", &url),
            ("CELLVISOR_TOKEN_FILE", &token),
            ("CELLVISOR_TLS_CA", &cert),
        ],
    );
    by_env.assert_code(0);
    assert!(by_env.stdout.contains("cli"), "{}", by_env.stdout);

    // A wrong token, none, and an untrusted certificate: each says what to fix.
    let wrong = net.files.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token\n").expect("a token file");
    let wrong = wrong.display().to_string();
    let refused = cli(
        &here,
        &[
            "--connect",
            &url,
            "--token-file",
            &wrong,
            "--tls-ca",
            &cert,
            "eval",
            "1",
        ],
        &[],
    );
    refused.assert_code(1);
    assert!(
        refused
            .stderr
            .contains(&format!("refused the token from --token-file {wrong} (401")),
        "{}",
        refused.stderr
    );
    let missing = cli(
        &here,
        &["--connect", &url, "--tls-ca", &cert, "status"],
        &[],
    );
    missing.assert_code(1);
    assert!(
        missing.stderr.contains("no token was given")
            && missing
                .stderr
                .contains("--token-file FILE (or $CELLVISOR_TOKEN_FILE)"),
        "{}",
        missing.stderr
    );
    let untrusted = cli(
        &here,
        &["--connect", &url, "--token-file", &token, "status"],
        &[],
    );
    untrusted.assert_code(1);
    assert!(
        untrusted.stderr.contains("not trusted") && untrusted.stderr.contains("--tls-ca FILE"),
        "{}",
        untrusted.stderr
    );
    let scheme = cli(&here, &["--connect", "https://127.0.0.1:1", "status"], &[]);
    scheme.assert_code(2);
    assert!(
        scheme.stderr.contains("`https` is not ws or wss"),
        "{}",
        scheme.stderr
    );

    here.assert_no_processes_left(std::time::Duration::from_secs(2));
    net.daemon.stop();
}

/// `target/test-venv`'s python with the `websockets` package (scripts/test-venv).
fn venv_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = std::process::Command::new(root.join("scripts/test-venv"))
        .arg("websockets")
        .output()
        .expect("scripts/test-venv runs");
    assert!(
        venv.status.success(),
        "scripts/test-venv websockets: {}",
        String::from_utf8_lossy(&venv.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&venv.stdout).trim())
}

const PYTHON_HOST: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from cellvisor_client import Client, ConnectError
url, token_file, cafile = sys.argv[2:5]
events = []
tools = [{"name": "add", "description": "Adds two numbers", "input_schema": {"type": "object"}}]
with Client(url=url, token_file=token_file, cafile=cafile, timeout=60) as client:
    result = client.call(
        "eval",
        {"session": "python", "tools": tools,
         "cells": [{"language": "py", "code": "print('x', flush=True)\nprint(tool.add(a=2, b=3))"}]},
        on_event=events.append, tools={"add": lambda args: args["a"] + args["b"]})
try:
    Client(url=url, token="not-the-token", cafile=cafile)
    refused = None
except ConnectError as error:
    refused = str(error)
print(json.dumps({"output": result["cells"][0]["output"],
                  "kinds": [e["event"] for e in events], "refused": refused}))
"#;

#[test]
fn the_python_client_over_wss_runs_an_eval_with_a_tool() {
    let python = venv_python();
    let net = NetDaemon::start(true, "", "");
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(PYTHON_HOST)
        .arg(&scripts)
        .arg(format!("wss://127.0.0.1:{}", net.port))
        .arg(token_file(&net))
        .arg(ca(&net))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(answer["output"], "x\n5\n", "{answer:#}");
    assert!(
        answer["kinds"]
            .as_array()
            .is_some_and(|k| k.contains(&json!("output"))),
        "{answer:#}"
    );
    let refused = answer["refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains("refused the token") && refused.contains("401"),
        "{refused}"
    );
    net.daemon.stop();
}
