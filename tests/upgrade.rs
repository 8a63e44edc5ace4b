//! Living across upgrades and under a service manager: `--version` names the protocols, a
//! client and a daemon of different protocol versions say so (both ways), and a daemon
//! started by socket activation serves cells on the socket it was passed and leaves it there.

mod common;

use common::daemon::{Client, Daemon};
use common::{path_str, wait_until, World};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const PROTOCOL: u32 = cellvisor::daemon::protocol::PROTOCOL_VERSION;

#[test]
fn version_names_the_program_and_both_protocols() {
    let world = World::new();
    let run = world.run(&["--version"]);
    run.assert_code(0);
    let expected = format!(
        "cellvisor {} (protocol {PROTOCOL}, worker ipc {})",
        env!("CARGO_PKG_VERSION"),
        cellvisor_ipc::PROTOCOL_VERSION
    );
    assert_eq!(run.stdout.trim(), expected);
}

#[test]
fn the_daemon_refuses_a_client_of_another_protocol_naming_both_versions() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let refusal = client
        .call(
            "initialize",
            json!({"protocol_version": PROTOCOL + 1, "client_version": "9.9.9"}),
        )
        .expect_err("another protocol is refused");
    assert_eq!(refusal["code"], -32007, "{refusal}");
    let message = refusal["message"].as_str().unwrap_or_default();
    let ours = format!(
        "protocol {PROTOCOL} (cellvisor {})",
        env!("CARGO_PKG_VERSION")
    );
    let theirs = format!("protocol {} (cellvisor 9.9.9)", PROTOCOL + 1);
    assert!(message.contains(&ours), "{message}");
    assert!(message.contains(&theirs), "{message}");
    assert!(message.contains("`cellvisor stop`"), "{message}");
    assert_eq!(refusal["data"]["daemon_protocol"], PROTOCOL);
    assert_eq!(refusal["data"]["client_protocol"], PROTOCOL + 1);

    // The same version, or none said (an older client), is welcome.
    let same = client.call("initialize", json!({"protocol_version": PROTOCOL}));
    assert_eq!(same.expect("same protocol")["protocol_version"], PROTOCOL);
    assert!(client.call("initialize", json!({})).is_ok());
    daemon.stop();
}

/// A daemon of protocol 0 as one left running across an upgrade behaves: `initialize`
/// ignores its params and answers its own version; every other method refuses the new
/// client's params with serde's "unknown field"; `shutdown` is obeyed.
fn old_daemon(listener: UnixListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let mut writer = stream.try_clone().expect("clone");
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let request: Value = serde_json::from_str(&line).expect("JSON line");
            let answer = match request["method"].as_str() {
                Some("initialize") => json!({"result": {"protocol_version": 0,
                    "server_version": "0.0.9", "languages": ["py"], "pid": 1}}),
                Some("shutdown") => json!({"result": null}),
                _ => json!({"error": {"code": -32602,
                    "message": "invalid params: unknown field `cwd`, expected `session`"}}),
            };
            let mut answer = answer;
            answer["jsonrpc"] = json!("2.0");
            answer["id"] = request["id"].clone();
            if writeln!(writer, "{answer}").is_err() {
                break;
            }
        }
    }
}

#[test]
fn the_cli_tells_an_old_daemon_by_its_version_not_by_the_field_it_refused() {
    let world = World::new();
    let socket = world.runtime_dir().join("old.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    std::thread::spawn(move || old_daemon(listener));
    let named = |run: &common::Run| {
        assert_ne!(run.code, 0, "stdout: {}", run.stdout);
        assert!(
            run.stderr.contains("protocol 0 (cellvisor 0.0.9)"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains(&format!("this client protocol {PROTOCOL}")),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("`cellvisor stop`"), "{}", run.stderr);
        assert!(!run.stderr.contains("unknown field"), "{}", run.stderr);
    };
    // `eval` checks the version as it connects.
    named(&world.run(&[
        "--socket",
        path_str(&socket),
        "eval",
        "-l",
        "py",
        "print(1)",
    ]));
    // `status` asks only once its request is refused.
    named(&world.run(&["--socket", path_str(&socket), "status"]));
}

#[test]
fn a_socket_activated_daemon_serves_cells_and_leaves_the_socket_to_its_manager() {
    let world = World::new();
    let socket = world.runtime_dir().join("activated.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let fd = listener.as_raw_fd();
    // What a service manager does: the listening socket as fd 3, LISTEN_PID the daemon's.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve --socket "$1""#)
        .arg(env!("CARGO_BIN_EXE_cellvisor"))
        .arg(&socket)
        .env("XDG_RUNTIME_DIR", world.runtime_dir())
        .env("XDG_STATE_HOME", world.dir.path().join("state"))
        .env("XDG_CONFIG_HOME", world.config_home())
        .env("CELLVISOR_CONFIG", world.config_path())
        .current_dir(world.work_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: dup2 and fcntl are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if fd == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawn the daemon");
    drop(listener);

    // The first connection waits in the socket's backlog until the daemon accepts it.
    let run = world.run(&[
        "--socket",
        path_str(&socket),
        "eval",
        "-l",
        "py",
        "print(6*7)",
    ]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "42", "{}", run.stderr);

    let mut client = Client::connect(&socket);
    client.call("shutdown", json!({})).expect("shutdown");
    let exited = wait_until(Duration::from_secs(15), || match child.try_wait() {
        Ok(Some(status)) => Ok(status),
        _ => Err(()),
    });
    if exited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(exited.is_ok_and(|s| s.success()), "the daemon did not exit");
    assert!(socket.exists(), "the manager's socket is left in place");
    world.assert_no_processes_left(Duration::from_secs(5));
}
