//! The daemon on the network: the TLS listener, its token, the WebSocket JSON-RPC, the
//! refusals at start, and a client that never reads.

mod common;

use common::net::{http_get, NetDaemon, TOKEN};
use common::{rss_bytes, wait_until, World};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn py(code: &str) -> Value {
    json!({"language": "python", "code": code})
}

#[test]
fn a_websocket_over_tls_with_the_token_runs_cells_with_state() {
    let net = NetDaemon::start(true, "", "");
    let mut ws = net.ws(Some(TOKEN), None).expect("connected over TLS");
    let init = ws.call("initialize", json!({})).expect("initialize");
    assert!(init["pid"].as_u64().is_some(), "{init:#}");
    let (_, first) = ws.call_with_tools(
        "eval",
        json!({"session": "s", "cells": [py("x = 41")]}),
        |_| Value::Null,
    );
    assert_eq!(first.expect("eval")["cells"][0]["status"], "complete");
    let (events, second) = ws.call_with_tools(
        "eval",
        json!({"session": "s", "cells": [py("print('hi')\nx + 1")]}),
        |_| Value::Null,
    );
    let second = second.expect("eval");
    assert_eq!(second["cells"][0]["output"], "hi\n42\n", "{second:#}");
    assert!(
        events.iter().any(|e| e["method"] == "eval/event"),
        "streamed events: {events:#?}"
    );
    // The same session over the Unix socket: one daemon, one namespace.
    let mut unix = net.daemon.client();
    let third = unix.eval("s", json!([py("x")]));
    assert_eq!(third["cells"][0]["output"], "41\n", "{third:#}");
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_connection_bound_to_a_session_refuses_another() {
    let net = NetDaemon::start(false, "", "");
    let mut ws = net.ws(Some(TOKEN), Some("mine")).expect("connected");
    let ok = ws.call("eval", json!({"session": "mine", "cells": [py("1 + 1")]}));
    assert_eq!(ok.expect("eval")["cells"][0]["output"], "2\n");
    let refused = ws
        .call("eval", json!({"session": "theirs", "cells": [py("1")]}))
        .expect_err("another session");
    assert_eq!(refused["code"], -32004, "{refused:#}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"mine\"") && message.contains("\"theirs\""),
        "{message}"
    );
    // Nothing was made for the other session; status is still answered.
    let rows = ws.call("status", json!({})).expect("status");
    let sessions: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["session"])
        .collect();
    assert!(!sessions.contains(&&json!("theirs")), "{rows:#}");
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_wrong_or_missing_token_gets_401_and_creates_nothing() {
    let net = NetDaemon::start(true, "", "");
    for token in [None, Some("wrong-token-0123456789"), Some("")] {
        let refused = net.ws(token, None).err().expect("refused");
        assert_eq!(refused, "HTTP 401", "{token:?}");
    }
    // ureq speaks TLS only to trusted certificates; the plaintext checks are below.
    let mut unix = net.daemon.client();
    assert_eq!(unix.call("status", json!({})).expect("status"), json!([]));
    net.daemon.stop();

    let net = NetDaemon::start(false, "", "");
    let (status, body) = http_get(&net.http_url("/healthz"), None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_get(&net.http_url("/readyz"), None);
    assert_eq!(status, 200, "a probe needs no token: {body}");
    for path in ["/v1/rpc", "/metrics", "/nothing"] {
        let (status, body) = http_get(&net.http_url(path), Some("wrong-token-0123456789"));
        assert_eq!(status, 401, "{path}: {body}");
        let (status, body) = http_get(&net.http_url(path), None);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("Authorization: Bearer"), "{path}: {body}");
    }
    let (status, body) = http_get(&net.http_url("/nothing"), Some(TOKEN));
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("GET /healthz"), "{body}");
    net.daemon.stop();
}

/// `cellvisor serve` with `config`: its exit code and stderr (it must not start).
fn serve_refused(world: &World) -> (Option<i32>, String) {
    let mut child = world
        .command()
        .args(["serve", "--socket"])
        .arg(world.runtime_dir().join("refused.sock"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let exited = wait_until(Duration::from_secs(15), || match child.try_wait() {
        Ok(Some(status)) => Ok(status),
        _ => Err(()),
    });
    if exited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the daemon started with a refused configuration");
    }
    let mut stderr = String::new();
    use std::io::Read;
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    (exited.ok().and_then(|s| s.code()), stderr)
}

#[test]
fn plaintext_beyond_loopback_and_listeners_without_a_token_are_refused_at_start() {
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), TOKEN).unwrap();
    let port = common::net::free_port();
    let world = World::with_config(&format!(
        "[daemon]\nlisten = [\"tcp://0.0.0.0:{port}\"]\ntoken-file = {:?}\n",
        token.path().display().to_string()
    ));
    let (code, stderr) = serve_refused(&world);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("0.0.0.0")
            && stderr.contains("daemon.tls-cert")
            && stderr.contains("daemon.insecure-plaintext"),
        "{stderr}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens"
    );
    world.assert_no_processes_left(Duration::from_secs(5));

    let world = World::with_config(&format!(
        "[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\n"
    ));
    let (code, stderr) = serve_refused(&world);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("daemon.token-file"), "{stderr}");

    let world = World::with_config(&format!(
        "[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ntoken-file = {:?}\ntls-cert = \"/nonexistent/cert.pem\"\ntls-key = \"/nonexistent/key.pem\"\n",
        token.path().display().to_string()
    ));
    let (code, stderr) = serve_refused(&world);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("/nonexistent/cert.pem"), "{stderr}");
}

#[test]
fn a_websocket_client_that_never_reads_is_bounded_then_dropped() {
    let net = NetDaemon::start(
        false,
        "max-pending-requests = 16\nstalled-client-timeout = \"1s\"\n",
        "",
    );
    let mut unix = net.daemon.client();
    let pid = unix.call("initialize", json!({})).expect("initialize")["pid"]
        .as_u64()
        .expect("pid");
    let before = rss_bytes(pid);
    let mut flood = net.ws(Some(TOKEN), None).expect("connected");
    if let tungstenite::stream::MaybeTlsStream::Plain(tcp) = flood.socket.get_ref() {
        tcp.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}).to_string();
    // Far more than the kernel buffers on both ends can hold (the receive buffer alone may
    // grow to tens of MiB), so only a daemon that stops reading ends this loop early.
    const FLOOD: usize = 2_000_000;
    let mut written = 0usize;
    while written < FLOOD
        && flood
            .socket
            .send(tungstenite::Message::text(request.clone()))
            .is_ok()
    {
        written += 1;
    }
    assert!(
        written < FLOOD,
        "the daemon kept reading a client that reads nothing"
    );
    let during = rss_bytes(pid);
    // Past the stall timeout the daemon drops the connection: what is buffered, then the end.
    std::thread::sleep(Duration::from_secs(3));
    if let tungstenite::stream::MaybeTlsStream::Plain(tcp) = flood.socket.get_ref() {
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let dropped = loop {
        match flood.socket.read() {
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break Err(e)
            }
            Err(_) => break Ok(()),
        }
    };
    assert!(dropped.is_ok(), "the stalled connection stayed open");
    assert!(
        during < before + (64 << 20),
        "daemon RSS {} MiB before, {} MiB while a client read nothing",
        before >> 20,
        during >> 20
    );
    // Every other client is served meanwhile and after.
    let after = unix.eval("s", json!([py("1")]));
    assert_eq!(after["cells"][0]["output"], "1\n");
    net.daemon.stop();
}

#[test]
fn with_a_client_ca_only_a_certificate_it_signed_gets_in() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = common::net::ClientIdentity::make(dir.path(), "trusted");
    let stranger = common::net::ClientIdentity::make(dir.path(), "stranger");
    let net = NetDaemon::start(
        true,
        &format!("client-ca = {:?}\n", trusted.ca_cert.display().to_string()),
        "",
    );
    assert!(net.ws(Some(TOKEN), None).is_err(), "no client certificate");
    assert!(
        net.ws_as(Some(TOKEN), None, Some(&stranger)).is_err(),
        "a certificate of another CA"
    );
    // The certificate alone is not enough: the token is still asked for.
    let refused = net
        .ws_as(None, None, Some(&trusted))
        .err()
        .expect("no token");
    assert_eq!(refused, "HTTP 401");
    let mut ws = net
        .ws_as(Some(TOKEN), None, Some(&trusted))
        .expect("mutual TLS");
    let result = ws.call("eval", json!({"session": "m", "cells": [py("6 * 7")]}));
    assert_eq!(result.expect("eval")["cells"][0]["output"], "42\n");
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_reload_replaces_the_token_and_a_bad_token_file_keeps_the_old_one() {
    let net = NetDaemon::start(false, "", "");
    let token_file = net.files.path().join("token");
    let new_token = "the-next-token-0123456789";
    std::fs::write(&token_file, new_token).unwrap();
    let mut unix = net.daemon.client();
    unix.call("config/reload", json!({})).expect("reloaded");
    assert_eq!(net.ws(Some(TOKEN), None).err().as_deref(), Some("HTTP 401"));
    let mut ws = net.ws(Some(new_token), None).expect("the new token");
    assert!(ws.call("status", json!({})).is_ok());
    // A token too short to guard anything is refused, and the one in force stays.
    std::fs::write(&token_file, "short").unwrap();
    let refused = unix.call("config/reload", json!({})).expect_err("refused");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("at least 16") && message.contains("unchanged"),
        "{message}"
    );
    assert!(
        net.ws(Some(new_token), None).is_ok(),
        "the token in force still works"
    );
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_websocket_message_over_the_size_cap_is_answered_then_the_connection_closed() {
    let net = NetDaemon::start(false, "", "");
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    let big = format!(
        "{{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"status\", \"pad\": \"{}\"}}",
        "x".repeat(17 << 20)
    );
    let _ = ws.socket.send(tungstenite::Message::text(big));
    let mut answers = Vec::new();
    while let Some(message) = ws.read() {
        answers.push(message);
    }
    assert!(
        answers.iter().any(|a| a["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exceeds"))),
        "{answers:#?}"
    );
    // A binary frame is answered and the connection goes on.
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    ws.socket
        .send(tungstenite::Message::binary(b"{}".to_vec()))
        .unwrap();
    let answer = ws.read().expect("an answer");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("text frame"),
        "{answer:#}"
    );
    assert!(ws.call("status", json!({})).is_ok());
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_cell_that_reads_the_token_still_cannot_drive_its_own_daemon() {
    let net = NetDaemon::start(false, "", "");
    let token_file = net.files.path().join("token");
    // Readable on purpose (an operator's mistake the daemon warns about): the peer check is
    // the defence that is left.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let code = format!(
        r#"import socket
token = open({token:?}).read().strip()
s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
s.sendall(("GET /v1/rpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n\r\n").encode())
try:
    answer = s.recv(200)
except OSError as e:
    answer = repr(e).encode()
print("answer:", answer)"#,
        token = token_file.display().to_string(),
        port = net.port
    );
    let mut unix = net.daemon.client();
    let result = unix.eval("c", json!([py(&code)]));
    let output = result["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("HTTP/1.1 403"),
        "the cell was not refused: {output}"
    );
    // The test itself (not under the daemon) is served on the same route.
    let mut ws = net
        .ws(Some(TOKEN), None)
        .expect("the test's own connection");
    assert!(ws.call("status", json!({})).is_ok());
    drop(ws);
    net.daemon.stop();
}

#[test]
fn connections_past_the_cap_are_closed_and_the_others_served() {
    let net = NetDaemon::start(false, "max-network-connections = 2\n", "");
    let mut first = net.ws(Some(TOKEN), None).expect("first");
    let mut second = net.ws(Some(TOKEN), None).expect("second");
    assert!(
        net.ws(Some(TOKEN), None).is_err(),
        "a third connection over the cap"
    );
    assert!(first.call("status", json!({})).is_ok());
    drop(second.socket.close(None));
    drop(second);
    // Its slot comes back once the daemon sees it closed.
    let third = wait_until(Duration::from_secs(10), || net.ws(Some(TOKEN), None));
    assert!(third.is_ok(), "{:?}", third.err());
    assert!(first.call("status", json!({})).is_ok());
    drop(first);
    drop(third);
    net.daemon.stop();
}

#[test]
fn metrics_parse_and_move_as_cells_run_crash_and_are_evicted() {
    use common::net::{sample, scrape, venv_python};
    let python = venv_python(&["prometheus_client"]);
    let net = NetDaemon::start(false, "", "idle-timeout = \"1s\"\n");
    let url = net.http_url("/metrics");
    let before = scrape(&python, &url);
    assert_eq!(sample(&before, "cellvisor_draining", &[]), 0.0);
    assert!(sample(&before, "cellvisor_process_resident_memory_bytes", &[]) > 0.0);
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    ws.call(
        "eval",
        json!({"session": "m", "cells": [py("x = 1"), py("1/0")]}),
    )
    .expect("eval");
    ws.call("eval", json!({"session": "m", "cells": [py("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")]}))
        .expect("eval");
    let during = scrape(&python, &url);
    let cells = |s: &[(String, Value, f64)], status| {
        sample(
            s,
            "cellvisor_cells_total",
            &[("language", "py"), ("status", status)],
        )
    };
    assert_eq!(
        cells(&during, "complete") - cells(&before, "complete"),
        1.0,
        "{during:?}"
    );
    assert!(
        cells(&during, "error") - cells(&before, "error") >= 2.0,
        "{during:?}"
    );
    assert!(
        sample(
            &during,
            "cellvisor_worker_crashes_total",
            &[("language", "py")]
        ) >= 1.0
    );
    assert!(
        sample(
            &during,
            "cellvisor_worker_starts_total",
            &[("language", "py")]
        ) >= 1.0
    );
    assert!(
        sample(
            &during,
            "cellvisor_cell_duration_seconds_count",
            &[("language", "py")]
        ) >= 3.0
    );
    assert_eq!(
        sample(
            &during,
            "cellvisor_connections",
            &[("transport", "websocket")]
        ),
        1.0
    );
    // No label carries a session's name.
    assert!(
        during
            .iter()
            .all(|(_, labels, _)| !labels.to_string().contains("\"m\"")),
        "a session id in a label"
    );
    // The session goes idle and is evicted after idle-timeout.
    let evicted = wait_until(Duration::from_secs(20), || {
        let now = scrape(&python, &url);
        let idle = sample(&now, "cellvisor_evictions_total", &[("reason", "idle")]);
        (idle >= 1.0).then_some(()).ok_or(idle)
    });
    assert!(evicted.is_ok(), "no idle eviction counted: {evicted:?}");
    drop(ws);
    net.daemon.stop();
}

#[test]
fn healthz_and_readyz_answer_and_readyz_is_503_while_draining() {
    let net = NetDaemon::start(false, "", "");
    let (status, body) = http_get(&net.http_url("/healthz"), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"node\""), "{body}");
    let (status, body) = http_get(&net.http_url("/readyz"), None);
    assert_eq!(status, 200, "{body}");
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    ws.call("drain", json!({})).expect("drain");
    let (status, body) = http_get(&net.http_url("/readyz"), Some(TOKEN));
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("drain"), "{body}");
    // A draining node is still healthy, and refuses a new session with the typed code.
    let (status, _) = http_get(&net.http_url("/healthz"), None);
    assert_eq!(status, 200);
    let refused = ws
        .call("eval", json!({"session": "new", "cells": [py("1")]}))
        .expect_err("refused while draining");
    assert_eq!(refused["code"], -32003, "{refused:#}");
    ws.call("undrain", json!({})).expect("undrain");
    let (status, body) = http_get(&net.http_url("/readyz"), Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    drop(ws);
    net.daemon.stop();
}
