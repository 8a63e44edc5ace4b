//! Tests of the host globals `self`, `navigator`, `Blob`, `File`, `FormData`, the global
//! `fs` and `fetch`'s Blob and FormData bodies, driven through `Engine::execute`.
use super::tests::{engine, run, stdout_of};
use cellvisor_ipc::CellOutcome;

/// Not a check: how long a fresh engine takes to start and run its first cell (median of
/// 40), for comparing builds; then what a first cell touching each lazily loaded group costs
/// (`cargo test -p cellvisor-workers --release start_time -- --ignored --nocapture`).
#[test]
#[ignore]
fn start_time() {
    for code in [
        "1 + 1",
        "typeof fetch",
        "typeof Blob",
        "typeof WebSocket",
        "typeof fs",
    ] {
        let mut times = Vec::new();
        for _ in 0..40 {
            let started = std::time::Instant::now();
            let mut js = engine();
            let ran = run(&mut js, code);
            assert_eq!(ran.outcome, CellOutcome::Completed);
            times.push(started.elapsed());
            drop(js);
        }
        times.sort();
        println!(
            "engine start + first cell {code:?}: median {:?}, min {:?}",
            times[20], times[0]
        );
    }
}

/// Runs `code` on a fresh engine and returns its stdout (the cell must complete).
fn fresh(code: &str) -> String {
    stdout_of(&mut engine(), code)
}

#[test]
fn self_is_the_global_object_and_navigator_describes_the_worker() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let out = fresh(
        "console.log(self === globalThis, typeof self, Object.keys(globalThis).includes('self'));\n\
         console.log(navigator.userAgent);\n\
         console.log(navigator.hardwareConcurrency, Number.isInteger(navigator.hardwareConcurrency));\n\
         console.log(typeof navigator.language, navigator.languages[0] === navigator.language);\n\
         console.log(String(navigator), self.navigator === navigator, self.Blob === Blob);",
    );
    assert_eq!(
        out,
        format!(
            "true object false\ncellvisor/{} QuickJS\n{cpus} true\nstring true\n\
             [object Navigator] true true\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    // A cell may shadow `self`, as any global.
    let mut js = engine();
    assert_eq!(stdout_of(&mut js, "var self = 5; console.log(self)"), "5\n");
    assert_eq!(stdout_of(&mut js, "console.log(self + 1)"), "6\n");
}

/// The locale of the test's own environment as a BCP 47 tag (the environment is not changed:
/// other tests run in this process at the same time).
#[test]
fn navigator_language_follows_the_locale() {
    let raw = ["LC_ALL", "LC_MESSAGES", "LANG"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.is_empty())
        .unwrap_or_default();
    let tag = raw
        .split(['.', '@'])
        .next()
        .unwrap_or_default()
        .replace('_', "-");
    let well_formed = tag.split('-').enumerate().all(|(i, part)| {
        let len_ok = if i == 0 {
            (2..=3).contains(&part.len()) && part.chars().all(|c| c.is_ascii_alphabetic())
        } else {
            (2..=8).contains(&part.len()) && part.chars().all(|c| c.is_ascii_alphanumeric())
        };
        len_ok
    });
    let expected = if well_formed { tag } else { "en-US".into() };
    let out = fresh("console.log(navigator.language, navigator.languages.join(), Object.isFrozen(navigator.languages))");
    assert_eq!(out, format!("{expected} {expected} true\n"));
}

#[test]
fn blob_joins_its_parts_and_reads_them_back() {
    let out = fresh(
        "const source = new Uint8Array([99, 100]);\n\
         const view = new Uint8Array([0, 101, 102, 0]).subarray(1, 3);\n\
         const b = new Blob(['ab', source, view, new TextEncoder().encode('g').buffer, new Blob(['h']), 42], {type: 'Text/Plain'});\n\
         source[0] = 0;\n\
         console.log(b.size, b.type, await b.text(), b instanceof Blob, String(b));\n\
         const ab = await b.arrayBuffer(); const bytes = await b.bytes();\n\
         console.log(ab instanceof ArrayBuffer, ab.byteLength, bytes instanceof Uint8Array, bytes[9]);\n\
         console.log(await b.slice(2, -2).text(), await b.slice(-3).text(), b.slice(5, 2).size, b.slice(1, 3, 'X/Y').type, b.slice().type);\n\
         console.log(new Blob().size, new Blob([], {type: 'caf\\u00e9'}).type === '', await new Blob(['a\\r\\nb'], {endings: 'native'}).text() === 'a\\nb');\n\
         console.log(await new Blob(['h\\u00e9\\u20ac']).bytes().then((u) => u.length));\n\
         try { new Blob('abc'); } catch (e) { console.log(e instanceof TypeError); }",
    );
    assert_eq!(
        out,
        "10 text/plain abcdefgh42 true [object Blob]\n\
         true 10 true 50\n\
         cdefgh h42 0 x/y \n\
         0 true true\n\
         6\n\
         true\n"
    );
}

#[test]
fn file_is_a_blob_with_a_name_and_a_date() {
    let out = fresh(
        "const f = new File(['x', 'yz'], 'notes.txt', {type: 'text/plain', lastModified: 1234});\n\
         console.log(f.name, f.lastModified, f.size, f.type, f instanceof Blob, f instanceof File, String(f));\n\
         console.log(await f.text(), f.slice(1) instanceof File, await f.slice(1).text());\n\
         const now = Date.now(); const g = new File([], 'empty');\n\
         console.log(Math.abs(g.lastModified - now) < 5000, g.size, g.type === '');\n\
         try { new File(['x']); } catch (e) { console.log(e instanceof TypeError, e.message); }",
    );
    assert_eq!(
        out,
        "notes.txt 1234 3 text/plain true true [object File]\n\
         xyz false yz\n\
         true 0 true\n\
         true File: 2 arguments required, but only 1 present\n"
    );
}

#[test]
fn form_data_keeps_entries_in_order() {
    let out = fresh(
        "const fd = new FormData();\n\
         fd.append('a', '1'); fd.append('b', 2); fd.append('a', '3');\n\
         fd.append('file', new Blob(['data'], {type: 'text/csv'}));\n\
         fd.append('named', new Blob(['x']), 'x.bin');\n\
         fd.append('kept', new File(['k'], 'k.txt'));\n\
         console.log(fd.get('a'), fd.getAll('a').join(), fd.get('b'), typeof fd.get('b'), fd.get('none'), fd.getAll('none').length);\n\
         const file = fd.get('file');\n\
         console.log(file instanceof File, file.name, file.type, await file.text(), fd.get('named').name, fd.get('kept').name);\n\
         console.log(fd.has('a'), fd.has('none'), [...fd.keys()].join());\n\
         fd.set('a', 'only'); fd.delete('b');\n\
         console.log([...fd].map(([k, v]) => k + '=' + (typeof v === 'string' ? v : v.name)).join('&'));\n\
         const seen = []; fd.forEach((v, k, form) => seen.push(k + (form === fd)));\n\
         console.log(seen.join(), [...fd.values()].length, [...fd.entries()][0].join(':'), String(fd));\n\
         try { fd.append('x', 'y', 'z'); } catch (e) { console.log(e instanceof TypeError); }\n\
         try { new FormData({}); } catch (e) { console.log(e instanceof TypeError); }",
    );
    assert_eq!(
        out,
        "1 1,3 2 string null 0\n\
         true blob text/csv data x.bin k.txt\n\
         true false a,b,a,file,named,kept\n\
         a=only&file=blob&named=x.bin&kept=k.txt\n\
         atrue,filetrue,namedtrue,kepttrue 4 a:only [object FormData]\n\
         true\n\
         true\n"
    );
}

#[test]
fn request_and_response_bodies_take_blobs_and_form_data() {
    let out = fresh(
        "const fd = new FormData();\n\
         fd.append('field', 'va\"l\\nue');\n\
         fd.append('up\"load', new File(['\\u00e9\\u0000'], 'a.bin', {type: 'application/x-test'}));\n\
         fd.append('plain', new Blob(['p']));\n\
         const request = new Request('http://example.test/', {method: 'POST', body: fd});\n\
         const type = request.headers.get('content-type');\n\
         const boundary = type.split('boundary=')[1];\n\
         console.log(type.startsWith('multipart/form-data; boundary='), /^[-\\w]{30,70}$/.test(boundary));\n\
         const text = await request.text();\n\
         console.log(JSON.stringify(text.split(boundary).join('B')));\n\
         const other = new Request('http://example.test/', {method: 'POST', body: fd}).headers.get('content-type');\n\
         console.log(other !== type);\n\
         const blobbed = new Request('http://example.test/', {method: 'PUT', body: new Blob(['{}'], {type: 'application/json'})});\n\
         console.log(blobbed.headers.get('content-type'), await blobbed.text());\n\
         const untyped = new Request('http://example.test/', {method: 'PUT', body: new Blob(['z'])});\n\
         console.log(untyped.headers.get('content-type'), await untyped.text());\n\
         const back = await new Response(fd).formData();\n\
         const up = back.get('up\"load');\n\
         console.log(back.get('field') === 'va\"l\\r\\nue', up.name, up.type, [...await up.bytes()].join(), back.get('plain').name);\n\
         const encoded = await new Response(new URLSearchParams({q: 'a b', r: '1'})).formData();\n\
         console.log([...encoded].join('|'));\n\
         const blob = await new Response('hi', {headers: {'content-type': 'text/x-hi'}}).blob();\n\
         console.log(blob instanceof Blob, blob.type, await blob.text());\n\
         console.log(await new Response('x').formData().then(() => 'parsed', (e) => e instanceof TypeError));",
    );
    assert_eq!(
        out,
        "true true\n\
         \"--B\\r\\nContent-Disposition: form-data; name=\\\"field\\\"\\r\\n\\r\\nva\\\"l\\r\\nue\\r\\n\
         --B\\r\\nContent-Disposition: form-data; name=\\\"up%22load\\\"; filename=\\\"a.bin\\\"\\r\\n\
         Content-Type: application/x-test\\r\\n\\r\\né\\u0000\\r\\n\
         --B\\r\\nContent-Disposition: form-data; name=\\\"plain\\\"; filename=\\\"blob\\\"\\r\\n\
         Content-Type: application/octet-stream\\r\\n\\r\\np\\r\\n--B--\\r\\n\"\n\
         true\n\
         application/json {}\n\
         null z\n\
         true a.bin application/x-test 195,169,0 blob\n\
         q,a b|r,1\n\
         true text/x-hi hi\n\
         true\n"
    );
}

#[test]
fn fs_is_a_global_and_the_same_object_as_node_fs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "from disk").expect("write");
    let path = serde_json::to_string(&file.to_string_lossy()).expect("json");
    let out = fresh(&format!(
        "console.log(typeof fs, fs === require('fs'), fs === require('node:fs'), fs.promises === require('fs/promises'));\n\
         console.log(fs.readFileSync({path}, 'utf8'), (await fs.promises.readFile({path}, 'utf8')).length);\n\
         console.log(Object.keys(globalThis).includes('fs'));"
    ));
    assert_eq!(out, "object true true true\nfrom disk 9\nfalse\n");
    // The usual first line of a Node script still works, and a cell may shadow it.
    let mut js = engine();
    assert_eq!(
        stdout_of(
            &mut js,
            "const fs = require('fs'); console.log(typeof fs.existsSync)"
        ),
        "function\n"
    );
    assert_eq!(stdout_of(&mut js, "fs = 3; console.log(fs)"), "3\n");
}

#[test]
fn blob_and_form_data_load_only_when_first_used() {
    let out = fresh(
        "const placeholder = (name) => typeof Object.getOwnPropertyDescriptor(globalThis, name).get === 'function';\n\
         const steps = [placeholder('Blob'), placeholder('navigator')];\n\
         new URL('http://a.test/');\n\
         steps.push(placeholder('Blob'), placeholder('URL'));\n\
         new FormData();\n\
         steps.push(placeholder('Blob'), placeholder('navigator'), placeholder('Buffer'));\n\
         console.log(steps.join());",
    );
    assert_eq!(out, "true,true,true,false,false,false,true\n");
}

/// A WebSocket server on 127.0.0.1 for one connection: it picks the first subprotocol asked
/// for, answers a text message `t` with `echo:t` and a binary one with its bytes reversed,
/// and closes when asked to. Returns its port and the thread (joined by the test).
#[allow(clippy::result_large_err)] // tungstenite's callback type, not ours
fn websocket_server() -> (u16, std::thread::JoinHandle<()>) {
    use tungstenite::handshake::server::{Request, Response};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let thread = std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let pick = |request: &Request, mut response: Response| {
            let first = request
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.split(',').next())
                .map(|value| value.trim().to_string());
            if let Some(first) = first.and_then(|value| value.parse().ok()) {
                response
                    .headers_mut()
                    .insert("sec-websocket-protocol", first);
            }
            Ok(response)
        };
        let Ok(mut socket) = tungstenite::accept_hdr(stream, pick) else {
            return;
        };
        while let Ok(message) = socket.read() {
            let answer = match message {
                tungstenite::Message::Text(text) => {
                    tungstenite::Message::text(format!("echo:{}", text.as_str()))
                }
                tungstenite::Message::Binary(bytes) => {
                    tungstenite::Message::binary(bytes.iter().rev().copied().collect::<Vec<u8>>())
                }
                _ => continue,
            };
            if socket.send(answer).is_err() {
                break;
            }
        }
    });
    (port, thread)
}

#[test]
fn websocket_talks_to_a_server_and_closes_cleanly() {
    let (port, server) = websocket_server();
    let out = fresh(&format!(
        "const ws = new WebSocket('ws://127.0.0.1:{port}/chat', ['v2.proto', 'v1']);\n\
         const log = [ws.readyState, ws.url, ws.binaryType];\n\
         try {{ ws.send('early'); }} catch (e) {{ log.push(e.name); }}\n\
         ws.binaryType = 'arraybuffer';\n\
         const done = new Promise((resolve) => {{\n\
           ws.onopen = () => {{ log.push('open', ws.readyState, ws.protocol); ws.send('hi'); ws.send(new Uint8Array([1, 2, 3])); }};\n\
           ws.addEventListener('message', (event) => {{\n\
             log.push(typeof event.data === 'string' ? event.data : [...new Uint8Array(event.data)].join('-'));\n\
             if (event.data instanceof ArrayBuffer) ws.close(1000, 'done');\n\
           }});\n\
           ws.onclose = (event) => {{ log.push('close', event.code, event.reason, event.wasClean, ws.readyState); resolve(); }};\n\
         }});\n\
         await done;\n\
         console.log(log.join(' '));\n\
         console.log(WebSocket.OPEN, ws.CLOSED, String(ws));"
    ));
    server.join().expect("server thread");
    assert_eq!(
        out,
        format!(
            "0 ws://127.0.0.1:{port}/chat blob InvalidStateError open 1 v2.proto echo:hi 3-2-1 \
             close 1000 done true 3\n1 3 [object WebSocket]\n"
        )
    );
}

#[test]
fn websocket_fails_like_fetch_when_it_cannot_connect() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port();
    let out = fresh(&format!(
        "const ws = new WebSocket('http://127.0.0.1:{port}/');\n\
         const events = [];\n\
         ws.onerror = (e) => events.push('error', e.error instanceof TypeError, e.message);\n\
         await new Promise((resolve) => ws.addEventListener('close', (e) => {{ events.push('close', e.code, e.wasClean); resolve(); }}));\n\
         const fetched = await fetch('http://127.0.0.1:{port}/').catch((e) => e.message);\n\
         const reason = (text) => text.slice(text.indexOf('failed: ') + 8);\n\
         console.log(ws.url, events[0], events[1], reason(events[2]) === reason(fetched), /refused/.test(fetched), events.slice(3).join());\n\
         for (const bad of ['ftp://x/', 'ws://x/#f', 'nonsense']) {{\n\
           try {{ new WebSocket(bad); }} catch (e) {{ console.log(e.name); }}\n\
         }}\n\
         try {{ new WebSocket('ws://x/', ['a', 'a']); }} catch (e) {{ console.log(e.name); }}"
    ));
    assert_eq!(
        out,
        format!(
            "ws://127.0.0.1:{port}/ error true true true close,1006,false\n\
             SyntaxError\nSyntaxError\nSyntaxError\nSyntaxError\n"
        )
    );
}
