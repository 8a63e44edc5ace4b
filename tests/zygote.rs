//! Python workers forked from a zygote, through the daemon with real interpreters: a forked
//! session is its own (environment, directory, limits, random stream), preloads are there or
//! reported, its processes end with it, and the zygote comes back when it dies or its
//! virtualenv changes.

mod common;

use common::daemon::{output, Client, Daemon};
use common::wait_until;
use serde_json::{json, Value};
use std::time::Duration;

const BASE: &str = "[python]\nprewarm = 0\n[env]\nallow = [\"ZT_*\"]\n";

fn zygotes(client: &mut Client) -> Vec<Value> {
    let rows = client.call("zygotes", json!({})).expect("zygotes answers");
    rows.as_array().cloned().unwrap_or_default()
}

/// Waits for one ready zygote and returns its row.
fn ready_zygote(client: &mut Client) -> Value {
    let ready = wait_until(Duration::from_secs(30), || {
        let rows = zygotes(client);
        rows.iter()
            .find(|row| row["state"] == "ready")
            .cloned()
            .ok_or(rows)
    });
    ready.unwrap_or_else(|rows| panic!("no zygote became ready: {rows:?}"))
}

fn forks(client: &mut Client) -> u64 {
    zygotes(client)
        .iter()
        .filter_map(|r| r["forks"].as_u64())
        .sum()
}

fn py(client: &mut Client, session: &str, code: &str) -> String {
    let result = client.eval(session, json!([{"language": "py", "code": code}]));
    assert_eq!(result["is_error"], false, "{result}");
    output(&result, 0).trim().to_string()
}

fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_forked_session_has_its_own_environment_directory_limits_and_random_stream() {
    let daemon = Daemon::start_with(&format!("{BASE}[limits]\nopen-files = 123\n"));
    let mut client = daemon.client();
    ready_zygote(&mut client);
    let before = forks(&mut client);
    let dir_a = daemon.world.work_dir().join("a");
    let dir_b = daemon.world.work_dir().join("b");
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let probe = "import os, random, resource\n\
                 print(os.environ.get('ZT_NAME'), os.environ.get('ZT_ONLY_A'), os.getcwd(), \
                 resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.getppid() != 1)\n\
                 print(random.random())";
    let mut run = |session: &str, dir: &std::path::Path, env: Value| -> Vec<String> {
        let result = client.call(
            "eval",
            json!({"session": session, "cwd": dir, "env": env,
                   "cells": [{"language": "py", "code": probe}]}),
        );
        let result = result.expect("eval answers");
        assert_eq!(result["is_error"], false, "{result}");
        output(&result, 0).lines().map(str::to_string).collect()
    };
    let a = run("a", &dir_a, json!({"ZT_NAME": "alpha", "ZT_ONLY_A": "yes"}));
    let b = run("b", &dir_b, json!({"ZT_NAME": "beta"}));
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap().display().to_string();
    assert_eq!(
        a[0],
        format!("alpha yes {} 123 True", canonical(&dir_a)),
        "{a:?}"
    );
    // Not the zygote's environment, not the other session's.
    assert_eq!(
        b[0],
        format!("beta None {} 123 True", canonical(&dir_b)),
        "{b:?}"
    );
    assert_ne!(
        a[1], b[1],
        "two forked sessions drew the same random number"
    );
    assert!(
        forks(&mut client) >= before + 2,
        "the sessions were not forked"
    );
    drop(client);
    daemon.stop();
}

#[test]
fn preloaded_modules_are_imported_and_a_failing_one_is_reported() {
    let daemon = Daemon::start_with(
        "[python]\nprewarm = 0\npreload = [\"colorsys\", \"no_such_module_zt\", \"xml.dom.minidom\"]\n",
    );
    let mut client = daemon.client();
    let row = ready_zygote(&mut client);
    assert_eq!(
        row["preloaded"],
        json!(["colorsys", "xml.dom.minidom"]),
        "{row}"
    );
    let failed = row["failed"].to_string();
    assert!(
        failed.contains("no_such_module_zt") && failed.contains("ModuleNotFoundError"),
        "{row}"
    );

    let first = py(
        &mut client,
        "one",
        "import sys\nprint('colorsys' in sys.modules, 'xml.dom.minidom' in sys.modules)",
    );
    assert!(
        first.contains("no_such_module_zt could not be imported"),
        "{first}"
    );
    assert!(first.ends_with("True True"), "{first}");
    // The next session is not told again; the module is there all the same.
    let second = py(
        &mut client,
        "two",
        "import sys\nprint('colorsys' in sys.modules)",
    );
    assert_eq!(second, "True");

    let status = daemon
        .world
        .run(&["--socket", common::path_str(&daemon.socket), "status"]);
    assert!(
        status
            .stdout
            .contains("could not preload no_such_module_zt"),
        "{}",
        status.stdout
    );
    // `status --json` shows the same zygote, its failed preload named.
    let json = daemon.world.run(&[
        "--socket",
        common::path_str(&daemon.socket),
        "status",
        "--json",
    ]);
    let view: Value = serde_json::from_str(&json.stdout).expect("status JSON");
    let zygote = view["zygotes"]
        .as_array()
        .and_then(|rows| rows.first())
        .unwrap_or_else(|| panic!("no zygote in status --json: {view:#}"));
    assert!(zygote["pid"].as_u64().is_some(), "{zygote:#}");
    assert_eq!(
        zygote["failed"][0]["module"], "no_such_module_zt",
        "{zygote:#}"
    );
    assert!(view["sessions"].as_array().is_some(), "{view:#}");
    assert_eq!(view["node"]["draining"], false, "{view:#}");
    drop(client);
    daemon.stop();
}

/// Starts a `setsid` child in a forked session and returns its pid.
fn start_detached_child(client: &mut Client, session: &str) -> u32 {
    let pid = py(
        client,
        session,
        "import subprocess\nprint(subprocess.Popen(['sleep', '300'], start_new_session=True).pid)",
    );
    pid.parse().expect("a pid")
}

#[test]
fn a_forked_sessions_detached_child_ends_at_close_eviction_and_daemon_kill() {
    let daemon = Daemon::start_with(BASE);
    let mut client = daemon.client();
    ready_zygote(&mut client);
    let before = forks(&mut client);

    let closed = start_detached_child(&mut client, "closed");
    assert!(pid_alive(closed));
    client
        .call("close", json!({"session": "closed"}))
        .expect("close answers");
    let gone = wait_until(Duration::from_secs(10), || {
        (!pid_alive(closed)).then_some(()).ok_or(())
    });
    assert!(gone.is_ok(), "the child outlived its closed session");

    let killed = start_detached_child(&mut client, "killed");
    assert!(
        forks(&mut client) >= before + 2,
        "the sessions were not forked"
    );
    drop(client);
    let world = daemon.signal_and_wait("KILL");
    let gone = wait_until(Duration::from_secs(10), || {
        (!pid_alive(killed)).then_some(()).ok_or(())
    });
    assert!(gone.is_ok(), "the child outlived the daemon's SIGKILL");
    world.assert_no_processes_left(Duration::from_secs(10));

    let evicting =
        common::SHORT_INTERVALS.replace("idle-timeout = \"0s\"", "idle-timeout = \"1s\"");
    let daemon = Daemon::start_in(common::World::with_config(&format!("{evicting}{BASE}")));
    let mut client = daemon.client();
    ready_zygote(&mut client);
    let evicted = start_detached_child(&mut client, "evicted");
    let gone = wait_until(Duration::from_secs(15), || {
        (!pid_alive(evicted)).then_some(()).ok_or(())
    });
    assert!(gone.is_ok(), "the child outlived its evicted session");
    drop(client);
    daemon.stop();
}

#[test]
fn a_killed_zygote_is_restarted_and_sessions_keep_starting_meanwhile() {
    let daemon = Daemon::start_with(BASE);
    let mut client = daemon.client();
    let first = ready_zygote(&mut client)["pid"].as_u64().expect("a pid");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    // Sessions start while it is gone.
    for session in ["during-1", "during-2"] {
        assert_eq!(py(&mut client, session, "print(6 * 7)"), "42");
    }
    let replaced = wait_until(Duration::from_secs(30), || {
        let rows = zygotes(&mut client);
        rows.iter()
            .find(|r| r["state"] == "ready" && r["pid"].as_u64() != Some(first))
            .cloned()
            .ok_or(rows)
    });
    assert!(
        replaced.is_ok(),
        "the zygote was not restarted: {replaced:?}"
    );
    let before = forks(&mut client);
    assert_eq!(py(&mut client, "after", "print(6 * 7)"), "42");
    assert_eq!(
        forks(&mut client),
        before + 1,
        "the new zygote did not fork"
    );
    drop(client);
    daemon.stop();
}

#[test]
fn a_virtualenv_changed_on_disk_gets_a_new_zygote() {
    let world = common::World::new();
    let venv = world.work_dir().join("venv-zt");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(made.success(), "python3 -m venv");
    let python = venv.join("bin").join("python");
    let daemon = Daemon::start_with(&format!(
        "[python]\nprewarm = 0\ninterpreter = \"{}\"\n",
        python.display()
    ));
    let mut client = daemon.client();
    let first = ready_zygote(&mut client);
    assert_eq!(
        py(&mut client, "before", "import sys\nprint(sys.prefix)"),
        venv.display().to_string()
    );

    // A package installed into the venv: the zygote's site-packages changed.
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .expect("site-packages");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(site.join("zt_new_module.py"), "VALUE = 7\n").unwrap();
    // The request that notices the change starts plainly and the zygote is replaced.
    assert_eq!(
        py(
            &mut client,
            "during",
            "import zt_new_module\nprint(zt_new_module.VALUE)"
        ),
        "7"
    );
    let replaced = wait_until(Duration::from_secs(30), || {
        let rows = zygotes(&mut client);
        rows.iter()
            .find(|r| r["state"] == "ready" && r["pid"] != first["pid"])
            .cloned()
            .ok_or(rows)
    });
    assert!(
        replaced.is_ok(),
        "no new zygote after the venv changed: {replaced:?}"
    );
    assert_eq!(
        py(
            &mut client,
            "after",
            "import zt_new_module\nprint(zt_new_module.VALUE)"
        ),
        "7"
    );
    drop(client);
    daemon.stop();
    drop(world);
}

#[test]
fn zygote_false_starts_every_worker_plainly() {
    let daemon = Daemon::start_with("[python]\nprewarm = 0\nzygote = false\n");
    let mut client = daemon.client();
    assert_eq!(py(&mut client, "plain", "x = 41\nprint(x + 1)"), "42");
    assert_eq!(py(&mut client, "plain", "print(x + 1)"), "42");
    assert!(
        zygotes(&mut client).is_empty(),
        "a zygote runs under zygote = false"
    );
    drop(client);
    daemon.stop();
}

#[test]
fn a_sandboxed_session_with_a_network_namespace_starts_its_own_confined_interpreter() {
    let daemon = Daemon::start_with(BASE);
    let mut client = daemon.client();
    ready_zygote(&mut client);
    let before = forks(&mut client);
    let secret = daemon.world.work_dir().join("secret.txt");
    std::fs::write(&secret, "hidden").unwrap();
    let inside = daemon.world.work_dir().join("inside");
    std::fs::create_dir_all(&inside).unwrap();
    let result = client
        .call(
            "eval",
            json!({"session": "boxed", "cwd": inside,
                   "sandbox": {"enabled": true, "network_namespace": true},
                   "cells": [{"language": "py", "code": format!("open({:?}).read()", secret.display().to_string())}]}),
        )
        .expect("eval answers");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(result.to_string().contains("PermissionError"), "{result}");
    // The namespace is entered before the runner starts, which a forked one cannot be.
    assert_eq!(
        forks(&mut client),
        before,
        "a sandboxed session with a network namespace was forked"
    );
    drop(client);
    daemon.stop();
}

#[test]
fn a_preload_that_leaves_threads_running_is_refused_and_workers_start_plainly() {
    let world = common::World::new();
    let modules = world.work_dir().join("zt-mods");
    std::fs::create_dir_all(&modules).unwrap();
    std::fs::write(
        modules.join("zt_threader.py"),
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n",
    )
    .unwrap();
    let daemon = Daemon::start_with(&format!(
        "[python]\nprewarm = 0\npreload = [\"zt_threader\"]\n[env.set]\nPYTHONPATH = \"{}\"\n",
        modules.display()
    ));
    let mut client = daemon.client();
    let failed = wait_until(Duration::from_secs(30), || {
        let rows = zygotes(&mut client);
        rows.iter()
            .find(|row| row["state"] == "failed")
            .cloned()
            .ok_or(rows)
    });
    let failed =
        failed.unwrap_or_else(|rows| panic!("the threaded zygote was not refused: {rows:?}"));
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or("")
            .contains("runs 2 threads"),
        "{failed}"
    );
    assert_eq!(py(&mut client, "plain", "print(6 * 7)"), "42");
    assert_eq!(forks(&mut client), 0);
    drop(client);
    daemon.stop();
    drop(world);
}

#[test]
fn a_preload_that_fails_halfway_leaves_no_half_imported_module() {
    let world = common::World::new();
    let modules = world.work_dir().join("zt-half");
    std::fs::create_dir_all(modules.join("zt_half")).unwrap();
    std::fs::write(modules.join("zt_half/part.py"), "VALUE = 1\n").unwrap();
    std::fs::write(
        modules.join("zt_half/__init__.py"),
        "from . import part\nraise RuntimeError('boom halfway')\n",
    )
    .unwrap();
    let daemon = Daemon::start_with(&format!(
        "[python]\nprewarm = 0\npreload = [\"zt_half\", \"colorsys\"]\n[env.set]\nPYTHONPATH = \"{}\"\n",
        modules.display()
    ));
    let mut client = daemon.client();
    let row = ready_zygote(&mut client);
    assert!(row["failed"].to_string().contains("boom halfway"), "{row}");
    let seen = py(
        &mut client,
        "s",
        "import sys\nprint('zt_half' in sys.modules, 'zt_half.part' in sys.modules, 'colorsys' in sys.modules)",
    );
    assert!(seen.ends_with("False False True"), "{seen}");
    drop(client);
    daemon.stop();
    drop(world);
}

/// One line per attempt, `name: allowed` or `name: denied <error>`, from a cell that tries
/// to read `secret`, write beside it, connect to `port`, write its cwd, and has a child
/// process (with a forged fork marker and no sandbox variable) try the read again.
fn escape_attempts(secret: &std::path::Path, port: u16) -> String {
    let secret = common::path_str(secret);
    let outside = secret.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("/");
    format!(
        r#"import os, socket, subprocess, sys
def attempt(name, f):
    try:
        f()
        print(name + ": allowed")
    except Exception as e:
        print(name + ": denied " + type(e).__name__)
attempt("read", lambda: open({secret:?}).read())
attempt("write", lambda: open({outside:?} + "/planted.txt", "w").write("x"))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).close())
attempt("write-cwd", lambda: open("mine.txt", "w").write("x"))
forged = dict(os.environ, CELLVISOR_FORKED_PYTHON="1,10,11,12,13,14,tok," + sys.executable,
              CELLVISOR_SANDBOX="")
child = subprocess.run([sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())", {secret:?}],
                       env=forged, capture_output=True, text=True)
print("child-read: " + ("allowed" if child.returncode == 0 else "denied " + child.stderr.strip().splitlines()[-1]))
"#
    )
}

fn no_new_privs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|status| status.lines().any(|l| l == "NoNewPrivs:\t1"))
}

fn runner_of(worker: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{worker}/task/{worker}/children"))
        .unwrap_or_default();
    children
        .split_whitespace()
        .find_map(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("worker {worker} has no runner"))
}

fn session_row(client: &mut Client, session: &str) -> Value {
    let rows = client.call("status", json!({})).expect("status answers");
    rows.as_array()
        .and_then(|rows| rows.iter().find(|r| r["session"] == session).cloned())
        .unwrap_or_else(|| panic!("no row for {session}: {rows}"))
}

#[test]
fn a_sandboxed_forked_session_is_confined_and_the_next_unsandboxed_one_is_not() {
    let daemon = Daemon::start_with(BASE);
    let mut client = daemon.client();
    ready_zygote(&mut client);
    let outside = daemon.world.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("secret.txt");
    std::fs::write(&secret, "SECRET\n").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = escape_attempts(&secret, port);

    let before = forks(&mut client);
    let boxed_dir = daemon.world.work_dir().join("boxed");
    std::fs::create_dir_all(&boxed_dir).unwrap();
    let boxed_eval = |client: &mut Client, code: &str| -> String {
        let result = client
            .call(
                "eval",
                json!({"session": "boxed", "cwd": boxed_dir,
                       "sandbox": {"enabled": true, "required": true, "network": "none"},
                       "cells": [{"language": "py", "code": code}]}),
            )
            .expect("eval answers");
        assert_eq!(result["is_error"], false, "{result}");
        output(&result, 0).to_string()
    };
    let boxed = boxed_eval(&mut client, &code);
    assert_eq!(
        forks(&mut client),
        before + 1,
        "the sandboxed session was not forked"
    );
    for name in ["read", "write", "tcp", "child-read"] {
        let line = boxed.lines().find(|l| l.starts_with(&format!("{name}: ")));
        assert!(
            line.is_some_and(|l| l.contains("denied")),
            "{name} should be denied:\n{boxed}"
        );
    }
    assert!(boxed.contains("write-cwd: allowed"), "{boxed}");
    assert!(boxed.contains("PermissionError"), "{boxed}");
    assert!(!outside.join("planted.txt").exists());
    assert!(
        listener.accept().is_err(),
        "a denied connection reached the listener"
    );
    let row = session_row(&mut client, "boxed");
    assert_eq!(
        row["sandbox"]["enforced"],
        json!(["files", "tcp", "scopes"]),
        "{row}"
    );
    let boxed_worker = u32::try_from(row["pid"].as_u64().expect("a pid")).unwrap();
    assert!(
        no_new_privs(runner_of(boxed_worker)),
        "the forked runner lacks no_new_privs"
    );

    // The same zygote's next session, unsandboxed, reads the file: confinement is per fork.
    let open_dir = daemon.world.work_dir().join("open");
    std::fs::create_dir_all(&open_dir).unwrap();
    let result = client
        .call(
            "eval",
            json!({"session": "open", "cwd": open_dir,
                   "cells": [{"language": "py", "code": escape_attempts(&secret, port)}]}),
        )
        .expect("eval answers");
    let open = output(&result, 0);
    assert_eq!(
        forks(&mut client),
        before + 2,
        "the open session was not forked"
    );
    for name in ["read", "write", "tcp", "child-read"] {
        assert!(
            open.contains(&format!("{name}: allowed")),
            "{name}:\n{open}"
        );
    }
    let row = session_row(&mut client, "open");
    assert!(row.get("sandbox").is_none(), "{row}");
    let worker = u32::try_from(row["pid"].as_u64().expect("a pid")).unwrap();
    assert!(!no_new_privs(runner_of(worker)));

    // Its worker (confined in a Landlock domain of its own) still interrupts its runner: the
    // cell stops at its timeout and the same worker runs the next one.
    let boxed_runner = runner_of(boxed_worker);
    let result = client
        .call(
            "eval",
            json!({"session": "boxed", "cwd": boxed_dir,
                   "sandbox": {"enabled": true, "required": true, "network": "none"},
                   "cells": [{"language": "py", "code": "import time\ntime.sleep(60)", "timeout": 1}]}),
        )
        .expect("eval answers");
    let said = result["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(
        said.contains("timed out") && !said.contains("interrupt-grace"),
        "{result}"
    );
    assert_eq!(boxed_eval(&mut client, "print(6 * 7)").trim(), "42");
    assert_eq!(
        session_row(&mut client, "boxed")["pid"],
        json!(boxed_worker)
    );
    // Closing the session ends the runner.
    client
        .call("close", json!({"session": "boxed"}))
        .expect("close answers");
    let gone = wait_until(Duration::from_secs(10), || {
        (!pid_alive(boxed_runner)).then_some(()).ok_or(())
    });
    assert!(
        gone.is_ok(),
        "the sandboxed session's runner outlived its close"
    );
    drop(client);
    daemon.stop();
}

/// A cell that finds its zygote (the oldest process running its own interpreter's command
/// line: the zygote forked it without exec) and stops it; prints the pid it stopped.
const STOP_THE_ZYGOTE: &str = "\
import os, signal
me = open('/proc/self/cmdline', 'rb').read()
def started(p):
    return int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[19])
found = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if open(f'/proc/{p}/cmdline', 'rb').read() == me:
                found.append((started(p), int(p)))
        except OSError:
            pass
zygote = min(found)[1]
os.kill(zygote, signal.SIGSTOP)
print(zygote)";

#[test]
fn a_zygote_a_cell_stopped_is_shown_stopped_then_replaced_and_sessions_keep_starting() {
    let daemon = Daemon::start_with(BASE);
    let mut client = daemon.client();
    let first = ready_zygote(&mut client)["pid"].as_u64().expect("a pid");
    assert_eq!(
        py(&mut client, "attacker", STOP_THE_ZYGOTE),
        first.to_string()
    );
    let stopped = wait_until(Duration::from_secs(30), || {
        let rows = zygotes(&mut client);
        rows.iter()
            .find(|r| r["pid"].as_u64() == Some(first) && r["state"] == "stopped")
            .cloned()
            .ok_or(rows)
    });
    assert!(stopped.is_ok(), "status did not say stopped: {stopped:?}");
    // New sessions start: the first fork request waits for the zygote's answer (bounded),
    // gets none, and the worker starts plainly while a new zygote starts.
    for session in ["after-1", "after-2"] {
        assert_eq!(py(&mut client, session, "print(6 * 7)"), "42");
    }
    let replaced = wait_until(Duration::from_secs(60), || {
        let rows = zygotes(&mut client);
        rows.iter()
            .find(|r| r["state"] == "ready" && r["pid"].as_u64() != Some(first))
            .cloned()
            .ok_or(rows)
    });
    assert!(
        replaced.is_ok(),
        "the zygote was not replaced: {replaced:?}"
    );
    let gone = wait_until(Duration::from_secs(30), || {
        (!pid_alive(u32::try_from(first).unwrap_or(u32::MAX)))
            .then_some(())
            .ok_or(())
    });
    assert!(gone.is_ok(), "the stopped zygote was left running");
    let before = forks(&mut client);
    assert_eq!(py(&mut client, "after-3", "print(6 * 7)"), "42");
    assert_eq!(
        forks(&mut client),
        before + 1,
        "the new zygote did not fork"
    );
    drop(client);
    daemon.stop();
}
