//! The Rust client's `eval` survives a fleet's faults as the Python and TypeScript clients'
//! does (docs/fleet.md, "The clients' retries"), against the real binary with real workers:
//! a `LEASED_ELSEWHERE` refusal is retried after its `retry_after_ms` until the session moved;
//! a connection cut mid-answer is retried with the same `request_id`, answered from memory,
//! and the cell ran once; a stopped (SIGSTOPped) daemon on the network is silence, given up
//! after `silent_after`, and the request sent again once it is continued runs once.

mod common;

use cellvisor_client::daemon::{Client, ClientError, Remote, Token};
use cellvisor_client::EvalRequest;
use common::daemon::Daemon;
use common::net::{NetDaemon, TOKEN};
use common::{path_str, wait_until};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEASED_ELSEWHERE: i64 = -32005;

fn request(session: &str, code: &str, request_id: Option<&str>) -> EvalRequest {
    serde_json::from_value(json!({
        "session": session,
        "cells": [{"language": "py", "code": code}],
        "request_id": request_id,
    }))
    .expect("a request")
}

async fn eval(client: &mut Client, session: &str, code: &str) -> Result<Value, ClientError> {
    let result = client.eval(&request(session, code, None), |_| {}).await?;
    Ok(serde_json::to_value(result).expect("json"))
}

/// A node of a fleet whose nodes share `shared`'s snapshot directory and key, leases of 5 s.
fn node(shared: &Path, name: &str) -> Daemon {
    Daemon::start_with(&format!(
        "[daemon]\nnode = \"{name}\"\n[snapshots]\nwhen = \"every-cell\"\ndir = \"{}\"\n\
         key-file = \"{}\"\n[fleet]\nleases = true\nlease-ttl = \"5s\"\n",
        path_str(&shared.join("snapshots")),
        path_str(&shared.join("fleet.key"))
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leased_elsewhere_refusal_is_retried_until_the_session_moved() {
    let shared = tempfile::tempdir().expect("tempdir");
    let key = shared.path().join("fleet.key");
    std::fs::write(&key, [0x5a; 32]).expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let a = node(shared.path(), "node-a");
    let b = node(shared.path(), "node-b");

    let mut on_a = Client::connect(&a.socket).await.expect("a");
    let first = eval(&mut on_a, "moving-rs", "x = 41").await.expect("on a");
    assert_eq!(first["node"], "node-a", "{first}");
    drop(on_a);
    let latest = shared.path().join("snapshots/moving-rs/py/latest.snap");
    wait_until(Duration::from_secs(10), || {
        latest.is_file().then_some(()).ok_or(())
    })
    .expect("saved after the cell");
    // node-a dies holding the lease: node-b refuses the session until it runs out.
    let _world = a.signal_and_wait("KILL");
    let mut no_retry = Client::connect(&b.socket).await.expect("b").with_retries(0);
    match eval(&mut no_retry, "moving-rs", "x + 1").await {
        Err(ClientError::Rpc(refusal)) => {
            assert_eq!(refusal.code, LEASED_ELSEWHERE, "{}", refusal.message);
            let data = refusal.data.unwrap_or_default();
            assert_eq!(data["node"], "node-a", "{data}");
            assert!(data["retry_after_ms"]
                .as_u64()
                .is_some_and(|ms| ms > 0 && ms <= 5000));
        }
        other => panic!("node-b should refuse while node-a's lease lasts: {other:?}"),
    }

    // The same request with retries: refused, waited for, and answered once the lease ran out.
    let mut client = Client::connect(&b.socket)
        .await
        .expect("b")
        .with_retries(10);
    let moved = tokio::time::timeout(
        Duration::from_secs(120),
        eval(&mut client, "moving-rs", "print(x + 1)"),
    )
    .await
    .expect("bounded")
    .expect("moved to node-b");
    assert_eq!(moved["cells"][0]["output"], "42\n", "{moved}");
    assert_eq!(moved["node"], "node-b", "{moved}");
    assert_eq!(
        moved["cells"][0]["state"]["from"]["node"], "node-a",
        "{moved}"
    );
    b.stop();
}

/// A Unix-socket proxy to the daemon that cuts its first connection (both ways) once it
/// forwarded an `eval` on it and the daemon sent something back, which the client never
/// hears. Later connections pass untouched. It records every `eval`'s params.
struct CuttingProxy {
    path: PathBuf,
    evals: Arc<Mutex<Vec<Value>>>,
}

impl CuttingProxy {
    fn start(path: PathBuf, upstream: PathBuf) -> CuttingProxy {
        let listener = UnixListener::bind(&path).expect("bind the proxy");
        let evals = Arc::new(Mutex::new(Vec::new()));
        let seen = evals.clone();
        std::thread::spawn(move || {
            for (index, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { return };
                let Ok(daemon) = UnixStream::connect(&upstream) else {
                    return;
                };
                let cut = index == 0;
                let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let (mut to_daemon, from_daemon) = (daemon.try_clone().expect("clone"), daemon);
                let (from_client, mut to_client) = (client.try_clone().expect("clone"), client);
                let (up_sent, up_seen) = (sent.clone(), seen.clone());
                std::thread::spawn(move || {
                    for line in BufReader::new(from_client).lines() {
                        let Ok(line) = line else { break };
                        let message: Value = serde_json::from_str(&line).unwrap_or_default();
                        if message["method"] == "eval" {
                            up_seen
                                .lock()
                                .expect("evals")
                                .push(message["params"].clone());
                            up_sent.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        if to_daemon.write_all(format!("{line}\n").as_bytes()).is_err() {
                            break;
                        }
                    }
                });
                std::thread::spawn(move || {
                    let mut from_daemon = from_daemon;
                    let mut buffer = [0u8; 65536];
                    loop {
                        let read = match from_daemon.read(&mut buffer) {
                            Ok(0) | Err(_) => break,
                            Ok(read) => read,
                        };
                        if cut && sent.load(std::sync::atomic::Ordering::SeqCst) {
                            // The answer (or the cell's start) is lost: cut both ways.
                            let _ = to_client.shutdown(std::net::Shutdown::Both);
                            let _ = from_daemon.shutdown(std::net::Shutdown::Both);
                            break;
                        }
                        if to_client.write_all(&buffer[..read]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        CuttingProxy { path, evals }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_cut_mid_answer_is_retried_with_the_same_id_and_the_cell_runs_once() {
    let daemon = Daemon::start();
    let proxy = CuttingProxy::start(
        daemon.world.dir.path().join("proxy.sock"),
        daemon.socket.clone(),
    );
    let target = daemon.world.dir.path().join("appended.txt");
    let code = format!(
        "import time\ntime.sleep(0.3)\nwith open({0:?}, 'a') as f:\n    f.write('ran\\n')\n\
         print(len(open({0:?}).readlines()))",
        path_str(&target)
    );
    let mut client = Client::connect(&proxy.path)
        .await
        .expect("through the proxy");
    let result = tokio::time::timeout(
        Duration::from_secs(120),
        eval(&mut client, "once-rs", &code),
    )
    .await
    .expect("bounded")
    .expect("answered on the retry");
    assert_eq!(result["cells"][0]["status"], "complete", "{result}");
    assert_eq!(result["cells"][0]["output"], "1\n", "{result}");
    assert_eq!(result["replayed"], true, "answered from memory: {result}");
    let evals = proxy.evals.lock().expect("evals").clone();
    assert_eq!(evals.len(), 2, "the first send and one retry: {evals:?}");
    assert_eq!(evals[0]["request_id"], evals[1]["request_id"]);
    assert_eq!(
        std::fs::read_to_string(&target).expect("appended"),
        "ran\n",
        "the cell ran once"
    );
    drop(client);
    daemon.stop();
}

/// Local ports of this machine's established TCP connections to `port` (from
/// /proc/net/tcp): a new one is a client connecting again.
fn connections_to(port: u16) -> HashSet<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |address: &str| {
        address
            .rsplit(':')
            .next()
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, state) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
            (*state == "01" && port_of(remote) == Some(port)).then(|| port_of(local))?
        })
        .collect()
}

/// Continues a stopped daemon when the test ends, however it ends.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_daemon_is_silence_and_the_retry_runs_the_cell_once() {
    let net = NetDaemon::start(false, "", "");
    let mut remote = Remote::new(&format!("ws://127.0.0.1:{}", net.port)).expect("a URL");
    remote.token = Some(Token::new(TOKEN, "the test"));
    let silent = Some(Duration::from_secs(1));
    let connect = || async {
        Client::connect_remote(&remote)
            .await
            .expect("connect")
            .with_silent_after(silent)
    };
    let mut no_retry = connect().await.with_retries(0);
    let mut client = connect().await.with_retries(10);
    // A long quiet cell on a live daemon is not silence: the daemon answers the pings.
    let quiet = eval(
        &mut client,
        "paused-rs",
        "import time\ntime.sleep(3)\nran = []\nprint('slept')",
    )
    .await
    .expect("a quiet cell");
    assert_eq!(quiet["cells"][0]["output"], "slept\n", "{quiet}");

    let before = connections_to(net.port);
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &net.daemon.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let _resume = Continue(net.daemon.pid());

    // Sent while the daemon is stopped: the connection goes silent, and the client goes on
    // connecting again (each upgrade unanswered) until the daemon answers.
    let retried = tokio::spawn(async move {
        let request = request(
            "paused-rs",
            "ran.append('retried')\nprint(ran.count('retried'))",
            Some("sent-while-stopped-rs"),
        );
        let result = client.eval(&request, |_| {}).await;
        result.map(|r| serde_json::to_value(r).expect("json"))
    });
    let given_up = tokio::time::timeout(
        Duration::from_secs(60),
        no_retry.eval(&request("paused-rs", "1", None), |_| {}),
    )
    .await
    .expect("bounded");
    assert!(
        matches!(given_up, Err(ClientError::Silent { .. })),
        "{given_up:?}"
    );
    let port = net.port;
    let reconnected = wait_until(Duration::from_secs(60), || {
        let now = connections_to(port);
        now.difference(&before).next().copied().ok_or(())
    });
    assert!(reconnected.is_ok(), "the client never connected again");
    drop(_resume);

    let result = tokio::time::timeout(Duration::from_secs(120), retried)
        .await
        .expect("bounded")
        .expect("the task")
        .expect("answered after the daemon continued");
    assert_eq!(result["cells"][0]["status"], "complete", "{result}");
    assert_eq!(result["cells"][0]["output"], "1\n", "{result}");
    let mut check = connect().await;
    let count = eval(&mut check, "paused-rs", "print(ran.count('retried'))")
        .await
        .expect("count");
    assert_eq!(count["cells"][0]["output"], "1\n", "the cell ran once");
    drop((check, no_retry));
    net.daemon.stop();
}
