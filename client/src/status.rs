//! What `status` reports: one row per live worker (session and language).

use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a session is doing, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Starting,
    Idle,
    Busy,
    Failed,
    Stopping,
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    pub session: String,
    pub language: Language,
    pub pid: Option<u32>,
    pub engine: Option<String>,
    pub state: SessionState,
    pub cells_run: u64,
    pub restarts: u32,
    pub idle_ms: u64,
    pub queued: usize,
    /// Resident memory of the worker and its children, when sampled.
    pub rss_bytes: Option<u64>,
    /// CPU use of the worker and its children since the previous status, in percent of a core.
    pub cpu_percent: Option<f32>,
    /// The running cell's id (`wait`, `terminate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_id: Option<u64>,
    /// The running cell went to the background: its request has returned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// A `wait` (or `terminate`) watches the running cell: another `wait` is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub observed: bool,
    /// Why the session is failed, or why its last worker could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The session's sandbox; `None`: not sandboxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::SandboxStatus>,
}

impl fmt::Display for SessionState {
    /// The state as the protocol spells it (`idle`, `busy`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionState::Starting => "starting",
            SessionState::Idle => "idle",
            SessionState::Busy => "busy",
            SessionState::Failed => "failed",
            SessionState::Stopping => "stopping",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_display_as_the_protocol_names_them() {
        for state in [
            SessionState::Starting,
            SessionState::Idle,
            SessionState::Busy,
            SessionState::Failed,
            SessionState::Stopping,
        ] {
            assert_eq!(
                serde_json::json!(state.to_string()),
                serde_json::json!(state)
            );
        }
    }
}
