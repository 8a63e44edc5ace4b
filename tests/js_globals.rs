//! JavaScript cells that use the host surface of Node and the web, end to end: `fetch`
//! against a local HTTP server (and its proxy under the environment filter), `require` and
//! `import` of `node:` modules, `Buffer`, `URL`, `crypto`, `TextEncoder`, `process` and
//! `child_process`, `Blob`, `File`, `FormData`, `navigator` and the global `fs`.

mod common;

use common::daemon::Daemon;
use common::{cells, path_str, World};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

fn js(code: &str) -> Value {
    json!({"language": "js", "code": code})
}

/// The cell's output, after checking it completed.
fn completed_output(result: &Value, index: usize) -> String {
    let cell = &result["cells"][index];
    assert_eq!(cell["status"], "complete", "cell {index}: {result:#}");
    cell["output"].as_str().unwrap_or_default().to_string()
}

/// How long `/slow` takes to answer: longer than the cell timeout of the test that uses it.
const SLOW_ANSWER: std::time::Duration = std::time::Duration::from_secs(3);

/// A tiny HTTP/1.1 server on 127.0.0.1 that answers every request (one at a time) with JSON
/// describing it (`server`, `method`, `target`, `body`, a few headers); `/redirect` answers
/// 302 to `/final`, `/slow` answers after [`SLOW_ANSWER`]. Stopped (and its thread joined)
/// when dropped.
struct EchoServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    fn start(name: &'static str) -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        answer(stream, name);
                    }
                }
            }
        });
        EchoServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one request; a `CONNECT` (how a client reaches a server through an HTTP proxy) is
/// accepted and the request that follows in the tunnel answered here, naming the tunnel.
fn answer(stream: TcpStream, server: &str) {
    let mut reader = BufReader::new(stream);
    let mut tunnel = None;
    loop {
        match answer_one(&mut reader, server, tunnel.as_deref()) {
            Some(authority) => tunnel = Some(authority),
            None => return,
        }
    }
}

/// Reads and answers one request; `Some(authority)` when it was a `CONNECT`.
fn answer_one(
    reader: &mut BufReader<TcpStream>,
    server: &str,
    tunnel: Option<&str>,
) -> Option<String> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return None;
    }
    let mut headers = serde_json::Map::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            if name == "content-length" {
                length = value.trim().parse().unwrap_or(0);
            }
            headers.insert(name, json!(value.trim()));
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    if method == "CONNECT" {
        let _ = reader
            .get_mut()
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        return Some(target);
    }
    if target.ends_with("/slow") {
        std::thread::sleep(SLOW_ANSWER);
    }
    let (status, extra) = if target.ends_with("/redirect") {
        ("302 Found", "Location: /final\r\n".to_string())
    } else if method == "POST" {
        ("201 Created", String::new())
    } else {
        ("200 OK", String::new())
    };
    let description = json!({
        "server": server,
        "tunnel": tunnel,
        "method": method,
        "target": target,
        "body": String::from_utf8_lossy(&body),
        "content-type": headers.get("content-type"),
        "x-test": headers.get("x-test"),
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Server: {server}\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{description}",
        description.len()
    );
    let _ = reader.get_mut().write_all(response.as_bytes());
    None
}

#[test]
fn node_modules_and_web_globals_work_in_a_cell() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    std::fs::write(
        work.join("package.json"),
        r#"{"name": "demo", "version": "1.2.3"}"#,
    )
    .expect("package.json");
    let code = r#"
const fs = require('node:fs');
console.log(JSON.parse(fs.readFileSync('package.json', 'utf8')).version);
console.log(require('fs') === fs, fs.readFileSync('package.json').length);
console.log(Buffer.from('hi').toString('base64'), Buffer.from('aGk=', 'base64').toString());
const url = new URL('../b?x=1&y=two#top', 'https://user@example.com:8443/a/c');
console.log(url.href, url.host, url.pathname, url.searchParams.get('y'), url.hash);
console.log(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID()));
const bytes = new TextEncoder().encode('héllo €');
console.log(bytes.length, new TextDecoder().decode(bytes));
console.log(process.cwd());
console.log(require('node:child_process').execSync('echo from-sh; pwd').toString().trim().split('\n').join('|'));
console.log(atob(btoa('ok')), structuredClone({a: [1, {b: 2}]}).a[1].b);
const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode('abc'));
console.log(Buffer.from(digest).toString('hex').slice(0, 16), crypto.getRandomValues(new Uint8Array(8)).length);
console.log(require('path').join('/x/y', '../z'), typeof require('os').platform(), process.platform);
process.env.CELLVISOR_JS_GLOBALS = 'set';
console.log(process.env.CELLVISOR_JS_GLOBALS, new URLSearchParams({q: 'a b'}).toString());
"#;
    let result = client.eval_in("globals", &work, json!([js(code)]));
    let output = completed_output(&result, 0);
    let cwd = std::fs::canonicalize(&work).expect("canonical work dir");
    let cwd = path_str(&cwd);
    let expected = format!(
        "1.2.3\ntrue 36\naGk= hi\nhttps://user@example.com:8443/b?x=1&y=two#top example.com:8443 /b two #top\n\
         true\n10 héllo €\n{cwd}\nfrom-sh|{cwd}\nok 2\nba7816bf8f01cfea 8\n/x/z string linux\nset q=a+b\n"
    );
    assert_eq!(output, expected, "{result:#}");
    daemon.stop();
}

#[test]
fn node_modules_import_by_name_with_and_without_the_prefix() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    std::fs::write(work.join("data.txt"), "line one\nline two\n").expect("data");
    let cells = json!([
        js("import fs, { readFileSync } from 'node:fs';\nimport { join } from 'path';\n\
            console.log(readFileSync(join('.', 'data.txt'), 'utf8').split('\\n')[1], fs.readFileSync === readFileSync)"),
        js("const { readFile } = await import('node:fs/promises');\n(await readFile('data.txt', 'utf8')).length"),
        js("import os from 'os';\nimport { execSync } from 'child_process';\n\
            console.log(os.EOL === '\\n', execSync('printf %s abc', {encoding: 'utf8'}))"),
        js("await import('node:http')"),
    ]);
    let result = client.eval_in("imports", &work, cells);
    assert_eq!(completed_output(&result, 0), "line two true\n");
    assert_eq!(completed_output(&result, 1), "18\n");
    assert_eq!(completed_output(&result, 2), "true abc\n");
    let http = &result["cells"][3];
    assert_eq!(http["status"], "error", "{result:#}");
    let message = http["output"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot import `node:http`") && message.contains("fs, fs/promises, path"),
        "{message}"
    );
    let missing = client.eval_in("imports", &work, json!([js("require('left-pad')")]));
    let missing = missing["cells"][0]["output"].as_str().unwrap_or_default();
    assert!(
        missing.contains("Cannot find module 'left-pad'") && missing.contains("import()"),
        "{missing}"
    );
    daemon.stop();
}

#[test]
fn fetch_talks_to_a_local_server() {
    let server = EchoServer::start("origin");
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let code = format!(
        r#"
const got = await fetch({get:?});
const seen = await got.json();
console.log(got.status, got.ok, got.headers.get('x-server'), seen.method, seen.target);
const posted = await fetch({get:?}, {{
  method: 'POST',
  headers: {{'Content-Type': 'application/json', 'X-Test': 'yes'}},
  body: JSON.stringify({{n: 1}}),
}});
const echo = await posted.json();
console.log(posted.status, posted.statusText, echo.body, echo['content-type'], echo['x-test']);
const moved = await fetch({redirect:?});
console.log(moved.status, moved.redirected, moved.url.endsWith('/final'), (await moved.json()).target);
const manual = await fetch({redirect:?}, {{redirect: 'manual'}});
console.log(manual.status, manual.headers.get('location'));
const controller = new AbortController();
const pending = fetch({get:?}, {{signal: controller.signal}});
controller.abort();
console.log(await pending.then(() => 'not aborted', (e) => e.name));
console.log(await fetch('http://127.0.0.1:1/').then(() => 'reached', (e) => e instanceof TypeError && e.message.startsWith('fetch failed')));
const put = await (await fetch(new Request({get:?}, {{method: 'put', body: new URLSearchParams({{k: 'v w'}})}}))).json();
console.log(put.method, put.body, put['content-type']);
const both = await Promise.all([fetch({get:?}), fetch({get:?})]);
console.log(both.map((r) => r.status).join(','));
"#,
        get = server.url("/hello?x=1"),
        redirect = server.url("/redirect"),
    );
    // An aborted or timed-out request ends at once: the cell does not wait for the server
    // (which answers after its timeout).
    let abandon = format!(
        r#"
const controller = new AbortController();
setTimeout(() => controller.abort(), 50);
console.log(await fetch({slow:?}, {{signal: controller.signal}}).then(() => 'answered', (e) => e.name));
console.log(await fetch({slow:?}, {{signal: AbortSignal.timeout(100)}}).then(() => 'answered', (e) => e.name));
"#,
        slow = server.url("/slow"),
    );
    let result = client.eval_in(
        "fetch",
        &work,
        json!([js(&code), {"language": "js", "code": abandon, "timeout": 2}]),
    );
    assert_eq!(
        completed_output(&result, 1),
        "AbortError\nTimeoutError\n",
        "{result:#}"
    );
    assert_eq!(
        completed_output(&result, 0),
        "200 true origin GET /hello?x=1\n\
         201 Created {\"n\":1} application/json yes\n\
         200 true true /final\n\
         302 /final\n\
         AbortError\n\
         true\n\
         PUT k=v+w application/x-www-form-urlencoded;charset=UTF-8\n\
         200,200\n",
        "{result:#}"
    );
    daemon.stop();
    drop(server);
}

/// The worker sees the proxy variables only when the configuration passes them: by default
/// `fetch` goes straight to the server; with `HTTP_PROXY` allowed, through the proxy.
#[test]
fn fetch_uses_a_proxy_only_when_the_environment_filter_passes_it() {
    let origin = EchoServer::start("origin");
    let proxy = EchoServer::start("proxy");
    let code = format!(
        "const seen = await (await fetch({:?})).json(); console.log(seen.server, seen.tunnel, seen.target)",
        origin.url("/via")
    );
    let run = |config: &str| output_behind_proxy(config, &code, &proxy.url(""));
    assert_eq!(run(""), "origin null /via\n");
    assert_eq!(
        run("[env]\nallow = [\"HTTP_PROXY\"]\n"),
        format!("proxy 127.0.0.1:{} /via\n", origin.port)
    );
}

/// A cell blocked in `execSync` stops on an interrupt (its child is killed) and the session
/// keeps its state.
#[test]
fn a_cell_waiting_for_exec_sync_can_be_interrupted() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    let cells = json!([
        js("var kept = 41"),
        {"language": "js", "code": "require('child_process').execSync('sleep 30')", "timeout": 1},
    ]);
    let result = client.eval_in("interrupt", &work, cells);
    let stopped = &result["cells"][1];
    assert_eq!(stopped["status"], "cancelled", "{result:#}");
    let output = stopped["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("timed out") && !output.contains("state lost"),
        "{output}"
    );
    let after = client.eval_in("interrupt", &work, json!([js("kept + 1")]));
    assert_eq!(completed_output(&after, 0), "42\n");
    daemon.stop();
}

/// `self`, `navigator`, `Blob`, `File`, `FormData` and the global `fs` in a cell, and `fetch`
/// sending FormData (multipart), Blob, ArrayBuffer and URLSearchParams bodies to a local server.
#[test]
fn blob_file_form_data_navigator_and_fs_globals_work_in_a_cell() {
    let server = EchoServer::start("origin");
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let work = daemon.world.work_dir();
    std::fs::write(work.join("notes.txt"), "kept notes").expect("notes");
    let globals = r#"
console.log(self === globalThis, navigator.userAgent.startsWith('cellvisor/'), navigator.userAgent.endsWith(' QuickJS'));
console.log(Number.isInteger(navigator.hardwareConcurrency) && navigator.hardwareConcurrency >= 1);
console.log(fs === require('node:fs'), fs.readFileSync('notes.txt', 'utf8'));
const blob = new Blob(['ab', new Uint8Array([99])], {type: 'text/plain'});
console.log(blob.size, blob.type, await blob.text(), await blob.slice(1).text());
const file = new File([blob, 'd'], 'abcd.txt', {lastModified: 7});
console.log(file.name, file.lastModified, file.size, file instanceof Blob);
const fd = new FormData(); fd.append('k', 'v'); fd.append('k', 'w'); fd.set('f', file);
console.log(fd.getAll('k').join(), fd.get('f').name, [...fd.keys()].join());
"#;
    let fetches = format!(
        r#"
const fd = new FormData();
fd.append('title', 'hello');
fd.append('upload', new File(['file body'], 'a.txt', {{type: 'text/plain'}}));
const sent = await (await fetch({url:?}, {{method: 'POST', body: fd}})).json();
const boundary = sent['content-type'].split('boundary=')[1];
console.log(sent['content-type'].startsWith('multipart/form-data; boundary='), boundary.length > 20);
console.log(JSON.stringify(sent.body.split(boundary).join('B')));
const blobbed = await (await fetch({url:?}, {{method: 'POST', body: new Blob(['{{"n":1}}'], {{type: 'application/json'}})}})).json();
console.log(blobbed['content-type'], blobbed.body);
const buffered = await (await fetch({url:?}, {{method: 'POST', body: new TextEncoder().encode('raw').buffer}})).json();
console.log(buffered['content-type'], buffered.body);
const form = await (await fetch({url:?}, {{method: 'POST', body: new URLSearchParams({{a: '1'}})}})).json();
console.log(form['content-type'], form.body);
const got = await (await fetch({url:?})).blob();
console.log(got instanceof Blob, got.type, JSON.parse(await got.text()).method);
"#,
        url = server.url("/form"),
    );
    let result = client.eval_in("files", &work, json!([js(globals), js(&fetches)]));
    assert_eq!(
        completed_output(&result, 0),
        "true true true\ntrue\ntrue kept notes\n3 text/plain abc bc\nabcd.txt 7 4 true\nv,w abcd.txt k,k,f\n",
        "{result:#}"
    );
    assert_eq!(
        completed_output(&result, 1),
        "true true\n\
         \"--B\\r\\nContent-Disposition: form-data; name=\\\"title\\\"\\r\\n\\r\\nhello\\r\\n\
         --B\\r\\nContent-Disposition: form-data; name=\\\"upload\\\"; filename=\\\"a.txt\\\"\\r\\n\
         Content-Type: text/plain\\r\\n\\r\\nfile body\\r\\n--B--\\r\\n\"\n\
         application/json {\"n\":1}\n\
         null raw\n\
         application/x-www-form-urlencoded;charset=UTF-8 a=1\n\
         true application/json GET\n",
        "{result:#}"
    );
    daemon.stop();
    drop(server);
}

/// A WebSocket server on 127.0.0.1 that answers each text message `t` with `echo:t` and each
/// binary one with its bytes reversed, one connection at a time, until dropped.
struct WebSocketServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WebSocketServer {
    fn start() -> WebSocketServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut socket) = stream.map(tungstenite::accept) else {
                        continue;
                    };
                    if let Ok(socket) = socket.as_mut() {
                        while let Ok(message) = socket.read() {
                            let answer = match message {
                                tungstenite::Message::Text(text) => {
                                    tungstenite::Message::text(format!("echo:{}", text.as_str()))
                                }
                                tungstenite::Message::Binary(bytes) => {
                                    tungstenite::Message::binary(
                                        bytes.iter().rev().copied().collect::<Vec<u8>>(),
                                    )
                                }
                                _ => continue,
                            };
                            if socket.send(answer).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        });
        WebSocketServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/socket", self.port)
    }
}

impl Drop for WebSocketServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A cell that opens a WebSocket, sends text and bytes, and closes it: prints what happened.
fn websocket_cell(url: &str) -> String {
    format!(
        r#"
const ws = new WebSocket({url:?});
ws.binaryType = 'arraybuffer';
const log = [];
await new Promise((resolve) => {{
  ws.onopen = () => {{ log.push('open'); ws.send('hi'); ws.send(new Blob([new Uint8Array([1, 2, 3])])); }};
  ws.onmessage = (event) => {{
    log.push(typeof event.data === 'string' ? event.data : [...new Uint8Array(event.data)].join('-'));
    if (typeof event.data !== 'string') ws.close(3001, 'bye');
  }};
  ws.onerror = (event) => log.push('error: ' + event.message);
  ws.onclose = (event) => {{ log.push(`close ${{event.code}} ${{event.wasClean}}`); resolve(); }};
}});
console.log(log.join(' | '));
"#
    )
}

/// `WebSocket` reaches a local server; like `fetch`, it goes through the proxy of the
/// worker's environment only when the environment filter passes it.
#[test]
fn websocket_talks_to_a_local_server_and_honours_the_environment_filter() {
    let server = WebSocketServer::start();
    let proxy = EchoServer::start("proxy");
    let code = websocket_cell(&server.url());
    let run = |config: &str| output_behind_proxy(config, &code, &proxy.url(""));
    assert_eq!(run(""), "open | echo:hi | 3-2-1 | close 3001 true\n");
    // Through the proxy (an HTTP server, not a WebSocket one), the opening handshake fails.
    let proxied = run("[env]\nallow = [\"HTTP_PROXY\"]\n");
    assert!(
        proxied.starts_with(&format!(
            "error: WebSocket connection to '{}' failed: ",
            server.url()
        )) && proxied.ends_with(" | close 1006 false\n"),
        "{proxied}"
    );
    drop(proxy);
    drop(server);
}

/// Under a sandbox whose network rule is `none`, a WebSocket is refused for the reason a
/// `fetch` to the same (listening) server is.
#[test]
fn websocket_is_refused_like_fetch_when_the_sandbox_forbids_the_network() {
    let server = WebSocketServer::start();
    let world = World::with_config("[sandbox]\nenabled = true\nnetwork = \"none\"\n");
    let code = format!(
        r#"
const ws = new WebSocket({url:?});
const events = [];
await new Promise((resolve) => {{
  ws.onopen = () => events.push('open');
  ws.onerror = (event) => events.push(event.message.split(' failed: ')[1]);
  ws.onclose = (event) => {{ events.push(event.code); resolve(); }};
}});
const fetched = await fetch({http:?}).then(() => 'reached', (e) => e.message.replace('fetch failed: ', ''));
console.log(events[0] === fetched, events.slice(1).join(), fetched);
"#,
        url = server.url(),
        http = format!("http://127.0.0.1:{}/", server.port),
    );
    let cells_file = world.cells_file(&json!([js(&code)]));
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "--json",
        "--cells",
        path_str(&cells_file),
    ]);
    run.assert_code(0);
    let result = run.json();
    world.assert_no_processes_left(std::time::Duration::from_secs(5));
    let output = cells(&result)[0]["output"].as_str().unwrap_or_default();
    assert!(output.starts_with("true 1006 io: "), "{result:#}");
    drop(server);
}

/// The output of the JavaScript cell `code` run by `cellvisor eval --no-daemon` under the
/// config `config`, with `HTTP_PROXY` set to `proxy` (and no other proxy variable) in its
/// environment: the filter decides whether the worker sees it.
fn output_behind_proxy(config: &str, code: &str, proxy: &str) -> String {
    let world = World::with_config(config);
    let cells_file = world.cells_file(&json!([js(code)]));
    let mut command = world.command();
    command.env("HTTP_PROXY", proxy);
    for name in [
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    let output = command
        .args([
            "eval",
            "--no-daemon",
            "--json",
            "--cells",
            path_str(&cells_file),
        ])
        .output()
        .expect("run cellvisor");
    let run = common::Run::from(output);
    run.assert_code(0);
    let result = run.json();
    world.assert_no_processes_left(std::time::Duration::from_secs(5));
    cells(&result)[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
