//! A uid per session (`[isolation]`), tried as an attacker would, through the real binary:
//! as root with a uid range, and as an unprivileged user (where the daemon cannot change
//! uids and says so).

mod common;

use common::daemon::{Client, Daemon};
use common::net::{free_port, TOKEN};
use common::{nobody, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// Each test's daemon has a range of its own: a daemon ends whatever runs in its range when
/// it starts (a killed predecessor's cells), so two daemons must never share one.
const RANGE: &str = "61700-61709";

fn root_only(why: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root ({why})");
    }
    root
}

/// A daemon whose sessions run as uids of `uids` (more `[python]` keys in `python_extra`), with a network listener on `port` whose
/// token file only root reads; the world's directories are opened to traversal as an
/// operator would (a session's uid must reach its own directories inside them).
fn start(uids: &str, port: u16, python_extra: &str) -> Daemon {
    let config = format!(
        "{SHORT_INTERVALS}[python]\ninterpreter = \"/usr/bin/python3\"\n{python_extra}\
         [isolation]\nlevel = \"uid\"\nuids = \"{uids}\"\n\
         [daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ninsecure-plaintext = true\n\
         token-file = \"TOKEN_FILE\"\n"
    );
    let world = World::with_config("");
    let secrets = world.dir.path().join("secrets");
    std::fs::create_dir(&secrets).expect("secrets dir");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let token = secrets.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(
        world.config_path(),
        config.replace("TOKEN_FILE", &token.display().to_string()),
    )
    .expect("config");
    let state = world.dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    for dir in [world.dir.path().to_path_buf(), world.work_dir(), state] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    }
    Daemon::start_in(world)
}

fn py(code: &str) -> Value {
    json!({"language": "py", "code": code})
}

/// The output of one cell of `language` in `session`.
fn run(client: &mut Client, session: &str, language: &str, code: &str) -> String {
    let result = client.eval(session, json!([{"language": language, "code": code}]));
    result["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn status_rows(client: &mut Client) -> Vec<Value> {
    client
        .call("status", json!({}))
        .expect("status")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn uid_of(client: &mut Client, session: &str) -> Option<u64> {
    status_rows(client)
        .into_iter()
        .find(|row| row["session"] == session)
        .and_then(|row| row["uid"].as_u64())
}

/// The ready zygote's row, once there is one.
fn ready_zygote(client: &mut Client) -> Value {
    let ready = wait_until(Duration::from_secs(60), || {
        let rows = client.call("zygotes", json!({})).expect("zygotes");
        rows.as_array()
            .and_then(|rows| rows.iter().find(|row| row["state"] == "ready").cloned())
            .ok_or(rows)
    });
    ready.unwrap_or_else(|rows| panic!("no zygote became ready: {rows}"))
}

#[test]
fn every_worker_of_a_session_runs_as_its_leased_uid_and_sessions_differ() {
    if !root_only("changing uids") {
        return;
    }
    let daemon = start(RANGE, free_port(), "");
    let mut client = daemon.client();
    let init = client.call("initialize", json!({})).expect("initialize");
    assert_eq!(init["isolation"]["level"], "uid", "{init}");
    assert_eq!(init["isolation"]["uids"], RANGE, "{init}");

    // Session a's Python worker is forked from the zygote; b's starts plainly.
    ready_zygote(&mut client);
    let py_ids = run(
        &mut client,
        "a",
        "py",
        "import os, subprocess\nprint(os.getuid(), os.getgid(), os.getgroups(), \
         subprocess.run(['id', '-u'], capture_output=True, text=True).stdout.strip())",
    );
    let js_ids = run(&mut client, "a", "js", "text(String(process.getuid()))");
    let lua_ids = run(&mut client, "a", "lua", "io.popen('id -u'):read('*l')");
    let uid = uid_of(&mut client, "a").expect("session a has a uid in status");
    assert!((61700..=61709).contains(&uid), "{uid}");
    assert_eq!(
        py_ids.trim(),
        format!("{uid} {uid} [] {uid}"),
        "python, no supplementary groups"
    );
    assert_eq!(lua_ids.trim(), uid.to_string(), "lua");
    assert_eq!(js_ids.trim(), uid.to_string(), "js");

    assert!(
        ready_zygote(&mut client)["forks"].as_u64() >= Some(1),
        "a's Python worker was forked from the zygote"
    );
    let b_py = run(&mut client, "b", "py", "import os; print(os.getuid())");
    let b = uid_of(&mut client, "b").expect("session b has a uid");
    assert_ne!(b, uid, "two sessions, two uids");
    assert_eq!(b_py.trim(), b.to_string());
    daemon.stop();
}

#[test]
fn a_cell_cannot_read_the_daemons_secrets_nor_touch_another_session() {
    if !root_only("changing uids") {
        return;
    }
    let daemon = start("61720-61729", free_port(), "");
    let mut client = daemon.client();
    let state = daemon.world.dir.path().join("state/cellvisor");
    let key = state.join("snapshots/.key");
    let token = daemon.world.dir.path().join("secrets/token");
    // Session a leaves files in its temporary directory and its store.
    let a_files = run(
        &mut client,
        "a",
        "py",
        "import os, tempfile\np = os.path.join(tempfile.gettempdir(), 'mine')\n\
         open(p, 'w').write('a secret')\nprint(p)",
    );
    let a_tmp_file = a_files.trim().to_string();
    run(&mut client, "a", "js", "store('k', 'a value'); text('ok')");
    let a_store = state.join("store/a");
    let a_worker = status_rows(&mut client)
        .into_iter()
        .find(|row| row["session"] == "a" && row["language"] == "py")
        .and_then(|row| row["pid"].as_u64())
        .expect("a's worker");
    let zygote = ready_zygote(&mut client)["pid"]
        .as_u64()
        .expect("the zygote's pid");

    let attack = format!(
        r#"import os, signal
def attempt(what, action):
    try:
        action()
        print(what, "DONE")
    except OSError as error:
        print(what, "refused", type(error).__name__)
attempt("key", lambda: open({key:?}, "rb").read())
attempt("token", lambda: open({token:?}).read())
attempt("a-tmp-read", lambda: open({a_tmp:?}).read())
attempt("a-tmp-write", lambda: open({a_tmp:?}, "w").write("x"))
attempt("a-store-list", lambda: os.listdir({a_store:?}))
attempt("a-store-write", lambda: open(os.path.join({a_store:?}, "planted"), "w").write("x"))
attempt("state-list", lambda: os.listdir({state:?}))
attempt("signal-a", lambda: os.kill({a_worker}, signal.SIGKILL))
attempt("signal-zygote", lambda: os.kill({zygote}, signal.SIGSTOP))
"#,
        key = key.display().to_string(),
        token = token.display().to_string(),
        a_tmp = a_tmp_file,
        a_store = a_store.display().to_string(),
        state = state.display().to_string(),
    );
    let output = run(&mut client, "b", "py", &attack);
    for what in [
        "key",
        "token",
        "a-tmp-read",
        "a-tmp-write",
        "a-store-list",
        "a-store-write",
        "state-list",
        "signal-a",
        "signal-zygote",
    ] {
        assert!(
            output.contains(&format!("{what} refused")),
            "{what} was not refused:\n{output}"
        );
    }
    assert!(!output.contains("DONE"), "{output}");
    // Session a's own files are still its own and intact.
    assert_eq!(
        run(
            &mut client,
            "a",
            "py",
            &format!("print(open({a_tmp_file:?}).read())")
        )
        .trim(),
        "a secret"
    );
    assert_eq!(
        run(&mut client, "a", "js", "text(load('k'))").trim(),
        "a value"
    );
    assert!(!Path::new(&a_store).join("planted").exists());
    daemon.stop();
}

#[test]
fn a_cell_cannot_drive_its_daemon_over_the_socket_or_tcp_even_with_the_token() {
    if !root_only("changing uids") {
        return;
    }
    let port = free_port();
    let daemon = start("61740-61749", port, "");
    let mut client = daemon.client();
    let socket = daemon.socket.display().to_string();
    // The cell hides its descriptors (non-dumpable) and presents the token, which it got
    // by other means than the file (which it cannot read).
    let code = format!(
        r#"import ctypes, socket
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
try:
    open({token_file:?}).read()
    print("token READ")
except OSError as error:
    print("token refused", type(error).__name__)
try:
    u = socket.socket(socket.AF_UNIX)
    u.connect({socket:?})
    u.sendall(b'{{"jsonrpc":"2.0","id":1,"method":"status"}}\n')
    print("unix answered", u.recv(300))
except OSError as error:
    print("unix refused", type(error).__name__)
s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
s.sendall(("GET /v1/rpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n").encode())
print("tcp answer", s.recv(200))"#,
        token_file = daemon
            .world
            .dir
            .path()
            .join("secrets/token")
            .display()
            .to_string(),
        token = TOKEN,
    );
    let output = run(&mut client, "c", "py", &code);
    assert!(output.contains("token refused PermissionError"), "{output}");
    assert!(
        output.contains("unix refused PermissionError")
            || output.contains("cells may not drive the daemon"),
        "{output}"
    );
    assert!(
        output.contains("HTTP/1.1 403"),
        "the cell was not refused: {output}"
    );
    daemon.stop();
}

#[test]
fn close_ends_a_setsid_double_forked_grandchild_and_the_uid_is_reused_only_after() {
    if !root_only("changing uids") {
        return;
    }
    // Python workers started plainly here (the other tests fork them from the zygote).
    let daemon = start("61710-61711", free_port(), "zygote = false\n");
    let mut client = daemon.client();
    let escape = r#"import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        while True:
            time.sleep(1)
    os._exit(0)
os.close(w)
time.sleep(0.2)
print(os.read(r, 32).decode())"#;
    let grandchild: u32 = run(&mut client, "a", "py", escape)
        .trim()
        .parse()
        .expect("the grandchild's pid");
    let a = uid_of(&mut client, "a").expect("a's uid");
    let b = {
        run(&mut client, "b", "lua", "1");
        uid_of(&mut client, "b").expect("b's uid")
    };
    // Both uids of the range are leased: a third session is refused, naming the key.
    let refused = client.eval("c", json!([py("print(1)")]));
    let said = refused["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
        + refused["cells"][0]["error"].as_str().unwrap_or_default();
    assert!(
        refused
            .to_string()
            .contains("isolation.uids = \\\"61710-61711\\\""),
        "{refused} {said}"
    );
    client
        .call("close", json!({"session": "a"}))
        .expect("close a");
    let gone = wait_until(Duration::from_secs(30), || {
        let alive = Path::new(&format!("/proc/{grandchild}")).exists()
            && !std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        (!alive).then_some(()).ok_or(())
    });
    assert!(
        gone.is_ok(),
        "the setsid grandchild {grandchild} survived close"
    );
    // Once a's processes are gone its uid serves the next session.
    let reused = wait_until(Duration::from_secs(30), || {
        let result = client.eval("c", json!([py("import os; print(os.getuid())")]));
        let out = result["cells"][0]["output"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        (out == a.to_string()).then_some(()).ok_or(result)
    });
    assert!(reused.is_ok(), "a's uid was not leased again: {reused:?}");
    assert_ne!(a, b);
    daemon.stop();
}

#[test]
fn a_daemon_that_cannot_change_uids_says_so_and_runs_cells_as_itself() {
    if !nobody::can_run_as_nobody("to run the daemon as an unprivileged user") {
        return;
    }
    let world = World::with_config(&format!(
        "[python]\ninterpreter = \"/usr/bin/python3\"\n[daemon]\nidle-exit = \"0s\"\n\
         [isolation]\nuids = \"{RANGE}\"\n"
    ));
    nobody::give_to_nobody(&world);
    let output = nobody::as_nobody(
        &world,
        &["eval", "-l", "py", "import os; print(os.getuid())"],
    )
    .output()
    .expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.trim(), nobody::NOBODY.to_string(), "{output:?}");
    let status = nobody::as_nobody(&world, &["status"])
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    // Without uids, `auto` confines the sessions served on the network with Landlock.
    assert!(
        text.contains("isolation: landlock (network sessions confined by Landlock"),
        "{text}"
    );
    assert!(text.contains("CAP_SETUID"), "{text}");
    // `uid` asked for outright is refused at start, saying what is needed.
    std::fs::write(
        world.config_path(),
        format!("[isolation]\nlevel = \"uid\"\nuids = \"{RANGE}\"\n"),
    )
    .expect("config");
    let stop = nobody::as_nobody(&world, &["stop"]).output().expect("stop");
    assert!(stop.status.success(), "{stop:?}");
    let socket = world.dir.path().join("refused.sock");
    let refused = nobody::as_nobody(&world, &["serve", "--socket", common::path_str(&socket)])
        .output()
        .expect("serve");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("CAP_SETUID and CAP_SETGID"), "{said}");
    world.assert_no_processes_left(Duration::from_secs(10));
}

#[test]
fn the_process_limit_counts_one_session_only() {
    if !root_only("changing uids") {
        return;
    }
    let daemon = start("61760-61769", free_port(), "[limits]\nprocesses = 40\n");
    let mut client = daemon.client();
    // Session a starts processes until the kernel refuses one: its uid's limit.
    let fill = r#"import subprocess
started = []
try:
    for _ in range(200):
        started.append(subprocess.Popen(["sleep", "600"]))
    print("never refused", len(started))
except OSError as error:
    print("refused after", len(started), type(error).__name__)"#;
    let filled = run(&mut client, "a", "py", fill);
    assert!(filled.starts_with("refused after"), "{filled}");
    // Session b, with a's processes still running, starts its own as usual.
    let other = run(
        &mut client,
        "b",
        "py",
        "import subprocess\nprint([subprocess.run(['true']).returncode for _ in range(10)])",
    );
    assert_eq!(other.trim(), "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]", "{other}");
    client
        .call("close", json!({"session": "a"}))
        .expect("close a");
    daemon.stop();
}

#[test]
fn a_cell_cannot_make_the_zygote_load_its_code_as_the_daemons_user() {
    if !root_only("changing uids") {
        return;
    }
    let daemon = start("61770-61774", free_port(), "");
    let mut client = daemon.client();
    ready_zygote(&mut client);
    // The cell plants a `.venv/bin/python` in a directory of its own: an interpreter found in
    // a request's cwd, which records who ran it before it runs the real one.
    let planted = run(
        &mut client,
        "a",
        "py",
        "import os, tempfile\n\
         d = tempfile.mkdtemp()\n\
         os.makedirs(os.path.join(d, '.venv', 'bin'))\n\
         open(os.path.join(d, '.venv', 'pyvenv.cfg'), 'w').write('home = /usr/bin\\n')\n\
         p = os.path.join(d, '.venv', 'bin', 'python')\n\
         open(p, 'w').write('#!/bin/sh\\ntouch \"' + d + '/ran-as-$(id -u)\"\\nexec /usr/bin/python3 \"$@\"\\n')\n\
         os.chmod(p, 0o755)\n\
         print(d)",
    );
    let dir = planted.trim().to_string();
    assert!(
        Path::new(&dir).join(".venv/bin/python").is_file(),
        "{planted}"
    );
    // A request whose cwd (and PYTHONPATH) point there: its worker starts as its session's
    // uid, never as a zygote of the daemon's user running the planted interpreter.
    let _ = client.call(
        "eval",
        json!({"session": "b", "cwd": dir, "cells": [py("import os; print(os.getuid())")],
               "env": {"PYTHONPATH": dir}}),
    );
    let ran_as_root = wait_until(Duration::from_secs(10), || {
        if Path::new(&dir).join("ran-as-0").exists() {
            Ok(())
        } else {
            Err(())
        }
    });
    assert!(
        ran_as_root.is_err(),
        "the daemon's user ran the interpreter a cell planted"
    );
    daemon.stop();
}
