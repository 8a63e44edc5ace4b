//! etcd for the end-to-end tests (Debian's `etcd-server`): one server of a test's own
//! (`etcd_server.rs`, shared with the supervisor's unit tests), or a cluster.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "etcd_server.rs"]
mod server;
use server::data_dir;
// Not every test program that includes `common` speaks to etcd.
#[allow(unused_imports)]
pub use server::{installed, EtcdServer as Etcd};

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
            .map(|_| (server::free_port(), server::free_port()))
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
