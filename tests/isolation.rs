//! Sessions kept apart on disk, through the daemon: two names that once shared one directory
//! keep apart their store, checkpoints, temporary files and artifacts; a session's temporary
//! files go with `close` and `reset`; what a killed daemon left is removed at the next start.

mod common;

use common::daemon::{cell, output, Client, Daemon};
use common::{path_str, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The dotted name, and the name its file-safe form used to be (`team_alpha-` and the low 32
/// bits of its FNV-1a hash): one directory served both.
const DOTTED: &str = "team.alpha";
const LOOKALIKE: &str = "team_alpha-4d4ab6be";

fn daemon() -> Daemon {
    Daemon::start_in(World::with_config(&format!(
        "{SHORT_INTERVALS}[output]\nmax-bytes = \"1KiB\"\n[sandbox]\nenabled = true\n"
    )))
}

/// Runs one Python cell in `session` (sandboxed, in `cwd`); its first cell.
fn py(client: &mut Client, session: &str, cwd: &Path, code: &str) -> Value {
    let result = client.eval_in(session, cwd, json!([{"language": "py", "code": code}]));
    cell(&result, 0).clone()
}

/// A session's working directory in the daemon's world.
fn cwd_of(daemon: &Daemon, session: &str) -> PathBuf {
    let dir = daemon.world.work_dir().join(session.replace('.', "_dot_"));
    std::fs::create_dir_all(&dir).expect("cwd");
    dir
}

/// Writes `name` to a file in the session's temporary directory; that directory.
fn write_tmp(client: &mut Client, session: &str, cwd: &Path) -> PathBuf {
    let code = format!(
        "import os, tempfile\nd = tempfile.gettempdir()\nopen(os.path.join(d, 'mine'), 'w').write({session:?})\nprint(d)"
    );
    let done = py(client, session, cwd, &code);
    PathBuf::from(
        done["output"]
            .as_str()
            .unwrap_or_else(|| panic!("{done:#}"))
            .trim(),
    )
}

fn checkpoint_names(client: &mut Client, session: &str) -> Vec<String> {
    let listed = client
        .call("checkpoints", json!({"session": session}))
        .expect("checkpoints");
    listed
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn names_that_once_shared_a_directory_keep_apart_store_checkpoints_tmp_and_artifacts() {
    let daemon = daemon();
    let mut client = daemon.client();
    let mut tmp = Vec::new();
    let mut artifact_dirs = Vec::new();
    for session in [DOTTED, LOOKALIKE] {
        let cwd = cwd_of(&daemon, session);
        let stored = py(
            &mut client,
            session,
            &cwd,
            &format!("store('k', {session:?})\nprint('v' * 5000)"),
        );
        let artifact = stored["truncation"]["artifact_path"]
            .as_str()
            .unwrap_or_else(|| panic!("the cell spilled: {stored:#}"));
        artifact_dirs.push(Path::new(artifact).parent().map(Path::to_path_buf));
        tmp.push(write_tmp(&mut client, session, &cwd));
        let saved = client
            .call(
                "checkpoint",
                json!({"session": session, "language": "py", "name": session.replace('.', "-")}),
            )
            .expect("checkpoint answered");
        assert_eq!(saved.as_array().map(Vec::len), Some(1), "{saved:#}");
    }
    assert_ne!(tmp[0], tmp[1], "one temporary directory each");
    assert_ne!(
        artifact_dirs[0], artifact_dirs[1],
        "one artifact directory each"
    );
    for session in [DOTTED, LOOKALIKE] {
        let cwd = cwd_of(&daemon, session);
        let read = py(
            &mut client,
            session,
            &cwd,
            "import os, tempfile\nprint(load('k'), open(os.path.join(tempfile.gettempdir(), 'mine')).read())",
        );
        assert_eq!(
            read["output"],
            json!(format!("{session} {session}\n")),
            "{read:#}"
        );
        assert_eq!(
            checkpoint_names(&mut client, session),
            [session.replace('.', "-")],
            "each session lists its own checkpoint only"
        );
    }
    // Closing one forgets its checkpoints and files, and nothing of the other.
    client
        .call("close", json!({"session": DOTTED}))
        .expect("close");
    assert!(checkpoint_names(&mut client, DOTTED).is_empty());
    assert_eq!(
        checkpoint_names(&mut client, LOOKALIKE),
        ["team_alpha-4d4ab6be"]
    );
    assert!(
        tmp[1].join("mine").is_file(),
        "the other's temporary file stays"
    );
    let cwd = cwd_of(&daemon, LOOKALIKE);
    let read = py(&mut client, LOOKALIKE, &cwd, "print(load('k'))");
    assert_eq!(
        output(&json!({"cells": [read]}), 0),
        format!("{LOOKALIKE}\n")
    );
    drop(client);
    daemon.stop();
}

#[test]
fn a_sessions_temporary_files_are_gone_after_close_and_reset() {
    let daemon = daemon();
    let mut client = daemon.client();
    let cwd = cwd_of(&daemon, "forget");
    for method in ["close", "reset"] {
        let dir = write_tmp(&mut client, "forget", &cwd);
        assert!(dir.join("mine").is_file());
        client
            .call(method, json!({"session": "forget"}))
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let gone = wait_until(Duration::from_secs(30), || {
            (!dir.join("mine").exists()).then_some(()).ok_or(())
        });
        assert!(gone.is_ok(), "the temporary file outlived {method}");
        // The next session of the name finds no old file.
        let listed = py(
            &mut client,
            "forget",
            &cwd,
            "import os, tempfile\nprint(sorted(os.listdir(tempfile.gettempdir())))",
        );
        assert!(
            !listed["output"]
                .as_str()
                .unwrap_or_default()
                .contains("'mine'"),
            "after {method}: {listed:#}"
        );
    }
    drop(client);
    daemon.stop();
}

/// At level `none`, without the sandbox, a session's temporary files are its own too: a
/// prewarmed Python worker (the pool serves unsandboxed sessions) and a JavaScript worker
/// both write to the session's directory in the run directory, which `close`, `reset` and
/// an eviction without a snapshot remove; the daemon's inherited `TMPDIR` is not used.
#[test]
fn an_unsandboxed_session_at_level_none_has_its_own_temporary_directory_removed_on_forget() {
    let world = World::with_config(&format!(
        "{SHORT_INTERVALS}max-sessions = 1\n[isolation]\nlevel = \"none\"\n\
         [python]\nprewarm = 1\n[snapshots]\nwhen = \"never\"\n"
    ));
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let cwd = cwd_of(&daemon, "plain");
    let inherited = std::env::temp_dir();
    for method in ["close", "reset", "evict"] {
        let dir = write_tmp(&mut client, "plain", &cwd);
        assert!(dir.join("mine").is_file());
        let shown = path_str(&dir);
        assert!(
            shown.contains("/sup-") && shown.ends_with("/tmp/plain/py"),
            "the session's own directory in the run directory: {shown}"
        );
        assert_ne!(dir, inherited);
        // What the cell's programs see too (`TMPDIR`), and JavaScript's workers.
        let env = py(
            &mut client,
            "plain",
            &cwd,
            "import os, subprocess\nprint(subprocess.run(['sh', '-c', 'echo $TMPDIR'], capture_output=True, text=True).stdout.strip())",
        );
        assert_eq!(
            env["output"].as_str().unwrap_or_default().trim(),
            shown,
            "{env:#}"
        );
        let js = client.eval_in(
            "plain",
            &cwd,
            json!([{"language": "js", "code": "text(process.env.TMPDIR)"}]),
        );
        let js_tmp = output(&js, 0).trim().to_string();
        assert!(js_tmp.ends_with("/tmp/plain/js"), "{js:#}");
        if method == "evict" {
            // Another session takes the only place: `plain` is evicted, with no snapshot.
            let other = cwd_of(&daemon, "other");
            py(&mut client, "other", &other, "print(1)");
        } else {
            client
                .call(method, json!({"session": "plain"}))
                .unwrap_or_else(|e| panic!("{method}: {e}"));
        }
        let gone = wait_until(Duration::from_secs(30), || {
            (!dir.join("mine").exists()).then_some(()).ok_or(())
        });
        assert!(gone.is_ok(), "the temporary file outlived {method}");
    }
    drop(client);
    daemon.stop();
}

#[test]
fn what_a_killed_daemon_left_is_removed_at_the_next_start() {
    let daemon = daemon();
    let mut client = daemon.client();
    let cwd = cwd_of(&daemon, "left");
    let tmp = write_tmp(&mut client, "left", &cwd);
    // run_dir/tmp/<session>/<language>
    let run_dir = tmp
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("the run directory");
    let name = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    assert!(name.starts_with("sup-"), "{}", path_str(&run_dir));
    drop(client);
    let world = daemon.signal_and_wait("KILL");
    // The workers follow their daemon (their death signal).
    world.assert_no_processes_left(Duration::from_secs(30));
    assert!(
        tmp.join("mine").is_file(),
        "a SIGKILL leaves the files behind"
    );
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let listed = py(
        &mut client,
        "left",
        &cwd,
        "import os, tempfile\nprint(sorted(os.listdir(tempfile.gettempdir())))",
    );
    assert!(
        !listed["output"]
            .as_str()
            .unwrap_or_default()
            .contains("'mine'"),
        "{listed:#}"
    );
    assert!(
        !run_dir.exists(),
        "the dead daemon's run directory is removed at start: {}",
        path_str(&run_dir)
    );
    drop(client);
    daemon.stop();
}

#[test]
fn a_session_over_its_temporary_quota_gets_a_clear_error_and_others_start_fine() {
    let daemon = Daemon::start_in(World::with_config(&format!(
        "{SHORT_INTERVALS}[sandbox]\nenabled = true\ntmp-max = \"1MiB\"\n"
    )));
    let mut client = daemon.client();
    let cwd = cwd_of(&daemon, "filler");
    let filled = py(
        &mut client,
        "filler",
        &cwd,
        "import os, tempfile\nfor i in range(3):\n    open(os.path.join(tempfile.gettempdir(), f'f{i}'), 'wb').write(b'x' * 1_000_000)\nprint('wrote')",
    );
    assert_eq!(filled["status"], "error", "{filled:#}");
    let text = filled["output"].as_str().unwrap_or_default();
    assert!(text.contains("sandbox.tmp-max"), "{filled:#}");
    // Its files are gone, and the session goes on.
    let listed = py(
        &mut client,
        "filler",
        &cwd,
        "import os, tempfile\nprint(sorted(os.listdir(tempfile.gettempdir())))",
    );
    assert_eq!(listed["output"], "[]\n", "{listed:#}");
    // Other sessions start in every language.
    let other = cwd_of(&daemon, "other");
    let result = client.eval_in(
        "other",
        &other,
        json!([
            {"language": "js", "code": "console.log(6 * 7)"},
            {"language": "lua", "code": "print(6 * 7)"},
            {"language": "py", "code": "print(6 * 7)"},
        ]),
    );
    for i in 0..3 {
        assert_eq!(output(&result, i), "42\n", "{result:#}");
    }
    drop(client);
    daemon.stop();
}
