//! `POST /mcp` end to end: the official MCP Python SDK's streamable HTTP client
//! (tests/mcp_http_client.py) against a daemon's network listener, with its bearer token.
//! Two MCP sessions are two cellvisor sessions, and ending one closes its session.

mod common;

use common::net::{NetDaemon, TOKEN};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The status code of a POST of an MCP `initialize` to `/mcp` with these extra headers.
fn post_initialize(port: u16, headers: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_python_sdk_runs_cells_over_streamable_http_on_the_daemon() {
    let python = common::net::venv_python(&[]);
    let net = NetDaemon::start(false, "", "");

    // Behind the token: a request without it gets 401 and makes no session.
    let refused = post_initialize(net.port, "");
    assert!(refused.contains(" 401 "), "{refused}");

    let output = Command::new(&python)
        .arg(workspace().join("tests/mcp_http_client.py"))
        .arg(net.http_url("/mcp"))
        .arg(TOKEN)
        .env_remove("VIRTUAL_ENV")
        .current_dir(net.daemon.world.work_dir())
        .output()
        .expect("run tests/mcp_http_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "mcp_http_client.py failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all MCP HTTP checks passed"), "{stdout}");
    println!("{stdout}");

    // Both MCP sessions ended with the client's DELETEs: no cellvisor session is left, as
    // the Unix socket's `status` shows.
    let rows = net
        .daemon
        .client()
        .call("status", json!({}))
        .expect("status");
    assert_eq!(
        rows,
        json!([]),
        "sessions left after the MCP sessions ended"
    );
    net.daemon.stop();
}
