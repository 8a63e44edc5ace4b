//! The routes of a network listener. `/healthz` and `/readyz` are open (an orchestrator's
//! probes carry no secret, and they tell only up or not); everything else needs the bearer
//! token (or Jupyter's `token` scheme, or `?token=` on the Kernel Gateway API's `/api`).

use super::super::{lock, Daemon};
use super::{files_http, ws};
use crate::mcp::http::Sessions as McpSessions;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use cellvisor::daemon::protocol::MAX_LINE_BYTES;
use cellvisor_config::schema::CellsConfig;
use serde_json::json;
use std::sync::Arc;

/// The listener's routes over `daemon`.
pub(super) fn router(daemon: Arc<Daemon>, cells: CellsConfig) -> Router {
    let (mcp, owners) = crate::mcp::http::streamable_http_owned(
        Arc::clone(&daemon.cv),
        cells,
        daemon.shutdown.subscribe(),
    );
    tokio::spawn(close_revoked_mcp(Arc::clone(&daemon), Arc::clone(&owners)));
    // Routes added after the token's layer are outside it: the probes. An unknown
    // path needs the token too, so a stranger learns nothing of the endpoints.
    Router::new()
        .route_service("/mcp", mcp)
        .route_layer(middleware::from_fn_with_state(
            (Arc::clone(&daemon), owners),
            mcp_owner,
        ))
        .route("/v1/rpc", get(ws::upgrade))
        .route("/v1/sessions/{id}/files", get(files_http::list_root))
        .route(
            "/v1/sessions/{id}/files/{*path}",
            get(files_http::get)
                .put(files_http::put)
                .delete(files_http::delete)
                // Streamed to the file as it arrives, bounded by the workspace's quotas.
                .layer(DefaultBodyLimit::disable()),
        )
        .merge(super::jupyter::routes())
        // The routes that drive the daemon refuse its own cells; probes and metrics only read.
        .route_layer(middleware::from_fn(refuse_cells))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&daemon),
            require_token,
        ))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_LINE_BYTES))
        .with_state(daemon)
}

/// 401 unless the request carries a known token (`Authorization: Bearer <token>`); the
/// request then carries its [`Principal`](super::Principal), the token's tenant.
async fn require_token(
    State(daemon): State<Arc<Daemon>>,
    request: Request,
    next: Next,
) -> Response {
    // Jupyter clients may send the token in the query (`?token=T`), on `/api` only.
    let in_query = (request.headers().get(header::AUTHORIZATION).is_none()
        && request.uri().path().starts_with("/api"))
    .then(|| super::jupyter::query_token(request.uri().query()))
    .flatten()
    .map(|token| format!("Bearer {token}"));
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|value| value.as_bytes())
        .or(in_query.as_ref().map(|t| t.as_bytes()));
    let admitted = lock(&daemon.tenants)
        .as_ref()
        .and_then(|tenants| tenants.admit(presented));
    if let Some(principal) = admitted {
        let slot = request.extensions().get::<super::ConnectionSlot>().cloned();
        if slot.is_some_and(|slot| !slot.authenticate()) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({ "error": "the network listeners hold daemon.max-network-connections \
                                       authenticated connections already; retry later" }),
                ),
            )
                .into_response();
        }
        let mut request = request;
        request.extensions_mut().insert(principal);
        return next.run(request).await;
    }
    let reason = if presented.is_some() {
        "wrong bearer token"
    } else {
        "missing bearer token: send `Authorization: Bearer <token>`, the token of the daemon's \
         daemon.token-file"
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(json!({ "error": reason })),
    )
        .into_response()
}

/// Refuses MCP to a tenant without the `cells` right (its tools run cells), another tenant's
/// or token's `Mcp-Session-Id` (as unknown, so it learns nothing of it), and a new MCP
/// session past the tenant's `max-mcp-sessions` or, since each MCP session is a session of
/// cells, past its `max-sessions` and `max-memory`.
async fn mcp_owner(
    State((daemon, owners)): State<(Arc<Daemon>, Arc<McpSessions>)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(principal) = request.extensions().get::<super::Principal>().cloned() else {
        return next.run(request).await;
    };
    if let Err(error) = super::super::tenancy::may_run_cells(&principal.tenant, "mcp") {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"jsonrpc": "2.0", "id": null, "error": error})),
        )
            .into_response();
    }
    let id = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    match id {
        Some(id) if owners.owned_by_other(id, &principal) => {
            tracing::warn!(tenant = %principal.tenant.name, "refused another client's MCP session id");
            return (
                StatusCode::NOT_FOUND,
                Json(json!({
                    "error": format!(
                        "no MCP session {id} for this client: an MCP session belongs to the \
                         tenant and token that opened it; initialize your own"
                    )
                })),
            )
                .into_response();
        }
        None if request.method() == axum::http::Method::POST => {
            let tenant = &principal.tenant;
            // Held while the MCP session is opened: concurrent opens count each other.
            let admitted = super::super::tenancy::within_quotas(
                &daemon,
                tenant,
                super::super::admission::Ask::McpSession,
                || owners.count(&tenant.name),
            )
            .await;
            return match admitted {
                Ok(_reservation) => next.run(request).await,
                Err(error) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(json!({"jsonrpc": "2.0", "id": null, "error": error})),
                )
                    .into_response(),
            };
        }
        _ => {}
    }
    next.run(request).await
}

/// Ends the MCP sessions of a token that a reload rotated or removed.
async fn close_revoked_mcp(daemon: Arc<Daemon>, owners: Arc<McpSessions>) {
    let mut generation = daemon.credentials.subscribe();
    while generation.changed().await.is_ok() {
        let tenants = lock(&daemon.tenants).clone();
        owners
            .close_revoked(|principal| tenants.as_ref().is_some_and(|t| t.still_admits(principal)))
            .await;
    }
}

/// 403 for a connection one of this daemon's cells opened: a cell that found the token
/// still must not drive the daemon that runs it (the Unix socket's peer check, over TCP).
async fn refuse_cells(request: Request, next: Next) -> Response {
    let slot = request.extensions().get::<super::ConnectionSlot>().cloned();
    let own_cell = match slot {
        Some(slot) => slot.opened_by_own_cell().await,
        None => true,
    };
    if !own_cell {
        return next.run(request).await;
    }
    tracing::warn!(
        "refused {} from a cell (a process under one of this daemon's workers)",
        request.uri().path()
    );
    (
        StatusCode::FORBIDDEN,
        Json(json!({
            "error": "this daemon's own cells may not drive it: connections from a process \
                      under one of its workers are refused"
        })),
    )
        .into_response()
}

/// 200 while the supervisor and its sessions answer, else 503 with the reason.
async fn healthz(State(daemon): State<Arc<Daemon>>) -> Response {
    let health = daemon.cv.health().await;
    let node = daemon.cv.node();
    match health.reason {
        None => (
            StatusCode::OK,
            Json(json!({ "status": "ok", "node": node })),
        )
            .into_response(),
        Some(reason) => unavailable("unhealthy", node, reason),
    }
}

/// 200 while this node takes new sessions; 503 while it drains or is full.
async fn readyz(State(daemon): State<Arc<Daemon>>) -> Response {
    let readiness = daemon.cv.readiness().await;
    let node = daemon.cv.node();
    match readiness.reason {
        None => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "node": node })),
        )
            .into_response(),
        Some(reason) => unavailable("not ready", node, reason),
    }
}

fn unavailable(status: &str, node: &str, reason: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": status, "node": node, "reason": reason })),
    )
        .into_response()
}

/// Every metric as OpenMetrics text.
/// They describe the whole node (every tenant's sessions), so they need the `operate` right.
async fn metrics(
    State(daemon): State<Arc<Daemon>>,
    principal: Option<axum::Extension<super::Principal>>,
) -> Response {
    if let Some(axum::Extension(principal)) = principal {
        if !principal.tenant.may(super::Right::Operate) {
            return (
                StatusCode::FORBIDDEN,
                Json(json!({
                    "error": format!(
                        "tenant {:?} may not read /metrics: it needs the `operate` right (see \
                         daemon.tenants-file)",
                        principal.tenant.name
                    )
                })),
            )
                .into_response();
        }
    }
    match daemon.cv.scrape().await {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, cellvisor::metrics::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        Err(err) => unavailable("unhealthy", daemon.cv.node(), err.to_string()),
    }
}

async fn not_found(request: Request) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "error": format!(
                "no such endpoint: {} {}; the endpoints are GET /healthz, GET /readyz, \
                 GET /metrics, GET /v1/rpc (WebSocket), POST /mcp, GET, PUT, DELETE \
                 /v1/sessions/<id>/files/<path> and the Kernel Gateway API under /api",
                request.method(),
                request.uri().path()
            )
        })),
    )
        .into_response()
}
