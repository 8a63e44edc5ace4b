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

    /// etcd's count of gRPC requests handled so far (its metrics), by method.
    pub fn requests(&self) -> std::collections::BTreeMap<String, f64> {
        use std::io::{Read, Write};
        let address = self.url.trim_start_matches("http://").to_string();
        let mut out = String::new();
        if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
            let _ = write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
            let _ = stream.read_to_string(&mut out);
        }
        let mut counts = std::collections::BTreeMap::new();
        for line in out
            .lines()
            .filter(|l| l.starts_with("grpc_server_handled_total"))
        {
            let method = line
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string();
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *counts.entry(method).or_insert(0.0) += n;
        }
        counts
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
