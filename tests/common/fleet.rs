//! A fleet for the tests: three nodes sharing a snapshot directory, its key and leases,
//! behind a real HAProxy running the shipped `deploy/haproxy/haproxy.cfg` on a port of the
//! test's. Used by the router's WebSocket test and by MCP over HTTP through the router
//! (tests/fleet_router.rs).

use super::net::{connect_ws, free_port, NetDaemon, TOKEN};
use super::{path_str, wait_until};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// HAProxy, when this machine has it; under CI its absence fails the suite.
pub fn haproxy() -> Option<&'static str> {
    let found = Command::new("haproxy")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("CI").is_some() {
        panic!("haproxy is not installed: .ci/run installs it from Debian's packages");
    }
    if !found {
        eprintln!("skipped: haproxy is not installed (apt-get install haproxy)");
    }
    found.then_some("haproxy")
}

/// The shipped HAProxy config (its addresses come from the environment).
pub fn shipped_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy/haproxy.cfg")
}

/// Three nodes sharing a snapshot directory and key, and HAProxy in front of them.
pub struct Fleet {
    /// `node-0`, `node-1`, `node-2`; a test that kills one takes it out (`None`).
    pub nodes: Vec<Option<NetDaemon>>,
    router: Child,
    /// HAProxy's port.
    pub port: u16,
    shared: tempfile::TempDir,
}

impl Fleet {
    /// The fleet, each node with `[sessions]` keys `sessions_extra` (over the short
    /// intervals), snapshots after every cell, leases of 2 s and an agent check.
    pub fn start(haproxy: &str, sessions_extra: &str) -> Fleet {
        let shared = tempfile::tempdir().expect("tempdir");
        // Open to traversal: as root the nodes give their sessions uids of their own, which
        // must reach their snapshot directories inside.
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        let key = shared.path().join("fleet.key");
        std::fs::write(&key, [0x42; 32]).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        let snapshots = shared.path().join("snapshots");
        let mut router = Command::new(haproxy);
        router
            .args(["-db", "-L", "local", "-f"])
            .arg(shipped_config());
        let mut nodes = Vec::new();
        for i in 0..3 {
            let agent = free_port();
            let extra = format!(
                "node = \"node-{i}\"\n[snapshots]\nwhen = \"every-cell\"\ndir = \"{}\"\n\
                 key-file = \"{}\"\n[fleet]\nleases = true\nlease-ttl = \"2s\"\n\
                 agent-listen = [\"tcp://127.0.0.1:{agent}\"]\n",
                path_str(&snapshots),
                path_str(&key)
            );
            let node = NetDaemon::start(false, &extra, sessions_extra);
            router
                .env(
                    format!("CELLVISOR_NODE_{i}"),
                    format!("127.0.0.1:{}", node.port),
                )
                .env(format!("CELLVISOR_AGENT_PORT_{i}"), agent.to_string());
            nodes.push(Some(node));
        }
        let port = free_port();
        let router = router
            .env("CELLVISOR_HAPROXY_BIND", format!("127.0.0.1:{port}"))
            .env(
                "CELLVISOR_HAPROXY_PEER_ADDR",
                format!("127.0.0.1:{}", free_port()),
            )
            .stdout(std::fs::File::create(shared.path().join("haproxy.log")).expect("log file"))
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy starts");
        let fleet = Fleet {
            nodes,
            router,
            port,
            shared,
        };
        let up = wait_until(Duration::from_secs(15), || {
            fleet.eval("probe", "py", "1").map(|_| ())
        });
        assert!(up.is_ok(), "HAProxy never routed a request: {up:?}");
        fleet
    }

    /// One cell of `session` through HAProxy on a connection of its own, bound to the
    /// session (as a router needs it); a refusal, a lost connection or no answer in 30 s
    /// (a wait only a node that never answers makes) is an `Err`, for the caller to retry.
    pub fn eval(&self, session: &str, language: &str, code: &str) -> Result<Value, String> {
        let mut client = connect_ws(self.port, None, Some(TOKEN), Some(session), None)?;
        client.set_read_timeout(Duration::from_secs(30));
        client
            .try_call(
                "eval",
                json!({"session": session, "cells": [{"language": language, "code": code}]}),
            )?
            .map_err(|e| e.to_string())
    }

    /// What HAProxy and every live node logged (their last lines), for a failure's message.
    pub fn logs(&self) -> String {
        let router = super::tail_of_file(&self.shared.path().join("haproxy.log"), 60);
        let mut out = format!("== HAProxy\n{router}\n");
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(node) = node {
                out += &format!("== node-{i}\n{}\n", node.daemon.log_tail(60));
            }
        }
        out
    }

    /// The fleet's snapshot master key, shared by every node.
    pub fn key_file(&self) -> PathBuf {
        self.shared.path().join("fleet.key")
    }

    /// `http://<HAProxy>/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn node(&self, i: usize) -> &NetDaemon {
        self.nodes[i].as_ref().expect("a live node")
    }

    /// The name (`node-<i>`) of the live node whose processes run with `runtime_dir` as
    /// their `XDG_RUNTIME_DIR`: where a cell that printed it ran.
    pub fn node_running_in(&self, runtime_dir: &str) -> Option<String> {
        self.nodes.iter().enumerate().find_map(|(i, node)| {
            let node = node.as_ref()?;
            (node.daemon.world.runtime_dir() == Path::new(runtime_dir)).then(|| format!("node-{i}"))
        })
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.router.kill();
        let _ = self.router.wait();
    }
}
