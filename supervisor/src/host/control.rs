//! The host's commands on a session's workers: interrupt, reset, close. A reset or close
//! also forgets the session's background cells, so an id from before it is "not found" at
//! once and never hands out a result of the state that is gone, and its remembered
//! `request_id`s (a retry of one runs as a new request). Under
//! `sessions.key = "session+cwd"` a command without `cwd` reaches every pair of the name.

use super::{lock, Cellvisor, RequestError, SessionRef};
use crate::supervisor::{Control, ControlAction};
use cellvisor_ipc::Language;

impl Cellvisor {
    async fn control(
        &self,
        session: SessionRef<'_>,
        language: Option<Language>,
        action: ControlAction,
    ) -> Result<usize, RequestError> {
        let mut reached = 0;
        for key in self.resolve_set(session).await? {
            if matches!(action, ControlAction::Reset | ControlAction::Close) {
                self.forget_background(&key, language);
                // Its remembered requests answered for a state that is gone.
                self.requests.forget(&key);
            }
            if action == ControlAction::Close && language.is_none() {
                lock(&self.pairs).forget(&key);
            }
            reached += self
                .supervisor
                .send(Control {
                    session: key,
                    language,
                    action,
                })
                .await
                .map_err(|_| RequestError::Stopped)?;
        }
        Ok(reached)
    }

    /// Forgets the background cells of `session` (in `language`, or all of its languages):
    /// a `wait` or `terminate` on one of them is then refused as unknown.
    pub(super) fn forget_background(&self, session: &str, language: Option<Language>) {
        lock(&self.background)
            .retain(|_, key| key.session != session || language.is_some_and(|l| l != key.language));
    }

    /// Interrupts the running cell of the session (all languages, or one); answers how many
    /// cells were interrupted.
    pub async fn interrupt<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session.into(), language, ControlAction::Interrupt)
            .await
    }

    /// Replaces the session's workers with fresh ones; answers how many were reset.
    pub async fn reset<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session.into(), language, ControlAction::Reset)
            .await
    }

    /// Closes the session's workers; answers how many were closed. Closing the whole
    /// session (no language) also removes its workspace: see [`Cellvisor::close_with`].
    pub async fn close<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.close_with(session, language, CloseOptions::default())
            .await
    }

    /// [`Cellvisor::close`] with options: closing the whole session removes its workspace
    /// (its directory of files) unless `keep_workspace` says to keep it for a later session
    /// of the same name. Closing one language keeps it.
    pub async fn close_with<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
        options: CloseOptions,
    ) -> Result<usize, RequestError> {
        let session = session.into();
        let closed = self
            .control(session, language, ControlAction::Close)
            .await?;
        if language.is_none() && !options.keep_workspace && !self.keyed_by_cwd() {
            let workspace = self.workspace(&super::policy::validate_session_name(session.name)?);
            let removed = tokio::task::spawn_blocking(move || workspace.remove()).await;
            if let Ok(Err(err)) = removed {
                return Err(RequestError::Workspace(format!(
                    "session {} closed, but its workspace could not be removed: {err}",
                    session.name
                )));
            }
        }
        Ok(closed)
    }
}

/// How [`Cellvisor::close_with`] closes a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloseOptions {
    /// Keep the session's workspace (its files) for a later session of the same name.
    pub keep_workspace: bool,
}
