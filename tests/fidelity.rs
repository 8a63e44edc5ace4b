//! The last mile of fidelity (issue 28), end to end through the daemon: a Python that cannot
//! start says why (item 4), helper paths that are URIs are refused (item 10), and Python's
//! `exit()` ends the cell as JavaScript's does, past `finally` (item 11), and Python's stderr
//! streams as `stderr` (item 3).

mod common;

use common::daemon::{cell, output, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A file at `path` holding `text`, with `mode`.
fn file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The error a `py` cell gets from a daemon whose configured interpreter is `interpreter`.
fn start_error(interpreter: &Path) -> String {
    let daemon = Daemon::start_with(&format!("[python]\ninterpreter = {interpreter:?}\n"));
    let answer = daemon.client().call(
        "eval",
        json!({"cells": [{"language": "py", "code": "print(1)"}]}),
    );
    let text = match answer {
        Err(error) => error["message"].as_str().unwrap_or_default().to_string(),
        Ok(result) => format!("{}{}", output(&result, 0), cell(&result, 0)["error"]),
    };
    daemon.stop();
    text
}

#[test]
fn a_python_that_cannot_start_says_why_with_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = Path::new("/nonexistent/python");
    let text = start_error(missing);
    assert!(
        text.contains("the configured Python interpreter /nonexistent/python does not exist"),
        "{text}"
    );
    assert!(!text.contains("Connection reset"), "{text}");

    let plain = dir.path().join("plain");
    file(&plain, "#!/bin/sh\n", 0o644);
    let text = start_error(&plain);
    assert!(
        text.contains(&format!(
            "the configured Python interpreter {} is not executable (mode 644",
            plain.display()
        )),
        "{text}"
    );
    let text = start_error(dir.path());
    assert!(
        text.contains(&format!(
            "the configured Python interpreter {} is a directory, not an executable file",
            dir.path().display()
        )),
        "{text}"
    );

    // A Python 2: it answers the version probe, and cannot run the runner.
    let old = dir.path().join("python2");
    file(
        &old,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then printf 2.7.18; exit 0; fi\n\
         echo 'SyntaxError: invalid syntax' >&2\nexit 1\n",
        0o755,
    );
    let text = start_error(&old);
    assert!(
        text.contains(&format!(
            "python ({}) is Python 2.7.18, too old: cellvisor's runner needs Python 3.8 or later",
            old.display()
        )),
        "{text}"
    );

    // A recent Python whose runner cannot import: its stderr is the reason.
    let broken = dir.path().join("python3");
    file(
        &broken,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then printf 3.12.1; exit 0; fi\n\
         echo 'Traceback (most recent call last):' >&2\n\
         echo \"ModuleNotFoundError: No module named 'encodings'\" >&2\nexit 1\n",
        0o755,
    );
    let text = start_error(&broken);
    assert!(
        text.contains(&format!(
            "python ({}, Python 3.12.1) failed to start cellvisor's runner: python exited with code 1; it printed:\n\
             Traceback (most recent call last):\nModuleNotFoundError: No module named 'encodings'",
            broken.display()
        )),
        "{text}"
    );
}

/// The one cell of `eval`ing `code` in `language` in `session`.
fn run(daemon: &Daemon, session: &str, language: &str, code: &str) -> Value {
    daemon
        .client()
        .eval(session, json!([{"language": language, "code": code}]))
}

#[test]
fn python_exit_skips_except_finally_and_exit_blocks_as_javascript_does() {
    let daemon = Daemon::start();
    // The anchor's rule, in JavaScript and in Python alike: nothing after exit() runs to any
    // effect, including catch and finally blocks; values saved before it are kept.
    let js = run(
        &daemon,
        "exit-js",
        "js",
        "globalThis.flag = 'unchanged'; store('before_exit', 7); text('shown')\n\
         try { exit() } catch (e) { globalThis.flag = 'catch-ran' } finally { globalThis.flag = 'finally-ran' }\n\
         globalThis.flag = 'after'",
    );
    let py = run(
        &daemon,
        "exit-py",
        "py",
        "flag = 'unchanged'; store('before_exit', 7); text('shown')\n\
         try:\n    exit()\nexcept SystemExit:\n    flag = 'except-ran'\n\
         finally:\n    flag = 'finally-ran'; print('finally')\n\
         flag = 'after'",
    );
    for result in [&js, &py] {
        assert_eq!(cell(result, 0)["status"], "complete", "{result:#}");
        assert_eq!(output(result, 0), "shown\n", "{result:#}");
    }
    let js_after = run(
        &daemon,
        "exit-js",
        "js",
        "[flag, load('before_exit')].join()",
    );
    assert_eq!(output(&js_after, 0), "unchanged,7\n", "{js_after:#}");
    let py_after = run(&daemon, "exit-py", "py", "print(flag, load('before_exit'))");
    assert_eq!(output(&py_after, 0), "unchanged 7\n", "{py_after:#}");

    // Deeper: a function's finally, a bare except, a cell-defined context manager, a loop.
    let nested = run(
        &daemon,
        "exit-py",
        "py",
        "log = []\n\
         class Guard:\n    def __enter__(self):\n        return self\n\
         \x20   def __exit__(self, *exc):\n        log.append('__exit__'); print('exit ran')\n\
         def leave():\n    try:\n        exit()\n    finally:\n        log.append('inner finally')\n\
         for _ in range(3):\n    with Guard():\n        try:\n            leave()\n\
         \x20       except BaseException:\n            log.append('caught')\n",
    );
    assert_eq!(cell(&nested, 0)["status"], "complete", "{nested:#}");
    assert_eq!(output(&nested, 0), "", "{nested:#}");
    let log = run(&daemon, "exit-py", "py", "log");
    assert_eq!(output(&log, 0), "[]\n", "{log:#}");

    // exit(3) still fails the cell, naming the code, and the next cell runs as usual
    // (with sys.exit keeping Python's own rule: its finally runs).
    let failed = run(
        &daemon,
        "exit-py",
        "py",
        "try:\n    exit(3)\nfinally:\n    print('no')",
    );
    assert_eq!(cell(&failed, 0)["status"], "error", "{failed:#}");
    let text = output(&failed, 0);
    assert!(
        text.contains("SystemExit: 3") && !text.contains("no\n"),
        "{text}"
    );
    assert!(!text.contains("cellvisor_exit"), "{text}");
    let sys_exit = run(
        &daemon,
        "exit-py",
        "py",
        "import sys\ntry:\n    sys.exit(0)\nfinally:\n    print('sys.exit runs finally')",
    );
    assert_eq!(
        output(&sys_exit, 0),
        "sys.exit runs finally\n",
        "{sys_exit:#}"
    );
    let next = run(
        &daemon,
        "exit-py",
        "py",
        "try:\n    1/0\nexcept ZeroDivisionError:\n    print('handled')",
    );
    assert_eq!(output(&next, 0), "handled\n", "{next:#}");
    daemon.stop();
}

#[test]
fn helper_paths_that_are_uris_are_refused_in_every_language() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let cwd = daemon.world.work_dir();
    let refusal = "is a URI: file helpers take local file paths only \
                   (remote and file:// URIs are not supported)";
    for language in ["py", "js", "lua"] {
        for (helper, call, path) in [
            ("write", "write(\"https://x/y\", \"z\")", "https://x/y"),
            ("append", "append(\"https://x/y\", \"z\")", "https://x/y"),
            (
                "read",
                "read(\"file:///etc/hostname\")",
                "file:///etc/hostname",
            ),
            ("tree", "tree(\"s3://bucket/key\")", "s3://bucket/key"),
        ] {
            let result = client.eval_in(
                &format!("uri-{language}"),
                &cwd,
                json!([{"language": language, "code": call}]),
            );
            assert_eq!(cell(&result, 0)["status"], "error", "{result:#}");
            let text = output(&result, 0);
            assert!(
                text.contains(&format!("{helper}: '{path}' {refusal}")),
                "{language} {call}: {text}"
            );
        }
    }
    assert!(!cwd.join("https:").exists(), "a URI became a directory");
    // A local path that only holds `://` further on is still a path.
    let local = client.eval_in(
        "uri-py",
        &cwd,
        json!([{"language": "py", "code": "write('notes/a://b', 'z'); read('notes/a://b')"}]),
    );
    assert_eq!(output(&local, 0), "'z'\n", "{local:#}");

    for code in [
        "await import('https://esm.sh/lodash-es')",
        "import _ from 'https://esm.sh/lodash-es'; _",
    ] {
        let result = client.eval("uri-js", json!([{"language": "js", "code": code}]));
        let text = output(&result, 0);
        assert!(
            text.contains(
                "cannot import `https://esm.sh/lodash-es`: remote imports are not supported"
            ) && !text.contains("package `https:`"),
            "{code}: {text}"
        );
    }
    daemon.stop();
}

/// The streamed `output` events of one eval, as (stream, text) pairs in order.
fn streamed(daemon: &Daemon, session: &str, language: &str, code: &str) -> Vec<(String, String)> {
    let (events, response) = daemon.client().call_collect(
        "eval",
        json!({"session": session, "cells": [{"language": language, "code": code}]}),
    );
    assert!(response.get("error").is_none(), "{response:#}");
    events
        .iter()
        .filter(|e| e["params"]["event"] == "output")
        .map(|e| {
            let text = |key: &str| e["params"][key].as_str().unwrap_or_default().to_string();
            (text("stream"), text("text"))
        })
        .collect()
}

/// The text of the events on `stream`, joined.
fn joined(events: &[(String, String)], stream: &str) -> String {
    events
        .iter()
        .filter(|(s, _)| s == stream)
        .map(|(_, text)| text.as_str())
        .collect()
}

#[test]
fn python_stderr_streams_as_stderr_in_order_with_its_markers() {
    let daemon = Daemon::start();
    // The interpreter's own writes, a child process's, and a traceback; the stdout written
    // after the stderr still follows it.
    let code = "import sys, subprocess\n\
                print('out one')\n\
                print('err one', file=sys.stderr)\n\
                subprocess.run([sys.executable, '-c', 'import sys; sys.stderr.write(\"child err\\\\n\"); print(\"child out\")'])\n\
                print('out two')";
    let events = streamed(&daemon, "streams", "py", code);
    assert_eq!(
        joined(&events, "stdout"),
        "out one\nchild out\nout two\n",
        "{events:?}"
    );
    assert_eq!(
        joined(&events, "stderr"),
        "err one\nchild err\n",
        "{events:?}"
    );
    let failed = streamed(&daemon, "streams", "py", "print('before')\n1/0");
    assert_eq!(joined(&failed, "stdout"), "before\n", "{failed:?}");
    assert!(
        joined(&failed, "stderr").contains("ZeroDivisionError: division by zero"),
        "{failed:?}"
    );
    // A cell that moved fd 2 gets it back on the error pipe in the next cell.
    let moved = streamed(
        &daemon,
        "streams",
        "py",
        "import os; os.dup2(1, 2); _ = os.write(2, b'on stdout now\\n')",
    );
    assert_eq!(joined(&moved, "stdout"), "on stdout now\n", "{moved:?}");
    let back = streamed(
        &daemon,
        "streams",
        "py",
        "import os; _ = os.write(2, b'stderr again\\n')",
    );
    assert_eq!(joined(&back, "stderr"), "stderr again\n", "{back:?}");
    assert_eq!(joined(&back, "stdout"), "", "{back:?}");
    // Stderr is never late: a cell's stderr comes before its end, cell after cell.
    for n in 0..50 {
        let quick = streamed(
            &daemon,
            "streams",
            "py",
            &format!("import sys; sys.stderr.write('e{n}\\n'); {n}"),
        );
        assert_eq!(joined(&quick, "stderr"), format!("e{n}\n"), "{quick:?}");
    }
    daemon.stop();
}

#[test]
fn python_print_streams_each_line_in_one_event() {
    let daemon = Daemon::start();
    let events = streamed(
        &daemon,
        "print",
        "py",
        "import sys\nfor i in range(300):\n    print(i)\n    print('e', i, sep='', file=sys.stderr)",
    );
    let expected: String = (0..300).map(|i| format!("{i}\n")).collect();
    assert_eq!(joined(&events, "stdout"), expected);
    // Each print is one write: no event ends inside a line (a value without its newline).
    assert!(
        events.iter().all(|(_, text)| text.ends_with('\n')),
        "{events:?}"
    );
    // Other files still get the built-in print, and print keeps its name and errors.
    let result = daemon.client().eval(
        "print",
        json!([{"language": "py", "code": "import io\nb = io.StringIO()\nprint(1, 2, sep='-', file=b)\ntry:\n    print(1, sep=3)\nexcept TypeError as e:\n    print(e)\n(b.getvalue(), print.__name__, print.__module__)"}]),
    );
    assert_eq!(
        output(&result, 0),
        "sep must be None or a string, not int\n('1-2\\n', 'print', 'builtins')\n",
        "{result:#}"
    );
    daemon.stop();
}

/// Issue 28 item 7: through the daemon, cells see the caller's environment (as `[env]`
/// passes it), not the daemon's; a credential of the caller stays out; a live worker gets a
/// change applied before the cell, with a notice naming the variable (never its value).
#[test]
fn cells_through_the_daemon_see_the_callers_environment() {
    let world = common::World::with_config("[env]\nallow = [\"MYAPP_*\"]\n");
    let eval_in = |session: &str, vars: &[(&str, &str)], language: &str, code: &str| {
        let mut command = world.command();
        for name in ["MYAPP_MODE", "MYAPP_TOKEN", "MYAPP_ONLY_DAEMON"] {
            command.env_remove(name);
        }
        command.envs(vars.iter().copied());
        let output = command
            .args(["eval", "--session", session, "-l", language, code])
            .output()
            .expect("run cellvisor eval");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        assert!(output.status.success(), "{stdout}\n{stderr}");
        (stdout, stderr)
    };
    let eval =
        |vars: &[(&str, &str)], language: &str, code: &str| eval_in("env", vars, language, code);
    // The daemon starts (for another session) from a caller with a variable of its own.
    eval_in("boot", &[("MYAPP_ONLY_DAEMON", "d")], "lua", "print(1)");
    let caller = [("MYAPP_MODE", "dev"), ("MYAPP_TOKEN", "secret-value")];
    let cells = [
        (
            "py",
            "import os, subprocess\n\
             print(os.environ.get('MYAPP_MODE'), os.environ.get('MYAPP_TOKEN'), os.environ.get('MYAPP_ONLY_DAEMON'))\n\
             _ = subprocess.run(['sh', '-c', 'echo child $MYAPP_MODE'])",
            "dev None None\nchild dev\n",
        ),
        (
            "js",
            "console.log(process.env.MYAPP_MODE, process.env.MYAPP_TOKEN, process.env.MYAPP_ONLY_DAEMON)",
            "dev undefined undefined\n",
        ),
        (
            "lua",
            "print(os.getenv('MYAPP_MODE'), os.getenv('MYAPP_TOKEN'), os.getenv('MYAPP_ONLY_DAEMON'))",
            "dev\tnil\tnil\n",
        ),
    ];
    for (language, code, expected) in cells {
        let (stdout, stderr) = eval(&caller, language, code);
        assert_eq!(stdout, expected, "{language}: {stderr}");
        assert!(
            !stderr.contains("environment changed"),
            "{language}: {stderr}"
        );
    }
    // A change reaches the live workers, named in a notice; the value stays out of it.
    for (language, code, _) in cells {
        let (stdout, stderr) = eval(&[("MYAPP_MODE", "prod-value")], language, code);
        assert!(stdout.starts_with("prod-value"), "{language}: {stdout}");
        assert!(
            stderr.contains("the caller's environment changed: MYAPP_MODE"),
            "{language}: {stderr}"
        );
        assert!(!stderr.contains("prod-value"), "{language}: {stderr}");
        // And a variable the caller no longer has is gone.
        let (stdout, _) = eval(&[], language, code);
        assert!(!stdout.contains("prod-value"), "{language}: {stdout}");
    }
    world.run(&["stop"]).assert_code(0);
    world.assert_no_processes_left(std::time::Duration::from_secs(5));
}

/// A process a Python cell forks without an exec or exit of its own ends when its copy of the
/// cell does: it never marks the cell done, nor runs the session's next cells.
#[test]
fn a_forked_copy_of_a_python_cell_ends_with_its_code() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let pid_of = |client: &mut common::daemon::Client| {
        let result = client.eval(
            "fork",
            json!([{"language": "py", "code": "import os; os.getpid()"}]),
        );
        output(&result, 0).to_string()
    };
    let runner = pid_of(&mut client);
    let forked = client.eval(
        "fork",
        json!([{"language": "py", "code": "import os, time\n\
            pid = os.fork()\n\
            if pid == 0:\n    print('child', flush=True)\n    time.sleep(0.2)\n\
            else:\n    _, code = os.waitpid(pid, 0)\n    print('parent saw', code)"}]),
    );
    let text = output(&forked, 0);
    assert_eq!(cell(&forked, 0)["status"], "complete", "{forked:#}");
    assert!(
        text.contains("child\n") && text.contains("parent saw 0\n"),
        "{text}"
    );
    // A child whose code fails ends too, with status 1.
    let failing = client.eval(
        "fork",
        json!([{"language": "py", "code": "import os\n\
            pid = os.fork()\n\
            if pid == 0:\n    raise ValueError('in the child')\n\
            _, code = os.waitpid(pid, 0)\n\
            print('exit', os.waitstatus_to_exitcode(code))"}]),
    );
    assert!(output(&failing, 0).contains("exit 1\n"), "{failing:#}");
    for _ in 0..5 {
        assert_eq!(pid_of(&mut client), runner, "a cell ran in another process");
    }
    daemon.stop();
}
