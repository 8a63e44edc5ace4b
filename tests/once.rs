//! Requests that run once, end to end through the daemon and real workers: a retried
//! `request_id` is answered with the first run's result and runs nothing (a cell that
//! appends to a file leaves one line), a retry sent while the first run goes on (or after
//! its connection was lost) waits for it and gets the same answer, the same id with other
//! cells is refused naming the conflict, bad ids are refused with the allowed form, the
//! memory survives a daemon restart with snapshots on (and a file copied from another
//! session is refused), and `close` forgets it.

mod common;

use common::daemon::{cell, Client, Daemon};
use common::{path_str, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A Python cell that appends one line to `file`, then prints how many lines it holds.
fn append(file: &Path) -> Value {
    let code = format!(
        "with open({path:?}, 'a') as f:\n    f.write('ran\\n')\nprint(len(open({path:?}).readlines()))",
        path = path_str(file)
    );
    json!([{"language": "py", "code": code}])
}

fn eval_with_id(
    client: &mut Client,
    session: &str,
    id: &str,
    cells: &Value,
) -> Result<Value, Value> {
    client.call(
        "eval",
        json!({"session": session, "request_id": id, "cells": cells}),
    )
}

fn lines(file: &Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |text| text.lines().count())
}

fn requests_file(world: &World, session: &str) -> PathBuf {
    world
        .dir
        .path()
        .join("state/cellvisor/snapshots")
        .join(session)
        .join("requests.mem")
}

#[test]
fn a_retried_request_id_is_answered_without_running_again() {
    let daemon = Daemon::start();
    let file = daemon.world.work_dir().join("appended.txt");
    let cells = append(&file);
    let mut client = daemon.client();
    let first = eval_with_id(&mut client, "once", "req-1", &cells).expect("first run");
    assert_eq!(cell(&first, 0)["status"], "complete", "{first:#}");
    assert_eq!(cell(&first, 0)["output"], "1\n");
    assert!(first.get("replayed").is_none(), "{first:#}");
    // The retry, on another connection as after a lost one.
    let mut other = daemon.client();
    let retry = eval_with_id(&mut other, "once", "req-1", &cells).expect("retry answered");
    assert_eq!(retry["replayed"], true, "{retry:#}");
    assert_eq!(cell(&retry, 0)["cell_id"], cell(&first, 0)["cell_id"]);
    assert_eq!(cell(&retry, 0)["output"], "1\n");
    assert_eq!(lines(&file), 1, "the retry ran nothing");
    // Another id is another request; the same id in another session is its own.
    let second = eval_with_id(&mut client, "once", "req-2", &cells).expect("second");
    assert_eq!(cell(&second, 0)["output"], "2\n");
    let elsewhere = eval_with_id(&mut client, "other", "req-1", &cells).expect("elsewhere");
    assert_eq!(cell(&elsewhere, 0)["output"], "3\n");
    assert_eq!(lines(&file), 3);
    // Without an id nothing is remembered: the same cells run again.
    client.eval("once", cells.clone());
    assert_eq!(lines(&file), 4);
    daemon.stop();
}

#[test]
fn a_retry_sent_while_the_first_run_goes_on_waits_and_gets_the_same_answer() {
    let daemon = Daemon::start();
    let file = daemon.world.work_dir().join("slow.txt");
    let code = format!(
        "import time\ntime.sleep(1.5)\nwith open({path:?}, 'a') as f:\n    f.write('ran\\n')\nprint('done')",
        path = path_str(&file)
    );
    let cells = json!([{"language": "py", "code": code}]);
    // The first run's connection is lost while its cell runs.
    let mut lost = daemon.client();
    lost.send(
        "eval",
        json!({"session": "slow", "request_id": "lost-1", "cells": cells}),
    );
    daemon.wait_for_state("slow", "busy");
    drop(lost);
    // Two retries at once, on connections of their own: each waits for the first run.
    let retries: Vec<_> = (0..2)
        .map(|_| {
            let (socket, cells) = (daemon.socket.clone(), cells.clone());
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket);
                eval_with_id(&mut client, "slow", "lost-1", &cells).expect("retry answered")
            })
        })
        .collect();
    let answers: Vec<Value> = retries
        .into_iter()
        .map(|r| r.join().expect("retry thread"))
        .collect();
    for answer in &answers {
        assert_eq!(cell(answer, 0)["status"], "complete", "{answer:#}");
        assert_eq!(cell(answer, 0)["output"], "done\n");
        assert_eq!(answer["replayed"], true, "{answer:#}");
    }
    assert_eq!(
        cell(&answers[0], 0)["cell_id"],
        cell(&answers[1], 0)["cell_id"]
    );
    assert_eq!(lines(&file), 1, "the cell ran once");
    daemon.stop();
}

#[test]
fn the_same_id_with_other_cells_is_refused_naming_the_conflict() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let cells = json!([{"language": "py", "code": "x = 1"}]);
    eval_with_id(&mut client, "c", "dup", &cells).expect("first");
    let other = json!([{"language": "py", "code": "x = 2"}]);
    let refused = eval_with_id(&mut client, "c", "dup", &other).expect_err("conflict");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("request_id \"dup\" was already used in session c for other cells"),
        "{refused}"
    );
    assert_eq!(refused["code"], -32001, "{refused}");
    // Nothing ran: x is still 1.
    let x = client.eval("c", json!([{"language": "py", "code": "print(x)"}]));
    assert_eq!(cell(&x, 0)["output"], "1\n");
    daemon.stop();
}

#[test]
fn bad_request_ids_are_refused_with_the_allowed_form() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let cells = json!([{"language": "py", "code": "print('ran')"}]);
    let long = "x".repeat(129);
    for (id, why) in [
        ("", "it is empty"),
        (long.as_str(), "it is 129 bytes long"),
        ("a b", "it holds ' '"),
        ("caf\u{e9}", "it holds 'é'"),
    ] {
        let refused = eval_with_id(&mut client, "bad", id, &cells).expect_err(id);
        assert_eq!(refused["code"], -32602, "{refused}");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{id:?}: {message}");
        assert!(
            message.contains("1 to 128 printable ASCII characters without spaces"),
            "{message}"
        );
    }
    let not_a_string = client
        .call(
            "eval",
            json!({"session": "bad", "request_id": 7, "cells": cells}),
        )
        .expect_err("a number");
    assert_eq!(not_a_string["code"], -32602, "{not_a_string}");
    let status = client.call("status", json!({})).expect("status");
    assert_eq!(status, json!([]), "no bad request started a session");
    daemon.stop();
}

#[test]
fn the_memory_survives_a_daemon_restart_with_snapshots_on_and_close_forgets_it() {
    let config = format!("{SHORT_INTERVALS}[snapshots]\nwhen = \"every-cell\"\n");
    let daemon = Daemon::start_in(World::with_config(&config));
    let file = daemon.world.work_dir().join("kept.txt");
    let cells = append(&file);
    let mut client = daemon.client();
    let first = eval_with_id(&mut client, "kept", "r-1", &cells).expect("first");
    assert_eq!(cell(&first, 0)["output"], "1\n");
    eval_with_id(&mut client, "thief", "t-1", &cells).expect("another session");
    assert_eq!(lines(&file), 2);
    let world = daemon.stop_keep_world();
    assert!(requests_file(&world, "kept").is_file());

    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let retry = eval_with_id(&mut client, "kept", "r-1", &cells).expect("retry");
    assert_eq!(retry["replayed"], true, "{retry:#}");
    assert_eq!(cell(&retry, 0)["cell_id"], cell(&first, 0)["cell_id"]);
    assert_eq!(lines(&file), 2, "the retry after the restart ran nothing");

    // Another session's file copied over this one's is refused, never answered from.
    std::fs::copy(
        requests_file(&daemon.world, "thief"),
        requests_file(&daemon.world, "kept"),
    )
    .expect("copy");
    let copied = eval_with_id(&mut client, "kept", "t-1", &cells).expect("runs");
    assert!(copied.get("replayed").is_none(), "{copied:#}");
    assert_eq!(lines(&file), 3);

    // Close forgets: the same id then runs as a new request.
    client
        .call("close", json!({"session": "kept"}))
        .expect("close");
    let gone = wait_until(Duration::from_secs(10), || {
        (!requests_file(&daemon.world, "kept").exists())
            .then_some(())
            .ok_or(())
    });
    assert!(gone.is_ok(), "close removed the remembered requests");
    let again = eval_with_id(&mut client, "kept", "r-1", &cells).expect("again");
    assert!(again.get("replayed").is_none(), "{again:#}");
    assert_eq!(lines(&file), 4);
    daemon.stop();
}

#[test]
fn another_tenants_request_id_is_its_own_and_never_answers_for_this_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alpha_token, beta_token) = ("alpha-once-0123456789abcdef", "beta-once-0123456789abcdef");
    std::fs::write(dir.path().join("alpha.token"), alpha_token).expect("token");
    std::fs::write(dir.path().join("beta.token"), beta_token).expect("token");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenants]]\nname = \"alpha\"\ntoken-file = \"alpha.token\"\n\
         [[tenants]]\nname = \"beta\"\ntoken-file = \"beta.token\"\n",
    )
    .expect("tenants");
    let extra = format!("tenants-file = {:?}\n", path_str(&tenants));
    let net = common::net::NetDaemon::start(false, &extra, "");
    let mut alpha = net.ws(Some(alpha_token), None).expect("alpha connects");
    let mut beta = net.ws(Some(beta_token), None).expect("beta connects");
    let counter = json!([{"language": "py", "code": "n = globals().get('n', 0) + 1\nprint(n)"}]);
    let request = json!({"session": "shared", "request_id": "same-id", "cells": counter});
    let first = alpha.call("eval", request.clone()).expect("alpha");
    assert_eq!(cell(&first, 0)["output"], "1\n");
    // Beta's same name and same id are another session's: they run there, and alpha's
    // answer is never handed to beta.
    let theirs = beta.call("eval", request.clone()).expect("beta");
    assert!(theirs.get("replayed").is_none(), "{theirs}");
    assert_eq!(cell(&theirs, 0)["output"], "1\n");
    assert_ne!(cell(&theirs, 0)["cell_id"], cell(&first, 0)["cell_id"]);
    // Beta reusing the id with other cells conflicts with nothing of alpha's: it is refused
    // only for beta's own request.
    let other = json!({"session": "shared", "request_id": "same-id", "cells": [{"language": "py", "code": "print('beta')"}]});
    let refused = beta.call("eval", other).expect_err("beta's own conflict");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("request_id \"same-id\" was already used in session")),
        "{refused}"
    );
    let retry = alpha.call("eval", request).expect("alpha again");
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(cell(&retry, 0)["cell_id"], cell(&first, 0)["cell_id"]);
    drop((alpha, beta));
    net.daemon.stop();
}
