//! `/api/sessions`, as JupyterLab's services use it: a session ties a path (a notebook, a
//! console) to a kernel of the caller's tenant. Creating one with a kernel name starts a
//! kernel as `POST /api/kernels` does (or takes the kernel it names by id); deleting one
//! shuts its kernel down, as jupyter_server does. Another tenant's session is `404`, as an
//! unknown one.

use super::super::super::Daemon;
use super::super::Principal;
use super::rest::{error, refused_without_cells, shut_down, start_kernel, unknown_kernel};
use super::{Gateway, Kernel};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use std::sync::Arc;

/// One session: its path, name and type as the client gave them, and its kernel's id.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Session {
    pub(super) id: String,
    tenant: String,
    path: String,
    name: String,
    kind: String,
    kernel: String,
}

/// What a `POST` or `PATCH` body asks for, read leniently (every field optional).
#[derive(Debug, Default, PartialEq)]
struct Asked {
    path: Option<String>,
    name: Option<String>,
    kind: Option<String>,
    kernel_id: Option<String>,
    kernel_name: Option<String>,
}

impl Asked {
    /// Reads a JSON object body; the message says what was wrong.
    fn read(body: &[u8]) -> Result<Asked, String> {
        let value: Value = match body.is_empty() {
            true => json!({}),
            false => serde_json::from_slice(body).map_err(|e| e.to_string())?,
        };
        let Value::Object(object) = value else {
            return Err("the body must be a JSON object".into());
        };
        let text = |v: Option<&Value>, key: &str| -> Result<Option<String>, String> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("{key} must be a string")),
            }
        };
        let kernel = match object.get("kernel") {
            None | Some(Value::Null) => json!({}),
            Some(k @ Value::Object(_)) => k.clone(),
            Some(_) => {
                return Err("kernel must be an object such as {\"name\": \"python3\"}".into())
            }
        };
        // Older clients name the path under `notebook`.
        let path = match object.get("path") {
            Some(path) => text(Some(path), "path")?,
            None => text(
                object.get("notebook").and_then(|n| n.get("path")),
                "notebook.path",
            )?,
        };
        Ok(Asked {
            path,
            name: text(object.get("name"), "name")?,
            kind: text(object.get("type"), "type")?,
            kernel_id: text(kernel.get("id"), "kernel.id")?,
            kernel_name: text(kernel.get("name"), "kernel.name")?,
        })
    }
}

fn bad_body(why: String) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!(
            "{why}: a session is {{\"path\": \"notebook.ipynb\", \"name\": ..., \"type\": \
             \"notebook\", \"kernel\": {{\"name\": \"python3\"}} or {{\"id\": <a kernel id>}}}}"
        ),
    )
}

fn unknown_session(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no session {id} for this client: GET /api/sessions lists its sessions"),
    )
}

impl Session {
    /// The session's model, with its kernel's (as jupyter_server writes it, `notebook`
    /// included for older clients).
    fn model(&self, kernel: &Kernel) -> Value {
        json!({
            "id": self.id, "path": self.path, "name": self.name, "type": self.kind,
            "kernel": kernel.model(),
            "notebook": {"path": self.path, "name": self.name},
        })
    }
}

impl Gateway {
    /// The tenant's session `id` and its kernel; a session whose kernel is gone is
    /// forgotten (as jupyter_server culls a session whose kernel died).
    async fn session(
        &self,
        daemon: &Arc<Daemon>,
        principal: &Principal,
        id: &str,
    ) -> Option<(Session, Arc<Kernel>)> {
        let session = crate::daemon::lock(&self.sessions)
            .get(id)
            .filter(|s| s.tenant == principal.tenant.name)
            .cloned()?;
        match self.find(daemon, principal, &session.kernel).await {
            Some(kernel) => Some((session, kernel)),
            None => {
                crate::daemon::lock(&self.sessions).remove(id);
                None
            }
        }
    }

    /// The kernel a session asks for: the tenant's kernel by id, else a new one of the
    /// kernelspec named (`python3` when none).
    async fn kernel_for(
        &self,
        daemon: &Arc<Daemon>,
        principal: &Principal,
        asked: &Asked,
        what: &str,
    ) -> Result<Arc<Kernel>, Response> {
        match &asked.kernel_id {
            Some(id) => self
                .find(daemon, principal, id)
                .await
                .ok_or_else(|| unknown_kernel(id)),
            None => {
                let name = asked.kernel_name.as_deref().unwrap_or("python3");
                start_kernel(daemon, self, principal, name, what).await
            }
        }
    }
}

/// `GET /api/sessions`: the tenant's sessions whose kernels live.
pub(super) async fn list(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
) -> Json<Value> {
    let ids: Vec<String> = crate::daemon::lock(&gateway.sessions)
        .values()
        .filter(|s| s.tenant == principal.tenant.name)
        .map(|s| s.id.clone())
        .collect();
    let mut models = Vec::new();
    for id in ids {
        if let Some((session, kernel)) = gateway.session(&daemon, &principal, &id).await {
            models.push(session.model(&kernel));
        }
    }
    Json(Value::Array(models))
}

/// `POST /api/sessions`: the session of a path (the one there is, if the tenant has one
/// for it), with a new kernel or the one named by id (201).
pub(super) async fn create(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "POST /api/sessions") {
        return refused;
    }
    let asked = match Asked::read(&body) {
        Ok(asked) => asked,
        Err(why) => return bad_body(why),
    };
    let Some(path) = asked.path.clone() else {
        return bad_body("the session has no path".into());
    };
    let existing = crate::daemon::lock(&gateway.sessions)
        .values()
        .find(|s| s.tenant == principal.tenant.name && s.path == path)
        .map(|s| s.id.clone());
    if let Some(id) = existing {
        if let Some((session, kernel)) = gateway.session(&daemon, &principal, &id).await {
            return created(&session, &kernel);
        }
    }
    let kernel = match gateway
        .kernel_for(&daemon, &principal, &asked, "POST /api/sessions")
        .await
    {
        Ok(kernel) => kernel,
        Err(refused) => return refused,
    };
    let session = Session {
        id: uuid::Uuid::new_v4().to_string(),
        tenant: principal.tenant.name.clone(),
        name: asked.name.unwrap_or_default(),
        kind: asked.kind.unwrap_or_else(|| "notebook".into()),
        path,
        kernel: kernel.id.clone(),
    };
    crate::daemon::lock(&gateway.sessions).insert(session.id.clone(), session.clone());
    created(&session, &kernel)
}

fn created(session: &Session, kernel: &Kernel) -> Response {
    (
        StatusCode::CREATED,
        [("location", format!("/api/sessions/{}", session.id))],
        Json(session.model(kernel)),
    )
        .into_response()
}

/// `GET /api/sessions/<id>`.
pub(super) async fn one(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    match gateway.session(&daemon, &principal, &id).await {
        Some((session, kernel)) => Json(session.model(&kernel)).into_response(),
        None => unknown_session(&id),
    }
}

/// `PATCH /api/sessions/<id>`: a new path, name or type, or another kernel (by id, or a new
/// one by name: the one it had is shut down, as jupyter_server does).
pub(super) async fn update(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "PATCH /api/sessions/<id>") {
        return refused;
    }
    let asked = match Asked::read(&body) {
        Ok(asked) => asked,
        Err(why) => return bad_body(why),
    };
    let Some((mut session, mut kernel)) = gateway.session(&daemon, &principal, &id).await else {
        return unknown_session(&id);
    };
    let before = Arc::clone(&kernel);
    if asked.kernel_id.is_some() || asked.kernel_name.is_some() {
        kernel = match gateway
            .kernel_for(&daemon, &principal, &asked, "PATCH /api/sessions/<id>")
            .await
        {
            Ok(kernel) => kernel,
            Err(refused) => return refused,
        };
    }
    session.path = asked.path.unwrap_or(session.path);
    session.name = asked.name.unwrap_or(session.name);
    session.kind = asked.kind.unwrap_or(session.kind);
    session.kernel = kernel.id.clone();
    crate::daemon::lock(&gateway.sessions).insert(id, session.clone());
    if before.id != kernel.id {
        if let Err(refused) = shut_down(&daemon, &gateway, &before).await {
            return refused;
        }
    }
    Json(session.model(&kernel)).into_response()
}

/// `DELETE /api/sessions/<id>`: the session and its kernel end (204).
pub(super) async fn delete(
    State(daemon): State<Arc<Daemon>>,
    Extension(gateway): Extension<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = refused_without_cells(&principal, "DELETE /api/sessions/<id>") {
        return refused;
    }
    let Some((_, kernel)) = gateway.session(&daemon, &principal, &id).await else {
        return unknown_session(&id);
    };
    crate::daemon::lock(&gateway.sessions).remove(&id);
    match shut_down(&daemon, &gateway, &kernel).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refused) => refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_read_leniently_and_a_wrong_one_is_named() {
        let asked = Asked::read(
            br#"{"path": "a.ipynb", "name": "a", "type": "notebook", "kernel": {"name": "lua"}}"#,
        )
        .unwrap();
        assert_eq!(
            asked,
            Asked {
                path: Some("a.ipynb".into()),
                name: Some("a".into()),
                kind: Some("notebook".into()),
                kernel_id: None,
                kernel_name: Some("lua".into()),
            }
        );
        let old =
            Asked::read(br#"{"notebook": {"path": "b.ipynb"}, "kernel": {"id": "k"}}"#).unwrap();
        assert_eq!(
            (old.path.as_deref(), old.kernel_id.as_deref()),
            (Some("b.ipynb"), Some("k"))
        );
        assert_eq!(Asked::read(b"").unwrap(), Asked::default());
        assert!(Asked::read(b"[1]").unwrap_err().contains("JSON object"));
        assert!(Asked::read(br#"{"path": 3}"#)
            .unwrap_err()
            .contains("path must be a string"));
        assert!(Asked::read(br#"{"kernel": "python3"}"#)
            .unwrap_err()
            .contains("kernel must be an object"));
        assert!(Asked::read(b"{nope").is_err());
    }
}
