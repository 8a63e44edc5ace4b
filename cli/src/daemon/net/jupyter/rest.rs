//! The Kernel Gateway's REST routes: the API version, the kernelspecs of the enabled
//! languages, the tenant's kernels, starting, interrupting, restarting and deleting one.

use super::super::super::{tenancy, Daemon};
use super::super::Principal;
use super::Gateway;
use crate::jupyter::mapping;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cellvisor::{Language, SessionRef};
use serde_json::{json, Value};
use std::sync::Arc;

/// The Kernel Gateway version these routes follow (what `GET /api` reports).
const API_VERSION: &str = "3.0.1";

/// A JSON error body as Jupyter's servers write them (`message`, and `reason`).
/// Refuses a client whose tenant lacks the `cells` right: a kernel runs cells, and so does
/// whatever reaches one (its channels, interrupt, restart, delete).
pub(super) fn refused_without_cells(principal: &Principal, what: &str) -> Option<Response> {
    tenancy::may_run_cells(&principal.tenant, what)
        .err()
        .map(|refused| error(StatusCode::FORBIDDEN, refused.message))
}

pub(super) fn error(status: StatusCode, message: String) -> Response {
    let reason = status.canonical_reason().unwrap_or("error");
    (status, Json(json!({"message": message, "reason": reason}))).into_response()
}

pub(super) fn unknown_kernel(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no kernel {id} for this client: a kernel is one of its tenant's sessions (GET \
             /api/kernels lists them) or one it started with POST /api/kernels"
        ),
    )
}

/// The languages the configuration in force enables, in the kernelspecs' order.
fn enabled(daemon: &Daemon) -> Vec<Language> {
    let config = daemon.cv.config_now();
    Language::ALL
        .into_iter()
        .filter(|l| match l {
            Language::Python => config.python.enabled,
            Language::JavaScript => config.js.enabled,
            Language::Lua => config.lua.enabled,
        })
        .collect()
}

/// `GET /api`.
pub(super) async fn api() -> Json<Value> {
    Json(json!({"version": API_VERSION, "cellvisor": env!("CARGO_PKG_VERSION")}))
}

/// `GET /api/kernelspecs`: one per enabled language; `python3` the default.
pub(super) async fn kernelspecs(State(daemon): State<Arc<Daemon>>) -> Json<Value> {
    let languages = enabled(&daemon);
    let specs: serde_json::Map<String, Value> = languages
        .iter()
        .map(|l| {
            (
                mapping::kernel_name(*l).to_string(),
                mapping::kernelspec(*l),
            )
        })
        .collect();
    let default = languages
        .first()
        .map_or("python3", |l| mapping::kernel_name(*l));
    Json(json!({"default": default, "kernelspecs": specs}))
}

/// `GET /api/kernelspecs/<name>`.
pub(super) async fn kernelspec(
    State(daemon): State<Arc<Daemon>>,
    Path(name): Path<String>,
) -> Response {
    match language_named(&daemon, &name) {
        Ok(language) => Json(mapping::kernelspec(language)).into_response(),
        Err(refused) => error(StatusCode::NOT_FOUND, refused),
    }
}

/// The enabled language a kernelspec name stands for, or the message naming the ones there
/// are.
fn language_named(daemon: &Daemon, name: &str) -> Result<Language, String> {
    let languages = enabled(daemon);
    match mapping::language_of(name).filter(|l| languages.contains(l)) {
        Some(language) => Ok(language),
        None => {
            let names: Vec<&str> = languages.iter().map(|l| mapping::kernel_name(*l)).collect();
            Err(format!(
                "no such kernel {name:?}: the kernelspecs are {}",
                names.join(", ")
            ))
        }
    }
}

/// `GET /api/kernels`: the kernels the tenant's clients started or joined, and every other
/// live session of the tenant under its stable id.
pub(super) async fn list(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
) -> Json<Value> {
    let held = gateway.held(&principal);
    let mut models: Vec<Value> = held.iter().map(|k| k.model()).collect();
    for (session, language) in gateway.live(&daemon, &principal).await {
        let id = mapping::kernel_id(&principal.tenant.name, &session, language);
        if !held.iter().any(|k| k.id == id) {
            models.push(json!({
                "id": id, "name": mapping::kernel_name(language),
                "last_activity": crate::jupyter::message::now(),
                "execution_state": "idle", "connections": 0,
                "cellvisor": {"session": session, "language": language.short_name()},
            }));
        }
    }
    Json(Value::Array(models))
}

/// `POST /api/kernels` (`{"name": "python3"}`; no body: the default): a kernel on a new
/// session of the tenant, its worker started before the answer (201).
pub(super) async fn start(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Response {
    let request: Value = match body.is_empty() {
        true => json!({}),
        false => match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "the body must be a JSON object such as {\"name\": \"python3\"}".into(),
                )
            }
        },
    };
    let name = request["name"].as_str().unwrap_or("python3");
    match start_kernel(&daemon, &gateway, &principal, name, "POST /api/kernels").await {
        Ok(kernel) => (
            StatusCode::CREATED,
            [("location", format!("/api/kernels/{}", kernel.id))],
            Json(kernel.model()),
        )
            .into_response(),
        Err(refused) => refused,
    }
}

/// A kernel of kernelspec `name` on a new session of the caller's tenant, its worker
/// started (for `POST /api/kernels` and a new `/api/sessions` session).
pub(super) async fn start_kernel(
    daemon: &Arc<Daemon>,
    gateway: &Gateway,
    principal: &Principal,
    name: &str,
    what: &str,
) -> Result<Arc<super::Kernel>, Response> {
    let language =
        language_named(daemon, name).map_err(|refused| error(StatusCode::NOT_FOUND, refused))?;
    let tenant = &principal.tenant;
    if let Err(refused) = tenancy::may_run_cells(tenant, what) {
        return Err(error(StatusCode::FORBIDDEN, refused.message));
    }
    let session = format!("kernel-{}", uuid::Uuid::new_v4());
    // The kernel's place counts against the tenant's quotas until its worker has started.
    let params = Some(json!({"session": tenant.internal(&session)}));
    let ask = tenancy::asked_session(&params);
    let _reservation = tenancy::within_quotas(daemon, tenant, ask, || 0)
        .await
        .map_err(|refused| error(StatusCode::TOO_MANY_REQUESTS, refused.message))?;
    let id = mapping::kernel_id(&tenant.name, &session, language);
    let kernel = gateway.hold(daemon, principal, id.clone(), session, language);
    // The worker starts now, as a kernel's process does: the first cell finds it ready.
    if let Err(why) = kernel.prepare(daemon).await {
        gateway.remove(&id);
        kernel.end();
        return Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the kernel did not start: {why}"),
        ));
    }
    Ok(kernel)
}

/// Shuts a kernel down: its WebSockets end and its session's worker for its language closes.
pub(super) async fn shut_down(
    daemon: &Daemon,
    gateway: &Gateway,
    kernel: &super::Kernel,
) -> Result<(), Response> {
    gateway.remove(&kernel.id);
    kernel.end();
    let session = SessionRef::new(&kernel.internal, None);
    daemon
        .cv
        .close(session, Some(kernel.language))
        .await
        .map(|_| ())
        .map_err(|err| error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))
}

/// `GET /api/kernels/<id>`.
pub(super) async fn one(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    match gateway.find(&daemon, &principal, &id).await {
        Some(kernel) => Json(kernel.model()).into_response(),
        None => unknown_kernel(&id),
    }
}

/// `DELETE /api/kernels/<id>`: closes the session's worker of the kernel's language (204).
pub(super) async fn delete(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "DELETE /api/kernels/<id>") {
        return refused;
    }
    let Some(kernel) = gateway.find(&daemon, &principal, &id).await else {
        return unknown_kernel(&id);
    };
    match shut_down(&daemon, &gateway, &kernel).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refused) => refused,
    }
}

/// `POST /api/kernels/<id>/interrupt`: stops the running cell, if any (204 either way).
pub(super) async fn interrupt(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "POST /api/kernels/<id>/interrupt") {
        return refused;
    }
    let Some(kernel) = gateway.find(&daemon, &principal, &id).await else {
        return unknown_kernel(&id);
    };
    kernel.interrupt(&daemon).await;
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /api/kernels/<id>/restart`: a fresh worker for the kernel's language (its state
/// gone, as a restarted kernel's); answers the model.
pub(super) async fn restart(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "POST /api/kernels/<id>/restart") {
        return refused;
    }
    let Some(kernel) = gateway.find(&daemon, &principal, &id).await else {
        return unknown_kernel(&id);
    };
    let session = SessionRef::new(&kernel.internal, None);
    if let Err(err) = daemon.cv.reset(session, Some(kernel.language)).await {
        return error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
    }
    kernel.restarted();
    Json(kernel.model()).into_response()
}
