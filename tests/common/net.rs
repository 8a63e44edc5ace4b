//! A daemon with a network listener for the tests: a self-signed certificate made by the
//! test, a token file, a free port, and a WebSocket JSON-RPC client.

use super::daemon::Daemon;
use super::{wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// The token the test daemons accept.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A self-signed certificate for `localhost` and `127.0.0.1`, written as PEM files.
pub struct TestCert {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub der: Vec<u8>,
}

impl TestCert {
    pub fn make(dir: &Path) -> TestCert {
        let made = rcgen::generate_simple_self_signed(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ])
        .expect("a self-signed certificate");
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, made.cert.pem()).expect("cert.pem");
        std::fs::write(&key, made.signing_key.serialize_pem()).expect("key.pem");
        TestCert {
            cert,
            key,
            der: made.cert.der().to_vec(),
        }
    }
}

/// A CA (its certificate as PEM at `cert`) and a client certificate it signed, for
/// mutual TLS.
pub struct ClientIdentity {
    pub ca_cert: PathBuf,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

impl ClientIdentity {
    pub fn make(dir: &Path, name: &str) -> ClientIdentity {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(
            ca_params,
            rcgen::KeyPair::generate().expect("key"),
        )
        .expect("CA");
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
        params
            .extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        let cert = params.signed_by(&key, &ca).expect("client certificate");
        let ca_cert = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_cert, ca.pem()).expect("ca.pem");
        ClientIdentity {
            ca_cert,
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An `[isolation]` section whose uid range (100 uids within 20000-59999) no other daemon of
/// this test process has (the first 400 get distinct blocks; a block another process's live
/// daemon holds leaves this one at isolation level none, by the daemon's range lock).
pub fn uid_range_config() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let taken = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let block = (std::process::id().wrapping_mul(7).wrapping_add(taken)) % 400;
    let first = 20_000 + block * 100;
    format!("[isolation]\nuids = \"{first}-{}\"\n", first + 99)
}

/// A daemon listening on its Unix socket and on `127.0.0.1:<port>`.
pub struct NetDaemon {
    pub daemon: Daemon,
    pub port: u16,
    pub tls: Option<TestCert>,
    /// The token, certificate and key files.
    pub files: tempfile::TempDir,
}

impl NetDaemon {
    /// With TLS (`tls`) or plaintext on loopback, a token file, more `[daemon]` keys in
    /// `daemon_extra` and `[sessions]` keys in `sessions_extra` (which replace the short
    /// intervals' keys of the same name).
    pub fn start(tls: bool, daemon_extra: &str, sessions_extra: &str) -> NetDaemon {
        let port = free_port();
        let files = tempfile::tempdir().expect("tempdir");
        let dir = files.path();
        let token = dir.join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).expect("token file");
        // As an operator keeps it: the daemon's own, out of every session uid's reach.
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let cert = tls.then(|| TestCert::make(dir));
        let tls_keys = cert
            .as_ref()
            .map(|c| {
                format!(
                    "tls-cert = {:?}\ntls-key = {:?}\n",
                    c.cert.display().to_string(),
                    c.key.display().to_string()
                )
            })
            .unwrap_or_default();
        let replaced: Vec<&str> = sessions_extra
            .lines()
            .filter_map(|l| l.split('=').next())
            .map(str::trim)
            .collect();
        let sessions: String = SHORT_INTERVALS
            .lines()
            .filter(|l| !replaced.contains(&l.split('=').next().unwrap_or("").trim()))
            .map(|l| format!("{l}\n"))
            .collect();
        // As root, a daemon on the network gives its sessions uids of their own
        // (`isolation.level = "auto"`): their Python must be one every user can run, and
        // each daemon needs a range of its own (a daemon ends whatever runs in its range
        // when it starts).
        let config = format!(
            "{sessions}{sessions_extra}\n{}{}[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\n\
             token-file = {:?}\n{tls_keys}{daemon_extra}",
            super::shared_python_config(),
            uid_range_config(),
            token.display().to_string()
        );
        let daemon = Daemon::start_in(World::with_config(&config));
        let up = wait_until(Duration::from_secs(15), || {
            TcpStream::connect(("127.0.0.1", port)).map(|_| ())
        });
        assert!(up.is_ok(), "the network listener never listened: {up:?}");
        NetDaemon {
            daemon,
            port,
            tls: cert,
            files,
        }
    }

    pub fn http_url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// A WebSocket JSON-RPC client with `token` (and a session binding).
    pub fn ws(&self, token: Option<&str>, session: Option<&str>) -> Result<WsClient, String> {
        self.ws_as(token, session, None)
    }

    /// [`NetDaemon::ws`] presenting a client certificate.
    pub fn ws_as(
        &self,
        token: Option<&str>,
        session: Option<&str>,
        identity: Option<&ClientIdentity>,
    ) -> Result<WsClient, String> {
        connect_ws(self.port, self.tls.as_ref(), token, session, identity)
    }
}

/// A WebSocket JSON-RPC client of whatever listens on `127.0.0.1:<port>` (a daemon, or a
/// router in front of several), with `tls` trusted when given.
pub fn connect_ws(
    port: u16,
    tls: Option<&TestCert>,
    token: Option<&str>,
    session: Option<&str>,
    identity: Option<&ClientIdentity>,
) -> Result<WsClient, String> {
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let url = format!("{scheme}://127.0.0.1:{}/v1/rpc", port);
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    if let Some(token) = token {
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
    }
    if let Some(session) = session {
        request
            .headers_mut()
            .insert("cellvisor-session", session.parse().expect("header"));
    }
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let connector = tls.map(|cert| {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(cert.der.clone()))
            .expect("the test's CA");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
        let config = match identity {
            None => config.with_no_client_auth(),
            Some(id) => config
                .with_client_auth_cert(
                    vec![rustls::pki_types::CertificateDer::from(id.cert_der.clone())],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(id.key_der.clone().into()),
                )
                .expect("client certificate"),
        };
        tungstenite::Connector::Rustls(Arc::new(config))
    });
    let connector = connector.unwrap_or(tungstenite::Connector::Plain);
    let (socket, _) = tungstenite::client_tls_with_config(request, stream, None, Some(connector))
        .map_err(|e| match e {
        tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response)) => {
            format!("HTTP {}", response.status().as_u16())
        }
        other => other.to_string(),
    })?;
    Ok(WsClient { socket, next_id: 0 })
}

/// JSON-RPC over a WebSocket, one message per text frame.
pub struct WsClient {
    pub socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl WsClient {
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.socket
            .send(Message::text(request.to_string()))
            .expect("send");
        self.next_id
    }

    /// The next JSON-RPC message; `None` when the daemon closed the connection.
    pub fn read(&mut self) -> Option<Value> {
        loop {
            match self.socket.read() {
                Ok(Message::Text(text)) => {
                    return Some(serde_json::from_str(text.as_str()).expect("JSON"))
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    /// Bounds every later read (plaintext connections only).
    pub fn set_read_timeout(&mut self, timeout: Duration) {
        if let MaybeTlsStream::Plain(stream) = self.socket.get_mut() {
            stream
                .set_read_timeout(Some(timeout))
                .expect("read timeout");
        }
    }

    /// [`WsClient::call`], with a connection closed (or a read timed out) before the answer
    /// as an `Err` rather than a panic, for callers that retry.
    pub fn try_call(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, Value>, String> {
        let id = self.send(method, params);
        loop {
            let message = self.read().ok_or_else(|| {
                format!("no answer to {method}: the connection closed or timed out")
            })?;
            if message["id"] == id && message.get("method").is_none() {
                return Ok(match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                });
            }
        }
    }

    /// Calls `method`, answering `tool/call` requests with `tool`, and collects the
    /// notifications that came before the answer.
    pub fn call_with_tools(
        &mut self,
        method: &str,
        params: Value,
        mut tool: impl FnMut(&Value) -> Value,
    ) -> (Vec<Value>, Result<Value, Value>) {
        let id = self.send(method, params);
        let mut notifications = Vec::new();
        loop {
            let message = self.read().expect("an answer before the connection closed");
            if message["method"] == "tool/call" {
                let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": tool(&message["params"])});
                self.socket
                    .send(Message::text(answer.to_string()))
                    .expect("send");
            } else if message.get("id").is_none() {
                notifications.push(message);
            } else if message["id"] == id {
                let answer = match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                };
                return (notifications, answer);
            }
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.call_with_tools(method, params, |_| Value::Null).1
    }
}

/// `GET url` with an optional bearer token: the status and the body.
pub fn http_get(url: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().expect("an HTTP answer");
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    (status, body)
}

/// The test venv's python (scripts/test-venv) with `packages` installed.
pub fn venv_python(packages: &[&str]) -> PathBuf {
    super::test_venv(packages).join("bin/python")
}

/// Every sample of `GET /metrics`, parsed by the prometheus_client OpenMetrics parser
/// (tests/metrics_scrape.py): `(name, labels, value)`.
pub fn scrape(python: &Path, url: &str) -> Vec<(String, Value, f64)> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/metrics_scrape.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .args([url, TOKEN])
        .output()
        .expect("run metrics_scrape.py");
    assert!(
        output.status.success(),
        "the metrics did not parse: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let sample: Value = serde_json::from_str(line).expect("a JSON sample");
            let name = sample["name"].as_str().unwrap_or_default().to_string();
            let value = sample["value"].as_f64().unwrap_or(f64::NAN);
            (name, sample["labels"].clone(), value)
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels` (0 when there is none).
pub fn sample(samples: &[(String, Value, f64)], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l[*k] == *v))
        .map(|(_, _, v)| v)
        .sum()
}
