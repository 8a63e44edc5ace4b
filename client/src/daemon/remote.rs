//! A daemon reached over its network listener: the `ws://` / `wss://` URL of its `/v1/rpc`
//! WebSocket, the bearer token, the CA to trust, and the optional session binding, and the
//! handshake that turns them into a connection (or an error saying which of them was wrong).

use super::tls;
use super::ClientError;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

/// The WebSocket of a daemon's JSON-RPC, as the client holds it.
pub(super) type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The path the daemon serves its JSON-RPC WebSocket at, used when a URL names none.
pub const RPC_PATH: &str = "/v1/rpc";

/// The upgrade request's header that binds a connection to one session.
pub const SESSION_HEADER: &str = "Cellvisor-Session";

/// How long reaching the daemon (TCP, TLS and the upgrade) may take before it counts as
/// unreachable: a host that drops packets would otherwise hold a command for minutes.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest message either way. The daemon's own cap on a request is 16 MiB; results can
/// be larger (several cells' output and displays), so answers get room beyond it.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// A parsed daemon URL: `ws://HOST[:PORT][/PATH]` or `wss://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonUrl {
    /// `true` for `wss://` (TLS), `false` for `ws://`.
    pub tls: bool,
    /// The host as written (an IPv6 address keeps its brackets).
    pub host: String,
    /// The port: as written, else 443 for `wss`, 80 for `ws`.
    pub port: u16,
    /// The path of the WebSocket: as written, else [`RPC_PATH`].
    pub path: String,
}

impl DaemonUrl {
    /// Parses `url`; the error says what was wrong and what is allowed.
    pub fn parse(url: &str) -> Result<DaemonUrl, ClientError> {
        let bad = |reason: &str| ClientError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("it has no scheme"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "wss" => true,
            "ws" => false,
            _ => return Err(bad(&format!("the scheme `{scheme}` is not ws or wss"))),
        };
        if rest.contains(['?', '#']) {
            return Err(bad("a query or fragment has no meaning here"));
        }
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                "credentials do not go in the URL; the token comes from a token file",
            ));
        }
        let (host, port) = split_host_port(authority).map_err(|reason| bad(&reason))?;
        let port = match port {
            Some(port) => port,
            None if tls => 443,
            None => 80,
        };
        let path = match path {
            "" | "/" => RPC_PATH.to_string(),
            path => path.to_string(),
        };
        Ok(DaemonUrl {
            tls,
            host: host.to_string(),
            port,
            path,
        })
    }

    /// The host without an IPv6 address's brackets, to connect to and to check TLS names by.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl std::fmt::Display for DaemonUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "wss" } else { "ws" };
        write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

/// `host[:port]` (`[v6]:port` for an IPv6 address).
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or("an IPv6 address in brackets lacks its `]`")?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            rest => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("`{rest}` after the address is not `:PORT`")),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("it names no host".into());
    }
    if !host.starts_with('[') && host.contains(':') {
        return Err("an IPv6 address goes in brackets: wss://[::1]:7420".into());
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => Some(port),
            _ => return Err(format!("the port `{port}` is not a number from 1 to 65535")),
        },
    };
    Ok((host, port))
}

/// The bearer token, and where it came from, so a refusal can say which token was wrong.
#[derive(Clone)]
pub struct Token {
    secret: String,
    /// Where it came from (`--token-file /path`, an environment variable, ...).
    pub source: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token {{ source: {:?} }}", self.source)
    }
}

impl Token {
    /// A token given as it is; `source` names where it came from.
    pub fn new(secret: impl Into<String>, source: impl Into<String>) -> Token {
        Token {
            secret: secret.into(),
            source: source.into(),
        }
    }

    /// The token in `path` (surrounding whitespace, such as its final newline, ignored);
    /// `source` names the file for errors (default: its path).
    pub fn from_file(path: &Path, source: Option<&str>) -> Result<Token, ClientError> {
        let source = source.map_or_else(|| path.display().to_string(), str::to_string);
        let bad = |reason: String| ClientError::Token {
            from: source.clone(),
            reason,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        let secret = text.trim();
        if secret.is_empty() {
            return Err(bad(format!("{} is empty", path.display())));
        }
        Ok(Token::new(secret, source))
    }

    fn header(&self) -> Result<http::HeaderValue, ClientError> {
        let mut value =
            http::HeaderValue::from_str(&format!("Bearer {}", self.secret)).map_err(|_| {
                ClientError::Token {
                    from: self.source.clone(),
                    reason: "the token holds characters an HTTP header cannot carry \
                         (control characters or line breaks inside it)"
                        .into(),
                }
            })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// Everything needed to reach a daemon over the network.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The daemon's `/v1/rpc` URL.
    pub url: DaemonUrl,
    /// The bearer token the daemon requires (`None`: none sent, for a daemon that needs none).
    pub token: Option<Token>,
    /// PEM certificates to trust for `wss://` instead of the system's CA bundle (a
    /// self-signed daemon certificate, or a private CA).
    pub ca_file: Option<PathBuf>,
    /// Binds the connection to this session (`Cellvisor-Session`), so a router can place it;
    /// the daemon then refuses requests for any other session.
    pub session: Option<String>,
}

impl Remote {
    /// A target at `url` with nothing else set.
    pub fn new(url: &str) -> Result<Remote, ClientError> {
        Ok(Remote {
            url: DaemonUrl::parse(url)?,
            token: None,
            ca_file: None,
            session: None,
        })
    }

    /// Opens the WebSocket: TCP, TLS for `wss`, the upgrade with the token and the session.
    pub(super) async fn connect(&self) -> Result<WsStream, ClientError> {
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connect_now()).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Unreachable {
                address: self.url.to_string(),
                reason: format!(
                    "no connection within {}s (a firewall, or the wrong port?)",
                    CONNECT_TIMEOUT.as_secs()
                ),
            }),
        }
    }

    async fn connect_now(&self) -> Result<WsStream, ClientError> {
        let mut request =
            self.url
                .to_string()
                .into_client_request()
                .map_err(|e| ClientError::BadUrl {
                    url: self.url.to_string(),
                    reason: e.to_string(),
                })?;
        if let Some(token) = &self.token {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, token.header()?);
        }
        if let Some(session) = &self.session {
            let value = http::HeaderValue::from_str(session).map_err(|_| {
                ClientError::Protocol(format!(
                    "the session name {session:?} cannot go in a header"
                ))
            })?;
            request.headers_mut().insert(SESSION_HEADER, value);
        }
        let connector = if self.url.tls {
            Connector::Rustls(tls::client_config(self.ca_file.as_deref())?)
        } else {
            Connector::Plain
        };
        let socket = TcpStream::connect((self.url.bare_host(), self.url.port))
            .await
            .map_err(|e| ClientError::Unreachable {
                address: format!("{}:{}", self.url.host, self.url.port),
                reason: e.to_string(),
            })?;
        let _ = socket.set_nodelay(true);
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        let (stream, _response) = tokio_tungstenite::client_async_tls_with_config(
            request,
            socket,
            Some(config),
            Some(connector),
        )
        .await
        .map_err(|e| self.handshake_error(e))?;
        Ok(stream)
    }

    /// What a failed handshake means, in the terms of what the caller gave.
    fn handshake_error(&self, error: WsError) -> ClientError {
        let url = self.url.to_string();
        match error {
            WsError::Http(response) => {
                let status = response.status();
                let body = response
                    .body()
                    .as_deref()
                    .map(|b| {
                        String::from_utf8_lossy(&b[..b.len().min(300)])
                            .trim()
                            .to_string()
                    })
                    .unwrap_or_default();
                if status == http::StatusCode::UNAUTHORIZED {
                    ClientError::Unauthorized {
                        url,
                        token: self.token.as_ref().map(|t| t.source.clone()),
                    }
                } else {
                    ClientError::Refused {
                        url,
                        status: status.to_string(),
                        body,
                    }
                }
            }
            WsError::Io(e) if tls::is_tls_error(&e) => ClientError::Tls {
                url,
                reason: tls::describe(&e),
            },
            WsError::Tls(e) => ClientError::Tls {
                url,
                reason: e.to_string(),
            },
            other => {
                let hint = if self.url.tls {
                    ""
                } else {
                    " (if the daemon's listener has TLS, use wss://)"
                };
                ClientError::Handshake {
                    url,
                    reason: format!("{other}{hint}"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> DaemonUrl {
        DaemonUrl::parse(url).unwrap()
    }

    fn error(url: &str) -> String {
        DaemonUrl::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn urls_take_a_host_a_port_and_default_the_path() {
        let url = parse("wss://127.0.0.1:7420");
        assert!(url.tls);
        assert_eq!((url.host.as_str(), url.port), ("127.0.0.1", 7420));
        assert_eq!(url.path, RPC_PATH);
        assert_eq!(url.to_string(), "wss://127.0.0.1:7420/v1/rpc");
        assert_eq!(parse("ws://host/").path, RPC_PATH);
        assert_eq!(
            parse("WS://cells.example:9/prefix/v1/rpc").path,
            "/prefix/v1/rpc"
        );
    }

    #[test]
    fn ports_default_by_scheme_and_ipv6_keeps_its_brackets() {
        assert_eq!(parse("wss://cells.example").port, 443);
        assert_eq!(parse("ws://cells.example").port, 80);
        let v6 = parse("wss://[::1]:7420");
        assert_eq!(
            (v6.host.as_str(), v6.bare_host(), v6.port),
            ("[::1]", "::1", 7420)
        );
        assert_eq!(parse("ws://[::1]").port, 80);
    }

    #[test]
    fn a_bad_scheme_names_the_allowed_ones() {
        let message = error("https://127.0.0.1:7420");
        assert!(message.contains("`https` is not ws or wss"), "{message}");
        assert!(message.contains("wss://HOST:PORT"), "{message}");
        assert!(error("tcp://127.0.0.1:7420").contains("`tcp` is not ws or wss"));
        assert!(error("127.0.0.1:7420").contains("no scheme"));
    }

    #[test]
    fn bad_hosts_and_ports_say_what_is_wrong() {
        assert!(error("wss://:7420").contains("no host"));
        assert!(error("wss://host:0").contains("`0` is not a number from 1 to 65535"));
        assert!(error("wss://host:99999").contains("`99999` is not a number"));
        assert!(error("wss://host:port").contains("`port` is not a number"));
        assert!(error("wss://::1:7420").contains("IPv6 address goes in brackets"));
        assert!(error("wss://[::1:7420").contains("lacks its `]`"));
        assert!(error("wss://[::1]x").contains("is not `:PORT`"));
        assert!(error("wss://user:pw@host:1").contains("token comes from a token file"));
        assert!(error("wss://host:1/v1/rpc?x=1").contains("query or fragment"));
    }

    #[test]
    fn tokens_come_trimmed_from_their_file_and_errors_name_it() {
        let dir = std::env::temp_dir().join(format!("cv-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "  s3cret\n").unwrap();
        let token = Token::from_file(&file, Some("--token-file t")).unwrap();
        assert_eq!(token.secret, "s3cret");
        assert_eq!(token.source, "--token-file t");
        assert_eq!(token.header().unwrap().to_str().unwrap(), "Bearer s3cret");
        assert!(
            !format!("{token:?}").contains("s3cret"),
            "Debug hides the secret"
        );

        std::fs::write(&file, "\n").unwrap();
        let empty = Token::from_file(&file, None).unwrap_err().to_string();
        assert!(empty.contains("is empty") && empty.contains(&file.display().to_string()));
        let missing = Token::from_file(&dir.join("nope"), Some("CELLVISOR_TOKEN_FILE"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("CELLVISOR_TOKEN_FILE") && missing.contains("cannot read"));
        let bad = Token::new("a\u{1}b", "x").header().unwrap_err().to_string();
        assert!(bad.contains("cannot carry"), "{bad}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_refused_token_is_named_and_a_missing_one_said_to_be_missing() {
        let mut remote = Remote::new("wss://127.0.0.1:7420").unwrap();
        let unauthorized = || {
            let response = http::Response::builder()
                .status(401)
                .body(Some(b"token required".to_vec()))
                .unwrap();
            WsError::Http(Box::new(response))
        };
        let missing = remote.handshake_error(unauthorized()).to_string();
        assert!(missing.contains("no token was given"), "{missing}");
        remote.token = Some(Token::new("x", "--token-file /etc/cv/token"));
        let wrong = remote.handshake_error(unauthorized()).to_string();
        assert!(
            wrong.contains("refused the token from --token-file /etc/cv/token"),
            "{wrong}"
        );
        let other = http::Response::builder()
            .status(404)
            .body(Some(b"no such path".to_vec()))
            .unwrap();
        let refused = remote
            .handshake_error(WsError::Http(Box::new(other)))
            .to_string();
        assert!(
            refused.contains("404") && refused.contains("no such path"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_daemon_names_its_address() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let remote = Remote::new(&format!("ws://127.0.0.1:{port}")).unwrap();
        let message = remote.connect().await.unwrap_err().to_string();
        assert!(
            message.contains(&format!(
                "cannot reach the cellvisor daemon at 127.0.0.1:{port}"
            )),
            "{message}"
        );
    }
}
