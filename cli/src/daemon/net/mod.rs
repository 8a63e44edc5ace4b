//! The daemon on the network: `[daemon] listen` listeners beside the Unix socket, each an
//! HTTP/1.1 server (hyper, axum) over TCP or TLS (rustls), every request but `/healthz`
//! behind the bearer token of `daemon.token-file`.
//!
//! - `peer`: tells connections from this daemon's own cells, which `/v1/rpc` and `/mcp` refuse.
//! - `tls`: the certificate, the key and the optional client CA (mutual TLS).
//! - `token`: the bearer token, compared in constant time, replaced on reload.
//! - `http`: the routes: `/healthz`, `/readyz`, `/metrics`, `/v1/rpc`, `/mcp`.
//! - `files_http`: `/v1/sessions/<id>/files/<path>`: workspace files, streamed.
//! - `ws`: `/v1/rpc`, the Unix socket's JSON-RPC over a WebSocket, one message per frame.
//! - `jupyter`: the Kernel Gateway API (`/api/kernelspecs`, `/api/kernels`, the channels).
//! - `agent`: HAProxy's agent check (`fleet.agent-listen`): `ready up` or `drain`.
//! - `strangers`: the places of connections that have not presented the token yet.

mod agent;
mod files_http;
mod http;
mod jupyter;
mod peer;
mod strangers;
mod tenants;
mod tls;
mod token;
mod ws;

pub(crate) use tenants::{Principal, Quotas, Right, Tenant, Tenants, SEPARATOR};
pub(crate) use token::Token;

use super::{lock, Daemon};
use cellvisor_config::schema::{DaemonConfig, FleetConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// Why the network listeners cannot start; each names the key to change.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A `daemon.listen` or `fleet.agent-listen` entry that is not an address.
    #[error("{0}")]
    Address(String),
    /// An agent check for a node no router can reach.
    #[error(
        "fleet.agent-listen is set but daemon.listen is not: HAProxy's agent check is for a node \
         it routes to over the network; set daemon.listen too, or leave fleet.agent-listen empty"
    )]
    AgentWithoutListen,
    /// Plaintext on an address other machines reach.
    #[error(
        "refusing to listen on {0} without TLS: it is not a loopback address, so tokens and \
         cells would cross the network in the clear; set daemon.tls-cert and daemon.tls-key, or \
         daemon.insecure-plaintext = true to allow it"
    )]
    Plaintext(SocketAddr),
    /// Listeners without a token.
    #[error(
        "daemon.listen is set but neither daemon.token-file nor daemon.tenants-file is: every \
         network request needs a bearer token; write one (e.g. `head -c 32 /dev/urandom | base64 > token`) and set \
         daemon.token-file to its path"
    )]
    NoToken,
    /// The token file cannot be used.
    #[error("daemon.token-file {}: {reason}", path.display())]
    Token {
        /// The token file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tenants file cannot be used.
    #[error("daemon.tenants-file {}: {reason}", path.display())]
    Tenants {
        /// The tenants file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Only one of the certificate and the key.
    #[error("daemon.tls-cert and daemon.tls-key go together: set both, or neither for plaintext")]
    TlsHalf,
    /// A client CA without TLS.
    #[error("daemon.client-ca needs TLS: set daemon.tls-cert and daemon.tls-key too")]
    ClientCaWithoutTls,
    /// A certificate, key or CA file that cannot be used.
    #[error("{}: {reason}", path.display())]
    Tls {
        /// The PEM file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration itself.
    #[error("cannot set up TLS: {0}")]
    TlsSetup(String),
    /// The address cannot be bound.
    #[error("cannot listen on tcp://{address}: {source}")]
    Bind {
        /// The address of the `daemon.listen` entry.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What `[daemon]` asks of the network, checked (and its files read) before anything binds.
pub(super) struct ListenPlan {
    addresses: Vec<SocketAddr>,
    /// `fleet.agent-listen`: HAProxy's agent check.
    agent: Vec<SocketAddr>,
    /// `daemon.max-network-connections`, shared by every listener.
    max_connections: usize,
    /// What strangers may hold (`daemon.max-unauthenticated-connections`, ...).
    limits: StrangerLimits,
    tls: Option<TlsAcceptor>,
    /// The credentials the listeners start with.
    pub(super) tenants: Tenants,
}

/// The limits on connections that have not presented the token yet.
#[derive(Debug, Clone, Copy)]
struct StrangerLimits {
    cap: usize,
    per_address: usize,
    /// The time to present the token (and the longest wait for a request's headers).
    timeout: Duration,
    /// hyper's read buffer: the longest request head.
    max_header_bytes: usize,
}

/// The plan for `[daemon]`'s listeners; `None` when it sets none.
pub(super) fn plan(
    config: &DaemonConfig,
    fleet: &FleetConfig,
) -> Result<Option<ListenPlan>, NetworkError> {
    let parse = |key: &'static str, entries: &[String]| {
        entries
            .iter()
            .map(|entry| {
                cellvisor_config::keys::parse_listen(entry)
                    .map_err(|why| NetworkError::Address(format!("{key}: {why}")))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let agent = parse("fleet.agent-listen", &fleet.agent_listen)?;
    if config.listen.is_empty() {
        return match agent.is_empty() {
            true => Ok(None),
            false => Err(NetworkError::AgentWithoutListen),
        };
    }
    let addresses = parse("daemon.listen", &config.listen)?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            Some(tls::server_config(cert, key, config.client_ca.as_deref())?)
        }
        (None, None) if config.client_ca.is_some() => return Err(NetworkError::ClientCaWithoutTls),
        (None, None) => None,
        _ => return Err(NetworkError::TlsHalf),
    };
    if let Some(address) = plaintext_refused(&addresses, tls.is_some(), config.insecure_plaintext) {
        return Err(NetworkError::Plaintext(address));
    }
    let tenants = credentials(config)?;
    Ok(Some(ListenPlan {
        addresses,
        agent,
        max_connections: config.max_network_connections.max(1),
        limits: StrangerLimits {
            cap: config.max_unauthenticated_connections.max(1),
            per_address: config.max_connections_per_address.max(1),
            timeout: config.unauthenticated_timeout,
            // hyper's minimum is 8 KiB.
            max_header_bytes: usize::try_from(config.max_header_bytes.as_u64())
                .unwrap_or(usize::MAX)
                .max(8192),
        },
        tls: tls.map(TlsAcceptor::from),
        tenants,
    }))
}

/// The credentials `[daemon]` names: `tenants-file`'s tenants, else `token-file`'s token as
/// the default tenant.
pub(super) fn credentials(config: &DaemonConfig) -> Result<Tenants, NetworkError> {
    if let Some(path) = config.tenants_file.as_deref() {
        return Tenants::load(path);
    }
    let token_file = config.token_file.as_deref().ok_or(NetworkError::NoToken)?;
    Ok(Tenants::single(&Token::load(token_file)?))
}

/// The first address that would carry plaintext beyond this machine, unless TLS is on or
/// the operator allowed it.
fn plaintext_refused(addresses: &[SocketAddr], tls: bool, allowed: bool) -> Option<SocketAddr> {
    if tls || allowed {
        return None;
    }
    addresses.iter().copied().find(|a| !a.ip().is_loopback())
}

/// A listener on `address`, or the error naming it.
async fn bind(address: &SocketAddr) -> Result<TcpListener, NetworkError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| NetworkError::Bind {
            address: *address,
            source,
        })
}

/// Binds every listener of `plan` and serves them until the daemon shuts down; answers the
/// bound addresses (a port 0 becomes the one the system gave).
pub(super) async fn start(
    daemon: &Arc<Daemon>,
    plan: ListenPlan,
    cells: cellvisor_config::schema::CellsConfig,
) -> Result<Vec<SocketAddr>, NetworkError> {
    let mut listeners = Vec::new();
    for address in &plan.addresses {
        listeners.push(bind(address).await?);
    }
    let router = http::router(Arc::clone(daemon), cells);
    let slots = Arc::new(tokio::sync::Semaphore::new(plan.max_connections));
    let strangers = strangers::Strangers::new(plan.limits.cap, plan.limits.per_address);
    let mut bound = Vec::new();
    for listener in listeners {
        let address = listener.local_addr().map_err(|source| NetworkError::Bind {
            address: plan.addresses[bound.len()],
            source,
        })?;
        let scheme = if plan.tls.is_some() { "https" } else { "http" };
        tracing::info!("listening on {scheme}://{address}");
        bound.push(address);
        tokio::spawn(accept_loop(
            Arc::clone(daemon),
            listener,
            router.clone(),
            plan.tls.clone(),
            Gate {
                slots: Arc::clone(&slots),
                strangers: Arc::clone(&strangers),
                limits: plan.limits,
            },
        ));
    }
    agent::start(daemon, &plan.agent).await?;
    Ok(bound)
}

/// Where a listener's connections are placed: the authenticated ones' `slots`
/// (`daemon.max-network-connections`) and the strangers' places.
#[derive(Clone)]
struct Gate {
    slots: Arc<tokio::sync::Semaphore>,
    strangers: Arc<strangers::Strangers>,
    limits: StrangerLimits,
}

/// Accepts connections until the daemon shuts down, each served in a task of its own that
/// holds a stranger's place until it presents the token, then one of the `slots`.
async fn accept_loop(
    daemon: Arc<Daemon>,
    listener: TcpListener,
    router: axum::Router,
    tls: Option<TlsAcceptor>,
    gate: Gate,
) {
    let mut shutdown = daemon.shutdown.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(stranger) = gate.strangers.admit(peer.ip()) else {
                        tracing::debug!(%peer, "refused a connection: its address holds daemon.max-connections-per-address unauthenticated connections already");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (router, tls) = (router.clone(), tls.clone());
                    let pushed_out = stranger.pushed_out();
                    let slot = ConnectionSlot {
                        place: Arc::new(Mutex::new(Place::Stranger(stranger))),
                        slots: Arc::clone(&gate.slots),
                        session_uids: daemon.cv.isolation().range(),
                        ends: stream.local_addr().ok().map(|local| (local, peer)),
                        own_cell: Arc::default(),
                    };
                    tokio::spawn(serve_tcp(stream, router, tls, slot, gate.limits, pushed_out));
                }
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
}

/// A TCP connection's place under `daemon.max-network-connections`, held by its HTTP
/// connection and, once it is upgraded, by its WebSocket (each request carries it); and
/// whether one of this daemon's cells opened it, looked up once, when a route that drives
/// the daemon is first asked for.
#[derive(Clone)]
pub(super) struct ConnectionSlot {
    place: Arc<Mutex<Place>>,
    slots: Arc<tokio::sync::Semaphore>,
    /// The connection's local and peer addresses.
    ends: Option<(SocketAddr, SocketAddr)>,
    own_cell: Arc<tokio::sync::OnceCell<bool>>,
    /// The uids leased to sessions (`isolation.level = "uid"`): a connection opened by one
    /// is a cell's, wherever its process sits.
    session_uids: Option<cellvisor_config::UidRange>,
}

/// What a connection holds: a stranger's place until it presents the token, then one of the
/// authenticated ones'. Each is held for what its drop gives back.
enum Place {
    Stranger(#[allow(dead_code)] strangers::Stranger),
    Authenticated(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
}

impl ConnectionSlot {
    /// Moves the connection, which just presented the token, to the authenticated ones;
    /// `false` when `daemon.max-network-connections` are held already.
    pub(super) fn authenticate(&self) -> bool {
        let mut place = lock(&self.place);
        if matches!(*place, Place::Authenticated(_)) {
            return true;
        }
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => {
                *place = Place::Authenticated(permit);
                true
            }
            Err(_) => false,
        }
    }

    fn is_authenticated(&self) -> bool {
        matches!(*lock(&self.place), Place::Authenticated(_))
    }

    /// Whether a process under this daemon's workers opened the connection. The lookup
    /// reads `/proc` (milliseconds with many sessions), so it runs off the daemon's thread,
    /// once per connection, and only for the routes that drive the daemon.
    pub(super) async fn opened_by_own_cell(&self) -> bool {
        let Some((local, peer)) = self.ends else {
            return true;
        };
        let session_uids = self.session_uids;
        *self
            .own_cell
            .get_or_init(|| async move {
                tokio::task::spawn_blocking(move || peer::from_own_cell(local, peer, session_uids))
                    .await
                    .unwrap_or(true)
            })
            .await
    }
}

/// One TCP connection: its TLS handshake, then HTTP/1.1 with upgrades. Until it presents
/// the token it has `limits.timeout` in all, and is closed when a newer stranger takes its
/// place.
async fn serve_tcp(
    stream: TcpStream,
    router: axum::Router,
    tls: Option<TlsAcceptor>,
    slot: ConnectionSlot,
    limits: StrangerLimits,
    pushed_out: Arc<tokio::sync::Notify>,
) {
    let watched = slot.clone();
    let serve = async move {
        match tls {
            None => serve_http(stream, router, slot, limits).await,
            Some(acceptor) => match acceptor.accept(stream).await {
                Ok(stream) => serve_http(stream, router, slot, limits).await,
                Err(err) => tracing::debug!("TLS handshake failed: {err}"),
            },
        }
    };
    tokio::pin!(serve);
    let unauthenticated_for = tokio::time::sleep(limits.timeout);
    tokio::pin!(unauthenticated_for);
    let why = tokio::select! {
        () = &mut serve => return,
        () = &mut unauthenticated_for => "it sent no token within daemon.unauthenticated-timeout",
        () = pushed_out.notified() => "a newer unauthenticated connection took its place",
    };
    if watched.is_authenticated() {
        serve.await;
    } else {
        tracing::debug!("closed an unauthenticated connection: {why}");
    }
}

async fn serve_http<S>(
    stream: S,
    router: axum::Router,
    slot: ConnectionSlot,
    limits: StrangerLimits,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt;
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(slot.clone());
        router.clone().oneshot(request)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.timeout)
        .max_buf_size(limits.max_header_bytes)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(err) = connection.await {
        tracing::debug!("HTTP connection ended: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_is_refused_beyond_loopback_unless_tls_or_allowed() {
        let loopback: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        let v6: SocketAddr = "[::1]:7420".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7420".parse().unwrap();
        assert_eq!(plaintext_refused(&[loopback, v6], false, false), None);
        assert_eq!(plaintext_refused(&[loopback, any], false, false), Some(any));
        assert_eq!(plaintext_refused(&[any], true, false), None);
        assert_eq!(plaintext_refused(&[any], false, true), None);
    }

    #[test]
    fn a_plan_names_what_is_missing() {
        let mut config = DaemonConfig::default();
        let mut fleet = FleetConfig::default();
        let plan = |config: &DaemonConfig| plan(config, &FleetConfig::default());
        assert!(plan(&config).unwrap().is_none());
        fleet.agent_listen = vec!["tcp://127.0.0.1:0".into()];
        let err = super::plan(&config, &fleet).err().unwrap().to_string();
        assert!(
            err.contains("fleet.agent-listen") && err.contains("daemon.listen"),
            "{err}"
        );
        fleet.agent_listen = vec!["7421".into()];
        config.listen = vec!["tcp://127.0.0.1:0".into()];
        let err = super::plan(&config, &fleet).err().unwrap().to_string();
        assert!(err.starts_with("fleet.agent-listen: "), "{err}");
        config.listen = vec!["tcp://127.0.0.1:0".into()];
        let err = plan(&config).err().unwrap().to_string();
        assert!(err.contains("daemon.token-file"), "{err}");
        config.listen = vec!["tcp://0.0.0.0:0".into()];
        let err = plan(&config).err().unwrap().to_string();
        assert!(
            err.contains("daemon.tls-cert") && err.contains("insecure-plaintext"),
            "{err}"
        );
        config.tls_cert = Some("/nonexistent/cert.pem".into());
        let err = plan(&config).err().unwrap().to_string();
        assert!(err.contains("daemon.tls-key"), "{err}");
        config.tls_key = Some("/nonexistent/key.pem".into());
        let err = plan(&config).err().unwrap().to_string();
        assert!(err.contains("/nonexistent/cert.pem"), "{err}");
        config.listen = vec!["127.0.0.1:80".into()];
        let err = plan(&config).err().unwrap().to_string();
        assert!(
            err.contains("tcp://<ip>:<port>") && err.starts_with("daemon.listen: "),
            "{err}"
        );
    }
}
