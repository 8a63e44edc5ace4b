//! A workspace per session, through the real daemon and its network listener: files in and
//! out over HTTP and JSON-RPC, a cell working in its workspace, `cwd` confined to it, quotas
//! named in their refusals, 100 MB streamed with the daemon's memory flat, workspaces kept
//! over eviction and restarts and removed by `close`, and two sessions' workspaces apart.

mod common;

use common::daemon::Daemon;
use common::net::{free_port, NetDaemon, TOKEN};
use common::{rss_bytes, wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::io::Read;
use std::time::Duration;

fn py(code: &str) -> Value {
    json!({"language": "py", "code": code})
}

/// Plain HTTP to a test daemon's listener, with its token.
struct Http {
    agent: ureq::Agent,
    base: String,
    token: String,
}

impl Http {
    fn new(net: &NetDaemon) -> Http {
        Http::to(net.http_url(""), net.tls.as_ref())
    }

    fn to(base: String, tls: Option<&common::net::TestCert>) -> Http {
        let mut config = ureq::Agent::config_builder().http_status_as_error(false);
        if let Some(cert) = tls {
            let root = ureq::tls::Certificate::from_der(&cert.der).to_owned();
            let tls = ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(vec![
                    root,
                ])))
                .build();
            config = config.tls_config(tls);
        }
        Http {
            agent: config.build().into(),
            base,
            token: TOKEN.to_string(),
        }
    }

    fn url(&self, session: &str, path: &str) -> String {
        format!("{}/v1/sessions/{session}/files/{path}", self.base)
    }

    fn put(&self, session: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let mut response = self
            .agent
            .put(&self.url(session, path))
            .header("authorization", &format!("Bearer {}", self.token))
            .send(body)
            .expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn get(&self, session: &str, path: &str) -> (u16, Vec<u8>) {
        let mut response = self
            .agent
            .get(&self.url(session, path))
            .header("authorization", &format!("Bearer {}", self.token))
            .call()
            .expect("an HTTP answer");
        let status = response.status().as_u16();
        let mut bytes = Vec::new();
        response
            .body_mut()
            .as_reader()
            .read_to_end(&mut bytes)
            .expect("the body");
        (status, bytes)
    }

    fn delete(&self, session: &str, path: &str) -> u16 {
        self.agent
            .delete(&self.url(session, path))
            .header("authorization", &format!("Bearer {}", self.token))
            .call()
            .expect("an HTTP answer")
            .status()
            .as_u16()
    }
}

fn output(result: &Value) -> String {
    result["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn files_go_in_and_out_over_http_and_json_rpc_and_cells_work_in_their_workspace() {
    let net = NetDaemon::start(false, "", "");
    let http = Http::new(&net);
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");

    // A session without cwd works in a workspace of its own under the state directory.
    let here = ws
        .call(
            "eval",
            json!({"session": "a", "cells": [py("import os; print(os.getcwd())")]}),
        )
        .expect("eval");
    let workspace = std::path::PathBuf::from(output(&here).trim());
    assert!(
        workspace.ends_with("cellvisor/workspaces/local/a"),
        "{here:#}"
    );

    // In: over HTTP (into a directory made on the way) and over JSON-RPC.
    let (status, put) = http.put("a", "in/data.csv", b"x,y\n1,2\n");
    assert_eq!(status, 200, "{put}");
    let wrote = ws
        .call(
            "files/write",
            json!({"session": "a", "path": "rpc.txt", "data": "from rpc"}),
        )
        .expect("files/write");
    assert_eq!(wrote["written"], 8, "{wrote}");
    let read = ws
        .call(
            "eval",
            json!({"session": "a", "cells": [py("print(open('in/data.csv').read() + open('rpc.txt').read())")]}),
        )
        .expect("eval");
    assert_eq!(output(&read), "x,y\n1,2\nfrom rpc\n", "{read:#}");

    // Out: what a cell wrote, byte-exact, whole over HTTP and in parts over JSON-RPC.
    let made = ws
        .call(
            "eval",
            json!({"session": "a", "cells": [py("open('out.bin', 'wb').write(bytes(range(256)) * 300)")]}),
        )
        .expect("eval");
    assert_eq!(made["cells"][0]["status"], "complete", "{made:#}");
    let expected: Vec<u8> = (0..=255u8).cycle().take(256 * 300).collect();
    let (status, got) = http.get("a", "out.bin");
    assert_eq!(status, 200);
    assert!(
        got == expected,
        "the download is byte-exact ({} bytes)",
        got.len()
    );
    let part = ws
        .call(
            "files/read",
            json!({"session": "a", "path": "out.bin", "offset": 250, "length": 10}),
        )
        .expect("files/read");
    assert_eq!(part["encoding"], "base64", "{part}");
    assert_eq!(
        (part["length"].as_u64(), part["size"].as_u64()),
        (Some(10), Some(76800))
    );
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(part["data"].as_str().unwrap_or_default())
        .expect("base64");
    assert_eq!(bytes, expected[250..260]);

    // Listing, over JSON-RPC and as HTTP's directory listing.
    let listed = ws
        .call("files/list", json!({"session": "a", "recursive": true}))
        .expect("files/list");
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        ["in", "in/data.csv", "out.bin", "rpc.txt"],
        "{listed}"
    );
    let (status, body) = http.get("a", "in");
    assert_eq!(status, 200);
    let listing: Value = serde_json::from_slice(&body).expect("a JSON listing");
    assert_eq!(listing["entries"][0]["path"], "in/data.csv", "{listing}");

    // Paths are the sandbox's: no `..`, no absolute path, no link out.
    let refused = ws
        .call("files/read", json!({"session": "a", "path": "../b/x"}))
        .expect_err("..");
    assert_eq!(refused["code"], -32602, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("without `..`"),
        "{refused}"
    );
    let refused = ws
        .call(
            "files/write",
            json!({"session": "a", "path": "/etc/x", "data": ""}),
        )
        .expect_err("absolute");
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("it is absolute"));
    ws.call(
        "eval",
        json!({"session": "a", "cells": [py("import os; os.symlink('/etc', 'etc'); os.symlink('../b', 'sibling')")]}),
    )
    .expect("eval");
    for link in ["etc/hostname", "sibling/x"] {
        let refused = ws
            .call("files/read", json!({"session": "a", "path": link}))
            .expect_err("a link out");
        assert!(
            refused["message"]
                .as_str()
                .unwrap_or_default()
                .contains("leads out of the session's workspace"),
            "{link}: {refused}"
        );
        let (status, _) = http.put("a", link, b"x");
        assert_eq!(status, 400, "{link}");
    }
    let (status, _) = http.get("a", "%2E%2E/b/x");
    assert_eq!(status, 400, "an encoded `..`");

    // A network client's cwd names a directory inside its workspace, never a path outside.
    let inside = ws
        .call(
            "eval",
            json!({"session": "a", "cwd": "in", "cells": [py("import os; print(os.getcwd())")]}),
        )
        .expect("cwd inside");
    assert_eq!(
        output(&inside).trim(),
        workspace.join("in").display().to_string()
    );
    for outside in ["/tmp", "..", "../b", "etc"] {
        let refused = ws
            .call(
                "eval",
                json!({"session": "a", "cwd": outside, "cells": [py("1")]}),
            )
            .expect_err("cwd outside");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("never a path outside it"),
            "{outside}: {refused}"
        );
    }

    // Delete, then close: keep_workspace keeps the files, a plain close removes them.
    assert_eq!(http.delete("a", "rpc.txt"), 200);
    let gone = ws
        .call("files/read", json!({"session": "a", "path": "rpc.txt"}))
        .expect_err("deleted");
    assert!(gone["message"]
        .as_str()
        .unwrap_or_default()
        .contains("does not exist"));
    ws.call("close", json!({"session": "a", "keep_workspace": true}))
        .expect("close, keeping");
    assert!(workspace.join("out.bin").is_file(), "kept");
    ws.call("close", json!({"session": "a"})).expect("close");
    assert!(!workspace.exists(), "close removes the workspace");
    drop(ws);
    net.daemon.stop();
}

#[test]
fn quotas_are_refused_with_the_quota_named() {
    let net = NetDaemon::start(
        false,
        "[workspaces]\nmax-bytes = \"64KiB\"\nmax-files = 4\n",
        "",
    );
    let http = Http::new(&net);
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    use base64::Engine;
    let big = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 100 * 1024]);
    let refused = ws
        .call(
            "files/write",
            json!({"session": "q", "path": "big", "data": big, "encoding": "base64"}),
        )
        .expect_err("over max-bytes");
    assert_eq!(refused["code"], -32008, "{refused}");
    assert_eq!(
        refused["data"]["quota"], "workspaces.max-bytes",
        "{refused}"
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("workspaces.max-bytes = 65536"),
        "{refused}"
    );
    // Streamed past the quota over HTTP: refused, and nothing of it kept.
    let (status, body) = http.put("q", "big", &vec![7u8; 100 * 1024]);
    assert_eq!(status, 413, "{body}");
    assert!(body.to_string().contains("workspaces.max-bytes"), "{body}");
    let listed = ws
        .call("files/list", json!({"session": "q"}))
        .expect("list");
    assert_eq!(listed["entries"], json!([]), "nothing kept: {listed}");
    // Files: four fit, the fifth is refused by name.
    for n in 0..4 {
        ws.call(
            "files/write",
            json!({"session": "q", "path": format!("f{n}"), "data": "x"}),
        )
        .expect("within max-files");
    }
    let refused = ws
        .call(
            "files/write",
            json!({"session": "q", "path": "f4", "data": "x"}),
        )
        .expect_err("over max-files");
    assert_eq!(
        refused["data"]["quota"], "workspaces.max-files",
        "{refused}"
    );
    // Replacing a file is no new file.
    ws.call(
        "files/write",
        json!({"session": "q", "path": "f0", "data": "y"}),
    )
    .expect("a replaced file fits");
    // A cell that leaves its workspace over a quota ends as an error naming it.
    let cell = ws
        .call(
            "eval",
            json!({"session": "q", "cells": [py("open('f0', 'wb').write(b'z' * 200000)")]}),
        )
        .expect("eval");
    assert_eq!(cell["cells"][0]["status"], "error", "{cell:#}");
    assert!(
        output(&cell).contains("over its quota workspaces.max-bytes = 65536"),
        "{cell:#}"
    );
    drop(ws);
    net.daemon.stop();
}

#[test]
fn a_100_mb_file_streams_both_ways_while_the_daemons_memory_stays_flat() {
    let net = NetDaemon::start(false, "", "");
    let http = Http::new(&net);
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    let pid = ws.call("initialize", json!({})).expect("initialize")["pid"]
        .as_u64()
        .expect("pid");
    // Warm the paths once, so what is measured is what a file's size adds.
    assert_eq!(http.put("big", "warm", &vec![1u8; 4 << 20]).0, 200);
    assert_eq!(http.get("big", "warm").0, 200);
    let before = rss_bytes(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak.fetch_max(rss_bytes(pid), std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    const SIZE: u64 = 100 << 20;
    // Up: a reader that makes the bytes as they are sent (the test holds none of them).
    let mut source = Pattern { at: 0, size: SIZE };
    let mut response = http
        .agent
        .put(&http.url("big", "data.bin"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send(ureq::SendBody::from_reader(&mut source))
        .expect("an HTTP answer");
    let answer = response.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(response.status().as_u16(), 200, "{answer}");
    // A cell sees it whole.
    let seen = ws
        .call(
            "eval",
            json!({"session": "big", "cells": [py("import os; print(os.path.getsize('data.bin'))")]}),
        )
        .expect("eval");
    assert_eq!(output(&seen).trim(), SIZE.to_string(), "{seen:#}");
    // Down: compared with the pattern as it arrives.
    let mut response = http
        .agent
        .get(&http.url("big", "data.bin"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("an HTTP answer");
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = response.body_mut().as_reader();
    let mut expected = Pattern { at: 0, size: SIZE };
    let (mut got, mut want) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut got).expect("the download");
        if n == 0 {
            break;
        }
        expected.read_exact(&mut want[..n]).expect("the pattern");
        assert!(got[..n] == want[..n], "byte-exact at {total}");
        total += n as u64;
    }
    assert_eq!(total, SIZE);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = sampler.join();
    let grew = peak
        .load(std::sync::atomic::Ordering::SeqCst)
        .saturating_sub(before);
    eprintln!(
        "daemon RSS before {before} B, peak growth {grew} B over a 100 MB upload and download"
    );
    assert!(
        grew < 10 << 20,
        "the daemon's RSS grew {grew} bytes streaming 100 MB both ways"
    );
    drop(ws);
    net.daemon.stop();
}

/// `size` bytes of a pattern no compressor or cache flattens to nothing.
struct Pattern {
    at: u64,
    size: u64,
}

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min((self.size - self.at) as usize);
        for (i, byte) in buf[..n].iter_mut().enumerate() {
            let at = self.at + i as u64;
            *byte = (at.wrapping_mul(2654435761) >> 13) as u8;
        }
        self.at += n as u64;
        Ok(n)
    }
}

#[test]
fn a_workspace_outlives_eviction_and_restarts_and_close_removes_it() {
    let daemon = Daemon::start_in(World::with_config(&format!(
        "{}idle-timeout = \"1s\"\n",
        SHORT_INTERVALS.replace("idle-timeout = \"0s\"\n", "")
    )));
    let mut client = daemon.client();
    // The Unix socket's caller without cwd (a library host) works in the workspace too.
    let wrote = client.eval(
        "keep",
        json!([py(
            "open('notes.txt', 'w').write('kept'); import os; print(os.getcwd())"
        )]),
    );
    let workspace = std::path::PathBuf::from(output(&wrote).trim());
    assert!(workspace.ends_with("workspaces/local/keep"), "{wrote:#}");
    let evicted = wait_until(Duration::from_secs(30), || {
        let rows = client.call("status", json!({})).expect("status");
        let live = rows
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["session"] == "keep"));
        if live {
            Err(rows)
        } else {
            Ok(())
        }
    });
    assert!(evicted.is_ok(), "the idle session was evicted: {evicted:?}");
    let read = client.eval("keep", json!([py("print(open('notes.txt').read())")]));
    assert_eq!(output(&read), "kept\n", "after eviction: {read:#}");
    let world = daemon.stop_keep_world();
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let read = client
        .call(
            "files/read",
            json!({"session": "keep", "path": "notes.txt"}),
        )
        .expect("files/read after a restart");
    assert_eq!(read["data"], "kept", "{read}");
    client
        .call("close", json!({"session": "keep"}))
        .expect("close");
    assert!(!workspace.exists(), "close removed the workspace");
    daemon.stop();
}

/// A request looks at its session's workspace once (one `statx` shared by its checks): a
/// workspace removed between two cells is still seen gone by the next request, and made again
/// for its cell, which works in it.
#[test]
fn a_workspace_removed_between_cells_is_made_again_for_the_next() {
    let daemon = Daemon::start_in(World::with_config(SHORT_INTERVALS));
    let mut client = daemon.client();
    let first = client.eval(
        "gone",
        json!([py(
            "import os; open('a.txt', 'w').write('1'); print(os.getcwd())"
        )]),
    );
    let workspace = std::path::PathBuf::from(output(&first).trim());
    assert!(workspace.ends_with("workspaces/local/gone"), "{first:#}");
    for round in 0..2 {
        std::fs::remove_dir_all(&workspace).expect("remove the workspace");
        let next = client.eval(
            "gone",
            json!([py("import os; print(os.getcwd(), sorted(os.listdir('.')))\nn = open('b.txt', 'w').write('2')")]),
        );
        assert_eq!(
            next["cells"][0]["status"], "complete",
            "round {round}: {next:#}"
        );
        assert_eq!(
            output(&next).trim(),
            format!("{} []", workspace.display()),
            "round {round}: a new, empty workspace: {next:#}"
        );
        assert!(
            workspace.join("b.txt").is_file(),
            "round {round}: the cell wrote in it"
        );
    }
    daemon.stop();
}

/// A cell that puts a link in its workspace's place (to another session's workspace) does
/// not get its next request run there: the daemon refuses a workspace that is not a
/// directory, saying so, and the other session is untouched. (At the `uid` level the
/// directory above a workspace is not the cell's to change; here, unconfined, it is.)
#[test]
fn a_link_in_a_workspaces_place_is_refused_not_entered() {
    let daemon = Daemon::start_in(World::with_config(SHORT_INTERVALS));
    let mut client = daemon.client();
    let victim = client.eval(
        "victim",
        json!([py(
            "import os; open('secret.txt', 'w').write('mine'); print(os.getcwd())"
        )]),
    );
    let victim_dir = output(&victim).trim().to_string();
    let moved = client.eval(
        "thief",
        json!([py(&format!(
            "import os\nhere = os.getcwd()\nos.chdir('/')\nos.rename(here, here + '.moved')\n\
             os.symlink({victim_dir:?}, here)\nprint('linked')"
        ))]),
    );
    assert_eq!(output(&moved).trim(), "linked", "{moved:#}");
    let refused = client
        .call(
            "eval",
            json!({"session": "thief", "cells": [py("print(open('secret.txt').read())")]}),
        )
        .expect_err("a link in the workspace's place is refused");
    assert!(refused.to_string().contains("not a directory"), "{refused}");
    let still = client.eval("victim", json!([py("print(open('secret.txt').read())")]));
    assert_eq!(output(&still).trim(), "mine", "{still:#}");
    daemon.stop();
}

#[test]
fn two_sessions_workspaces_are_apart_at_the_uid_level() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (sessions as uids of their own)");
        return;
    }
    let port = free_port();
    let daemon = uid_daemon(port);
    let http = Http::to(format!("http://127.0.0.1:{port}"), None);
    let mut ws = common::net::connect_ws(port, None, Some(TOKEN), None, None).expect("connected");
    let a = ws
        .call(
            "eval",
            json!({"session": "a", "cells": [py("open('secret', 'w').write('A'); import os; print(os.getcwd())")]}),
        )
        .expect("eval");
    assert_eq!(a["cells"][0]["status"], "complete", "{a:#}");
    let a_dir = output(&a).trim().to_string();
    // b tries a's file by relative path, absolute path, a link, and a listing.
    let code = format!(
        "import os\nfor p in ['../a/secret', '{a_dir}/secret']:\n    try:\n        print(open(p).read())\n    except OSError as e:\n        print(type(e).__name__)\nos.symlink('{a_dir}/secret', 'link')\ntry:\n    print(open('link').read())\nexcept OSError as e:\n    print(type(e).__name__)\nfor d in ['..', '{a_dir}']:\n    try:\n        print(os.listdir(d))\n    except OSError as e:\n        print(type(e).__name__)\ntry:\n    open('{a_dir}/planted', 'w')\nexcept OSError as e:\n    print(type(e).__name__)\n"
    );
    let b = ws
        .call("eval", json!({"session": "b", "cells": [py(&code)]}))
        .expect("eval");
    assert_eq!(
        output(&b),
        "PermissionError\nPermissionError\nPermissionError\nPermissionError\nPermissionError\nPermissionError\n",
        "{b:#}"
    );
    // The daemon is not tricked by b's link either: it reads beneath b's workspace only.
    let refused = ws
        .call("files/read", json!({"session": "b", "path": "link"}))
        .expect_err("b's link to a's file");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("leads out"),
        "{refused}"
    );
    // A file uploaded into b is b's: its cells may change it.
    assert_eq!(http.put("b", "up.txt", b"up").0, 200);
    let append = ws
        .call(
            "eval",
            json!({"session": "b", "cells": [py("open('up.txt', 'a').write('+b'); print(open('up.txt').read())")]}),
        )
        .expect("eval");
    assert_eq!(output(&append), "up+b\n", "{append:#}");
    drop(ws);
    daemon.stop();
}

/// A daemon whose sessions run as uids of their own, listening on `port` in plaintext; its
/// world's directories opened to traversal as an operator would (tests/uids.rs does the same).
fn uid_daemon(port: u16) -> Daemon {
    use std::os::unix::fs::PermissionsExt;
    let world = World::with_config("");
    let token = world.dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "{SHORT_INTERVALS}[python]\ninterpreter = \"/usr/bin/python3\"\n\
         [isolation]\nlevel = \"uid\"\nuids = \"61730-61739\"\n\
         [daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ninsecure-plaintext = true\n\
         token-file = {:?}\n",
        token.display().to_string()
    );
    std::fs::write(world.config_path(), config).expect("config");
    let state = world.dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    for dir in [world.dir.path().to_path_buf(), world.work_dir(), state] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    }
    let daemon = Daemon::start_in(world);
    let up = wait_until(Duration::from_secs(15), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).map(|_| ())
    });
    assert!(up.is_ok(), "the listener never listened: {up:?}");
    daemon
}

#[test]
fn the_rust_client_uploads_lists_and_downloads_over_wss() {
    use cellvisor_client::daemon::{Client, Remote, Token};
    let net = NetDaemon::start(true, "", "");
    let mut remote = Remote::new(&format!("wss://127.0.0.1:{}", net.port)).expect("a URL");
    remote.token = Some(Token::new(TOKEN, "the test"));
    remote.ca_file = net.tls.as_ref().map(|cert| cert.cert.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut client = Client::connect_remote(&remote).await.expect("connected");
        // Past one part each way (8 MiB).
        let data: Vec<u8> = (0..9u32 << 20)
            .map(|i| (i.wrapping_mul(31) >> 3) as u8)
            .collect();
        client
            .upload("rs", "d/data.bin", &data)
            .await
            .expect("upload");
        let listed = client.list("rs", "", true).await.expect("list");
        let paths: Vec<&str> = listed.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["d", "d/data.bin"]);
        assert_eq!(listed.entries[1].size, data.len() as u64);
        let back = client.download("rs", "d/data.bin").await.expect("download");
        assert!(back == data, "byte-exact ({} bytes back)", back.len());
        let refused = client.download("rs", "d/../../x").await.expect_err("`..`");
        assert!(refused.to_string().contains("without `..`"), "{refused}");
    });
    net.daemon.stop();
}

/// The figure docs/workspaces.md quotes: a file up and down over TLS through the listener
/// against a plain copy of it on the same disk (the floor), in one run. A measurement, not
/// a check: `cargo test --test workspaces -- --ignored --nocapture measure`.
#[test]
#[ignore]
fn measure_upload_and_download_over_tls_against_cp() {
    const SIZE: u64 = 256 << 20;
    let net = NetDaemon::start(true, "", "");
    let http = Http::new(&net);
    let scratch = tempfile::tempdir_in(net.daemon.world.dir.path()).expect("scratch");
    let source = scratch.path().join("source.bin");
    std::io::copy(
        &mut Pattern { at: 0, size: SIZE },
        &mut std::fs::File::create(&source).expect("source"),
    )
    .expect("the source file");
    let started = std::time::Instant::now();
    std::fs::copy(&source, scratch.path().join("copy.bin")).expect("cp");
    let cp = started.elapsed();
    let started = std::time::Instant::now();
    let mut file = std::fs::File::open(&source).expect("source");
    let mut response = http
        .agent
        .put(&http.url("m", "data.bin"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .header("content-length", &SIZE.to_string())
        .send(ureq::SendBody::from_reader(&mut file))
        .expect("an HTTP answer");
    assert_eq!(response.status().as_u16(), 200);
    let _ = response.body_mut().read_to_string();
    let up = started.elapsed();
    let started = std::time::Instant::now();
    let mut response = http
        .agent
        .get(&http.url("m", "data.bin"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("an HTTP answer");
    let mut sink = std::fs::File::create(scratch.path().join("down.bin")).expect("sink");
    let got = std::io::copy(&mut response.body_mut().as_reader(), &mut sink).expect("download");
    let down = started.elapsed();
    assert_eq!(got, SIZE);
    let rate = |d: Duration| SIZE as f64 / (1 << 20) as f64 / d.as_secs_f64();
    eprintln!(
        "{} MiB: cp {:.0} MiB/s; upload over TLS {:.0} MiB/s ({:.2}x cp's time); download over TLS \
         {:.0} MiB/s ({:.2}x cp's time)",
        SIZE >> 20,
        rate(cp),
        rate(up),
        up.as_secs_f64() / cp.as_secs_f64(),
        rate(down),
        down.as_secs_f64() / cp.as_secs_f64()
    );
    net.daemon.stop();
}

#[test]
fn tenants_have_workspaces_of_their_own_and_a_quota_over_all_of_them() {
    const ALPHA: &str = "alpha-token-0123456789abcdef";
    const BETA: &str = "beta-token-0123456789abcdef";
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("alpha.token"), ALPHA).expect("a test file");
    std::fs::write(dir.path().join("beta.token"), BETA).expect("a test file");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenants]]\nname = \"alpha\"\ntoken-file = \"alpha.token\"\nworkspace-bytes = \"48KiB\"\n\
         [[tenants]]\nname = \"beta\"\ntoken-file = \"beta.token\"\n",
    )
    .expect("a test file");
    let net = NetDaemon::start(
        false,
        &format!("tenants-file = {:?}\n", tenants.display().to_string()),
        "",
    );
    let mut alpha_http = Http::new(&net);
    alpha_http.token = ALPHA.to_string();
    let mut beta_http = Http::new(&net);
    beta_http.token = BETA.to_string();
    let mut alpha = net.ws(Some(ALPHA), None).expect("alpha connects");
    let mut beta = net.ws(Some(BETA), None).expect("beta connects");

    assert_eq!(alpha_http.put("s", "f.txt", b"alpha's").0, 200);
    let cwd = alpha
        .call("eval", json!({"session": "s", "cells": [py("import os; print(os.getcwd()); print(open('f.txt').read())")]}))
        .expect("eval");
    assert!(
        output(&cwd).contains("workspaces/tenants/alpha/s\nalpha's"),
        "{cwd:#}"
    );
    // Beta's `s` is another session with another workspace; alpha's is no name of beta's.
    assert_eq!(beta_http.get("s", "f.txt").0, 404);
    let listed = beta
        .call("files/list", json!({"session": "s"}))
        .expect("list");
    assert_eq!(listed["entries"], json!([]), "{listed}");
    let (status, body) = beta_http.get("alpha%2Fs", "f.txt");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let refused = beta
        .call("files/read", json!({"session": "alpha/s", "path": "f.txt"}))
        .expect_err("another tenant's session");
    assert_eq!(refused["code"], -32602, "{refused}");

    // The tenant's quota bounds its workspaces together.
    use base64::Engine;
    let part = base64::engine::general_purpose::STANDARD.encode(vec![1u8; 30 * 1024]);
    alpha
        .call(
            "files/write",
            json!({"session": "s2", "path": "p", "data": part, "encoding": "base64"}),
        )
        .expect("30 KiB fit");
    let refused = alpha
        .call(
            "files/write",
            json!({"session": "s3", "path": "p", "data": part, "encoding": "base64"}),
        )
        .expect_err("60 KiB do not");
    assert_eq!(refused["code"], -32008, "{refused}");
    assert_eq!(refused["data"]["quota"], "workspace-bytes", "{refused}");
    // Beta has no such quota.
    beta.call(
        "files/write",
        json!({"session": "s3", "path": "p", "data": part, "encoding": "base64"}),
    )
    .expect("beta is unbounded");
    drop((alpha, beta));
    net.daemon.stop();
}

/// An upload is written aside and moved over the file only once whole: one that breaks off,
/// or passes a quota as it arrives, leaves the file that was there as it was, and nothing of
/// itself behind.
#[test]
fn a_broken_or_refused_upload_leaves_the_old_file_as_it_was() {
    let net = NetDaemon::start(false, "[workspaces]\nmax-bytes = \"64KiB\"\n", "");
    let http = Http::new(&net);
    let (status, _) = http.put("keep", "data/kept.txt", b"the old contents");
    assert_eq!(status, 200);
    // A body that promises 1,000 bytes and breaks off after 10.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", net.port)).expect("connect");
    use std::io::{Read, Write};
    write!(
        raw,
        "PUT /v1/sessions/keep/files/data/kept.txt HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\n0123456789"
    )
    .expect("send");
    raw.shutdown(std::net::Shutdown::Write).expect("break off");
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    // An upload without a length that passes the quota while it arrives.
    let (status, refused) = http.put("keep", "data/kept.txt", &vec![b'x'; 100 * 1024]);
    assert_eq!(status, 413, "{refused}");
    let (status, bytes) = http.get("keep", "data/kept.txt");
    assert_eq!(status, 200);
    assert_eq!(bytes, b"the old contents");
    let mut ws = net.ws(Some(TOKEN), None).expect("connected");
    let listed = ws
        .call("files/list", json!({"session": "keep", "path": "data"}))
        .expect("list");
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["data/kept.txt"], "{listed}");
}
