//! `POST /mcp`: MCP's streamable HTTP transport over the daemon's supervisor, for MCP
//! clients that reach the daemon over the network (DESIGN.md §1).
//!
//! One MCP session is one cellvisor session, `mcp-<MCP session id>`, with the tools of
//! `cellvisor mcp`. The session ends when the client DELETEs it, when it has gone
//! [`SESSION_EXPIRY`] without a request and without a tool call in flight, or at the
//! daemon's shutdown; its cellvisor session is then closed (running cells stopped, workers
//! and snapshots gone: nobody can name that session again).
//!
//! The transport is rmcp's, with a session manager of ours around its in-memory one
//! ([`Sessions`]): it gives each session's handler its name at `initialize`, closes the
//! cellvisor session with the MCP session, and does the expiry (rmcp's own would end a
//! session in the middle of a long cell, which sends nothing while it runs).

use super::{server_info, CellvisorMcp};
use crate::daemon::Principal;
use cellvisor::daemon::protocol::MAX_LINE_BYTES;
use cellvisor::Cellvisor;
use cellvisor_config::schema::CellsConfig;
use cellvisor_os::locking::lock;
use futures::Stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientJsonRpcMessage, ErrorData, GetExtensions,
    InitializeRequestParams, InitializeResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, ServerJsonRpcMessage, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::transport::WorkerTransport;
use rmcp::ServerHandler;
use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The tower service to mount at `/mcp`.
pub type McpHttpService = StreamableHttpService<HttpSession, Sessions>;

/// An MCP session with no request and no tool call in flight for this long ends. Its
/// workers were long since stopped by the idle policy (`sessions.idle-timeout`, with a
/// snapshot); this frees what a client that vanished without a DELETE leaves behind.
pub const SESSION_EXPIRY: Duration = Duration::from_secs(60 * 60);

/// SSE comments this often keep an open response stream (a long cell's, or the client's
/// GET stream) alive through proxies that drop quiet connections.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The `/mcp` service over the daemon's supervisor. `cells` gives the tools' documented
/// timeouts; `shutdown` turning true (or its sender going away) ends every MCP session.
///
/// The listener must check the bearer token before this service sees a request: the
/// service accepts any `Host` and `Origin`. rmcp's default Host check (loopback names
/// only) defends an unauthenticated server on localhost against DNS rebinding, where a web
/// page's requests reach it with the browser's ambient authority; here every request must
/// carry the token, which a browser never adds on its own, and remote clients name the
/// daemon by whatever host name they reach it with.
///
/// Must be called within the daemon's tokio runtime (it spawns the expiry task).
#[cfg(test)]
pub fn streamable_http(
    cv: Arc<Cellvisor>,
    cells: CellsConfig,
    shutdown: watch::Receiver<bool>,
) -> McpHttpService {
    streamable_http_expiring(cv, cells, shutdown, SESSION_EXPIRY).0
}

/// [`streamable_http`] with its sessions, which the listener asks whose each one is.
pub(crate) fn streamable_http_owned(
    cv: Arc<Cellvisor>,
    cells: CellsConfig,
    shutdown: watch::Receiver<bool>,
) -> (McpHttpService, Arc<Sessions>) {
    streamable_http_expiring(cv, cells, shutdown, SESSION_EXPIRY)
}

/// [`streamable_http`] with sessions expiring after `expiry`.
fn streamable_http_expiring(
    cv: Arc<Cellvisor>,
    cells: CellsConfig,
    mut shutdown: watch::Receiver<bool>,
    expiry: Duration,
) -> (McpHttpService, Arc<Sessions>) {
    let mut local = LocalSessionManager::default();
    // The expiry is ours (`Sessions::expired`): a session running a cell never expires.
    local.session_config.keep_alive = None;
    let sessions = Arc::new(Sessions {
        inner: local,
        cv: Arc::clone(&cv),
        live: Mutex::new(HashMap::new()),
    });
    let config = StreamableHttpServerConfig::default()
        // A session lasts across requests: it is what keeps the cells' state.
        .with_legacy_session_mode(true)
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .disable_allowed_hosts()
        .disable_allowed_origins()
        // The Unix socket's and the WebSocket's cap on one message.
        .with_max_request_body_bytes(MAX_LINE_BYTES);
    let cancel = config.cancellation_token.clone();
    let weak = Arc::downgrade(&sessions);
    tokio::spawn(async move {
        tokio::select! {
            _ = expire_sessions(weak, expiry) => {}
            // True, or the daemon gone without saying so: a shutdown either way.
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
        cancel.cancel();
    });
    let tools = Arc::new(super::offered_tools(&cv, &cells));
    let factory_sessions = Arc::clone(&sessions);
    let owned = Arc::clone(&sessions);
    let service = StreamableHttpService::new(
        move || {
            Ok(HttpSession {
                cv: Arc::clone(&cv),
                cells: cells.clone(),
                tools: Arc::clone(&tools),
                sessions: Arc::clone(&factory_sessions),
                bound: OnceLock::new(),
            })
        },
        sessions,
        config,
    );
    (service, owned)
}

/// Ends the sessions that expire, until the service is gone.
async fn expire_sessions(sessions: Weak<Sessions>, expiry: Duration) {
    let mut tick = tokio::time::interval(sweep_interval(expiry));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.expired(Instant::now(), expiry) {
            tracing::info!(session = %session_name(&id), "MCP session expired: no request for {}", humantime::format_duration(expiry));
            if let Err(err) = sessions.close_session(&id).await {
                tracing::warn!(session = %session_name(&id), "cannot end the expired MCP session: {err}");
            }
        }
    }
}

/// How often to look for expired sessions: often enough that one outlives its expiry by a
/// quarter of it at most, and at most once a minute.
fn sweep_interval(expiry: Duration) -> Duration {
    (expiry / 4).clamp(Duration::from_millis(10), Duration::from_secs(60))
}

/// The cellvisor session of an MCP session.
fn session_name(id: &SessionId) -> String {
    format!("mcp-{id}")
}

/// What an MCP session's handler learns at `initialize`: which session it serves, and when
/// that session has ended.
#[derive(Clone)]
struct Binding {
    id: SessionId,
    name: String,
    ended: watch::Receiver<bool>,
}

/// A live MCP session, as the manager keeps it.
struct Live {
    name: String,
    /// The tenant and token that opened it (none outside a network listener).
    owner: Option<Principal>,
    ended: watch::Sender<bool>,
    activity: Activity,
}

/// When a session was last used, and how many of its tool calls are running.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Activity {
    last: Instant,
    busy: usize,
}

impl Activity {
    /// Expired: nothing running and nothing asked for `expiry`.
    fn expired(&self, now: Instant, expiry: Duration) -> bool {
        self.busy == 0 && now.saturating_duration_since(self.last) >= expiry
    }
}

/// The MCP sessions: rmcp's in-memory sessions, each bound to a cellvisor session.
pub struct Sessions {
    inner: LocalSessionManager,
    cv: Arc<Cellvisor>,
    live: Mutex<HashMap<SessionId, Live>>,
}

impl Sessions {
    /// Whether MCP session `id` belongs to another tenant or token than `caller`'s.
    pub(crate) fn owned_by_other(&self, id: &str, caller: &Principal) -> bool {
        lock(&self.live).get(id).is_some_and(|live| {
            live.owner.as_ref().is_some_and(|owner| {
                owner.credential != caller.credential || owner.tenant.name != caller.tenant.name
            })
        })
    }

    /// The live MCP sessions of tenant `tenant`.
    pub(crate) fn count(&self, tenant: &str) -> usize {
        lock(&self.live)
            .values()
            .filter(|live| live.owner.as_ref().is_some_and(|o| o.tenant.name == tenant))
            .count()
    }

    /// Ends the MCP sessions whose token no longer names their tenant (`admitted` says).
    pub(crate) async fn close_revoked(&self, admitted: impl Fn(&Principal) -> bool) {
        let revoked: Vec<SessionId> = lock(&self.live)
            .iter()
            .filter(|(_, live)| live.owner.as_ref().is_some_and(|o| !admitted(o)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in revoked {
            tracing::info!(session = %session_name(&id), "MCP session ended: its token was rotated or removed");
            let _ = self.close_session(&id).await;
        }
    }

    fn touch(&self, id: &SessionId) {
        if let Some(live) = lock(&self.live).get_mut(id) {
            live.activity.last = Instant::now();
        }
    }

    fn expired(&self, now: Instant, expiry: Duration) -> Vec<SessionId> {
        lock(&self.live)
            .iter()
            .filter(|(_, live)| live.activity.expired(now, expiry))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Marks a tool call of `id` running until the guard drops.
    fn busy(self: &Arc<Self>, id: &SessionId) -> Busy {
        if let Some(live) = lock(&self.live).get_mut(id) {
            live.activity.busy += 1;
        }
        Busy {
            sessions: Arc::clone(self),
            id: id.clone(),
        }
    }
}

/// A running tool call; its session does not expire meanwhile.
struct Busy {
    sessions: Arc<Sessions>,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(live) = lock(&self.sessions.live).get_mut(&self.id) {
            live.activity.busy = live.activity.busy.saturating_sub(1);
            live.activity.last = Instant::now();
        }
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    fn create_session(
        &self,
    ) -> impl Future<Output = Result<(SessionId, Self::Transport), Self::Error>> + Send {
        self.inner.create_session()
    }

    /// Binds the session to its cellvisor session: the handler finds the [`Binding`] in the
    /// `initialize` request's extensions.
    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        if let ClientJsonRpcMessage::Request(request) = &mut message {
            let (ended, ended_rx) = watch::channel(false);
            // The listener put the caller's principal in the HTTP request's extensions.
            let owner = request
                .request
                .extensions()
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Principal>())
                .cloned();
            let name = match &owner {
                Some(owner) => owner.tenant.internal(&session_name(id)),
                None => session_name(id),
            };
            tracing::info!(session = %name, "MCP session over HTTP");
            let activity = Activity {
                last: Instant::now(),
                busy: 0,
            };
            lock(&self.live).insert(
                id.clone(),
                Live {
                    name: name.clone(),
                    owner,
                    ended,
                    activity,
                },
            );
            request.request.extensions_mut().insert(Binding {
                id: id.clone(),
                name,
                ended: ended_rx,
            });
        }
        self.inner.initialize_session(id, message).await
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    /// Ends the MCP session, then closes its cellvisor session. Called at a DELETE, at the
    /// expiry, and when the session's service ends (a shutdown, a failed handshake): only
    /// the first call of a session finds it.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.inner.close_session(id).await;
        let live = lock(&self.live).remove(id);
        if let Some(live) = live {
            // A cell still running in the handler stops at once.
            live.ended.send_replace(true);
            match self.cv.close(&live.name, None).await {
                Ok(workers) => {
                    tracing::info!(session = %live.name, workers, "MCP session ended: its session is closed")
                }
                Err(err) => {
                    tracing::debug!(session = %live.name, "MCP session ended; closing its session: {err}")
                }
            }
        }
        closed
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.touch(id);
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.touch(id);
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.touch(id);
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.touch(id);
        self.inner.resume(id, last_event_id)
    }
}

/// The handler of one MCP session: a [`CellvisorMcp`] once `initialize` has named the
/// session. (rmcp makes the handler before the session has an id.)
pub struct HttpSession {
    cv: Arc<Cellvisor>,
    cells: CellsConfig,
    tools: Arc<Vec<Tool>>,
    sessions: Arc<Sessions>,
    bound: OnceLock<(Binding, CellvisorMcp)>,
}

impl ServerHandler for HttpSession {
    fn get_info(&self) -> ServerConfig {
        server_info()
    }

    /// The versions with an `initialize` handshake: the later ones have no sessions, and
    /// without a session the cells would keep no state.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(session_versions())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let Some(binding) = context.extensions.get::<Binding>().cloned() else {
            return Err(ErrorData::invalid_request(NO_SESSION, None));
        };
        let server = CellvisorMcp::new(
            Arc::clone(&self.cv),
            binding.name.clone(),
            self.cells.clone(),
            binding.ended.clone(),
        )
        .in_workspace()
        .on_network();
        if self.bound.set((binding, server)).is_err() {
            return Err(ErrorData::invalid_request(
                "this MCP session is already initialized",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((binding, server)) = self.bound.get() else {
            return Err(ErrorData::invalid_request(NO_SESSION, None));
        };
        if *binding.ended.borrow() {
            return Err(ErrorData::invalid_request(
                "this MCP session has ended: initialize a new one",
                None,
            ));
        }
        let _busy = self.sessions.busy(&binding.id);
        server.call_tool(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.server()?.list_resources(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.server()?
            .list_resource_templates(request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.server()?.read_resource(request, context).await
    }
}

impl HttpSession {
    /// The session's handler, once `initialize` has bound it.
    fn server(&self) -> Result<&CellvisorMcp, ErrorData> {
        match self.bound.get() {
            Some((_, server)) => Ok(server),
            None => Err(ErrorData::invalid_request(NO_SESSION, None)),
        }
    }
}

/// The protocol versions that have sessions (an `initialize` handshake).
fn session_versions() -> Vec<ProtocolVersion> {
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .filter(|version| version.has_initialize())
        .cloned()
        .collect()
}

const NO_SESSION: &str = "the cells' state lives in an MCP session: initialize one first \
                          (protocol 2025-11-25 or earlier, with the Mcp-Session-Id header on \
                          every later request)";

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
