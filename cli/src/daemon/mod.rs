//! `cellvisor serve`: the daemon's listener and connections.
//!
//! Each connection has a reader (this task) and a writer task fed by a bounded channel, and
//! every request runs in a task of its own, so a long `eval` does not hold up `status` and a
//! slow client slows only its own sessions (its events wait for room in its channel).
//!
//! What a connection costs the daemon is bounded whatever its client does: at most
//! `daemon.max-pending-requests` requests in flight (past it the daemon stops reading that
//! connection), at most [`MAX_PENDING_TOOL_CALLS`] tool calls awaiting the client, and a
//! client that reads none of its answers for `daemon.stalled-client-timeout` is dropped.

//!
//! - `listener`: the socket bound in a private directory, and the peer check (other users
//!   and the daemon's own cells are refused).
//! - `lifecycle`: signals, the idle exit, the reload of the configuration.
//! - `connection`: one client's connection: its reader, its writer, its requests in flight,
//!   the tool calls it is asked to answer.
//! - `dispatch`: the methods, one function each.
//! - `owned`: the sessions a connection owns (`own`), closed when it closes.
//! - `held_start`: a quick cell's `cell_started` event, sent in one write with what follows.

mod admission;
mod confined_first;
mod connection;
mod dispatch;
mod files;
mod held_start;
mod lifecycle;
mod listener;
mod net;
mod owned;
mod tenancy;

pub use net::NetworkError;
pub(crate) use net::Principal;

use cellvisor::{Cellvisor, Options};
use cellvisor_os::locking::lock;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub socket: PathBuf,
    pub supervisor: Options,
    /// The config file to re-read on SIGHUP and `config/reload`.
    pub config_path: Option<PathBuf>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("a cellvisor daemon is already listening on {0}; stop it first (`cellvisor stop`)")]
    AlreadyRunning(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Socket activation passed something the daemon cannot listen on.
    #[error("socket activation: {0}")]
    Activation(String),
    #[error(transparent)]
    Startup(#[from] cellvisor::StartupError),
    #[error(transparent)]
    Network(#[from] NetworkError),
}

/// Tool calls one connection's client may leave unanswered; a cell's call past it fails
/// at once with a message saying so.
pub const MAX_PENDING_TOOL_CALLS: usize = 1024;

/// The per-connection bounds from `[daemon]`; a reload applies them to new connections.
#[derive(Debug, Clone, Copy)]
struct ConnectionLimits {
    max_pending_requests: usize,
    stalled_client_timeout: Duration,
}

impl ConnectionLimits {
    fn from_config(config: &cellvisor_config::Config) -> ConnectionLimits {
        ConnectionLimits {
            max_pending_requests: config.daemon.max_pending_requests.max(1),
            stalled_client_timeout: config.daemon.stalled_client_timeout,
        }
    }
}

/// Shared by every connection.
struct Daemon {
    cv: Arc<Cellvisor>,
    config_path: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
    connections: AtomicU64,
    /// The most connections open at once since the last trim after a spike.
    connections_peak: AtomicU64,
    limits: Mutex<ConnectionLimits>,
    /// `daemon.idle-exit` in force (zero: never), which a reload replaces.
    idle_exit: watch::Sender<Duration>,
    /// The network listeners' credentials (`None`: no listener), which a reload re-reads.
    tenants: Mutex<Option<net::Tenants>>,
    /// Bumped whenever `tenants` is replaced: connections then check their credential still
    /// names their tenant, and close if it does not.
    credentials: watch::Sender<u64>,
    /// The `[daemon]` keys the credentials were read from (`token-file`, `tenants-file`).
    credential_keys: Mutex<cellvisor_config::schema::DaemonConfig>,
    /// The daemon's Unix socket, hidden from cells with its other files.
    socket: PathBuf,
    /// The tenants' quotas as requests reserve them.
    admissions: admission::Admissions,
}

impl Daemon {
    /// Names the daemon's secret files to the supervisor, which carves them out of every
    /// confined cell's rules: the token and tenants files and every token file a tenants
    /// file names, the TLS key, the socket and the log. Called at start and whenever the
    /// credentials are read again.
    fn hide_secrets(&self) {
        let keys = lock(&self.credential_keys).clone();
        let mut paths: Vec<PathBuf> = [keys.token_file, keys.tenants_file, keys.tls_key, keys.log]
            .into_iter()
            .flatten()
            .collect();
        paths.push(self.socket.clone());
        if let Some(tenants) = lock(&self.tenants).as_ref() {
            paths.extend(tenants.token_files().iter().cloned());
        }
        self.cv.hide_from_cells(paths);
    }
}

/// Runs the daemon until `shutdown`, SIGTERM or SIGINT (or its idle exit).
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    crate::allocator::map_big_blocks_separately();
    // Refused before anything binds: a plaintext listener beyond loopback, a missing token.
    let network = net::plan(
        &options.supervisor.config.daemon,
        &options.supervisor.config.fleet,
    )?;
    // What `/mcp`'s tools describe (the timeout range of a cell).
    let cells = options.supervisor.config.cells.clone();
    // A socket passed by the service manager (socket activation) is its to remove, not ours.
    let (listener, activated) = match listener::activated()? {
        Some(listener) => (listener, true),
        None => (listener::bind(&options.socket).await?, false),
    };
    let socket_inode = socket_inode(&options.socket).filter(|_| !activated);
    let remove_socket = || {
        if !activated {
            let _ = std::fs::remove_file(&options.socket);
        }
    };
    let idle_exit = options.supervisor.config.daemon.idle_exit;
    let daemon_keys = options.supervisor.config.daemon.clone();
    let limits = ConnectionLimits::from_config(&options.supervisor.config);
    // On the daemon's own actix system the connections and the actors share one thread.
    let started = match Cellvisor::start_on_current_system(options.supervisor.clone()) {
        Some(started) => started,
        None => Cellvisor::start(options.supervisor),
    };
    let cv = match started {
        Ok(cv) => cv,
        Err(err) => {
            // Nothing will listen on it: a client must see no daemon, not a dead socket.
            drop(listener);
            remove_socket();
            return Err(err.into());
        }
    };
    let (shutdown, mut shutdown_rx) = watch::channel(false);
    let daemon = Arc::new(Daemon {
        cv: Arc::new(cv),
        config_path: options.config_path,
        shutdown,
        connections: AtomicU64::new(0),
        connections_peak: AtomicU64::new(0),
        limits: Mutex::new(limits),
        idle_exit: watch::Sender::new(idle_exit),
        tenants: Mutex::new(None),
        credentials: watch::Sender::new(0),
        credential_keys: Mutex::new(daemon_keys),
        socket: options.socket.clone(),
        admissions: admission::Admissions::default(),
    });
    if let Some(mut plan) = network {
        *lock(&daemon.tenants) = Some(std::mem::replace(&mut plan.tenants, net::Tenants::empty()));
        if let Err(err) = net::start(&daemon, plan, cells).await {
            daemon.cv.shutdown().await;
            remove_socket();
            return Err(err.into());
        }
    }
    daemon.hide_secrets();
    tracing::info!(socket = %options.socket.display(), pid = std::process::id(), activated, "cellvisor daemon listening");
    lifecycle::spawn_signal_handlers(&daemon);
    lifecycle::spawn_idle_exit(&daemon);
    lifecycle::apply_memory_caps(&daemon).await;
    lifecycle::spawn_credentials_watch(&daemon);
    let uid = nix::unistd::getuid().as_raw();
    let session_uids = daemon.cv.isolation().range();
    // On the daemon's actix system, connections run on the actors' LocalSet.
    let tasks = connection::Tasks::here();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    match stream.peer_cred() {
                        Ok(cred) if cred.uid() == uid && listener::from_own_worker(cred.pid()) => {
                            tracing::warn!(peer_pid = cred.pid(), "refused a connection from a cell (a process under one of this daemon's workers)");
                            listener::refuse_cell(stream);
                        }
                        Ok(cred) if cred.uid() == uid => {
                            let daemon = Arc::clone(&daemon);
                            tasks.spawn(async move { connection::handle_connection(daemon, stream, tasks).await });
                        }
                        Ok(cred) if session_uids.is_some_and(|r| r.contains(cred.uid())) => {
                            tracing::warn!(peer_uid = cred.uid(), "refused a connection from a cell (a session's uid)");
                            listener::refuse_cell(stream);
                        }
                        Ok(cred) => tracing::warn!(peer_uid = cred.uid(), "refused a connection from another user"),
                        Err(err) => tracing::warn!("refused a connection without credentials: {err}"),
                    }
                }
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown_rx.changed() => break,
        }
    }
    tracing::info!("shutting down: stopping every worker");
    drop(listener);
    daemon.cv.shutdown().await;
    // A daemon started meanwhile may have replaced our socket file; leave its one alone.
    if socket_inode.is_some() && socket_inode == self::socket_inode(&options.socket) {
        let _ = std::fs::remove_file(&options.socket);
    }
    tracing::info!("stopped");
    Ok(())
}

fn socket_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
