//! Reliability under abuse: what a hostile or careless client, or cell, does to a shared
//! daemon. Each test reproduces one defect of issue 14 and proves that the daemon, and every
//! other session, come through.

mod common;

use common::daemon::Daemon;
use common::{cells, nobody, rss_bytes, wait_until, World};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SETTLE: Duration = Duration::from_secs(5);

fn lua(code: &str) -> Value {
    json!({"language": "lua", "code": code})
}

#[test]
fn a_request_of_many_cells_runs_in_linear_time_and_every_cell_counts() {
    // Each cell of a request used to leave a watcher on its session until the request
    // ended, and the session polled them all on every wake-up: 15,000 cells took minutes.
    let daemon = Daemon::start_with("[cells]\nmax-cells-per-request = 20000\n");
    let mut client = daemon.client();
    let count = 15_000;
    let many: Vec<Value> = (0..count).map(|_| lua("n = (n or 0) + 1")).collect();
    let started = Instant::now();
    let result = client.eval("many", Value::Array(many));
    // A liveness bound, far above the linear run's few seconds even on a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{count} cells took {:?}",
        started.elapsed()
    );
    assert_eq!(cells(&result).len(), count);
    assert!(cells(&result).iter().all(|c| c["status"] == "complete"));
    let last = client.eval("many", json!([lua("return n")]));
    assert_eq!(last["cells"][0]["output"], format!("{count}\n"));
    daemon.stop();
}

#[test]
fn a_request_over_the_cell_cap_is_refused_with_the_key_to_raise() {
    let daemon = Daemon::start_with("[cells]\nmax-cells-per-request = 3\n");
    let mut client = daemon.client();
    let four: Vec<Value> = (0..4).map(|_| lua("x = 1")).collect();
    let refused = client
        .call("eval", json!({"session": "s", "cells": four}))
        .expect_err("over the cap");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("4 cells")
            && message.contains("at most 3")
            && message.contains("cells.max-cells-per-request"),
        "{refused}"
    );
    let three: Vec<Value> = (0..3).map(|_| lua("x = 1")).collect();
    client.eval("s", Value::Array(three));
    daemon.stop();
}

/// `cellvisor ARGS` as `NOBODY` in `world`, with credentials in its environment.
fn as_nobody(world: &World, args: &[&str]) -> common::Run {
    let output = nobody::as_nobody(world, args)
        // Secrets of the user: each fits an allowed prefix or the old allowlist.
        .env("LC_API_TOKEN", "lc-secret-value")
        .env("XDG_SESSION_TOKEN", "xdg-secret-value")
        .env("SSH_AUTH_SOCK", "/tmp/agent-secret.sock")
        .env("CELLVISOR_TEST_PASSWORD", "daemon-secret-value")
        .output()
        .expect("setpriv runs");
    common::Run::from(output)
}

#[test]
fn cells_cannot_read_the_daemons_or_a_workers_environment() {
    if !nobody::can_run_as_nobody("to run the daemon as an unprivileged user") {
        return;
    }
    // The interpreter must be reachable by the unprivileged user (pyenv lives under /root).
    let world = World::with_config(
        "[python]\ninterpreter = \"/usr/bin/python3\"\n[daemon]\nidle-exit = \"0s\"\n",
    );
    nobody::give_to_nobody(&world);
    let peek = r#"
import json, os
def peek(pid):
    try:
        return "READ " + open("/proc/%d/environ" % pid, "rb").read().decode("utf-8", "replace")
    except OSError as e:
        return "refused: " + type(e).__name__
shim = os.getppid()
daemon = int(open("/proc/%d/stat" % shim).read().rsplit(")", 1)[1].split()[1])
print(json.dumps({"shim": peek(shim), "daemon": peek(daemon), "own": dict(os.environ)}))
"#;
    let run = as_nobody(&world, &["eval", "--json", "-l", "py", peek]);
    run.assert_code(0);
    let result = run.json();
    let seen: Value =
        serde_json::from_str(cells(&result)[0]["output"].as_str().expect("output").trim())
            .expect("the cell printed JSON");
    assert!(
        seen["shim"]
            .as_str()
            .unwrap_or_default()
            .starts_with("refused"),
        "{seen:#}"
    );
    assert!(
        seen["daemon"]
            .as_str()
            .unwrap_or_default()
            .starts_with("refused"),
        "{seen:#}"
    );
    let own = seen["own"].as_object().expect("environment");
    for secret in [
        "LC_API_TOKEN",
        "XDG_SESSION_TOKEN",
        "SSH_AUTH_SOCK",
        "CELLVISOR_TEST_PASSWORD",
    ] {
        assert!(
            !own.contains_key(secret),
            "{secret} reached the cell: {seen:#}"
        );
    }
    // A Lua worker runs cells in itself; its parent is the daemon.
    let lua_peek = r#"
local stat = io.open("/proc/self/stat"):read("a")
local ppid = stat:match("%) %S+ (%d+)")
local f, err = io.open("/proc/" .. ppid .. "/environ")
print(f and ("READ " .. f:read("a")) or ("refused: " .. tostring(err)))
"#;
    let run = as_nobody(&world, &["eval", "--json", "-l", "lua", lua_peek]);
    let result = run.json();
    let said = cells(&result)[0]["output"].as_str().unwrap_or_default();
    assert!(said.starts_with("refused"), "{said}");
    // Status still samples our own (now non-dumpable) workers.
    let status = as_nobody(&world, &["status", "--json"]);
    status.assert_code(0);
    let view: Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let rows = view["sessions"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for row in rows {
        assert!(row["rss_bytes"].as_u64().unwrap_or(0) > 0, "{row:#}");
    }
    let daemon_pid = world
        .processes()
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(5).any(|w| w == b"serve"))
        })
        .expect("the daemon runs");
    let owner = std::fs::metadata(format!("/proc/{daemon_pid}/environ"))
        .expect("proc entry")
        .uid();
    assert_eq!(owner, 0, "a non-dumpable process's environ belongs to root");
    as_nobody(&world, &["stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn json_rpc_refuses_an_object_id_and_positional_params() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client.send_line(r#"{"jsonrpc": "2.0", "id": {"a": 1}, "method": "status", "params": {}}"#);
    let refused = client.read().expect("answer");
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("id must be"));
    client.send_line(r#"{"jsonrpc": "2.0", "id": 5, "method": "close", "params": ["s", "py"]}"#);
    let refused = client.read().expect("answer");
    assert_eq!(refused["id"], 5, "{refused}");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("object"));
    // The connection still serves proper requests.
    client.call("status", json!({})).expect("status");
    daemon.stop();
}

#[test]
fn a_crashed_python_names_one_exit_code() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let result = client.eval(
        "crash",
        json!([{"language": "py", "code": "import os; os._exit(3)"}]),
    );
    let output = result["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(output.contains("python exited with code 3"), "{output}");
    assert!(!output.contains("(exited with code"), "{output}");
    daemon.stop();
}

fn py(code: &str) -> Value {
    json!({"language": "py", "code": code})
}

#[test]
fn a_python_cell_closing_its_standard_streams_breaks_only_itself() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    client.eval("s", json!([py("import os, sys\nos.close(1)\nos.close(2)")]));
    let after = client.eval(
        "s",
        json!([py(
            "import sys\nprint('out again')\nprint('err again', file=sys.stderr)"
        )]),
    );
    assert_eq!(after["cells"][0]["status"], "complete", "{after:#}");
    assert_eq!(after["cells"][0]["output"], "out again\nerr again\n");
    client.eval("s", json!([py("import sys\nsys.stdout.close()")]));
    let after = client.eval("s", json!([py("print('and again')")]));
    assert_eq!(after["cells"][0]["output"], "and again\n", "{after:#}");
    daemon.stop();
}

#[test]
fn python_keeps_the_sources_of_recent_cells_only() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let trivial: Vec<Value> = (0..300).map(|i| py(&format!("v{i} = {i}"))).collect();
    client.eval("s", Value::Array(trivial));
    // One-MB cells: four fit in the byte budget (4 MiB), not five.
    let big: Vec<Value> = (0..6)
        .map(|i| py(&format!("s{i} = 1\n#{}", "x".repeat(1 << 20))))
        .collect();
    client.eval("s", Value::Array(big));
    let defined = client.eval(
        "s",
        json!([py("def boom():\n    raise ValueError('here')")]),
    );
    assert_eq!(defined["cells"][0]["status"], "complete");
    let result = client.eval(
        "s",
        json!([
            py("import linecache\n\
             kept = [k for k in linecache.cache if k.startswith('<cell')]\n\
             size = sum(len(''.join(linecache.cache[k][2])) for k in kept)\n\
             print(len(kept) <= 200, size <= 5 << 20)"),
            py("boom()")
        ]),
    );
    assert_eq!(result["cells"][0]["output"], "True True\n", "{result:#}");
    // The traceback of a recent cell still quotes its code.
    let traceback = result["cells"][1]["output"].as_str().unwrap_or_default();
    assert!(
        traceback.contains("raise ValueError('here')"),
        "{traceback}"
    );
    daemon.stop();
}

#[test]
fn a_stopped_python_interpreter_is_detected_by_its_shim() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let stop_self = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)";
    let result = client.eval(
        "s",
        json!([{"language": "py", "code": stop_self, "timeout": 60}]),
    );
    let cell = &result["cells"][0];
    // Not the timeout (60 s) and not blamed on the cell's duration: the shim saw it.
    assert_eq!(cell["status"], "error", "{cell:#}");
    let output = cell["output"].as_str().unwrap_or_default();
    assert!(output.contains("was stopped by a signal"), "{output}");
    let next = client.eval("s", json!([py("print('fresh')")]));
    assert_eq!(next["cells"][0]["output"], "fresh\n", "{next:#}");
    daemon.stop();
}

#[test]
fn a_client_that_never_reads_is_bounded_then_dropped() {
    use std::io::{Read, Write};
    let daemon = Daemon::start_with(
        "[daemon]\nmax-pending-requests = 16\nstalled-client-timeout = \"1s\"\n",
    );
    let mut flood = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("connect");
    flood
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let line = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"status\", \"params\": {}}\n";
    // Writes until the daemon stops reading (the write times out) or drops us.
    let mut written = 0usize;
    while written < 50_000 && flood.write_all(line).is_ok() {
        written += 1;
    }
    assert!(
        written < 50_000,
        "the daemon kept reading a client that reads nothing"
    );
    // Past the stall timeout the daemon drops the connection: what is buffered, then EOF.
    std::thread::sleep(Duration::from_secs(3));
    flood
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut rest = Vec::new();
    // An EOF, or a reset when requests were still unread on the daemon's side: either way
    // the daemon closed it; a read timeout would mean it is still open.
    let ended = flood.read_to_end(&mut rest);
    let dropped = match &ended {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(dropped, "the stalled connection stayed open: {ended:?}");
    // Every other client is served meanwhile and after.
    let mut other = daemon.client();
    other.eval("s", json!([lua("return 1")]));
    daemon.stop();
}

#[test]
fn artifacts_never_follow_planted_links_and_stay_under_their_cap() {
    let daemon =
        Daemon::start_with("[output]\nmax-bytes = \"1KiB\"\nartifact-max-total = \"1MiB\"\n");
    let mut client = daemon.client();
    let plant = r#"
import os
d = os.environ["CELLVISOR_ARTIFACT_DIR"]
os.makedirs(d, exist_ok=True)
victim = os.path.abspath("victim.txt")
open(victim, "w").write("precious")
for i in range(0, 100):
    os.symlink(victim, os.path.join(d, "s-py-%d-%d.txt" % (os.getppid(), i)))
os.symlink(victim, os.path.join(d, "evil.txt"))
print(victim)
"#;
    let planted = client.eval("s", json!([py(plant)]));
    assert_eq!(planted["cells"][0]["status"], "complete", "{planted:#}");
    let first = client.eval("s", json!([py("print('a' * 600_000)")]));
    let first_path = first["cells"][0]["truncation"]["artifact_path"]
        .as_str()
        .unwrap_or_else(|| panic!("kept: {first:#}"))
        .to_string();
    // The session works in its workspace (a request without `cwd`): the cell said where.
    let victim = PathBuf::from(
        planted["cells"][0]["output"]
            .as_str()
            .unwrap_or_default()
            .trim(),
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    let meta = std::fs::symlink_metadata(&first_path).expect("artifact");
    assert!(meta.is_file(), "a plain file, not the planted link");
    assert_eq!(meta.len(), 600_001);
    let refused = client.eval("s", json!([py("output('evil')")]));
    let said = refused["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(said.contains("link"), "{said}");
    assert!(!said.contains("precious"), "{said}");
    // A second big output needs room: the oldest artifact goes.
    let second = client.eval("s", json!([py("print('b' * 600_000)")]));
    let second_path = second["cells"][0]["truncation"]["artifact_path"]
        .as_str()
        .expect("kept")
        .to_string();
    assert!(
        !Path::new(&first_path).exists(),
        "the oldest artifact made room"
    );
    assert!(Path::new(&second_path).exists());
    // More than the whole cap: not kept, said so, and no partial file left behind.
    let third = client.eval("s", json!([py("print('c' * 2_000_000)")]));
    let truncation = &third["cells"][0]["truncation"];
    assert_eq!(truncation["artifact_path"], Value::Null, "{truncation:#}");
    let why = truncation["artifact_error"].as_str().unwrap_or_default();
    assert!(why.contains("output.artifact-max-total"), "{why}");
    let output = third["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(output.contains("could not be kept"), "{output}");
    let dir = Path::new(&second_path).parent().expect("dir");
    let total: u64 = std::fs::read_dir(dir)
        .expect("artifact dir")
        .flatten()
        .filter_map(|e| std::fs::symlink_metadata(e.path()).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(total <= 1 << 20, "{total} bytes in the artifact directory");
    daemon.stop();
}

fn js(code: &str) -> Value {
    json!({"language": "js", "code": code})
}

#[test]
fn javascript_engine_edges_are_errors_a_cell_can_catch() {
    // A small heap: filling it cell by cell is slow in a debug build on a loaded machine, and
    // the limit's size changes nothing about how running out of it is reported.
    let daemon = Daemon::start_with("[js]\nmemory-limit = \"32MiB\"\n");
    let mut client = daemon.client();
    client.eval("s", json!([js("globalThis.kept = 7")]));
    let deep = "let o = {}; let c = o; for (let i = 0; i < 100000; i++) { c.a = [{}]; c = c.a[0] }\n\
                try { JSON.stringify(o); 'no error' } catch (e) { `${e.name}: ${e instanceof RangeError}` }";
    let result = client.eval("s", json!([js(deep)]));
    assert_eq!(
        result["cells"][0]["output"], "RangeError: true\n",
        "{result:#}"
    );
    let cyclic = "const c = {}; c.me = c; try { JSON.stringify(c) } catch (e) { e.name }";
    let result = client.eval("s", json!([js(cyclic)]));
    assert_eq!(result["cells"][0]["output"], "TypeError\n", "{result:#}");
    let surrogate = "console.log('a\\uD800b'); print('c\\uDC00d')";
    let result = client.eval("s", json!([js(surrogate)]));
    assert_eq!(result["cells"][0]["status"], "complete", "{result:#}");
    assert_eq!(result["cells"][0]["output"], "a\u{fffd}b\nc\u{fffd}d\n");
    // Small allocations to the limit: the engine has no memory left to build its error.
    let exhaust = "let m = new Map(); for (let i = 0; ; i++) m.set(i, [i])";
    let mut exhaust_cell = js(exhaust);
    exhaust_cell["timeout"] = json!(300);
    let result = client.eval("s", json!([exhaust_cell]));
    let output = result["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(output.contains("out of memory"), "{output}");
    assert!(output.contains("32 MiB"), "{output}");
    assert!(!output.contains("Uncaught null"), "{output}");
    let after = client.eval("s", json!([js("kept")]));
    assert_eq!(
        after["cells"][0]["output"], "7\n",
        "the worker survived: {after:#}"
    );
    daemon.stop();
}

#[test]
fn lua_loads_text_only_and_runs_out_of_memory_as_an_error() {
    let daemon = Daemon::start_with("[limits]\naddress-space = \"512MiB\"\n");
    let mut client = daemon.client();
    client.eval("s", json!([lua("kept = 7")]));
    let binary = "local f = string.dump(function() return 1 end)\n\
                  local mutated = f:sub(1, 20) .. string.rep('\\255', #f - 20)\n\
                  local a, why = lua_load(f)\n\
                  local b = lua_load(mutated)\n\
                  local path = os.tmpname()\n\
                  local file = io.open(path, 'wb') file:write(f) file:close()\n\
                  local c = loadfile(path)\n\
                  local ok = pcall(dofile, path)\n\
                  os.remove(path)\n\
                  print(a == nil, b == nil, c == nil, ok, why)";
    let result = client.eval("s", json!([lua(binary)]));
    let output = result["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("true\ttrue\ttrue\tfalse\t"),
        "{result:#}"
    );
    assert!(output.contains("binary chunk"), "{output}");
    // No lua.memory-limit: the address-space rlimit would make the allocator abort.
    let exhaust = "local ok, err = pcall(function()\n\
                     local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end\n\
                   end)\n\
                   collectgarbage()\n\
                   print(ok, err)";
    let result = client.eval("s", json!([lua(exhaust)]));
    assert_eq!(
        result["cells"][0]["output"], "false\tnot enough memory\n",
        "{result:#}"
    );
    let after = client.eval("s", json!([lua("return kept")]));
    assert_eq!(
        after["cells"][0]["output"], "7\n",
        "the worker survived: {after:#}"
    );
    daemon.stop();
}

#[test]
fn the_daemon_gives_memory_back_after_a_big_request() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let pid = client.call("initialize", json!({})).expect("initialize")["pid"]
        .as_u64()
        .expect("pid");
    client.eval("s", json!([lua("x = 1")]));
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_bytes(pid);
    let big = format!("-- {}", "x".repeat(7 << 20));
    client.eval("s", json!([lua(&big), lua(&big)]));
    let settled = wait_until(Duration::from_secs(5), || {
        let now = rss_bytes(pid);
        (now < before + (8 << 20)).then_some(now).ok_or(now)
    });
    assert!(
        settled.is_ok(),
        "daemon RSS {} MiB before a 15 MB request, {} MiB after",
        before >> 20,
        settled.unwrap_or_else(|now| now) >> 20
    );
    daemon.stop();
}

/// Issue 27 item 6: thousands of connections at once, then gone: the daemon gives the
/// memory they took back, as after a big request.
#[test]
fn the_daemon_gives_memory_back_after_a_connection_spike() {
    use std::io::{BufRead, BufReader, Write};
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let pid = client.call("initialize", json!({})).expect("initialize")["pid"]
        .as_u64()
        .expect("pid");
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_bytes(pid);
    let line = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"initialize\"}\n";
    let mut spike = Vec::new();
    for _ in 0..3000 {
        let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("connect");
        stream.write_all(line).expect("send");
        spike.push(stream);
    }
    // Every connection answered: each holds its reader, writer and buffers in the daemon.
    for stream in &spike {
        let mut answer = String::new();
        BufReader::new(stream)
            .read_line(&mut answer)
            .expect("answer");
        assert!(answer.contains("\"result\""), "{answer}");
    }
    let during = rss_bytes(pid);
    drop(spike);
    let settled = wait_until(Duration::from_secs(10), || {
        let now = rss_bytes(pid);
        (now < before + (during.saturating_sub(before)) / 3)
            .then_some(now)
            .ok_or(now)
    });
    eprintln!(
        "daemon RSS {} MiB before 3000 connections, {} MiB with them, {} MiB after",
        before >> 20,
        during >> 20,
        rss_bytes(pid) >> 20
    );
    assert!(
        settled.is_ok(),
        "daemon RSS {} MiB before 3000 connections, {} MiB with them, {} MiB after",
        before >> 20,
        during >> 20,
        settled.unwrap_or_else(|now| now) >> 20
    );
    // And it still serves.
    assert!(client.call("initialize", json!({})).is_ok());
    daemon.stop();
}

#[test]
fn a_worker_that_cannot_start_for_the_process_limit_says_so_in_the_result_and_status() {
    if !nobody::can_run_as_nobody("root ignores RLIMIT_NPROC") {
        return;
    }
    // One process for the user: a worker's first thread is already one too many.
    let world = World::with_config("[limits]\nprocesses = 1\n[daemon]\nidle-exit = \"0s\"\n");
    nobody::give_to_nobody(&world);
    let run = as_nobody(&world, &["eval", "--json", "-l", "js", "1"]);
    let result = run.json();
    let output = cells(&result)[0]["output"].as_str().unwrap_or_default();
    assert!(output.contains("RLIMIT_NPROC"), "{output}");
    let status = as_nobody(&world, &["status", "--json"]);
    let view: Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let row = &view["sessions"][0];
    assert_eq!(row["state"], "failed", "{row:#}");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("RLIMIT_NPROC"), "{row:#}");
    as_nobody(&world, &["stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}
