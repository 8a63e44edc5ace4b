//! One etcd server of a test's own (Debian's `etcd-server`): a private data directory in
//! memory where the machine has one, free ports, used once healthy, stopped by its pid at the
//! test's end. The end-to-end tests' `common::etcd` and the supervisor's unit tests (which
//! include this file by its path) share it, so it uses std, tempfile and nix alone.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A single-member etcd.
pub struct EtcdServer {
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
    assert!(
        found || std::env::var_os("CI").is_none(),
        "etcd is not installed: .ci/run installs etcd-server from Debian's packages"
    );
    if !found {
        eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
    }
    found
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A directory for etcd's data, in memory (`/dev/shm`) where this machine has it: etcd syncs
/// every write to disk, and on a slow disk shared with a parallel suite one write can take
/// longer than the second a test's 2 s lease gives each request (CI failed so).
pub fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let in_memory = shm
        .is_dir()
        .then(|| {
            tempfile::Builder::new()
                .prefix("cellvisor-etcd-")
                .tempdir_in(shm)
                .ok()
        })
        .flatten();
    in_memory.unwrap_or_else(|| tempfile::tempdir().expect("tempdir"))
}

/// Whether the etcd at `port` says it is healthy (it has a leader and serves requests):
/// listening alone is not enough for a first request to be answered in time.
pub fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.contains(r#""health":"true""#)
}

impl EtcdServer {
    /// The etcd, once it is healthy; `None` (the test skipped) where etcd is not installed,
    /// which fails under CI.
    pub fn start_if_installed() -> Option<EtcdServer> {
        installed().then(EtcdServer::start)
    }

    /// A new etcd, once it is healthy.
    pub fn start() -> EtcdServer {
        let dir = data_dir();
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        let mut etcd = EtcdServer {
            child,
            url,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(client) {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                panic!("etcd exited as it started ({status}): were its ports taken?");
            }
            assert!(
                Instant::now() < deadline,
                "etcd was not healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        etcd
    }

    /// Its process id.
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

    /// Sends it `signal` (SIGSTOP and SIGCONT: a member that is there but answers nothing).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal etcd");
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // A stopped etcd is continued first, so that it ends and is reaped.
        self.signal(nix::sys::signal::Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
