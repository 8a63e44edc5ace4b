//! Clients never hang on a daemon that accepts and never answers (issue 42 item 3): the
//! CLI gives up within the health handshake's bound (`CELLVISOR_HEALTH_TIMEOUT`) and says
//! what it tried and what to do, and `cellvisor eval`'s autostart replaces an unresponsive
//! daemon only when it can prove it is this socket's cellvisor daemon.

mod common;

use common::{wait_until, World};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

/// The handshake's bound the tests set: the commands must give up soon after it.
const HEALTH: &str = "2";

/// Far over the bound, for a loaded machine; a hang would pass it.
const GIVES_UP_WITHIN: Duration = Duration::from_secs(40);

/// `cellvisor ARGS` on `socket` with the short health bound: (code, stdout, stderr) and how
/// long it took.
fn run_on(world: &World, socket: &Path, args: &[&str]) -> (i32, String, String, Duration) {
    let started = Instant::now();
    let mut child = world
        .command()
        .env("CELLVISOR_HEALTH_TIMEOUT", HEALTH)
        .env("CELLVISOR_SOCKET", socket)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cellvisor");
    let exited = wait_until(GIVES_UP_WITHIN, || {
        child.try_wait().ok().flatten().ok_or(())
    });
    if exited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("cellvisor {args:?} still waited after {GIVES_UP_WITHIN:?}");
    }
    let output = child.wait_with_output().expect("output");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

/// A "daemon" that accepts on the socket and never answers: the test itself, which no
/// client may kill.
#[test]
fn a_silent_listener_makes_every_command_give_up_and_is_left_alone() {
    let world = World::new();
    let socket = world.runtime_dir().join("silent.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    // Accept and hold every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => held.push(stream),
                Err(_) => break,
            }
        }
    });
    for args in [
        &["status"][..],
        &["eval", "-l", "lua", "print(1)"][..],
        &["reset", "--session", "s"][..],
    ] {
        let (code, _, stderr, _) = run_on(&world, &socket, args);
        assert_ne!(code, 0, "{args:?}: {stderr}");
        assert!(
            stderr.contains("did not answer `initialize` within 2 s")
                || stderr.contains("did not answer within 2 s"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&socket.display().to_string()),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("CELLVISOR_HEALTH_TIMEOUT") || stderr.contains("--socket"),
            "{args:?}: {stderr}"
        );
    }
    // Autostart proved nothing about this process, so it left it (and its socket) alone.
    let (_, _, stderr, _) = run_on(&world, &socket, &["eval", "-l", "lua", "print(1)"]);
    assert!(
        stderr.contains("was left alone") && stderr.contains("is not a `cellvisor serve`"),
        "{stderr}"
    );
    assert!(socket.exists());
    world.assert_no_processes_left(Duration::from_secs(5));
}

/// A real daemon, SIGSTOPped: `status` gives up naming the process; `eval` proves it is this
/// socket's daemon, stops it, and runs the cell on a new one.
#[test]
fn a_stopped_daemon_fails_the_health_check_and_autostart_replaces_it() {
    let world = World::new();
    let socket = world.runtime_dir().join("cellvisor").join("stopped.sock");
    let (code, stdout, stderr, _) =
        run_on(&world, &socket, &["eval", "-l", "lua", "print('first')"]);
    assert_eq!((code, stdout.as_str()), (0, "first\n"), "{stderr}");
    let mut client = common::daemon::Client::connect(&socket);
    let init = client
        .call("initialize", serde_json::json!({}))
        .expect("initialize");
    let old = init["pid"].as_u64().expect("the daemon's pid") as i32;
    drop(client);
    let pid = nix::unistd::Pid::from_raw(old);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");

    let (code, _, stderr, _) = run_on(&world, &socket, &["status"]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("did not answer `initialize` within 2 s")
            && stderr.contains(&format!("(process {old})")),
        "{stderr}"
    );

    let (code, stdout, stderr, _) =
        run_on(&world, &socket, &["eval", "-l", "lua", "print('second')"]);
    assert_eq!((code, stdout.as_str()), (0, "second\n"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "(process {old}) did not answer within 2 s; stopped it and started a new one"
        )),
        "{stderr}"
    );
    let gone = wait_until(Duration::from_secs(15), || {
        (!Path::new(&format!("/proc/{old}")).exists())
            .then_some(())
            .ok_or(())
    });
    if gone.is_err() {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        panic!("the stopped daemon {old} is still there");
    }
    let (code, _, stderr, _) = run_on(&world, &socket, &["stop"]);
    assert_eq!(code, 0, "{stderr}");
    world.assert_no_processes_left(Duration::from_secs(10));
}
