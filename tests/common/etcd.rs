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

impl Etcd {
    /// A new etcd, once it is healthy.
    pub fn start() -> Etcd {
        let dir = data_dir();
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
        let mut etcd = Etcd {
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

/// An etcd cluster of a test's own: `n` members on free ports, each in a private data
/// directory, stopped (by their pids) at the test's end.
pub struct Cluster {
    members: Vec<Child>,
    /// The members' client URLs.
    pub urls: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// `n` members forming one cluster, once each listens and one leads.
    pub fn start(n: usize) -> Cluster {
        let dir = data_dir();
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| (super::net::free_port(), super::net::free_port()))
            .collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            members: Vec::new(),
            urls: ports
                .iter()
                .map(|(client, _)| format!("http://127.0.0.1:{client}"))
                .collect(),
            _dir: dir,
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}"), "--data-dir"])
                .arg(cluster._dir.path().join(format!("m{i}")))
                .args(["--listen-client-urls", &url])
                .args(["--advertise-client-urls", &url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                // Slower than etcd's defaults: on a loaded machine those change leaders for
                // nothing.
                .args(["--heartbeat-interval", "150", "--election-timeout", "1500"])
                .args(["--logger", "zap", "--log-level", "error"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("etcd starts");
            cluster.members.push(child);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while cluster.leader().is_none() {
            assert!(
                Instant::now() < deadline,
                "the etcd cluster elected no leader"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster
    }

    /// Member `i`'s process id (to stop and continue it).
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i].id()
    }

    fn etcdctl(&self, args: &[&str]) -> Option<serde_json::Value> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.urls.join(","), "-w", "json"])
            .args(["--command-timeout", "5s"])
            .args(args)
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The index of the member that leads, when every member answers and one leads.
    pub fn leader(&self) -> Option<usize> {
        let status = self.etcdctl(&["endpoint", "status"])?;
        let members = status.as_array()?;
        if members.len() != self.urls.len() {
            return None;
        }
        members.iter().find_map(|m| {
            let status = &m["Status"];
            let leads = status["leader"].as_u64()? == status["header"]["member_id"].as_u64()?;
            let url = m["Endpoint"].as_str()?;
            leads.then(|| self.urls.iter().position(|u| u == url))?
        })
    }

    /// The value at `key` and the revision that created it (none when absent).
    pub fn get(&self, key: &str) -> Option<(String, i64)> {
        use base64::Engine as _;
        let found = self.etcdctl(&["get", key])?;
        let kv = found["kvs"].as_array()?.first()?;
        let value = base64::engine::general_purpose::STANDARD
            .decode(kv["value"].as_str()?)
            .ok()?;
        Some((
            String::from_utf8_lossy(&value).into_owned(),
            kv["create_revision"].as_i64()?,
        ))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = Command::new("kill")
                .args(["-CONT", &member.id().to_string()])
                .status();
            let _ = member.kill();
            let _ = member.wait();
        }
    }
}
