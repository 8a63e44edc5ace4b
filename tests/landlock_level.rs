//! The `landlock` isolation level, where the daemon cannot change uids: a daemon run as an
//! unprivileged user (`nobody`), with `auto` and no uid range, confines the sessions it
//! serves on the network. Each attack a cell served so makes on its daemon is refused:
//! reading the token file, the snapshot master key, the state and runtime directories,
//! another session's temporary files; driving the daemon over its socket, or over TCP
//! with the token it cannot read. The cell itself keeps working in its cwd and temp.

mod common;

use common::net::{connect_ws, free_port, WsClient, TOKEN};
use common::nobody::{self, as_nobody, give_to_nobody};
use common::{path_str, wait_until, World};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A world whose daemon (started by `as_nobody`) listens on `port` with a token file in the
/// world, at `[isolation]` `level` (`auto` with no uids: `landlock` for network sessions).
fn world(port: u16, level: &str) -> World {
    let world = World::with_config("");
    let token = world.dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    std::fs::write(
        world.config_path(),
        format!(
            "[python]\ninterpreter = \"/usr/bin/python3\"\n[daemon]\nidle-exit = \"0s\"\n\
             listen = [\"tcp://127.0.0.1:{port}\"]\ntoken-file = {:?}\n\
             [isolation]\nlevel = \"{level}\"\n",
            path_str(&token)
        ),
    )
    .expect("config");
    give_to_nobody(&world);
    world
}

/// Starts the world's daemon as `nobody` (the first `eval` does) and waits for its
/// listener.
fn start_as_nobody(world: &World, port: u16) {
    let started = as_nobody(world, &["eval", "-l", "py", "print('up')"])
        .output()
        .expect("setpriv runs");
    assert!(
        String::from_utf8_lossy(&started.stdout).contains("up"),
        "{started:?}"
    );
    let up = wait_until(Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", port)).map(|_| ())
    });
    assert!(up.is_ok(), "the network listener never listened: {up:?}");
}

fn stop(world: &World) {
    let stopped = as_nobody(world, &["stop"]).output().expect("stop");
    assert!(stopped.status.success(), "{stopped:?}");
    world.assert_no_processes_left(Duration::from_secs(30));
}

/// Runs one Python cell in `session`, in its workspace (a network client names no path of
/// the node); its output.
fn py(client: &mut WsClient, session: &str, code: &str) -> String {
    let result = client
        .call(
            "eval",
            json!({"session": session, "cells": [{"language": "py", "code": code}]}),
        )
        .unwrap_or_else(|e| panic!("eval refused: {e}"));
    let cell = &result["cells"][0];
    assert_eq!(cell["status"], "complete", "{cell:#}");
    cell["output"].as_str().unwrap_or_default().to_string()
}

/// What reading `path` gives a cell: `READ` or the error's name.
fn try_read(path: &Path) -> String {
    format!(
        "try:\n    open({p:?}, 'rb').read()\n    print({p:?}, 'READ')\n\
         except OSError as error:\n    print({p:?}, 'refused', type(error).__name__)\n",
        p = path_str(path)
    )
}

#[test]
fn a_network_cell_at_the_landlock_level_reads_no_secret_and_cannot_drive_its_daemon() {
    if !nobody::can_run_as_nobody("to run the daemon as an unprivileged user") {
        return;
    }
    let port = free_port();
    let world = world(port, "auto");
    start_as_nobody(&world, port);
    let status = as_nobody(&world, &["status"]).output().expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("isolation: landlock (network sessions confined by Landlock"),
        "{text}"
    );
    let mut client = connect_ws(port, None, Some(TOKEN), None, None).expect("websocket");
    // The victim, another network session, keeps a file in its temporary directory and one
    // in its workspace.
    let victim = py(
        &mut client,
        "victim",
        "import os, tempfile\nd = tempfile.gettempdir()\n\
         open(os.path.join(d, 'private'), 'w').write('mine')\n\
         open('private.txt', 'w').write('mine')\nprint(d)\nprint(os.getcwd())",
    );
    let mut victim = victim.lines().map(|l| PathBuf::from(l.trim()));
    let victims_file = victim.next().unwrap_or_default().join("private");
    assert!(victims_file.is_file(), "{}", victims_file.display());
    let victims_workspace_file = victim.next().unwrap_or_default().join("private.txt");
    assert!(
        victims_workspace_file.is_file(),
        "{}",
        victims_workspace_file.display()
    );
    let token = world.dir.path().join("token");
    let state = world.dir.path().join("state/cellvisor");
    let key = state.join("snapshots/.key");
    assert!(key.is_file(), "the daemon made its snapshot key");
    let runtime = world.runtime_dir().join("cellvisor");
    let mut attack = String::from("import os, socket\n");
    for path in [&token, &key, &victims_file, &victims_workspace_file] {
        attack.push_str(&try_read(path));
    }
    for dir in [&state, &runtime] {
        attack.push_str(&format!(
            "try:\n    os.listdir({d:?})\n    print({d:?}, 'LISTED')\n\
             except OSError as error:\n    print({d:?}, 'refused', type(error).__name__)\n",
            d = path_str(dir)
        ));
    }
    // Its own daemon: over the Unix socket, and over TCP with what it could get of the
    // token (nothing: the file is out of reach).
    attack.push_str(&format!(
        r#"try:
    u = socket.socket(socket.AF_UNIX)
    u.connect({socket:?})
    u.sendall(b'{{"jsonrpc":"2.0","id":1,"method":"status"}}\n')
    print("unix answered", u.recv(300))
except OSError as error:
    print("unix refused", type(error).__name__)
try:
    token = open({token:?}).read().strip()
except OSError:
    token = ""
s = socket.create_connection(("127.0.0.1", {port}), timeout=10)
s.sendall(("GET /v1/rpc HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "Authorization: Bearer " + token + "\r\n\r\n").encode())
print("tcp answer", s.recv(200).split(b"\r\n")[0])
"#,
        socket = path_str(&runtime.join("daemon.sock")),
        token = path_str(&token),
    ));
    let said = py(&mut client, "attacker", &attack);
    for path in [&token, &key, &victims_file, &victims_workspace_file] {
        assert!(
            said.contains(&format!("{} refused PermissionError", path_str(path))),
            "{}: {said}",
            path.display()
        );
    }
    for dir in [&state, &runtime] {
        assert!(
            said.contains(&format!("{} refused PermissionError", path_str(dir))),
            "{}: {said}",
            dir.display()
        );
    }
    assert!(
        said.contains("unix refused") || said.contains("cells may not drive the daemon"),
        "{said}"
    );
    assert!(said.contains("tcp answer b'HTTP/1.1 401"), "{said}");
    assert!(!said.contains("READ") && !said.contains("LISTED"), "{said}");
    // The cell works as ever in its cwd and its own temporary directory.
    let works = py(
        &mut client,
        "attacker",
        "import os, tempfile\nopen('notes.txt', 'w').write('kept')\n\
         p = os.path.join(tempfile.gettempdir(), 't')\nopen(p, 'w').write('1')\n\
         print(open('notes.txt').read(), open(p).read(), len(os.listdir('/usr')) > 0)\n\
         print(os.getcwd())",
    );
    let mut lines = works.lines();
    assert_eq!(
        lines.next().unwrap_or_default().trim(),
        "kept 1 True",
        "{works}"
    );
    let workspace = PathBuf::from(lines.next().unwrap_or_default().trim());
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap_or_default(),
        "kept",
        "{works}"
    );

    drop(client);
    stop(&world);
}

#[test]
fn at_level_landlock_a_local_session_is_confined_too_and_status_says_so() {
    if !nobody::can_run_as_nobody("to run the daemon as an unprivileged user") {
        return;
    }
    let port = free_port();
    let world = world(port, "landlock");
    start_as_nobody(&world, port);
    let token = world.dir.path().join("token");
    let code = format!(
        "try:\n    open({t:?}).read()\n    print('token READ')\n\
         except OSError as error:\n    print('token refused', type(error).__name__)",
        t = path_str(&token)
    );
    let local = as_nobody(&world, &["eval", "-l", "py", &code])
        .output()
        .expect("eval");
    let said = String::from_utf8_lossy(&local.stdout);
    assert!(said.contains("token refused PermissionError"), "{local:?}");
    let status = as_nobody(&world, &["status"]).output().expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("isolation: landlock (every session confined by Landlock"),
        "{text}"
    );
    // `initialize` answers the level, and which sessions it confines.
    let mut client = connect_ws(port, None, Some(TOKEN), None, None).expect("websocket");
    let node: Value = client.call("initialize", json!({})).expect("initialize");
    assert_eq!(node["isolation"]["level"], "landlock", "{node:#}");
    assert_eq!(node["isolation"]["landlock"], "all", "{node:#}");
    drop(client);
    stop(&world);
}

/// A checkpoint's pickle is the tenant's own code. Restored over the network into a session
/// that is not live (after a daemon restart), it still runs in a worker the level confined:
/// its payload, which copies the daemon's token where the test can see it, cannot read it.
#[test]
fn a_network_restore_into_a_session_not_live_runs_its_pickle_confined() {
    if !nobody::can_run_as_nobody("to run the daemon as an unprivileged user") {
        return;
    }
    let port = free_port();
    let world = world(port, "auto");
    start_as_nobody(&world, port);
    let token = world.dir.path().join("token");
    let leak = world.dir.path().join("leaked-token");
    let mut client = connect_ws(port, None, Some(TOKEN), None, None).expect("websocket");
    let planted = py(
        &mut client,
        "restorer",
        &format!(
            "class Payload:\n    def __reduce__(self):\n        return (eval, ({expr:?},))\n\
             x = Payload()\nprint('planted')",
            expr = format!(
                "open({:?}, 'w').write(open({:?}).read())",
                path_str(&leak),
                path_str(&token)
            )
        ),
    );
    assert_eq!(planted.trim(), "planted");
    let params = json!({"session": "restorer", "language": "py", "name": "trap"});
    client
        .call("checkpoint", params.clone())
        .expect("checkpoint");
    drop(client);
    stop(&world);

    start_as_nobody(&world, port);
    let mut client = connect_ws(port, None, Some(TOKEN), None, None).expect("websocket");
    // No language named: every language the checkpoint holds, each confined first.
    let restored = client.call("restore", json!({"session": "restorer", "name": "trap"}));
    let leaked = std::fs::read_to_string(&leak).unwrap_or_default();
    assert!(
        !leaked.contains(TOKEN),
        "the payload read the token: {restored:?}"
    );
    drop(client);
    stop(&world);
}
