//! A daemon in the foreground and a line-oriented JSON-RPC client for it.

use super::{wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

/// A daemon in the foreground, stopped (and proven gone) at the end of the test.
pub struct Daemon {
    pub world: World,
    child: Option<Child>,
    pub socket: PathBuf,
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_with("")
    }

    /// A daemon under [`SHORT_INTERVALS`] whose config file also holds `extra`.
    pub fn start_with(extra: &str) -> Daemon {
        Daemon::start_in(World::with_config(&format!("{SHORT_INTERVALS}{extra}")))
    }

    /// A daemon in an existing world (to restart one where another stopped).
    pub fn start_in(world: World) -> Daemon {
        let socket = world.runtime_dir().join("cellvisor").join("test.sock");
        // What the daemon logs, for a failing test to show (`Daemon::log`).
        let log = std::fs::File::create(world.dir.path().join("daemon.log")).expect("log file");
        let child = world
            .command()
            .args(["serve", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn serve");
        let daemon = Daemon {
            world,
            child: Some(child),
            socket,
        };
        let up = wait_until(Duration::from_secs(15), || {
            UnixStream::connect(&daemon.socket).map(|_| ())
        });
        assert!(up.is_ok(), "daemon never listened: {up:?}");
        daemon
    }

    /// The last `lines` lines the daemon logged (its standard error), for a failure's
    /// message.
    pub fn log_tail(&self, lines: usize) -> String {
        super::tail_of_file(&self.world.dir.path().join("daemon.log"), lines)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |child| child.id())
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
    }

    /// Polls `status` until `session` is in `state` (`"busy"`, `"idle"`, ...), so a test
    /// orders its steps by what the daemon reports rather than by sleeping.
    pub fn wait_for_state(&self, session: &str, state: &str) {
        let mut client = self.client();
        let reached = wait_until(Duration::from_secs(30), || {
            let rows = client.call("status", json!({})).unwrap_or_default();
            let found = rows.as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["session"] == session && r["state"] == state)
            });
            found.then_some(()).ok_or(rows)
        });
        assert!(reached.is_ok(), "{session} never {state}: {reached:?}");
    }

    /// Sends the daemon `signal` (`"TERM"`, `"KILL"`), waits for it to exit, and hands the
    /// world back (to prove what is left of it).
    pub fn signal_and_wait(mut self, signal: &str) -> World {
        if let Some(mut child) = self.child.take() {
            let sent = std::process::Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status()
                .expect("kill runs");
            assert!(sent.success(), "kill -{signal} the daemon");
            let exited = wait_until(Duration::from_secs(15), || match child.try_wait() {
                Ok(Some(status)) => Ok(status),
                _ => Err(()),
            });
            assert!(exited.is_ok(), "the daemon did not exit on SIG{signal}");
        }
        std::mem::replace(&mut self.world, World::new())
    }

    pub fn stop(self) {
        let world = self.stop_keep_world();
        world.assert_no_processes_left(SETTLE);
    }

    /// Stops the daemon, proves its processes gone, and hands the world back.
    pub fn stop_keep_world(mut self) -> World {
        let mut client = self.client();
        client
            .call("shutdown", json!({}))
            .expect("shutdown answered");
        if let Some(mut child) = self.child.take() {
            let exited = wait_until(Duration::from_secs(15), || match child.try_wait() {
                Ok(Some(status)) => Ok(status),
                _ => Err(()),
            });
            assert!(
                exited.is_ok_and(|s| s.success()),
                "daemon did not exit cleanly"
            );
        }
        assert!(!self.socket.exists(), "socket removed on shutdown");
        self.world.assert_no_processes_left(SETTLE);
        std::mem::replace(&mut self.world, World::new())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A line-oriented JSON-RPC client.
pub struct Client {
    reader: BufReader<UnixStream>,
    pub writer: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &std::path::Path) -> Client {
        let stream = UnixStream::connect(path).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        Client {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
            next_id: 1,
        }
    }

    pub fn send_line(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).expect("write");
        self.writer.write_all(b"\n").expect("write");
    }

    pub fn read(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("daemon sends JSON lines")),
        }
    }

    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&line.to_string());
        id
    }

    /// Sends a request and collects notifications until its response.
    pub fn call_collect(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.send(method, params);
        let mut notifications = Vec::new();
        loop {
            let message = self.read().expect("connection open");
            if message["id"] == json!(id) {
                return (notifications, message);
            }
            notifications.push(message);
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let (_, response) = self.call_collect(method, params);
        match response.get("error") {
            Some(error) => Err(error.clone()),
            None => Ok(response["result"].clone()),
        }
    }

    /// `eval` of `cells` in `session`; the result (a refusal panics, with its error).
    pub fn eval(&mut self, session: &str, cells: Value) -> Value {
        self.call("eval", json!({"session": session, "cells": cells}))
            .unwrap_or_else(|e| panic!("eval refused: {e}"))
    }

    /// [`Client::eval`] run in `cwd`.
    pub fn eval_in(&mut self, session: &str, cwd: &std::path::Path, cells: Value) -> Value {
        self.call(
            "eval",
            json!({"session": session, "cwd": cwd, "cells": cells}),
        )
        .unwrap_or_else(|e| panic!("eval refused: {e}"))
    }
}

/// Cell `index` of an eval result.
pub fn cell(result: &Value, index: usize) -> &Value {
    &result["cells"][index]
}

/// The output of cell `index` of an eval result.
pub fn output(result: &Value, index: usize) -> &str {
    cell(result, index)["output"].as_str().unwrap_or_default()
}
