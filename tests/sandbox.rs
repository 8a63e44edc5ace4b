//! The sandbox end to end, on this machine's kernel (Landlock ABI 7): through the daemon, a
//! sandboxed session's Python, JavaScript and Lua cells try to reach what is not theirs (an
//! SSH key under a temp HOME, files outside their cwd, another session's artifact, store,
//! /proc files and worker, the daemon and its socket, a TCP listener) and fail with their
//! language's normal error, while everything the policy allows keeps working: the stdlib,
//! venv packages, cwd files, every prelude helper, store/load and host tools.

mod common;

use common::daemon::{Client, Daemon};
use common::{path_str, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// What the tests plant, and the daemon they run against.
struct Setup {
    daemon: Daemon,
    home: PathBuf,
    /// The victim session's spilled artifact, store file and worker.
    artifact: PathBuf,
    store_file: PathBuf,
    victim_pid: u32,
    /// The attacker's cwd.
    cwd: PathBuf,
}

/// A daemon with small outputs (so the victim spills) and a temp HOME holding `~/.ssh/id_test`;
/// `extra` goes into its config file. The victim session runs unsandboxed.
fn setup(extra: &str) -> Setup {
    let world = World::new();
    let home = world.dir.path().join("home");
    std::fs::write(
        world.config_path(),
        format!(
            "{SHORT_INTERVALS}[output]\nmax-bytes = \"1KiB\"\n[env]\nset = {{ HOME = \"{}\" }}\n{extra}",
            path_str(&home)
        ),
    )
    .expect("config");
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh dir");
    std::fs::write(home.join(".ssh/id_test"), "PRIVATE KEY\n").expect("key");
    let victim_cwd = daemon.world.work_dir().join("victim");
    let cwd = daemon.world.work_dir().join("attacker");
    std::fs::create_dir_all(&victim_cwd).expect("victim cwd");
    std::fs::create_dir_all(&cwd).expect("attacker cwd");
    let victim = client.eval_in(
        "victim",
        &victim_cwd,
        json!([{"language": "py", "code": "store('secret', {'token': 'VICTIM'})\nprint('v' * 5000)"}]),
    );
    let artifact = PathBuf::from(
        victim["cells"][0]["truncation"]["artifact_path"]
            .as_str()
            .unwrap_or_else(|| panic!("the victim spilled: {victim:#}")),
    );
    let store_file = daemon
        .world
        .dir
        .path()
        .join("state/cellvisor/store/victim/secret.json");
    assert!(store_file.is_file(), "the victim stored its value");
    let victim_pid = worker_pid(&mut client, "victim", "py");
    Setup {
        daemon,
        home,
        artifact,
        store_file,
        victim_pid,
        cwd,
    }
}

fn worker_pid(client: &mut Client, session: &str, language: &str) -> u32 {
    let rows = client.call("status", json!({})).expect("status");
    rows.as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["session"] == session && r["language"] == language)
        })
        .and_then(|row| row["pid"].as_u64())
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("no {language} worker for {session}: {rows:#}"))
}

/// `eval` of `cells` in `session` under a request sandbox, answering host tool calls with
/// their own arguments.
fn sandboxed_eval(client: &mut Client, session: &str, cwd: &Path, cells: Value) -> Value {
    let tools = json!([{"name": "echo", "description": "Echoes its arguments",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}]);
    let mut params = json!({"session": session, "cwd": cwd, "cells": cells, "tools": tools,
                            "sandbox": {"enabled": true}});
    // Python runs on the test venv (matplotlib) where there is one.
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv");
    if venv.join("bin/python3").exists() {
        params["virtual_env"] = json!(venv);
    }
    let id = client.send("eval", params);
    loop {
        let message = client.read().expect("connection open");
        if message["method"] == "tool/call" {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"echoed": message["params"]["arguments"]}});
            client.send_line(&answer.to_string());
        } else if message["id"] == json!(id) {
            return message
                .get("result")
                .cloned()
                .unwrap_or_else(|| panic!("eval refused: {message:#}"));
        }
    }
}

fn output(result: &Value, index: usize) -> String {
    let cell = &result["cells"][index];
    assert_eq!(cell["status"], "complete", "{result:#}");
    cell["output"].as_str().unwrap_or_default().to_string()
}

/// Each `name: outcome` line of a cell's output.
fn outcomes(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn assert_denied(outcomes: &std::collections::BTreeMap<String, String>, what: &[&str], all: &str) {
    for name in what {
        let outcome = outcomes.get(*name).map(String::as_str).unwrap_or("missing");
        assert!(
            outcome.starts_with("denied"),
            "{name} should be denied, got {outcome:?}\n{all}"
        );
    }
}

/// A non-blocking TCP listener on loopback, and its port: what a cell's connection reached
/// shows as an accepted connection.
fn loopback_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

fn daemon_pid(worker: u32) -> u32 {
    cellvisor_os::process_tree::stat(worker)
        .map(|s| s.ppid)
        .expect("the worker's parent")
}

#[test]
fn python_cells_in_the_sandbox_reach_only_what_the_policy_allows() {
    python_cells_reach_only_what_the_policy_allows(false);
}

/// The same attempts from a sandboxed session whose runner was forked by a zygote (which
/// confines itself with its worker's rules before it runs anything of the session).
#[test]
fn python_cells_of_a_forked_sandboxed_session_reach_only_what_the_policy_allows() {
    python_cells_reach_only_what_the_policy_allows(true);
}

/// The venv `sandboxed_eval` runs Python on, when there is one.
fn test_venv() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv");
    venv.join("bin/python3").exists().then_some(venv)
}

/// Workers forked so far, by every zygote.
fn forks(client: &mut Client) -> u64 {
    let rows = client.call("zygotes", json!({})).expect("zygotes answers");
    let rows = rows.as_array().cloned().unwrap_or_default();
    rows.iter().filter_map(|r| r["forks"].as_u64()).sum()
}

/// Starts the zygote of `sandboxed_eval`'s Python (through an unsandboxed session on it) and
/// waits until it is ready; says how many workers had been forked then.
fn warm_zygote(client: &mut Client, cwd: &Path) -> u64 {
    let mut params = json!({"session": "warm", "cwd": cwd,
                            "cells": [{"language": "py", "code": "print(1)"}]});
    if let Some(venv) = test_venv() {
        params["virtual_env"] = json!(venv);
    }
    client.call("eval", params).expect("eval answers");
    let venv = test_venv().map(|v| json!(v)).unwrap_or(Value::Null);
    let ready = common::wait_until(std::time::Duration::from_secs(30), || {
        let rows = client.call("zygotes", json!({})).expect("zygotes answers");
        let rows = rows.as_array().cloned().unwrap_or_default();
        let found = rows.iter().any(|row| {
            row["state"] == "ready" && row.get("virtual_env").unwrap_or(&Value::Null) == &venv
        });
        found.then_some(()).ok_or(rows)
    });
    if let Err(rows) = ready {
        panic!("no zygote for the sandboxed sessions' Python became ready: {rows:?}");
    }
    forks(client)
}

fn python_cells_reach_only_what_the_policy_allows(forked: bool) {
    let s = setup(if forked {
        // No prewarmed pool: its refill is a fork too, at a moment of its own, and the count
        // below must be the attacker's alone.
        "[python]\nprewarm = 0\n"
    } else {
        "[python]\nzygote = false\n"
    });
    let mut client = s.daemon.client();
    let forks_before = forked.then(|| warm_zygote(&mut client, &s.cwd));
    let (listener, port) = loopback_listener();
    // The attacker's worker is started by this request; the daemon is the victim's parent.
    let daemon_pid = daemon_pid(s.victim_pid);
    let attack = format!(
        r#"import os, signal, socket
def attempt(name, action):
    try:
        action()
        print(name + ": ALLOWED")
    except OSError as error:
        print(name + ": denied " + type(error).__name__)
def connect_daemon():
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect({socket:?})
    try:
        sock.sendall(b'{{"jsonrpc": "2.0", "id": 1, "method": "status"}}\n')
    except BrokenPipeError:
        pass  # the daemon answered and hung up first
    answer = sock.makefile().readline()
    if '"result"' in answer or 'refused' not in answer:
        return
    raise PermissionError(answer)
attempt("ssh", lambda: open(os.path.expanduser("~/.ssh/id_test")).read())
attempt("write-outside", lambda: open({outside:?}, "w").write("x"))
attempt("write-tmp-root", lambda: open("/tmp/cellvisor-sandbox-escape", "w").write("x"))
attempt("artifact", lambda: open({artifact:?}).read())
attempt("store", lambda: open({store:?}).read())
attempt("environ", lambda: open("/proc/{victim}/environ", "rb").read())
attempt("mem", lambda: open("/proc/{victim}/mem", "rb").read(1))
attempt("signal-worker", lambda: os.kill({victim}, signal.SIGTERM))
attempt("signal-daemon", lambda: os.kill({daemon_pid}, signal.SIGTERM))
attempt("daemon-socket", connect_daemon)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5))
"#,
        socket = path_str(&s.daemon.socket),
        outside = path_str(&s.home.join("outside.txt")),
        artifact = path_str(&s.artifact),
        store = path_str(&s.store_file),
        victim = s.victim_pid,
    );
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv");
    let matplotlib = if venv.join("bin/python3").exists() {
        "import matplotlib\nprint('matplotlib:', matplotlib.__version__ is not None)"
    } else {
        "print('matplotlib: True')"
    };
    let allowed = r#"import json, os
print("json:", json.dumps({"a": 1}))
open("own.txt", "w").write("mine\n")
print("own-file:", open("own.txt").read().strip())
write("helper.txt", "b\na\na\n")
append("helper.txt", "c\n")
print("read:", read("helper.txt").split())
print("sort:", sort(read("helper.txt")).split())
print("uniq:", uniq("a\na\nb\n").split())
print("counter:", counter(["x", "x", "y"]))
print("diff:", "+b" in diff("a\n", "b\n"))
print("tree:", "helper.txt" in tree("."))
print("env:", env("HOME") is not None)
store("mine", {"n": 1})
print("load:", load("mine"))
print("tool:", tool.echo(word="hi"))
print("tmp:", open(os.path.join(os.environ["TMPDIR"], "t"), "w").write("ok"))
print("x" * 3000)"#;
    let result = sandboxed_eval(
        &mut client,
        "attacker",
        &s.cwd,
        json!([
            {"language": "py", "code": attack},
            {"language": "py", "code": matplotlib},
            {"language": "py", "code": allowed},
        ]),
    );
    if let Some(before) = forks_before {
        assert_eq!(
            forks(&mut client),
            before + 1,
            "the attacker was not forked"
        );
    }
    let attacked = output(&result, 0);
    let found = outcomes(&attacked);
    assert_denied(
        &found,
        &[
            "ssh",
            "write-outside",
            "write-tmp-root",
            "artifact",
            "store",
            "environ",
            "mem",
            "signal-worker",
            "signal-daemon",
            "daemon-socket",
            "tcp",
        ],
        &attacked,
    );
    assert!(
        listener.accept().is_err(),
        "no TCP connection reached the listener"
    );
    assert!(!s.home.join("outside.txt").exists());
    assert!(
        output(&result, 1).contains("matplotlib: True"),
        "{result:#}"
    );
    let helpers = outcomes(&output(&result, 2));
    assert_eq!(helpers["json"], r#"{"a": 1}"#);
    assert_eq!(helpers["own-file"], "mine");
    assert_eq!(helpers["read"], "['b', 'a', 'a', 'c']");
    assert_eq!(helpers["sort"], "['a', 'a', 'b', 'c']");
    assert_eq!(helpers["uniq"], "['a', 'b']");
    assert!(helpers["counter"].contains('x'), "{helpers:?}");
    for key in ["diff", "tree", "env"] {
        assert_eq!(helpers[key], "True", "{key}: {helpers:?}");
    }
    assert_eq!(helpers["load"], "{'n': 1}");
    assert!(helpers["tool"].contains("hi"), "{helpers:?}");
    assert_eq!(helpers["tmp"], "2");
    // The spilled output of its own cell is readable through output(id).
    let spilled = result["cells"][2]["truncation"]["artifact_path"]
        .as_str()
        .expect("the cell spilled")
        .to_string();
    let id = Path::new(&spilled)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("artifact id")
        .to_string();
    let reread = sandboxed_eval(
        &mut client,
        "attacker",
        &s.cwd,
        json!([{"language": "py", "code": format!("print(len(output({id:?})))")}]),
    );
    assert!(output(&reread, 0).trim().parse::<usize>().unwrap_or(0) >= 3000);

    // The victim lived through it all, and status tells the two sessions apart.
    let victim = client.eval_in(
        "victim",
        &s.cwd,
        json!([{"language": "py", "code": "print('alive')"}]),
    );
    assert_eq!(output(&victim, 0), "alive\n");
    assert_eq!(worker_pid(&mut client, "victim", "py"), s.victim_pid);
    let rows = client.call("status", json!({})).expect("status");
    let row = |session: &str| {
        rows.as_array()
            .and_then(|rows| rows.iter().find(|r| r["session"] == session).cloned())
            .unwrap_or_default()
    };
    assert!(row("victim").get("sandbox").is_none(), "{rows:#}");
    let sandbox = &row("attacker")["sandbox"];
    assert_eq!(sandbox["landlock_abi"], 7, "{rows:#}");
    assert_eq!(
        sandbox["enforced"],
        json!(["files", "tcp", "scopes"]),
        "{rows:#}"
    );
    assert_eq!(sandbox["network"], "none");
    s.daemon.stop();
}

#[test]
fn javascript_and_lua_cells_in_the_sandbox_reach_only_what_the_policy_allows() {
    let s = setup("");
    let mut client = s.daemon.client();
    let (listener, port) = loopback_listener();
    let daemon_pid = daemon_pid(s.victim_pid);
    let js = format!(
        r#"const fs = require("fs");
const {{ execSync }} = require("child_process");
function attempt(name, action) {{
  try {{ action(); text(name + ": ALLOWED"); }}
  catch (e) {{ text(name + ": denied " + (e.code || e.message)); }}
}}
attempt("ssh", () => fs.readFileSync({ssh:?}, "utf8"));
attempt("write-outside", () => fs.writeFileSync({outside:?}, "x"));
attempt("artifact", () => fs.readFileSync({artifact:?}, "utf8"));
attempt("store", () => fs.readFileSync({store:?}, "utf8"));
attempt("environ", () => fs.readFileSync("/proc/{victim}/environ"));
attempt("signal-worker", () => execSync("kill -TERM {victim}", {{stdio: "pipe"}}));
attempt("signal-daemon", () => execSync("kill -TERM {daemon_pid}", {{stdio: "pipe"}}));
try {{ await fetch("http://127.0.0.1:{port}/"); text("tcp: ALLOWED"); }}
catch (e) {{ text("tcp: denied " + e.message); }}
fs.writeFileSync("own.txt", "mine");
text("own-file: " + fs.readFileSync("own.txt", "utf8"));
await write("helper.txt", "b\na\n");
text("read: " + (await read("helper.txt")).trim().split("\n").join(","));
store("js", 5);
text("load: " + load("js"));
text("tool: " + JSON.stringify(await tools.echo({{word: "hi"}})));"#,
        ssh = path_str(&s.home.join(".ssh/id_test")),
        outside = path_str(&s.home.join("outside.txt")),
        artifact = path_str(&s.artifact),
        store = path_str(&s.store_file),
        victim = s.victim_pid,
    );
    let lua = format!(
        r#"local function attempt(name, ok, err)
  if ok then print(name .. ": ALLOWED") else print(name .. ": denied " .. tostring(err)) end
end
attempt("ssh", io.open({ssh:?}, "r"))
attempt("write-outside", io.open({outside:?}, "w"))
attempt("artifact", io.open({artifact:?}, "r"))
attempt("store", io.open({store:?}, "r"))
attempt("environ", io.open("/proc/{victim}/environ", "r"))
attempt("signal-worker", os.execute("kill -TERM {victim} 2>/dev/null"))
attempt("signal-daemon", os.execute("kill -TERM {daemon_pid} 2>/dev/null"))
local f = assert(io.open("own-lua.txt", "w")); f:write("mine"); f:close()
print("own-file: " .. io.open("own-lua.txt"):read("a"))
write("lua-helper.txt", "z\ny\n")
print("sort: " .. sort(read("lua-helper.txt")):gsub("\n", ","))
store("lua", 6)
print("load: " .. load("lua"))
print("tool: " .. tools.echo{{word = "hi"}}.echoed.word)"#,
        ssh = path_str(&s.home.join(".ssh/id_test")),
        outside = path_str(&s.home.join("outside-lua.txt")),
        artifact = path_str(&s.artifact),
        store = path_str(&s.store_file),
        victim = s.victim_pid,
    );
    let result = sandboxed_eval(
        &mut client,
        "attacker",
        &s.cwd,
        json!([{"language": "js", "code": js}, {"language": "lua", "code": lua}]),
    );
    let denied = [
        "ssh",
        "write-outside",
        "artifact",
        "store",
        "environ",
        "signal-worker",
        "signal-daemon",
    ];
    let js_out = output(&result, 0);
    let js_found = outcomes(&js_out);
    assert_denied(&js_found, &denied, &js_out);
    assert_denied(&js_found, &["tcp"], &js_out);
    assert!(listener.accept().is_err(), "no TCP connection arrived");
    assert_eq!(js_found["own-file"], "mine");
    assert_eq!(js_found["read"], "b,a");
    assert_eq!(js_found["load"], "5");
    assert!(js_found["tool"].contains("hi"), "{js_out}");
    let lua_out = output(&result, 1);
    let lua_found = outcomes(&lua_out);
    assert_denied(&lua_found, &denied, &lua_out);
    assert_eq!(lua_found["own-file"], "mine");
    assert!(lua_found["sort"].starts_with("y,z"), "{lua_out}");
    assert_eq!(lua_found["load"], "6");
    assert_eq!(lua_found["tool"], "hi");
    assert!(!s.home.join("outside.txt").exists() && !s.home.join("outside-lua.txt").exists());
    let victim = client.eval_in(
        "victim",
        &s.cwd,
        json!([{"language": "py", "code": "print('alive')"}]),
    );
    assert_eq!(output(&victim, 0), "alive\n");
    s.daemon.stop();
}

#[test]
fn the_daemon_refuses_cells_with_the_sandbox_off_too() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let code = format!(
        r#"import socket
sock = socket.socket(socket.AF_UNIX)
sock.settimeout(10)
sock.connect({socket:?})
try:
    sock.sendall(b'{{"jsonrpc": "2.0", "id": 1, "method": "status"}}\n')
except BrokenPipeError:
    pass  # the daemon answered and hung up first
print(sock.makefile().readline())"#,
        socket = path_str(&daemon.socket)
    );
    let result = client.eval_in(
        "plain",
        &daemon.world.work_dir(),
        json!([{"language": "py", "code": code}]),
    );
    let answer = output(&result, 0);
    assert!(
        answer.contains("refused: cells may not drive the daemon"),
        "{answer}"
    );
    assert!(!answer.contains("\"result\""), "{answer}");
    // The test, not under a worker, is still served.
    assert!(client.call("status", json!({})).is_ok());
    daemon.stop();
}

#[test]
fn a_required_sandbox_the_kernel_cannot_enforce_refuses_to_start_workers() {
    let world = World::with_config(
        "[sandbox]\nenabled = true\nrequired = true\nconfine-unix-connect = true\n",
    );
    let run = world.run(&["eval", "--no-daemon", "-l", "py", "print(1)"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    for part in [
        "sandbox.confine-unix-connect",
        "needs Landlock ABI 9",
        "this kernel has Landlock ABI 7",
        "No worker was started",
    ] {
        assert!(run.stderr.contains(part), "{part}: {}", run.stderr);
    }
    assert!(world.processes().is_empty(), "no worker started");
    // What this kernel has, required, starts every language confined.
    let enforceable = world.dir.path().join("enforceable.toml");
    std::fs::write(&enforceable, "[sandbox]\nenabled = true\nrequired = true\n").expect("config");
    for (language, code) in [("py", "print(1 + 1)"), ("js", "1 + 1"), ("lua", "1 + 1")] {
        let run = world.run(&[
            "--config",
            path_str(&enforceable),
            "eval",
            "--no-daemon",
            "-l",
            language,
            code,
        ]);
        run.assert_code(0);
        assert_eq!(run.stdout, "2\n", "{language}: {}", run.stderr);
    }

    // Not required: the cell runs, with what the kernel enforces and a warning in status.
    let daemon = Daemon::start_with(
        "[sandbox]\nenabled = true\nconfine-unix-connect = true\nnetwork = \"all\"\n",
    );
    let mut client = daemon.client();
    let result = client.eval_in(
        "s",
        &daemon.world.work_dir(),
        json!([{"language": "lua", "code": "print(io.open('/root/.profile') == nil)"}]),
    );
    assert_eq!(output(&result, 0), "true\n");
    let rows = client.call("status", json!({})).expect("status");
    let sandbox = &rows[0]["sandbox"];
    assert_eq!(sandbox["enforced"], json!(["files", "scopes"]), "{rows:#}");
    let warning = sandbox["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("confine-unix-connect") && warning.contains("ABI 7"),
        "{warning}"
    );
    // A request may tighten the operator's policy, never loosen it.
    let loosened = client.call(
        "eval",
        json!({"session": "s", "cwd": daemon.world.work_dir(), "sandbox": {"enabled": false},
               "cells": [{"language": "lua", "code": "1"}]}),
    );
    let message = loosened.expect_err("refused")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("sandbox.enabled") && message.contains("only tighten"),
        "{message}"
    );
    let shown = daemon.world.run(&["config", "show"]);
    assert!(
        shown.stdout.contains("[sandbox]\nenabled = true"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("confine-unix-connect = true"),
        "{}",
        shown.stdout
    );
    let status = daemon
        .world
        .run(&["status", "--socket", path_str(&daemon.socket)]);
    assert!(
        status.stdout.contains("abi 7: files,signals (partial)"),
        "{}{}",
        status.stdout,
        status.stderr
    );
    daemon.stop();
}

#[test]
fn a_loopback_sandbox_has_a_network_of_its_own_and_the_namespace_cuts_udp_too() {
    let world = World::with_config("[sandbox]\nenabled = true\nnetwork = \"loopback\"\n");
    let (listener, tcp_port) = loopback_listener();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let code = format!(
        r#"import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
client = socket.create_connection(server.getsockname(), timeout=5)
conn, _ = server.accept()
client.sendall(b"hi")
print("own:", conn.recv(2).decode())
try:
    socket.create_connection(("127.0.0.1", {tcp}), timeout=5)
    print("host-tcp: ALLOWED")
except OSError as error:
    print("host-tcp: denied", type(error).__name__)
datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
datagram.sendto(b"escape", ("127.0.0.1", {udp}))
print("udp: sent")"#,
        tcp = tcp_port,
        udp = udp.local_addr().expect("addr").port(),
    );
    let run = world.run(&["eval", "--no-daemon", "-l", "py", &code]);
    run.assert_code(0);
    let found = outcomes(&run.stdout);
    assert_eq!(found["own"], "hi", "{}", run.stdout);
    assert_eq!(
        found["host-tcp"], "denied ConnectionRefusedError",
        "{}",
        run.stdout
    );
    assert_eq!(found["udp"], "sent");
    assert!(
        listener.accept().is_err(),
        "nothing reached the host's TCP listener"
    );
    let mut buffer = [0u8; 16];
    assert!(
        udp.recv_from(&mut buffer).is_err(),
        "the datagram stayed in the worker's namespace"
    );
    world.assert_no_processes_left(std::time::Duration::from_secs(10));
}

#[test]
fn a_sandboxed_session_asked_from_another_directory_gets_a_new_worker_confined_there() {
    let daemon = Daemon::start_with("[sandbox]\nenabled = true\n[python]\nprewarm = 1\n");
    let mut client = daemon.client();
    let first = daemon.world.work_dir().join("first");
    let second = daemon.world.work_dir().join("second");
    std::fs::create_dir_all(&first).expect("first");
    std::fs::create_dir_all(&second).expect("second");
    let write = |client: &mut Client, cwd: &Path| {
        client.eval_in(
            "moving",
            cwd,
            json!([{"language": "lua", "code": "local f, e = io.open('here.txt', 'w'); if f then f:write('x'); f:close(); print('wrote') else print(e) end"}]),
        )
    };
    let before = write(&mut client, &first);
    assert_eq!(output(&before, 0), "wrote\n");
    let pid = worker_pid(&mut client, "moving", "lua");
    let after = write(&mut client, &second);
    assert_eq!(
        output(&after, 0),
        "wrote\n",
        "the new worker may write its new cwd"
    );
    let notice = after["cells"][0]["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("sandbox") && notice.contains("new worker"),
        "{after:#}"
    );
    assert_ne!(worker_pid(&mut client, "moving", "lua"), pid);
    assert!(second.join("here.txt").is_file());
    // Under the operator's sandbox no Python worker is prewarmed: none could be used.
    let prewarmed = daemon.world.processes_running("__worker\u{0}py").len();
    assert_eq!(prewarmed, 0);
    daemon.stop();
}
