//! The Kernel Gateway API on the daemon's network listener: `/api`, `/api/kernelspecs`,
//! `/api/kernels` (and each kernel's interrupt, restart and channels WebSocket) and
//! `/api/sessions`, behind the listener's token and tenants. A kernel is a session and a
//! language of the caller's tenant: a kernel started here gets a session of its own (`kernel-<uuid>`), and every live
//! session of the tenant is listed as a kernel too, with the stable id
//! [`mapping::kernel_id`] gives it, so a person can join a session an agent drives.
//!
//! - `kernel`: one kernel: its iopub broadcast, its shell queue.
//! - `relay`: the cells other hosts run in a kernel's session, shown to its clients.
//! - `rest`: the REST routes of kernels and kernelspecs.
//! - `sessions`: `/api/sessions`, a path's kernel as JupyterLab's services ask for it.
//! - `channels`: the channels WebSocket in the legacy JSON framing.

mod channels;
mod kernel;
mod relay;
mod rest;
mod sessions;

use super::super::Daemon;
use super::Principal;
use crate::jupyter::mapping;
use axum::routing::{get, post};
use axum::{Extension, Router};
use kernel::Kernel;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// The kernels the gateway holds (started here, or joined by a client).
#[derive(Default)]
pub(super) struct Gateway {
    kernels: Mutex<HashMap<String, Arc<Kernel>>>,
    /// `/api/sessions`' sessions, by id (each of a tenant, over one of its kernels).
    sessions: Mutex<HashMap<String, sessions::Session>>,
    /// Tags of the kernels' own requests (0 is every other host's).
    next_origin: AtomicU64,
}

/// The gateway's routes, for the listener's router (behind its token).
pub(super) fn routes() -> Router<Arc<Daemon>> {
    Router::new()
        .route("/api", get(rest::api))
        .route("/api/kernelspecs", get(rest::kernelspecs))
        .route("/api/kernelspecs/{name}", get(rest::kernelspec))
        .route("/api/kernels", get(rest::list).post(rest::start))
        .route("/api/kernels/{id}", get(rest::one).delete(rest::delete))
        .route("/api/kernels/{id}/interrupt", post(rest::interrupt))
        .route("/api/kernels/{id}/restart", post(rest::restart))
        .route("/api/kernels/{id}/channels", get(channels::upgrade))
        .route("/api/sessions", get(sessions::list).post(sessions::create))
        .route(
            "/api/sessions/{id}",
            get(sessions::one)
                .patch(sessions::update)
                .delete(sessions::delete),
        )
        .layer(Extension(Arc::new(Gateway::default())))
}

/// `?token=T` of a request's query, as Jupyter clients send it (the WebSocket's too).
pub(super) fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "token").then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| Some(hex(bytes[i + 1])? * 16 + hex(bytes[i + 2])?))
            .flatten();
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b as u8);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Gateway {
    fn origin(&self) -> u64 {
        1 + self
            .next_origin
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The tenant's kernel `id`: one the gateway holds, else the live session whose id it is
    /// (joined now).
    async fn find(
        &self,
        daemon: &Arc<Daemon>,
        principal: &Principal,
        id: &str,
    ) -> Option<Arc<Kernel>> {
        let tenant = &principal.tenant.name;
        if let Some(kernel) = self.held_kernel(id) {
            return (kernel.tenant == *tenant).then_some(kernel);
        }
        let (session, language) = self
            .live(daemon, principal)
            .await
            .into_iter()
            .find(|(session, language)| mapping::kernel_id(tenant, session, *language) == id)?;
        Some(self.hold(daemon, principal, id.to_string(), session, language))
    }

    /// The kernel `id` of `session` in `language`, held from now on.
    fn hold(
        &self,
        daemon: &Arc<Daemon>,
        principal: &Principal,
        id: String,
        session: String,
        language: cellvisor::Language,
    ) -> Arc<Kernel> {
        let mut kernels = crate::daemon::lock(&self.kernels);
        if let Some(kernel) = kernels.get(&id).filter(|k| !k.is_ended()) {
            return Arc::clone(kernel);
        }
        let internal = principal.tenant.internal(&session);
        let kernel = Kernel::start(
            daemon,
            id.clone(),
            Arc::clone(&principal.tenant),
            session,
            internal,
            language,
            self.origin(),
        );
        kernels.insert(id, Arc::clone(&kernel));
        kernel
    }

    /// The kernel `id` the gateway holds, unless it ended with its session (then it is
    /// forgotten: the id is unknown unless the session runs again).
    fn held_kernel(&self, id: &str) -> Option<Arc<Kernel>> {
        let mut kernels = crate::daemon::lock(&self.kernels);
        let kernel = kernels.get(id)?;
        if kernel.is_ended() {
            kernels.remove(id);
            return None;
        }
        Some(Arc::clone(kernel))
    }

    /// Forgets a kernel (after it was shut down).
    fn remove(&self, id: &str) -> Option<Arc<Kernel>> {
        crate::daemon::lock(&self.kernels).remove(id)
    }

    /// The tenant's kernels the gateway holds (those that ended with their sessions are
    /// forgotten).
    fn held(&self, principal: &Principal) -> Vec<Arc<Kernel>> {
        let mut kernels = crate::daemon::lock(&self.kernels);
        kernels.retain(|_, kernel| !kernel.is_ended());
        kernels
            .values()
            .filter(|k| k.tenant == principal.tenant.name)
            .cloned()
            .collect()
    }

    /// The tenant's live sessions (their client names) and languages.
    async fn live(
        &self,
        daemon: &Daemon,
        principal: &Principal,
    ) -> Vec<(String, cellvisor::Language)> {
        let Ok(rows) = daemon.cv.status().await else {
            return Vec::new();
        };
        rows.into_iter()
            .filter_map(|row| {
                let own = principal.tenant.own(&row.session)?;
                Some((own.to_string(), row.language))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_token_is_read_and_decoded() {
        assert_eq!(query_token(Some("token=abc")), Some("abc".into()));
        assert_eq!(query_token(Some("x=1&token=a%2Bb%3D")), Some("a+b=".into()));
        assert_eq!(query_token(Some("tokens=1")), None);
        assert_eq!(query_token(None), None);
        assert_eq!(query_token(Some("token=50%")), Some("50%".into()));
    }
}
