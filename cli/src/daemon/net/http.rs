//! The routes of a network listener. `/healthz` is open (an orchestrator's probe carries no
//! secret); everything else needs the bearer token.

use super::super::{lock, Daemon};
use super::ws;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use cellvisor::daemon::protocol::MAX_LINE_BYTES;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How long the actors may take to answer a health probe.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The listener's routes over `daemon`.
pub(super) fn router(daemon: Arc<Daemon>) -> Router {
    // Routes added after the token's layer are outside it: only `/healthz`. An unknown
    // path needs the token too, so a stranger learns nothing of the endpoints.
    Router::new()
        .route("/v1/rpc", get(ws::upgrade))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&daemon),
            require_token,
        ))
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(MAX_LINE_BYTES))
        .with_state(daemon)
}

/// 401 unless the request carries the token (`Authorization: Bearer <token>`).
async fn require_token(
    State(daemon): State<Arc<Daemon>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|value| value.as_bytes());
    let admitted = lock(&daemon.token)
        .as_ref()
        .is_some_and(|token| token.admits(presented));
    if admitted {
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

/// 200 while the supervisor's actors answer, else 503 with the reason.
async fn healthz(State(daemon): State<Arc<Daemon>>) -> Response {
    match tokio::time::timeout(HEALTH_TIMEOUT, daemon.cv.status()).await {
        Ok(Ok(_)) => (StatusCode::OK, Json(json!({ "status": "ok" }))).into_response(),
        Ok(Err(err)) => unhealthy(err.to_string()),
        Err(_) => unhealthy(format!(
            "the supervisor did not answer within {}",
            humantime::format_duration(HEALTH_TIMEOUT)
        )),
    }
}

fn unhealthy(reason: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": "unhealthy", "reason": reason })),
    )
        .into_response()
}

async fn not_found(request: Request) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "error": format!(
                "no such endpoint: {} {}; the endpoints are GET /healthz, GET /readyz, \
                 GET /metrics, GET /v1/rpc (WebSocket) and POST /mcp",
                request.method(),
                request.uri().path()
            )
        })),
    )
        .into_response()
}
