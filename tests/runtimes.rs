//! Runtimes as agents already write for them (issue 11), end to end through the daemon:
//! read() gives the file's text, the caller's cwd and venv travel with the request,
//! IPython-style Python, startup modules, per-call mode, disabled languages, and the smaller
//! fixes (sys.exit(0), tracebacks, close notices, long lines, `~/` imports, `--` code, crash
//! messages).

mod common;

use common::daemon::{cell, output, Client, Daemon};
use common::{path_str, Run, World};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

/// `eval` over JSON-RPC; the result object (or the error, as a panic).
fn eval(client: &mut Client, params: Value) -> Value {
    client
        .call("eval", params)
        .unwrap_or_else(|e| panic!("eval refused: {e}"))
}

/// `cellvisor --socket SOCK ARGS` run in `dir`.
fn cli_in(daemon: &Daemon, dir: &Path, args: &[&str]) -> Run {
    let output = daemon
        .world
        .command()
        .current_dir(dir)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(args)
        .output()
        .expect("run cellvisor");
    Run::from(output)
}

fn mkdir(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path).expect("mkdir");
    path.canonicalize().expect("canonical path")
}

/// The real python3 (not a version-manager shim), to make virtual environments with.
fn real_python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn make_venv(dir: &Path) -> PathBuf {
    let venv = dir.join(".venv");
    let status = Command::new(real_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python -m venv");
    assert!(status.success(), "venv in {}", dir.display());
    venv
}

#[test]
fn read_returns_the_files_text_as_in_the_anchor_example() {
    let daemon = Daemon::start();
    let work = daemon.world.work_dir();
    std::fs::write(
        work.join("package.json"),
        "{\"name\": \"demo\",\n \"version\": \"1.0.0\"}\n",
    )
    .expect("package.json");
    let mut client = daemon.client();
    let result = eval(
        &mut client,
        json!({"cwd": work, "cells": [
            {"language": "py", "code": "import json\nfrom pathlib import Path"},
            {"language": "py", "code": "data = json.loads(read('package.json'))\ndisplay(data)\ndata['name']"},
            {"language": "js", "code": "const data = JSON.parse(await read('package.json'));\ndisplay(data);\nreturn data.name;"},
            {"language": "lua", "code": "local text = read('package.json')\nreturn #text, read('package.json', {offset = 2, numbered = true})"},
            {"language": "py", "code": "print(read('package.json', 2, 1), end='')\nprint(read('package.json', limit=1, numbered=True), end='')"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(output(&result, 1), "'demo'\n");
    assert_eq!(
        cell(&result, 1)["displays"][0]["application/json"],
        json!({"name": "demo", "version": "1.0.0"})
    );
    assert_eq!(output(&result, 2), "demo\n");
    assert!(
        output(&result, 3).contains("     2\t \"version\": \"1.0.0\"}"),
        "{result:#}"
    );
    assert_eq!(
        output(&result, 4),
        " \"version\": \"1.0.0\"}\n     1\t{\"name\": \"demo\",\n"
    );
    daemon.stop();
}

#[test]
fn the_cli_runs_cells_in_its_own_directory_through_the_daemon() {
    let daemon = Daemon::start();
    let project = mkdir(&daemon.world.dir.path().join("project"));
    let sub = mkdir(&project.join("sub"));
    let run = cli_in(&daemon, &project, &["eval", "import os; os.getcwd()"]);
    run.assert_code(0);
    assert_eq!(run.stdout, format!("'{}'\n", project.display()));
    // A relative --cwd is resolved against the caller's directory, not the daemon's.
    let run = cli_in(
        &daemon,
        &project,
        &["eval", "--cwd", "sub", "import os; os.getcwd()"],
    );
    run.assert_code(0);
    assert_eq!(run.stdout, format!("'{}'\n", sub.display()));
    // JavaScript follows the same directory (read() is relative to it).
    std::fs::write(project.join("here.txt"), "js here\n").expect("write");
    let run = cli_in(
        &daemon,
        &project,
        &["eval", "-l", "js", "await read('here.txt')"],
    );
    run.assert_code(0);
    assert_eq!(run.stdout, "js here\n\n");
    daemon.stop();
}

#[test]
fn each_request_runs_on_the_python_of_its_directory_or_its_virtual_env() {
    let daemon = Daemon::start();
    let a = mkdir(&daemon.world.dir.path().join("a"));
    let b = mkdir(&daemon.world.dir.path().join("b"));
    let (venv_a, venv_b) = (make_venv(&a), make_venv(&b));
    let mut client = daemon.client();
    let prefix = "import sys; sys.prefix";
    let first = eval(
        &mut client,
        json!({"cwd": a, "cells": [{"language": "py", "code": format!("x = 1\n{prefix}")}]}),
    );
    assert_eq!(output(&first, 0), format!("'{}'\n", venv_a.display()));
    // Same session, another project: its own venv, on a new worker, and the result says so.
    let second = eval(
        &mut client,
        json!({"cwd": b, "cells": [{"language": "py", "code": format!("print('x' in globals())\n{prefix}")}]}),
    );
    assert_eq!(
        output(&second, 0),
        format!("False\n'{}'\n", venv_b.display()),
        "{second:#}"
    );
    let notice = cell(&second, 0)["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains(path_str(&venv_b)) && notice.contains(path_str(&venv_a)),
        "{notice}"
    );
    // Same interpreter again: the worker (and its state) stays.
    let third = eval(
        &mut client,
        json!({"cwd": b, "cells": [{"language": "py", "code": "y = 2"}, {"language": "py", "code": "y"}]}),
    );
    assert_eq!(output(&third, 1), "2\n");
    assert!(cell(&third, 0)["notice"].is_null(), "{third:#}");
    // A venv without IPython still takes IPython syntax (and finds cellvisor's IPython).
    let plain = eval(
        &mut client,
        json!({"cwd": b, "cells": [{"language": "py", "code": "!echo no ipython here\n%time import importlib.util\nimportlib.util.find_spec('IPython').origin == 'cellvisor'"}]}),
    );
    let text = output(&plain, 0);
    assert!(
        text.starts_with("no ipython here\nCPU times: ") && text.ends_with("True\n"),
        "{plain:#}"
    );
    // The client's VIRTUAL_ENV comes first, before the directory's venv.
    let fourth = eval(
        &mut client,
        json!({"cwd": b, "virtual_env": venv_a, "cells": [{"language": "py", "code": prefix}]}),
    );
    assert_eq!(output(&fourth, 0), format!("'{}'\n", venv_a.display()));
    // The CLI sends its own VIRTUAL_ENV.
    let run = {
        let output = daemon
            .world
            .command()
            .current_dir(&b)
            .env("VIRTUAL_ENV", &venv_a)
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["eval", prefix])
            .output()
            .expect("cli");
        Run::from(output)
    };
    run.assert_code(0);
    assert_eq!(run.stdout, format!("'{}'\n", venv_a.display()));
    daemon.stop();
}

#[test]
fn python_cells_take_ipython_syntax() {
    let daemon = Daemon::start();
    let work = daemon.world.work_dir();
    let elsewhere = mkdir(&daemon.world.dir.path().join("elsewhere"));
    let mut client = daemon.client();
    let code_cd = format!("%cd {}\nimport os\nos.getcwd()", elsewhere.display());
    let result = eval(
        &mut client,
        json!({"cwd": work, "cells": [
            {"language": "py", "code": "name = 'world'\n!echo hi $name {1 + 2}\nlines = !printf 'a\\nb\\n'\nprint(lines, lines.n == 'a\\nb')"},
            {"language": "py", "code": "%time total = sum(range(1000))\ntotal"},
            {"language": "py", "code": code_cd},
            {"language": "py", "code": "%%writefile notes.txt\nfirst\nsecond\n"},
            {"language": "py", "code": "get_ipython().system('echo shell $name')\nprint(_exit_code, get_ipython().user_ns['name'])"},
            {"language": "py", "code": "%env GREETING=hello\n%env GREETING"},
            {"language": "py", "code": "%who str"},
            {"language": "py", "code": "40 + 2;"},
            {"language": "py", "code": "%timeit -n 3 -r 2 sum(range(10))"},
            {"language": "py", "code": "%%bash\necho from bash"},
            {"language": "py", "code": "x = 3\nif x > 2:\n    !echo indented $x\nprint('10 % 3 =', 10 % 3, x != 2)"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(output(&result, 0), "hi world 3\n['a', 'b'] True\n");
    let timed = output(&result, 1);
    assert!(
        timed.starts_with("CPU times: user ")
            && timed.contains("\nWall time: ")
            && timed.ends_with("\n499500\n"),
        "{timed}"
    );
    assert_eq!(
        output(&result, 2),
        format!("{0}\n'{0}'\n", elsewhere.display())
    );
    // %cd holds for later cells (as in a kernel) until a request comes from elsewhere.
    let same_dir = eval(
        &mut client,
        json!({"cwd": work, "cells": [{"language": "py", "code": "import os; os.getcwd()"}]}),
    );
    assert_eq!(output(&same_dir, 0), format!("'{}'\n", elsewhere.display()));
    let other_dir = eval(
        &mut client,
        json!({"cwd": daemon.world.dir.path(), "cells": [{"language": "py", "code": "import os; os.getcwd()"}]}),
    );
    assert_eq!(
        output(&other_dir, 0),
        format!("'{}'\n", daemon.world.dir.path().display())
    );
    assert_eq!(output(&result, 3), "Writing notes.txt\n");
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("notes.txt")).expect("written after %cd"),
        "first\nsecond\n"
    );
    assert_eq!(output(&result, 4), "shell world\n0 world\n");
    assert_eq!(output(&result, 5), "env: GREETING=hello\n'hello'\n");
    // IPython's own `%who` ends its line with a tab and a space; the emulation does not.
    assert_eq!(output(&result, 6).trim_end(), "name");
    assert_eq!(output(&result, 7), "", "a trailing ; hides the value");
    assert!(
        output(&result, 8).contains(" per loop (mean ± std. dev. of 2 runs, 3 loops each)"),
        "{}",
        output(&result, 8)
    );
    assert_eq!(output(&result, 9), "from bash\n");
    assert_eq!(output(&result, 10), "indented 3\n10 % 3 = 1 True\n");

    std::fs::write(
        work.join("script.py"),
        "import sys\nfrom_script = sys.argv[1:]\nprint('ran', __name__)\n",
    )
    .expect("script");
    let more = eval(
        &mut client,
        json!({"cwd": work, "cells": [
            {"language": "py", "code": "%run script.py a b\nfrom_script"},
            {"language": "py", "code": "%pip --version"},
            {"language": "py", "code": "shell = get_ipython()\nshell.run_line_magic('env', 'SHELL_SET=1')\nshell.run_cell_magic('bash', '', 'echo $SHELL_SET')\nshell.display_pub.publish({'text/markdown': '*m*', 'text/plain': 'm'})"},
        ]}),
    );
    assert_eq!(more["is_error"], false, "{more:#}");
    assert_eq!(output(&more, 0), "ran __main__\n['a', 'b']\n");
    let pip = output(&more, 1);
    assert!(
        pip.starts_with("pip ")
            && pip.ends_with("Note: you may need to restart the kernel to use updated packages.\n"),
        "{pip}"
    );
    assert_eq!(output(&more, 2), "env: SHELL_SET=1\n1\n");
    assert_eq!(
        cell(&more, 2)["displays"][0],
        json!({"text/markdown": "*m*", "text/plain": "m"})
    );

    let failed = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "%nosuchmagic"}]}),
    );
    assert!(
        output(&failed, 0).contains("UsageError: Line magic function `%nosuchmagic` not found."),
        "{failed:#}"
    );
    daemon.stop();
}

#[test]
fn ipython_display_arrives_as_a_rich_display_when_ipython_is_installed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let made = Command::new(root.join("scripts/test-venv"))
        .arg("IPython")
        .output()
        .expect("scripts/test-venv runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let venv = root.join("target/test-venv").canonicalize().expect("venv");
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let result = eval(
        &mut client,
        json!({"virtual_env": venv, "cells": [
            {"language": "py", "code": "import IPython.display\nIPython.display.display(IPython.display.Markdown('**x**'))"},
            {"language": "py", "code": "from IPython.display import publish_display_data\npublish_display_data({'text/plain': 'p', 'text/html': '<b>p</b>'})"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    let markdown = &cell(&result, 0)["displays"][0];
    assert_eq!(markdown["text/markdown"], "**x**", "{result:#}");
    assert_eq!(
        cell(&result, 1)["displays"][0],
        json!({"text/plain": "p", "text/html": "<b>p</b>"})
    );
    daemon.stop();
}

#[test]
fn startup_modules_load_at_each_worker_start_with_project_overrides() {
    let world = World::with_config(
        "[sessions]\nheartbeat-interval = \"200ms\"\nheartbeat-timeout = \"1s\"\n",
    );
    let user = mkdir(&world.config_home().join("cellvisor/startup"));
    let project = mkdir(&world.work_dir().join(".cellvisor/startup"));
    std::fs::write(
        user.join("10-tools.py"),
        "def where():\n    return 'user'\n",
    )
    .unwrap();
    std::fs::write(
        user.join("20-more.py"),
        "def more():\n    return where() + '+more'\n",
    )
    .unwrap();
    std::fs::write(
        project.join("10-tools.py"),
        "def where():\n    return 'project'\n",
    )
    .unwrap();
    std::fs::write(
        project.join("30-bad.py"),
        "x = 1\nraise ValueError('broken module')\n",
    )
    .unwrap();
    std::fs::write(
        user.join("tools.js"),
        "function where() { return 'user js' }\n",
    )
    .unwrap();
    std::fs::write(
        project.join("tools.lua"),
        "function where() return 'project lua' end\n",
    )
    .unwrap();
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let result = eval(
        &mut client,
        json!({"cwd": work, "cells": [
            {"language": "py", "code": "more(), x"},
            {"language": "py", "code": "where()"},
            {"language": "js", "code": "where()"},
            {"language": "lua", "code": "return where()"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(output(&result, 0), "('project+more', 1)\n");
    let notice = cell(&result, 0)["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("30-bad.py failed")
            && notice.contains("ValueError: broken module")
            && notice.contains("line 2"),
        "{notice}"
    );
    assert!(
        !notice.contains("runner.py") && !notice.contains("<cell 0>"),
        "{notice}"
    );
    assert!(
        cell(&result, 1)["notice"].is_null(),
        "only the first cell: {result:#}"
    );
    assert_eq!(output(&result, 2), "user js\n");
    assert_eq!(output(&result, 3), "project lua\n");
    // A reset starts a new worker: the modules are there again.
    let reset = eval(
        &mut client,
        json!({"cwd": work, "cells": [{"language": "py", "code": "where()", "reset": true}]}),
    );
    assert_eq!(output(&reset, 0), "'project'\n");
    daemon.stop();
}

#[test]
fn startup_levels_can_be_turned_off() {
    let world = World::with_config(
        "[sessions]\nheartbeat-interval = \"200ms\"\nheartbeat-timeout = \"1s\"\n[startup]\nproject = false\n",
    );
    let user = mkdir(&world.config_home().join("cellvisor/startup"));
    let project = mkdir(&world.work_dir().join(".cellvisor/startup"));
    std::fs::write(user.join("a.py"), "level = 'user'\n").unwrap();
    std::fs::write(project.join("a.py"), "level = 'project'\n").unwrap();
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let result = eval(
        &mut client,
        json!({"cwd": work, "cells": [{"language": "py", "code": "level"}]}),
    );
    assert_eq!(output(&result, 0), "'user'\n", "{result:#}");
    daemon.stop();
}

#[test]
fn per_call_mode_keeps_no_state_between_requests() {
    let daemon = Daemon::start_with("mode = \"per-call\"\n");
    let mut client = daemon.client();
    for (language, unknown) in [
        ("py", "NameError: name 'x' is not defined"),
        ("js", "ReferenceError: x is not defined"),
        ("lua", "nil"),
    ] {
        let first = eval(
            &mut client,
            json!({"cells": [{"language": language, "code": "x = 41"}, {"language": language, "code": "x + 1"}]}),
        );
        assert_eq!(
            output(&first, 1),
            "42\n",
            "{language}: state within a request"
        );
        let second = eval(
            &mut client,
            json!({"cells": [{"language": language, "code": "x"}]}),
        );
        assert!(
            output(&second, 0).contains(unknown),
            "{language}: {second:#}"
        );
    }
    // Every request's workers are gone once it ends.
    let live = common::wait_until(SETTLE, || {
        let status = client.call("status", json!({})).expect("status");
        status
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
            .ok_or(status)
    });
    assert!(live.is_ok(), "workers left: {live:?}");
    daemon.stop();
}

#[test]
fn a_fresh_request_neither_sees_nor_touches_the_sessions_state() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    eval(
        &mut client,
        json!({"session": "s", "cells": [{"language": "py", "code": "kept = 1"}]}),
    );
    let fresh = eval(
        &mut client,
        json!({"session": "s", "fresh": true, "cells": [
            {"language": "py", "code": "'kept' in globals()"},
            {"language": "py", "code": "kept = 2"},
        ]}),
    );
    assert_eq!(output(&fresh, 0), "False\n");
    let after = eval(
        &mut client,
        json!({"session": "s", "cells": [{"language": "py", "code": "kept"}]}),
    );
    assert_eq!(output(&after, 0), "1\n");
    assert!(cell(&after, 0)["notice"].is_null(), "{after:#}");
    daemon.stop();
}

#[test]
fn a_disabled_language_fails_at_once_naming_its_key() {
    let daemon = Daemon::start_with("[js]\nenabled = false\n");
    let mut client = daemon.client();
    let result = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "1 + 1"}, {"language": "js", "code": "1"}, {"language": "lua", "code": "return 1"}]}),
    );
    assert_eq!(output(&result, 0), "2\n");
    assert_eq!(cell(&result, 1)["status"], "error");
    assert!(
        output(&result, 1).contains("`js.enabled = false`"),
        "{result:#}"
    );
    assert_eq!(cell(&result, 2)["status"], "skipped");
    let status = client.call("status", json!({})).expect("status");
    assert!(
        status
            .as_array()
            .is_some_and(|rows| rows.iter().all(|r| r["language"] != "js")),
        "no js worker was started: {status:#}"
    );
    daemon.stop();
}

#[test]
fn python_exit_tracebacks_and_crash_messages() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let result = eval(
        &mut client,
        json!({"cells": [
            {"language": "py", "code": "import sys\nprint('before')\nsys.exit(0)\nprint('after')"},
            {"language": "py", "code": "raise SystemExit(None)"},
            {"language": "py", "code": "raise SystemExit"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(output(&result, 0), "before\n");
    let nonzero = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "import sys; sys.exit(3)"}]}),
    );
    assert_eq!(cell(&nonzero, 0)["status"], "error");
    assert!(output(&nonzero, 0).contains("SystemExit: 3"), "{nonzero:#}");
    let stdin = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "input()"}]}),
    );
    let text = output(&stdin, 0);
    assert!(
        text.contains("Kernel requested stdin; interactive input is not supported.")
            && !text.contains("runner.py"),
        "{text}"
    );
    let crash = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "import os; os._exit(3)"}]}),
    );
    let text = output(&crash, 0);
    assert!(text.contains("python exited with code 3"), "{text}");
    assert_eq!(text.matches("exited with code").count(), 1, "{text}");
    daemon.stop();
}

#[test]
fn closing_a_session_tells_its_next_cell_and_long_lines_are_cut() {
    let daemon = Daemon::start_with("[output]\nmax-line-length = 100\n");
    let mut client = daemon.client();
    eval(
        &mut client,
        json!({"session": "c", "cells": [{"language": "lua", "code": "x = 1"}]}),
    );
    client
        .call("close", json!({"session": "c"}))
        .expect("close");
    let after = eval(
        &mut client,
        json!({"session": "c", "cells": [{"language": "lua", "code": "return x"}]}),
    );
    let notice = cell(&after, 0)["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("was closed") && notice.contains("state is gone"),
        "{after:#}"
    );

    let long = eval(
        &mut client,
        json!({"cells": [{"language": "py", "code": "print('a' * 250)\nprint('short')"}]}),
    );
    let text = output(&long, 0);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&"a".repeat(100))
            && !first.starts_with(&"a".repeat(101))
            && first.contains("150 more characters"),
        "{text}"
    );
    assert!(text.ends_with("short\n"), "{text}");
    let artifact = cell(&long, 0)["truncation"]["artifact_path"]
        .as_str()
        .expect("artifact path");
    assert_eq!(
        std::fs::read_to_string(artifact).expect("artifact"),
        format!("{}\nshort\n", "a".repeat(250))
    );
    daemon.stop();
}

#[test]
fn home_imports_and_code_starting_with_dashes_work_from_the_cli() {
    let world = World::new();
    let home = mkdir(&world.dir.path().join("home"));
    std::fs::create_dir_all(home.join("lib")).unwrap();
    std::fs::write(home.join("lib/answer.js"), "export const answer = 42;\n").unwrap();
    let run = |args: &[&str]| {
        Run::from(
            world
                .command()
                .env("HOME", &home)
                .args(args)
                .output()
                .expect("cli"),
        )
    };
    let imported = run(&[
        "eval",
        "-l",
        "js",
        "import { answer } from '~/lib/answer.js';\nanswer",
    ]);
    imported.assert_code(0);
    assert_eq!(imported.stdout, "42\n");
    let dashed = run(&["eval", "-l", "lua", "-- a comment first\nreturn 7"]);
    dashed.assert_code(0);
    assert_eq!(dashed.stdout, "7\n");
    let after_separator = run(&["eval", "-l", "lua", "--", "--another\nreturn 8"]);
    after_separator.assert_code(0);
    assert_eq!(after_separator.stdout, "8\n");
    let lone_word = run(&["eval", "-l", "lua", "--x"]);
    lone_word.assert_code(2);
    assert!(
        lone_word.stderr.contains("-- '--x'"),
        "{}",
        lone_word.stderr
    );
    run(&["eval", "-l", "lua", "--", "--x"]).assert_code(0);
    run(&["stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_requests_use_prewarmed_interpreters() {
    use cellvisor::{CellSpec, EvalRequest, Language};
    let world = World::new();
    let cv = world.supervisor(|config| {
        config.python.prewarm = 1;
        // The pool's own interpreters only: a zygote is a `runner.py` of no session's.
        config.python.zygote = false;
        config.sessions.mode = cellvisor_config::SessionMode::PerCall;
    });
    let mut seen = Vec::new();
    for _ in 0..2 {
        let ready = common::wait_until(Duration::from_secs(15), || {
            let ready = common::block_on(cv.prewarmed()).unwrap_or(0);
            (ready == 1).then_some(()).ok_or(ready)
        });
        assert!(ready.is_ok(), "one prewarmed worker: {ready:?}");
        let prewarmed = world.processes_running("runner.py");
        let request = EvalRequest {
            cells: vec![CellSpec::new(Language::Python, "import os; os.getpid()")],
            ..Default::default()
        };
        let result = cv.eval(request, None).await.expect("eval");
        let pid: u32 = result.cells[0].report.output.trim().parse().expect("a pid");
        assert_eq!(
            prewarmed,
            [pid],
            "the request ran on the prewarmed interpreter"
        );
        seen.push(pid);
    }
    assert_ne!(seen[0], seen[1], "each request had a worker of its own");
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn matplotlib_magic_is_accepted_with_any_backend_without_importing_matplotlib() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    // The default interpreter may lack matplotlib: the magic is still a no-op, not an import.
    let result = eval(
        &mut client,
        json!({"cells": [
            {"language": "py", "code": "%matplotlib inline\nimport sys\nprint('imported:', 'matplotlib' in sys.modules)"},
            {"language": "py", "code": "%matplotlib\nprint('plain')"},
            {"language": "py", "code": "%matplotlib notebook\nprint('after notebook')"},
            {"language": "py", "code": "%matplotlib widget\nprint('after widget')"},
            {"language": "py", "code": "%matplotlib --list"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(output(&result, 0), "imported: False\n", "{result:#}");
    assert_eq!(output(&result, 1), "plain\n", "{result:#}");
    let notice = "cellvisor: %matplotlib notebook: interactive backends are not available here; \
                  figures arrive as PNG displays, as with %matplotlib inline\n";
    assert_eq!(
        output(&result, 2),
        format!("{notice}after notebook\n"),
        "{result:#}"
    );
    assert_eq!(
        output(&result, 3),
        "after widget\n",
        "the notice is printed once"
    );
    assert!(
        output(&result, 4).starts_with("Available matplotlib backends: ['inline']\n"),
        "{result:#}"
    );

    // With matplotlib (the test venv), `%matplotlib inline` then a plot gives one PNG.
    let venv = common::test_venv(&["matplotlib"]);
    let plotted = eval(
        &mut client,
        json!({"virtual_env": venv, "cells": [
            {"language": "py", "code": "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])"},
            {"language": "py", "code": "%matplotlib qt\nplt.plot([2, 1])\nplt.show()"},
        ]}),
    );
    assert_eq!(plotted["is_error"], false, "{plotted:#}");
    for index in 0..2 {
        let pngs = cell(&plotted, index)["displays"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["image/png"].is_string())
            .count();
        assert_eq!(pngs, 1, "{plotted:#}");
    }
    assert!(
        output(&plotted, 1).starts_with("cellvisor: %matplotlib qt: "),
        "{plotted:#}"
    );
    daemon.stop();
}

#[test]
fn each_cell_shows_its_warnings_once_per_location_as_jupyter_does() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let result = eval(
        &mut client,
        json!({"cells": [
            {"language": "py", "code": "import warnings\ndef old():\n    warnings.warn('old is going away', FutureWarning)\n    return 1"},
            {"language": "py", "code": "old()"},
            {"language": "py", "code": "old()"},
            {"language": "py", "code": "warnings.warn('top level', FutureWarning)"},
            {"language": "py", "code": "warnings.warn('top level', FutureWarning)"},
            {"language": "py", "code": "for _ in range(3):\n    old()\nprint('looped')"},
        ]}),
    );
    assert_eq!(result["is_error"], false, "{result:#}");
    for index in [1, 2, 5] {
        assert_eq!(
            output(&result, index)
                .matches("FutureWarning: old is going away")
                .count(),
            1,
            "cell {index}: {result:#}"
        );
    }
    for index in [3, 4] {
        assert_eq!(
            output(&result, index)
                .matches("FutureWarning: top level")
                .count(),
            1,
            "cell {index}: {result:#}"
        );
    }
    daemon.stop();
}
