//! Strangers are cheap: connections without the token, through the real daemon. A silent one
//! is closed after `daemon.unauthenticated-timeout`, an oversized request head is refused,
//! strangers have places of their own (a client with the token gets in while they are all
//! taken), and one address holds at most `daemon.max-connections-per-address` of them.

mod common;

use common::net::{http_get, NetDaemon, TOKEN};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A TCP connection to the daemon on 127.0.0.1 from the loopback address `127.0.0.<last>`.
fn connect_from(last: u8, port: u16) -> std::io::Result<TcpStream> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from(([127, 0, 0, last], 0)))?;
        let stream = socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await?
            .into_std()?;
        stream.set_nonblocking(false)?;
        Ok(stream)
    })
}

/// Whether the daemon closed `stream` (end of file or a reset) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let _ = stream.set_read_timeout(Some(within));
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_silent_connection_is_closed_after_the_deadline_and_one_with_the_token_is_not() {
    // A deadline a loaded machine's WebSocket upgrade fits in many times over.
    let net = NetDaemon::start(false, "unauthenticated-timeout = \"2s\"\n", "");
    let mut silent = connect_from(1, net.port).expect("connect");
    // Half a request head, then nothing.
    silent
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .expect("write");
    let started = Instant::now();
    assert!(
        closed_within(&mut silent, Duration::from_secs(60)),
        "a silent connection was kept"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    // A client that presented the token keeps its connection past the deadline: a stranger
    // that connects after it is closed first, so the deadline has passed for both.
    let mut ws = net.ws(Some(TOKEN), None).expect("ws");
    let mut later = connect_from(1, net.port).expect("connect");
    later
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .expect("write");
    assert!(
        closed_within(&mut later, Duration::from_secs(60)),
        "a silent connection was kept"
    );
    assert!(ws.call("status", json!({})).is_ok());
    drop(ws);
    net.daemon.stop();
}

#[test]
fn an_oversized_request_head_is_refused() {
    let net = NetDaemon::start(false, "max-header-bytes = \"8KiB\"\n", "");
    let mut stream = connect_from(1, net.port).expect("connect");
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    // The daemon may close before all of it is written.
    let _ = stream.write_all(big.as_bytes());
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with("HTTP/1.1 200"),
        "an oversized head was served: {answer}"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    // A head within the limit is served.
    let (status, _) = http_get(&net.http_url("/healthz"), None);
    assert_eq!(status, 200);
    net.daemon.stop();
}

#[test]
fn a_client_with_the_token_gets_in_while_strangers_hold_every_place_of_theirs() {
    let net = NetDaemon::start(
        false,
        "max-unauthenticated-connections = 8\nmax-connections-per-address = 100\n\
         unauthenticated-timeout = \"60s\"\n",
        "",
    );
    // Three times the strangers' places, all silent, from another loopback address.
    let silent: Vec<TcpStream> = (0..24)
        .map(|_| connect_from(2, net.port).expect("connect"))
        .collect();
    for _ in 0..10 {
        let mut ws = net
            .ws(Some(TOKEN), None)
            .expect("a client with the token gets in");
        assert!(ws.call("status", json!({})).is_ok());
    }
    // The oldest strangers were pushed out to make room.
    let mut silent = silent;
    assert!(closed_within(&mut silent[0], Duration::from_secs(30)));
    drop(silent);
    net.daemon.stop();
}

#[test]
fn one_address_holds_at_most_its_share_of_unauthenticated_connections() {
    let net = NetDaemon::start(
        false,
        "max-connections-per-address = 4\nunauthenticated-timeout = \"60s\"\n",
        "",
    );
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| connect_from(3, net.port).expect("connect"))
        .collect();
    let mut fifth = connect_from(3, net.port).expect("the kernel accepts it");
    assert!(
        closed_within(&mut fifth, Duration::from_secs(30)),
        "a fifth unauthenticated connection from one address was kept"
    );
    // The four are still open, and another address is served.
    assert!(!closed_within(&mut held[3], Duration::from_millis(300)));
    let mut ws = net.ws(Some(TOKEN), None).expect("another address gets in");
    assert!(ws.call("status", json!({})).is_ok());
    drop((ws, held));
    net.daemon.stop();
}
