//! The host's commands on a session's workers: interrupt, reset, close. A reset or close
//! also forgets the session's background cells, so an id from before it is "not found" at
//! once and never hands out a result of the state that is gone.

use super::policy::validate_session_name;
use super::{lock, Cellvisor, RequestError};
use crate::supervisor::{Control, ControlAction};
use cellvisor_ipc::Language;

impl Cellvisor {
    async fn control(
        &self,
        session: &str,
        language: Option<Language>,
        action: ControlAction,
    ) -> Result<usize, RequestError> {
        validate_session_name(session)?;
        if matches!(action, ControlAction::Reset | ControlAction::Close) {
            self.forget_background(session, language);
        }
        self.supervisor
            .send(Control {
                session: session.to_string(),
                language,
                action,
            })
            .await
            .map_err(|_| RequestError::Stopped)
    }

    /// Forgets the background cells of `session` (in `language`, or all of its languages):
    /// a `wait` or `terminate` on one of them is then refused as unknown.
    pub(super) fn forget_background(&self, session: &str, language: Option<Language>) {
        lock(&self.background)
            .retain(|_, key| key.session != session || language.is_some_and(|l| l != key.language));
    }

    /// Interrupts the running cell of the session (all languages, or one); answers how many
    /// cells were interrupted.
    pub async fn interrupt(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Interrupt)
            .await
    }

    /// Replaces the session's workers with fresh ones; answers how many were reset.
    pub async fn reset(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Reset).await
    }

    /// Closes the session's workers; answers how many were closed.
    pub async fn close(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Result<usize, RequestError> {
        self.control(session, language, ControlAction::Close).await
    }
}
