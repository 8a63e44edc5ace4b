//! A single-member etcd of a test's own (Debian's `etcd-server`): a private data directory,
//! free ports, stopped (by its pid) at the test's end.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    /// Its client URL.
    pub url: String,
    _dir: tempfile::TempDir,
}

/// etcd, when this machine has it; under CI its absence fails the suite.
pub fn installed() -> bool {
    let found = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("CI").is_some() {
        panic!("etcd is not installed: .ci/run installs etcd-server from Debian's packages");
    }
    if !found {
        eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
    }
    found
}

impl Etcd {
    /// A new etcd, once it listens.
    pub fn start() -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let (client, peer) = (super::net::free_port(), super::net::free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Etcd {
            child,
            url,
            _dir: dir,
        }
    }

    /// Its process id (to stop and continue it: an unreachable member).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The value at `key`, read with `etcdctl` (none when absent).
    pub fn get(&self, key: &str) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url, "get", "--print-value-only", key])
            .output()
            .expect("etcdctl runs");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!text.is_empty()).then_some(text)
    }

    /// Deletes `key` (a test's stand-in for a write that never happened).
    pub fn delete(&self, key: &str) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url, "del", key])
            .output()
            .expect("etcdctl runs");
        assert!(out.status.success(), "etcdctl del {key}: {out:?}");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
