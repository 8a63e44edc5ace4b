//! Tenants over the network listener: each token's tenant sees and names only its own
//! sessions, holds only its rights, is bounded by its quotas, and loses its connections
//! when its token is rotated.

mod common;

use common::net::NetDaemon;
use common::{wait_until, World};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ALPHA: &str = "alpha-token-0123456789abcdef";
const BETA: &str = "beta-token-0123456789abcdef";
const GAMMA: &str = "gamma-token-0123456789abcdef";
const DELTA: &str = "delta-token-0123456789abcdef";
const EPSILON: &str = "epsilon-token-0123456789abcdef";
/// `epsilon`'s `max-sessions`.
const EPSILON_CAP: usize = 3;
const ZETA: &str = "zeta-token-0123456789abcdef";
/// `zeta`'s `max-mcp-sessions`.
const ZETA_CAP: usize = 2;

fn py(code: &str) -> Value {
    json!({"language": "python", "code": code})
}

fn output(result: &Value) -> String {
    result["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A daemon whose tenants file gives `alpha` (cells, one live session at most) and `beta`
/// (cells) their tokens.
fn start() -> (NetDaemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("alpha.token"), ALPHA).expect("a test file");
    std::fs::write(dir.path().join("beta.token"), BETA).expect("a test file");
    std::fs::write(dir.path().join("gamma.token"), GAMMA).expect("a test file");
    std::fs::write(dir.path().join("delta.token"), DELTA).expect("a test file");
    std::fs::write(dir.path().join("epsilon.token"), EPSILON).expect("a test file");
    std::fs::write(dir.path().join("zeta.token"), ZETA).expect("a test file");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenants]]\nname = \"alpha\"\ntoken-file = \"alpha.token\"\nmax-sessions = 1\n\
         max-mcp-sessions = 1\n\
         [[tenants]]\nname = \"beta\"\ntoken-files = [\"beta.token\"]\nrights = [\"cells\"]\n\
         [[tenants]]\nname = \"gamma\"\ntoken-file = \"gamma.token\"\n\
         max-session-memory = \"100MiB\"\n\
         [[tenants]]\nname = \"delta\"\ntoken-file = \"delta.token\"\nrights = [\"operate\"]\n\
         [[tenants]]\nname = \"epsilon\"\ntoken-file = \"epsilon.token\"\nmax-sessions = 3\n\
         [[tenants]]\nname = \"zeta\"\ntoken-file = \"zeta.token\"\nmax-mcp-sessions = 2\n",
    )
    .expect("a test file");
    let extra = format!("tenants-file = {:?}\n", tenants.display().to_string());
    (NetDaemon::start(false, &extra, ""), dir)
}

#[test]
fn a_tenant_names_lists_and_closes_only_its_own_sessions() {
    let (net, _dir) = start();
    let mut alpha = net.ws(Some(ALPHA), None).expect("alpha connects");
    let mut beta = net.ws(Some(BETA), None).expect("beta connects");
    alpha
        .call(
            "eval",
            json!({"session": "s1", "cells": [py("x = 'alpha'")]}),
        )
        .expect("alpha's s1");
    alpha
        .call(
            "checkpoint",
            json!({"session": "s1", "language": "python", "name": "c1"}),
        )
        .expect("alpha's checkpoint");
    // Beta's `s1` is another session: alpha's variable is not in it.
    let seen = beta
        .call(
            "eval",
            json!({"session": "s1", "cells": [py("print(globals().get('x', 'none'))")]}),
        )
        .expect("beta's s1");
    assert_eq!(output(&seen), "none\n", "{seen}");
    // Beta's status lists its own s1 only, under the name it sent.
    let rows = beta.call("status", json!({})).expect("status");
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["session"].as_str())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| *n == "s1"),
        "{rows}"
    );
    // The operator (the Unix socket) sees both, apart.
    let all = net
        .daemon
        .client()
        .call("status", json!({}))
        .expect("status");
    let all = all.to_string();
    assert!(
        all.contains("\"alpha/s1\"") && all.contains("\"beta/s1\""),
        "{all}"
    );
    // Beta cannot name alpha's session, list or restore its checkpoints, or wait on it.
    for (method, params) in [
        ("close", json!({"session": "alpha/s1"})),
        (
            "eval",
            json!({"session": "alpha/s1", "cells": [py("print(x)")]}),
        ),
        ("wait", json!({"session": "alpha/s1", "cell_id": 1})),
    ] {
        let refused = beta.call(method, params).expect_err(method);
        assert!(
            refused["message"]
                .as_str()
                .unwrap_or_default()
                .contains("invalid session name"),
            "{method}: {refused}"
        );
    }
    let listed = beta
        .call("checkpoints", json!({"session": "s1"}))
        .expect("beta's checkpoints");
    assert_eq!(listed, json!([]), "alpha's checkpoint is not beta's");
    assert!(beta
        .call(
            "restore",
            json!({"session": "s1", "language": "python", "name": "c1"})
        )
        .is_err());
    assert!(beta
        .call("wait", json!({"session": "s1", "cell_id": 1}))
        .is_err());
    // Beta's close reaches its own s1 only: alpha's keeps its state.
    beta.call("close", json!({"session": "s1"})).expect("close");
    let kept = alpha
        .call("eval", json!({"session": "s1", "cells": [py("print(x)")]}))
        .expect("alpha's s1 again");
    assert_eq!(output(&kept), "alpha\n");
    let shown = alpha
        .call("checkpoints", json!({"session": "s1"}))
        .expect("alpha's checkpoints");
    assert_eq!(shown[0]["session"], "s1", "{shown}");
    // Alpha's quota of one live session refuses a second, naming the quota and the tenant.
    let over = alpha
        .call("eval", json!({"session": "s2", "cells": [py("1")]}))
        .expect_err("over the quota");
    assert_eq!(over["code"], -32008, "{over}");
    let message = over["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("max-sessions") && message.contains("alpha"),
        "{message}"
    );
    // The operator acts on a tenant's session by the name `status` shows.
    let kept = beta
        .call("eval", json!({"session": "s1", "cells": [py("y = 1")]}))
        .expect("beta's s1 again");
    assert_eq!(kept["cells"][0]["status"], "complete", "{kept}");
    let mut operator = net.daemon.client();
    operator
        .call("interrupt", json!({"session": "beta/s1"}))
        .expect("the operator interrupts beta's session");
    operator
        .call("close", json!({"session": "beta/s1"}))
        .expect("the operator closes beta's session");
    let after = output(
        &beta
            .call(
                "eval",
                json!({"session": "s1", "cells": [py("print('y' in globals())")]}),
            )
            .expect("an answer"),
    );
    assert_eq!(after.trim(), "False", "beta's s1 was closed: {after}");
    // Cells-only tokens may not operate the node, nor read its metrics.
    let (status, body) = common::net::http_get(&net.http_url("/metrics"), Some(BETA));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("operate"), "{body}");
    for method in ["drain", "shutdown", "config/reload"] {
        let refused = beta.call(method, json!({})).expect_err(method);
        assert_eq!(refused["code"], -32009, "{refused}");
        assert_eq!(refused["data"]["right"], "operate", "{refused}");
    }
    net.daemon.stop();
}

/// Opens fired together at a tenant's `max-sessions`, each on its own connection: exactly
/// the cap get a session, every other is refused with the quota named (-32008), however
/// they interleave (the check and the reservation are one step per tenant).
#[test]
fn concurrent_opens_at_the_session_cap_admit_exactly_the_cap() {
    let (net, _dir) = start();
    const ATTEMPTS: usize = 8;
    let mut clients: Vec<_> = (0..ATTEMPTS)
        .map(|_| net.ws(Some(EPSILON), None).expect("epsilon connects"))
        .collect();
    let start = std::sync::Barrier::new(ATTEMPTS);
    let answers: Vec<Result<Value, Value>> = std::thread::scope(|scope| {
        let running: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, client)| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    client.call(
                        "eval",
                        json!({"session": format!("s{i}"), "cells": [{"language": "js", "code": "1"}]}),
                    )
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("a client thread"))
            .collect()
    });
    let admitted = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(admitted, EPSILON_CAP, "{answers:#?}");
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused["code"], -32008, "{refused}");
        assert_eq!(refused["data"]["quota"], "max-sessions", "{refused}");
        assert_eq!(refused["data"]["tenant"], "epsilon", "{refused}");
    }
    let rows = clients[0].call("status", json!({})).expect("status");
    assert_eq!(rows.as_array().map(Vec::len), Some(EPSILON_CAP), "{rows:#}");
    drop(clients);
    net.daemon.stop();
}

#[test]
fn a_rotated_or_changed_token_closes_its_open_websocket() {
    let (net, dir) = start();
    let mut beta = net.ws(Some(BETA), None).expect("beta connects");
    let mut alpha = net.ws(Some(ALPHA), None).expect("alpha connects");
    beta.call("status", json!({})).expect("beta works");
    std::fs::write(
        dir.path().join("beta.token"),
        "beta-rotated-0123456789abcdef",
    )
    .unwrap();
    net.daemon
        .client()
        .call("config/reload", json!({}))
        .expect("reloaded");
    // Beta's open connection is closed by the daemon (not by a read timeout).
    let limit = Duration::from_secs(60);
    if let tungstenite::stream::MaybeTlsStream::Plain(stream) = beta.socket.get_ref() {
        stream.set_read_timeout(Some(limit)).unwrap();
    }
    let began = Instant::now();
    assert!(
        beta.read().is_none(),
        "the rotated token's connection still answers"
    );
    assert!(began.elapsed() < limit, "the connection was never closed");
    assert_eq!(net.ws(Some(BETA), None).err().as_deref(), Some("HTTP 401"));
    // Alpha's token is unchanged: its connection goes on.
    alpha.call("status", json!({})).expect("alpha still works");
    // A token file changed on disk, without a reload, closes its connections too.
    std::fs::write(
        dir.path().join("alpha.token"),
        "alpha-rotated-0123456789abcdef",
    )
    .unwrap();
    if let tungstenite::stream::MaybeTlsStream::Plain(stream) = alpha.socket.get_ref() {
        stream.set_read_timeout(Some(limit)).unwrap();
    }
    let began = Instant::now();
    assert!(
        alpha.read().is_none(),
        "the changed token's connection still answers"
    );
    assert!(began.elapsed() < limit, "the connection was never closed");
    let mut renewed = net
        .ws(Some("alpha-rotated-0123456789abcdef"), None)
        .expect("the new token is admitted");
    renewed.call("status", json!({})).expect("status");
    net.daemon.stop();
}

/// A POST to `/mcp` with `token` (and an MCP session id): its status, its
/// `Mcp-Session-Id` header and its body.
fn post_mcp(
    net: &NetDaemon,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent
        .post(&net.http_url("/mcp"))
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let mut response = request.send(body.to_string()).expect("an HTTP answer");
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, id, text)
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
}

/// MCP sessions opened together at a tenant's `max-mcp-sessions`: exactly the cap are
/// opened, every other is answered `429` with the quota named (-32008).
#[test]
fn concurrent_mcp_opens_at_the_cap_open_exactly_the_cap() {
    let (net, _dir) = start();
    const ATTEMPTS: usize = 6;
    let start = std::sync::Barrier::new(ATTEMPTS);
    let answers: Vec<(u16, String, String)> = std::thread::scope(|scope| {
        let running: Vec<_> = (0..ATTEMPTS)
            .map(|_| {
                let (start, net) = (&start, &net);
                scope.spawn(move || {
                    start.wait();
                    post_mcp(net, ZETA, None, initialize())
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("a client thread"))
            .collect()
    });
    let opened: Vec<&String> = answers
        .iter()
        .filter(|(status, id, _)| *status == 200 && !id.is_empty())
        .map(|(_, id, _)| id)
        .collect();
    assert_eq!(opened.len(), ZETA_CAP, "{answers:#?}");
    for (status, _, body) in answers.iter().filter(|(status, _, _)| *status != 200) {
        assert_eq!(*status, 429, "{body}");
        let error: Value = serde_json::from_str(body).expect("a JSON-RPC error");
        assert_eq!(error["error"]["code"], -32008, "{body}");
        assert_eq!(
            error["error"]["data"]["quota"], "max-mcp-sessions",
            "{body}"
        );
    }
    net.daemon.stop();
}

#[test]
fn an_mcp_session_belongs_to_the_tenant_that_opened_it() {
    let (net, _dir) = start();
    let (status, id, body) = post_mcp(&net, ALPHA, None, initialize());
    assert_eq!(status, 200, "{body}");
    assert!(!id.is_empty(), "an MCP session id: {body}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    // Beta presenting alpha's session id is refused, as if there were no such session.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, _, body) = post_mcp(&net, BETA, Some(&id), list.clone());
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("belongs to the tenant and token that opened it"),
        "{body}"
    );
    // Alpha's own client goes on.
    let (status, _, body) = post_mcp(&net, ALPHA, Some(&id), initialized);
    assert!(status == 202 || status == 200, "{status} {body}");
    let (status, _, body) = post_mcp(&net, ALPHA, Some(&id), list);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"tools\""), "{body}");
    // Alpha's quota of one MCP session refuses a second, naming it.
    let (status, _, body) = post_mcp(&net, ALPHA, None, initialize());
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("max-mcp-sessions") && body.contains("alpha"),
        "{body}"
    );
    // Beta opens its own.
    let (status, other, body) = post_mcp(&net, BETA, None, initialize());
    assert_eq!(status, 200, "{body}");
    assert_ne!(other, id);
    net.daemon.stop();
}

#[test]
fn mcp_needs_the_cells_right_and_counts_against_the_session_quota() {
    let (net, _dir) = start();
    // An operate-only token (a monitoring one) runs no cells, through MCP either.
    let (status, _, body) = post_mcp(&net, DELTA, None, initialize());
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("`cells` right") && body.contains("delta"),
        "{body}"
    );
    // Alpha's one live session fills its max-sessions: a new MCP session would be a second.
    let mut alpha = net.ws(Some(ALPHA), None).expect("alpha connects");
    let result = alpha
        .call("eval", json!({"session": "s1", "cells": [py("x = 1")]}))
        .expect("an answer");
    assert_eq!(result["cells"][0]["status"], "complete", "{result:#}");
    let (status, _, body) = post_mcp(&net, ALPHA, None, initialize());
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("max-sessions") && body.contains("alpha"),
        "{body}"
    );
    net.daemon.stop();
}

#[test]
fn a_tenants_session_memory_cap_recycles_its_worker_with_the_cap_named() {
    let (net, _dir) = start();
    let mut gamma = net.ws(Some(GAMMA), None).expect("gamma connects");
    let hog = "import time\nhog = bytearray(300 * 1024 * 1024)\n\
               for i in range(len(hog) // 4096): hog[i * 4096] = 1\ntime.sleep(20)";
    let result = gamma
        .call(
            "eval",
            json!({"session": "s1", "cells": [{"language": "python", "code": hog, "timeout": 30}]}),
        )
        .expect("an answer");
    let cell = &result["cells"][0];
    assert_eq!(cell["status"], "error", "{result:#}");
    let text = cell["output"].as_str().unwrap_or_default();
    assert!(text.contains("max-rss"), "{text}");
    assert!(
        text.contains("100 MiB") || text.contains("100.0 MiB"),
        "names the cap: {text}"
    );
    net.daemon.stop();
}

/// `cellvisor serve` on `world`, which must refuse to start: its exit code and stderr.
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
        panic!("the daemon started with a refused tenants file");
    }
    let mut stderr = String::new();
    use std::io::Read;
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    (exited.ok().and_then(|s| s.code()), stderr)
}

#[test]
fn a_bad_tenants_file_is_refused_at_start_naming_the_mistake() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.token"), ALPHA).unwrap();
    std::fs::write(dir.path().join("b.token"), BETA).unwrap();
    let tenants = dir.path().join("tenants.toml");
    let port = common::net::free_port();
    for (text, expected) in [
        (
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a.token\"\nrights = [\"admin\"]\n",
            &["unknown right \"admin\"", "cells and operate"][..],
        ),
        (
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a.token\"\n\
             [[tenants]]\nname = \"a\"\ntoken-file = \"b.token\"\n",
            &["\"a\" is used twice"][..],
        ),
        (
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a.token\"\n\
             [[tenants]]\nname = \"b\"\ntoken-file = \"a.token\"\n",
            &["also a token of tenant \"a\""][..],
        ),
    ] {
        std::fs::write(&tenants, text).unwrap();
        let world = World::with_config(&format!(
            "[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ntenants-file = {:?}\n",
            tenants.display().to_string()
        ));
        let (code, stderr) = serve_refused(&world);
        assert_ne!(code, Some(0), "{stderr}");
        assert!(stderr.contains("daemon.tenants-file"), "{stderr}");
        for part in expected {
            assert!(stderr.contains(part), "{part}: {stderr}");
        }
        world.assert_no_processes_left(Duration::from_secs(5));
    }
}
