//! `WebSocket`'s network half: one client connection (tungstenite, rustls with the webpki
//! roots) on its own thread, so the cell's event loop keeps running meanwhile.
//!
//! The thread connects (through the proxy the worker's environment names, like `fetch`:
//! `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` with `NO_PROXY`, which the supervisor passes only
//! when the configuration allows them), then reads messages and writes what the cell sends.
//! Events (`open`, `message`, `close`, `error`) are handed to the cell one at a time: each
//! `next` the cell asks for is a [`Sender`] the next event goes to, answered through the event
//! loop like a host tool call. A sandbox that forbids the connection makes it fail like a
//! `fetch` (the reason from the same system call). When the cell that waits is gone (it ended
//! or was interrupted), the thread closes the connection and ends.

use super::super::event_loop::PendingCall;
use super::super::RunningCell;
use super::bytes_of;
use crate::runtime::ToolOutcome;
use base64::Engine as _;
use rquickjs::{Ctx, Exception, Function, Object, Persistent, Promise, TypedArray, Value};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::rc::Rc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// How long connecting and the opening handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the thread looks for what the cell sends while no message arrives.
const POLL: Duration = Duration::from_millis(10);

/// What the cell asks of an open socket.
pub(super) enum Command {
    Text(String),
    Binary(Vec<u8>),
    Close(Option<u16>, String),
}

/// The cell's ends of one connection.
pub(super) struct Handle {
    pub commands: Sender<Command>,
    pub waiters: Sender<Sender<ToolOutcome>>,
}

/// Starts connecting to `url` (ws: or wss:) on a thread.
pub(super) fn start(url: String, protocols: Vec<String>) -> Result<Handle, String> {
    let (commands, command_rx) = std::sync::mpsc::channel();
    let (waiters, waiter_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("cellvisor-websocket".into())
        .spawn(move || {
            let mut events = Events {
                queue: VecDeque::new(),
                waiters: waiter_rx,
            };
            run(&url, &protocols, &command_rx, &mut events);
            events.drain();
        })
        .map_err(|err| format!("WebSocket: cannot start a thread: {err}"))?;
    Ok(Handle { commands, waiters })
}

/// Events waiting for the cell to ask for them.
struct Events {
    queue: VecDeque<String>,
    waiters: Receiver<Sender<ToolOutcome>>,
}

impl Events {
    fn push(&mut self, event: serde_json::Value) {
        self.queue.push_back(event.to_string());
    }

    /// Hands queued events to the waiters there are; `false` once the cell stopped listening.
    fn flush(&mut self) -> bool {
        while let Some(event) = self.queue.front() {
            match self.waiters.try_recv() {
                Ok(waiter) => {
                    if waiter.send(Ok(event.clone())).is_err() {
                        return false;
                    }
                    self.queue.pop_front();
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    /// After the connection ended: the last events, as the cell asks for them.
    fn drain(&mut self) {
        while let Some(event) = self.queue.pop_front() {
            match self.waiters.recv_timeout(CONNECT_TIMEOUT) {
                Ok(waiter) if waiter.send(Ok(event)).is_ok() => {}
                _ => return,
            }
        }
    }
}

fn closed(code: u16, reason: &str, clean: bool) -> serde_json::Value {
    serde_json::json!({"type": "close", "code": code, "reason": reason, "wasClean": clean})
}

fn run(url: &str, protocols: &[String], commands: &Receiver<Command>, events: &mut Events) {
    let mut socket = match connect(url, protocols) {
        Ok((socket, protocol)) => {
            events.push(serde_json::json!({"type": "open", "protocol": protocol}));
            socket
        }
        Err(reason) => {
            events.push(serde_json::json!({"type": "error", "message": reason}));
            events.push(closed(1006, "", false));
            return;
        }
    };
    let mut closing = false;
    loop {
        if !events.flush() {
            let _ = socket.close(Some(CloseFrame {
                code: CloseCode::Away,
                reason: "".into(),
            }));
            let _ = socket.flush();
            return;
        }
        loop {
            let sent = match commands.try_recv() {
                Ok(Command::Text(text)) => socket.send(Message::text(text)),
                Ok(Command::Binary(bytes)) => socket.send(Message::binary(bytes)),
                Ok(Command::Close(code, reason)) if !closing => {
                    closing = true;
                    let frame = code.map(|code| CloseFrame {
                        code: CloseCode::from(code),
                        reason: reason.into(),
                    });
                    socket.close(frame)
                }
                Ok(Command::Close(..)) => Ok(()),
                Err(_) => break,
            };
            if let Err(err) = sent {
                if !is_timeout(&err) {
                    events.push(serde_json::json!({"type": "error", "message": err.to_string()}));
                    events.push(closed(1006, "", false));
                    return;
                }
            }
        }
        match socket.read() {
            Ok(Message::Text(text)) => {
                events.push(serde_json::json!({"type": "message", "text": text.as_str()}));
            }
            Ok(Message::Binary(bytes)) => {
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                events.push(serde_json::json!({"type": "message", "binary": data}));
            }
            Ok(Message::Close(frame)) => {
                closing = true;
                let (code, reason) = frame
                    .map(|frame| (u16::from(frame.code), frame.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                // Answered by tungstenite; the connection ends on the next read.
                events.push(closed(code, &reason, true));
            }
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) | Err(tungstenite::Error::AlreadyClosed) => {
                if !closing {
                    events.push(closed(1006, "", false));
                }
                return;
            }
            Err(err) if is_timeout(&err) => {}
            Err(err) => {
                events.push(serde_json::json!({"type": "error", "message": err.to_string()}));
                events.push(closed(1006, "", false));
                return;
            }
        }
    }
}

fn is_timeout(err: &tungstenite::Error) -> bool {
    matches!(err, tungstenite::Error::Io(io) if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

type Socket = WebSocket<MaybeTlsStream<TcpStream>>;

/// The connection, its opening handshake done, and the subprotocol the server chose.
fn connect(url: &str, protocols: &[String]) -> Result<(Socket, String), String> {
    let mut request = url.into_client_request().map_err(|err| err.to_string())?;
    if !protocols.is_empty() {
        let value = protocols.join(", ");
        request.headers_mut().insert(
            "sec-websocket-protocol",
            value
                .parse()
                .map_err(|_| format!("invalid subprotocols {value:?}"))?,
        );
    }
    let uri = request.uri().clone();
    let secure = uri.scheme_str() == Some("wss");
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_string();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let proxy = ureq::Proxy::try_from_env().filter(|proxy| {
        let http_uri = format!(
            "{}://{}",
            if secure { "https" } else { "http" },
            uri.authority().map_or("", |a| a.as_str())
        );
        http_uri
            .parse()
            .map_or(true, |http_uri| !proxy.is_no_proxy(&http_uri))
    });
    let stream = match &proxy {
        Some(proxy) => tunnel(proxy, &host, port)?,
        None => tcp(&host, port)?,
    };
    stream
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|err| err.to_string())?;
    let connector = if secure {
        Some(tungstenite::Connector::Rustls(Arc::new(tls_config()?)))
    } else {
        None
    };
    let (socket, response) = tungstenite::client_tls_with_config(request, stream, None, connector)
        .map_err(|err| err.to_string())?;
    let tcp = match socket.get_ref() {
        MaybeTlsStream::Plain(stream) => stream,
        MaybeTlsStream::Rustls(stream) => stream.get_ref(),
        _ => return Err("an unexpected kind of stream".into()),
    };
    tcp.set_read_timeout(Some(POLL))
        .map_err(|err| err.to_string())?;
    let protocol = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok((socket, protocol))
}

/// A connection to `host:port`; failures are worded as `fetch`'s (ureq's): `host not found`,
/// `io: <the system's reason>`.
fn tcp(host: &str, port: u16) -> Result<TcpStream, String> {
    let addresses: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|_| "host not found".to_string())?
        .collect();
    let mut last = "host not found".to_string();
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(err) => last = format!("io: {err}"),
        }
    }
    Err(last)
}

/// A tunnel to `host:port` through an HTTP proxy (`CONNECT`), as `fetch` makes for HTTPS.
fn tunnel(proxy: &ureq::Proxy, host: &str, port: u16) -> Result<TcpStream, String> {
    if proxy.protocol() != ureq::ProxyProtocol::Http {
        return Err(format!(
            "the proxy {} is not an http:// one; WebSocket tunnels only through HTTP proxies",
            proxy.uri()
        ));
    }
    let mut stream = tcp(proxy.host(), proxy.port())?;
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(user) = proxy.username() {
        let pair = format!("{user}:{}", proxy.password().unwrap_or_default());
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        head.push_str(&format!("Proxy-Authorization: Basic {encoded}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|err| err.to_string())?;
    stream
        .write_all(head.as_bytes())
        .map_err(|err| format!("proxy: {err}"))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|err| err.to_string())?);
    let mut status = String::new();
    reader
        .read_line(&mut status)
        .map_err(|err| format!("proxy: {err}"))?;
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("the proxy refused the tunnel: {}", status.trim()));
    }
    loop {
        let mut line = String::new();
        if reader
            .read_line(&mut line)
            .map_err(|err| format!("proxy: {err}"))?
            == 0
            || line.trim().is_empty()
        {
            break;
        }
    }
    if !reader.buffer().is_empty() {
        return Err("the proxy sent data before the tunnel opened".into());
    }
    Ok(stream)
}

fn tls_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|err| err.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// The natives `websocket.js` uses: `wsOpen(url, protocols)` -> id, `wsNext(id)` -> a
/// promise of `[ok, eventJson]` (`ok` false once the connection is gone), `wsSend(id, data)`
/// (a string or a `Uint8Array`), `wsClose(id, code, reason)`, `wsForget(id)`.
pub(super) fn define<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    let open: Rc<RefCell<HashMap<u64, Handle>>> = Rc::default();
    let next_id = Rc::new(std::cell::Cell::new(0_u64));
    native.set(
        "wsOpen",
        Function::new(ctx.clone(), {
            let open = Rc::clone(&open);
            move |ctx: Ctx<'js>, url: String, protocols: Vec<String>| {
                let handle =
                    start(url, protocols).map_err(|err| Exception::throw_type(&ctx, &err))?;
                let id = next_id.get() + 1;
                next_id.set(id);
                open.borrow_mut().insert(id, handle);
                Ok::<_, rquickjs::Error>(id as f64)
            }
        })?,
    )?;
    native.set(
        "wsNext",
        Function::new(ctx.clone(), {
            let open = Rc::clone(&open);
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, id: f64| {
                let (answer, receiver) = std::sync::mpsc::channel();
                if let Some(handle) = open.borrow().get(&(id as u64)) {
                    // A thread that ended drops `answer`: the call is answered as failed.
                    let _ = handle.waiters.send(answer);
                }
                let (promise, resolve, _reject) = Promise::new(&ctx)?;
                cell.calls.borrow_mut().push(PendingCall {
                    answer: receiver,
                    resolve: Persistent::save(&ctx, resolve),
                    outcome: None,
                });
                Ok::<_, rquickjs::Error>(promise)
            }
        })?,
    )?;
    native.set(
        "wsSend",
        Function::new(ctx.clone(), {
            let open = Rc::clone(&open);
            move |ctx: Ctx<'js>, id: f64, data: Value<'js>| {
                let command = match data.as_string() {
                    Some(text) => Command::Text(text.to_string()?),
                    None => {
                        let array = TypedArray::<u8>::from_value(data).map_err(|_| {
                            Exception::throw_type(
                                &ctx,
                                "WebSocket.send: data must be text or bytes",
                            )
                        })?;
                        Command::Binary(bytes_of(&ctx, &array)?.to_vec())
                    }
                };
                Ok::<_, rquickjs::Error>(match open.borrow().get(&(id as u64)) {
                    Some(handle) => handle.commands.send(command).is_ok(),
                    None => false,
                })
            }
        })?,
    )?;
    native.set(
        "wsClose",
        Function::new(ctx.clone(), {
            let open = Rc::clone(&open);
            move |id: f64, code: Option<f64>, reason: String| {
                if let Some(handle) = open.borrow().get(&(id as u64)) {
                    let code = code.map(|code| code as u16);
                    let _ = handle.commands.send(Command::Close(code, reason));
                }
            }
        })?,
    )?;
    native.set(
        "wsForget",
        Function::new(ctx.clone(), move |id: f64| {
            open.borrow_mut().remove(&(id as u64));
        })?,
    )
}
