//! `[sessions] key = "session+cwd"` end to end through the daemon: one session name keeps
//! one state per directory (the pair), other methods name a pair by an optional `cwd`, and
//! the default key keeps today's behaviour (every directory shares the session's state).

mod common;

use common::daemon::{cell, output, Client, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const PAIRS: &str = "key = \"session+cwd\"\n";

/// Two project directories in the daemon's world, and their canonical paths.
fn projects(daemon: &Daemon) -> (PathBuf, PathBuf) {
    let a = daemon.world.work_dir().join("a");
    let b = daemon.world.work_dir().join("b");
    std::fs::create_dir_all(&a).expect("mkdir a");
    std::fs::create_dir_all(&b).expect("mkdir b");
    (
        std::fs::canonicalize(a).expect("a"),
        std::fs::canonicalize(b).expect("b"),
    )
}

/// What `x` holds in py and in js, read in `cwd`.
fn read_x(client: &mut Client, cwd: &Path) -> (String, String) {
    let result = client.eval_in(
        "s",
        cwd,
        json!([{"language": "py", "code": "print(x)"}, {"language": "js", "code": "console.log(x)"}]),
    );
    (
        output(&result, 0).to_string(),
        output(&result, 1).to_string(),
    )
}

fn set_x(client: &mut Client, cwd: &Path, value: u32) {
    let result = client.eval_in(
        "s",
        cwd,
        json!([
            {"language": "py", "code": format!("x = {value}")},
            {"language": "js", "code": format!("globalThis.x = {value}")},
        ]),
    );
    assert_eq!(result["is_error"], json!(false), "{result}");
}

/// The refusal of a request: its code and message.
fn refusal(answer: Result<Value, Value>) -> (i64, String) {
    let error = answer.expect_err("refused");
    (
        error["code"].as_i64().unwrap_or_default(),
        error["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// The (session, cwd, language) of every `status` row.
fn rows(client: &mut Client) -> Vec<(String, Option<String>, String)> {
    let status = client.call("status", json!({})).expect("status");
    let mut rows: Vec<_> = status
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            (
                row["session"].as_str().unwrap_or_default().to_string(),
                row["cwd"].as_str().map(str::to_string),
                row["language"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn shown(path: &Path) -> Option<String> {
    Some(path.display().to_string())
}

#[test]
fn each_directory_keeps_its_own_state_under_one_session_name() {
    let daemon = Daemon::start_with(PAIRS);
    let (a, b) = projects(&daemon);
    let mut client = daemon.client();
    set_x(&mut client, &a, 1);
    set_x(&mut client, &b, 2);
    assert_eq!(read_x(&mut client, &a), ("1\n".into(), "1\n".into()));
    assert_eq!(read_x(&mut client, &b), ("2\n".into(), "2\n".into()));

    // The key is the canonical directory: `..` and a symbolic link name the same pair.
    let link = daemon.world.work_dir().join("link-to-a");
    std::os::unix::fs::symlink(&a, &link).expect("symlink");
    assert_eq!(read_x(&mut client, &link).0, "1\n");
    assert_eq!(read_x(&mut client, &b.join("..").join("a")).0, "1\n");

    // `status` shows the session's name and each pair's directory.
    let s = "s".to_string();
    assert_eq!(
        rows(&mut client),
        [
            (s.clone(), shown(&a), "js".into()),
            (s.clone(), shown(&a), "py".into()),
            (s.clone(), shown(&b), "js".into()),
            (s.clone(), shown(&b), "py".into()),
        ]
    );

    // A directory that does not exist is refused, by eval and by the other methods.
    let missing = daemon.world.work_dir().join("missing");
    let (code, message) = refusal(client.call(
        "eval",
        json!({"session": "s", "cwd": missing, "cells": [{"language": "py", "code": "x"}]}),
    ));
    assert_eq!(code, -32001);
    assert!(message.contains("does not exist"), "{message}");
    let (code, message) = refusal(client.call("close", json!({"session": "s", "cwd": missing})));
    assert_eq!(code, -32001);
    assert!(message.contains("does not exist"), "{message}");

    // Without a cwd, eval names no pair: refused, naming the key.
    let (code, message) = refusal(client.call(
        "eval",
        json!({"session": "s", "cells": [{"language": "py", "code": "x"}]}),
    ));
    assert_eq!(code, -32001);
    assert!(message.contains("sessions.key"), "{message}");
    assert!(message.contains("cwd"), "{message}");

    // `close` with cwd A ends A's state and leaves B's.
    let closed = client
        .call("close", json!({"session": "s", "cwd": a}))
        .expect("close a");
    assert_eq!(closed["sessions"], json!(2), "{closed}");
    assert!(rows(&mut client).iter().all(|row| row.1 == shown(&b)));
    assert_eq!(read_x(&mut client, &b), ("2\n".into(), "2\n".into()));
    let fresh = client.eval_in("s", &a, json!([{"language": "py", "code": "print(x)"}]));
    assert!(output(&fresh, 0).contains("NameError"), "{fresh}");

    // Without a cwd, `close` reaches every pair of the name.
    let closed = client
        .call("close", json!({"session": "s"}))
        .expect("close all");
    assert_eq!(closed["sessions"], json!(3), "{closed}");
    assert!(rows(&mut client).is_empty());
    daemon.stop();
}

#[test]
fn a_method_needing_one_pair_refuses_a_name_with_two_and_takes_a_cwd() {
    let daemon = Daemon::start_with(PAIRS);
    let (a, b) = projects(&daemon);
    let mut client = daemon.client();
    set_x(&mut client, &b, 2);
    let started = client.eval_in(
        "s",
        &a,
        json!([{"language": "py", "code": "import time\ntime.sleep(1.5)\nprint('done', x)",
                "yield_time_ms": 100}]),
    );
    // x is not defined in A: the cell fails there once it ends, not with B's x.
    assert_eq!(cell(&started, 0)["status"], json!("running"), "{started}");
    let cell_id = cell(&started, 0)["cell_id"].clone();

    let (code, message) = refusal(client.call("wait", json!({"session": "s", "cell_id": cell_id})));
    assert_eq!(code, -32001);
    for needed in [a.display().to_string(), b.display().to_string()] {
        assert!(message.contains(&needed), "{message}");
    }
    assert!(message.contains("pass `cwd`"), "{message}");

    // B's pair has no such cell: the cell belongs to A's.
    let (code, message) = refusal(client.call(
        "wait",
        json!({"session": "s", "cwd": b, "cell_id": cell_id}),
    ));
    assert_eq!(code, -32001);
    assert!(message.contains("no background cell"), "{message}");

    let ended = client
        .call(
            "wait",
            json!({"session": "s", "cwd": a, "cell_id": cell_id}),
        )
        .expect("wait with cwd");
    assert_eq!(ended["status"], json!("error"), "{ended}");
    assert!(
        ended["output"]
            .as_str()
            .unwrap_or_default()
            .contains("NameError"),
        "{ended}"
    );

    // With one pair left, a method without cwd uses it.
    client
        .call("close", json!({"session": "s", "cwd": b}))
        .expect("close b");
    let names = client
        .call("names", json!({"session": "s", "language": "py"}))
        .expect("names of the only pair");
    assert_eq!(names["session"], json!("s"), "{names}");
    daemon.stop();
}

#[test]
fn the_cli_sends_its_directory_so_eval_and_close_name_the_same_pair() {
    let daemon = Daemon::start_with(PAIRS);
    let (a, b) = projects(&daemon);
    let socket = daemon.socket.to_string_lossy().into_owned();
    let cli = |dir: &Path, args: &[&str]| {
        let out = daemon
            .world
            .command()
            .current_dir(dir)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .expect("run cellvisor");
        common::Run::from(out)
    };
    cli(&a, &["eval", "-s", "p", "-l", "py", "y = 'a'"]).assert_code(0);
    cli(&b, &["eval", "-s", "p", "-l", "py", "y = 'b'"]).assert_code(0);
    let run = cli(&a, &["eval", "-s", "p", "-l", "py", "print(y)"]);
    assert_eq!(run.assert_code(0).stdout.trim(), "a");
    cli(&a, &["close", "-s", "p"]).assert_code(0);
    let mut client = daemon.client();
    assert!(rows(&mut client).iter().all(|row| row.1 == shown(&b)));
    let run = cli(&b, &["eval", "-s", "p", "-l", "py", "print(y)"]);
    assert_eq!(run.assert_code(0).stdout.trim(), "b");
    // `--cwd` names another directory's pair from here.
    let b_arg = b.to_string_lossy().into_owned();
    cli(&a, &["close", "-s", "p", "--cwd", &b_arg]).assert_code(0);
    assert!(rows(&mut client).is_empty());
    daemon.stop();
}

#[test]
fn under_the_default_key_every_directory_shares_the_session() {
    let daemon = Daemon::start();
    let (a, b) = projects(&daemon);
    let mut client = daemon.client();
    set_x(&mut client, &a, 1);
    assert_eq!(read_x(&mut client, &b), ("1\n".into(), "1\n".into()));
    assert!(rows(&mut client).iter().all(|row| row.1.is_none()));
    // `cwd` on the other methods is accepted and ignored.
    let missing = daemon.world.work_dir().join("missing");
    let reset = client
        .call(
            "reset",
            json!({"session": "s", "cwd": missing, "language": "py"}),
        )
        .expect("reset ignores cwd");
    assert_eq!(reset["sessions"], json!(1), "{reset}");

    // A reload that changes the key keeps the one in force until the next start.
    std::fs::write(
        daemon.world.config_path(),
        format!("{}{PAIRS}", common::SHORT_INTERVALS),
    )
    .expect("config");
    let reloaded = client.call("config/reload", json!({})).expect("reload");
    assert!(
        reloaded["changes"].to_string().contains("sessions.key"),
        "{reloaded}"
    );
    let still = client.eval("s", json!([{"language": "js", "code": "console.log(x)"}]));
    assert_eq!(output(&still, 0), "1\n");
    daemon.stop();
}
