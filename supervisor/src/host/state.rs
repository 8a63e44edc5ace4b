//! State that survives a worker, as hosts ask for it: named checkpoints (`checkpoint`,
//! `restore`, `checkpoints`) and the namespace's user names (`names`).

use super::policy::validate_session_name;
use super::{Cellvisor, RequestError};
use crate::state::{CheckpointInfo, RestoredState, SessionNames};
use cellvisor_ipc::Language;

impl Cellvisor {
    /// Saves the namespace of `session` (in `language`, or in each language it has a live
    /// worker or a snapshot in) as the checkpoint `name`, replacing one of the same name.
    pub async fn checkpoint(
        &self,
        session: &str,
        language: Option<Language>,
        name: &str,
    ) -> Result<Vec<CheckpointInfo>, RequestError> {
        validate_session_name(session)?;
        let _ = (language, name);
        Err(RequestError::State("checkpoints are being built".into()))
    }

    /// Replaces the namespace of `session` (in `language`, or in each language that has the
    /// checkpoint) with what the checkpoint `name` holds; answers each language's ledger.
    pub async fn restore(
        &self,
        session: &str,
        language: Option<Language>,
        name: &str,
    ) -> Result<Vec<RestoredState>, RequestError> {
        validate_session_name(session)?;
        let _ = (language, name);
        Err(RequestError::State("checkpoints are being built".into()))
    }

    /// The checkpoints `session` has, in every language, with their sizes and times.
    pub async fn checkpoints(&self, session: &str) -> Result<Vec<CheckpointInfo>, RequestError> {
        validate_session_name(session)?;
        Err(RequestError::State("checkpoints are being built".into()))
    }

    /// The user names of `session`'s namespace in `language`: type, size estimate and whether
    /// a snapshot would keep each (starting the session's worker, and restoring its
    /// snapshot, if it has none live).
    pub async fn names(
        &self,
        session: &str,
        language: Language,
    ) -> Result<SessionNames, RequestError> {
        validate_session_name(session)?;
        let _ = language;
        Err(RequestError::State("names are being built".into()))
    }
}
