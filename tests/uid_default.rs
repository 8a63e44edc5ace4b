//! The uid level by default (`isolation.level = "auto"`), through the real binary as root:
//! a daemon that serves the network gives its sessions uids of the default range; a daemon
//! that serves only its own user (the CLI's, on its 0600 socket) keeps cells as that user in
//! the caller's directory; a range another live daemon holds is refused, never swept.

mod common;

use common::daemon::Daemon;
use common::net::{free_port, TOKEN};
use common::{shared_python_config, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn root_only(why: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root ({why})");
    }
    root
}

/// A world whose daemon listens on `port` (a token file only root reads) with `isolation`
/// as its `[isolation]` keys.
fn network_world(port: u16, isolation: &str) -> World {
    let world = World::with_config("");
    let token = world.dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(
        world.config_path(),
        format!(
            "{SHORT_INTERVALS}{}[isolation]\n{isolation}[daemon]\n\
             listen = [\"tcp://127.0.0.1:{port}\"]\ntoken-file = {:?}\n",
            shared_python_config(),
            token.display().to_string()
        ),
    )
    .expect("config");
    world
}

fn output(result: &Value) -> String {
    result["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_root_daemon_on_the_network_gives_sessions_uids_of_the_default_range() {
    if !root_only("changing uids") {
        return;
    }
    let daemon = Daemon::start_in(network_world(free_port(), ""));
    let mut client = daemon.client();
    let init = client.call("initialize", json!({})).expect("initialize");
    assert_eq!(init["isolation"]["level"], "uid", "{init}");
    assert_eq!(init["isolation"]["uids"], "60706-61183", "{init}");
    let result = client.eval(
        "s",
        json!([{"language": "py", "code": "import os; print(os.getuid(), os.getgid())"}]),
    );
    let ids: Vec<u32> = output(&result)
        .split_whitespace()
        .filter_map(|id| id.parse().ok())
        .collect();
    assert_eq!(ids.len(), 2, "{result}");
    assert!((60706..=61183).contains(&ids[0]), "{result}");
    assert_eq!(ids[0], ids[1], "gid of the uid's number: {result}");
    daemon.stop();
}

#[test]
fn a_local_daemon_as_root_runs_cells_as_root_in_the_callers_private_directory() {
    if !root_only("a root caller") {
        return;
    }
    let world = World::with_config(SHORT_INTERVALS);
    // A caller's directory no other user may enter, as under /root.
    let private = world.work_dir().join("private");
    std::fs::create_dir(&private).expect("mkdir");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let run = world
        .command()
        .current_dir(&private)
        .args([
            "eval",
            "-l",
            "py",
            "import os; open('out.txt', 'w').write('x'); print(os.getuid(), os.getcwd())",
        ])
        .output()
        .expect("eval");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(stdout.trim(), format!("0 {}", private.display()), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(private.join("out.txt")).expect("written"),
        "x"
    );
    let status = world.run(&["status"]);
    assert!(
        status
            .stdout
            .contains("isolation: landlock (network sessions confined by Landlock")
            && status.stdout.contains("serves only its own user"),
        "{}",
        status.stdout
    );
    world.run(&["stop"]).assert_code(0);
    world.assert_no_processes_left(Duration::from_secs(10));
}

#[test]
fn a_range_another_live_daemon_holds_is_refused_at_uid_and_left_at_auto_never_swept() {
    if !root_only("changing uids") {
        return;
    }
    const RANGE: &str = "61720-61729";
    let first = Daemon::start_in(network_world(
        free_port(),
        &format!("level = \"uid\"\nuids = \"{RANGE}\"\n"),
    ));
    let mut client = first.client();
    let py = |code: &str| json!([{"language": "py", "code": code}]);
    client.eval("a", py("x = 41"));

    // Asked for outright, the same range is refused at start, naming the holder.
    let second = network_world(
        free_port(),
        &format!("level = \"uid\"\nuids = \"{RANGE}\"\n"),
    );
    let socket = second.runtime_dir().join("refused.sock");
    let refused = second
        .command()
        .args(["serve", "--socket", common::path_str(&socket)])
        .output()
        .expect("serve");
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!(
            "isolation.uids = \"{RANGE}\" is used by another daemon"
        )) && said.contains(&format!("pid {}", first.pid())),
        "{said}"
    );

    // A range that shares only its last uid with the held one is refused the same way.
    let overlapping = network_world(free_port(), "level = \"uid\"\nuids = \"61700-61720\"\n");
    let socket = overlapping.runtime_dir().join("refused.sock");
    let refused = overlapping
        .command()
        .args(["serve", "--socket", common::path_str(&socket)])
        .output()
        .expect("serve");
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!("\"61700-61720\" overlaps \"{RANGE}\""))
            && said.contains(&format!("pid {}", first.pid())),
        "{said}"
    );

    // At `auto`, the daemon starts without uids (Landlock for its network sessions) and says why.
    let third = Daemon::start_in(network_world(free_port(), "uids = \"61725-61740\"\n"));
    let init = third
        .client()
        .call("initialize", json!({}))
        .expect("initialize");
    assert_eq!(init["isolation"]["level"], "landlock", "{init}");
    assert!(
        init["isolation"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("overlaps \"61720-61729\"")),
        "{init}"
    );
    third.stop();

    // No start swept the first daemon's range: its session kept its state.
    assert_eq!(output(&client.eval("a", py("print(x + 1)"))), "42");
    first.stop();
}
