//! Sessions a connection owns (`own`): closed by the daemon when that connection closes,
//! however it ends (its client exits, is killed with SIGKILL, or loses the socket), as a
//! Jupyter kernel process's own session should end with the process rather than wait for
//! idle eviction.

use super::Daemon;
use cellvisor::daemon::protocol::{code, OwnResult, RpcError, SessionParams};
use cellvisor::SessionRef;
use std::sync::Mutex;

/// Sessions one connection may own at once: an owner names its own few.
pub(super) const MAX_OWNED: usize = 64;

/// The sessions a connection owns (internal names), each with what `close` is to reach.
#[derive(Default)]
pub(super) struct Owned(Mutex<Vec<SessionParams>>);

impl Owned {
    /// Owns `session` (again: once); refused past [`MAX_OWNED`].
    fn add(&self, session: SessionParams) -> Result<usize, RpcError> {
        let mut owned = super::lock(&self.0);
        let same = |o: &SessionParams| {
            o.session == session.session && o.cwd == session.cwd && o.language == session.language
        };
        if let Some(kept) = owned.iter_mut().find(|o| same(o)) {
            kept.keep_workspace = session.keep_workspace;
            return Ok(owned.len());
        }
        if owned.len() >= MAX_OWNED {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "invalid params: this connection owns {MAX_OWNED} sessions already, the \
                     most one connection may own; close one, or own it from another connection"
                ),
            ));
        }
        owned.push(session);
        Ok(owned.len())
    }

    /// The connection closed: closes what it owned, as `close` does.
    pub(super) async fn close_all(&self, daemon: &Daemon) {
        let owned = std::mem::take(&mut *super::lock(&self.0));
        for p in owned {
            let session = SessionRef::new(&p.session, p.cwd.as_deref());
            let options = cellvisor::CloseOptions {
                keep_workspace: p.keep_workspace,
            };
            match daemon.cv.close_with(session, p.language, options).await {
                Ok(n) => tracing::info!(session = %p.session, closed = n,
                    "closed a session its owner's connection left"),
                Err(err) => tracing::warn!(session = %p.session,
                    "cannot close a session its owner's connection left: {err}"),
            }
        }
    }
}

/// `own`: ties the session (its worker in `language`, else all of them) to this connection;
/// answers how many sessions the connection owns.
pub(super) fn own(owned: &Owned, session: SessionParams) -> Result<OwnResult, RpcError> {
    Ok(OwnResult {
        owned: owned.add(session)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(name: &str) -> SessionParams {
        SessionParams {
            session: name.into(),
            cwd: None,
            language: None,
            keep_workspace: false,
        }
    }

    #[test]
    fn a_session_is_owned_once_and_the_owned_are_bounded() {
        let owned = Owned::default();
        assert_eq!(owned.add(session("a")).ok(), Some(1));
        assert_eq!(owned.add(session("a")).ok(), Some(1), "owned again: once");
        for i in 1..MAX_OWNED {
            assert!(owned.add(session(&format!("s{i}"))).is_ok());
        }
        let refused = owned.add(session("over")).expect_err("over the bound");
        assert!(
            refused.message.contains("owns 64 sessions"),
            "{}",
            refused.message
        );
    }
}
