//! What `status` reports: one row per live worker (session and language); and what
//! `zygotes` reports of the Python zygotes.

use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a session is doing, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// The worker is being started; cells wait.
    Starting,
    /// The worker is up and runs no cell.
    Idle,
    /// A cell is running.
    Busy,
    /// The worker could not be started or died too often; the next cell tries again.
    Failed,
    /// The session is being closed.
    Stopping,
}

/// One row of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionStatus {
    /// The session's name.
    pub session: String,
    /// The directory whose state this row is, under `sessions.key = "session+cwd"` (absent
    /// under the default key, where one session's state serves every directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The language of this row's worker.
    pub language: Language,
    /// The worker's process id, while it has one.
    pub pid: Option<u32>,
    /// The engine and version the worker reported.
    pub engine: Option<String>,
    /// What the worker is doing.
    pub state: SessionState,
    /// Cells run in this session in this language.
    pub cells_run: u64,
    /// How many times the worker was replaced after dying.
    pub restarts: u32,
    /// Time since the last cell ended, which decides idle eviction.
    pub idle_ms: u64,
    /// Cells waiting behind the running one.
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
    /// The node (daemon) holding the session (empty from a daemon that predates nodes).
    #[serde(default)]
    pub node: String,
    /// The uid its workers run as, at the `uid` isolation level (`[isolation]`); absent
    /// when they run as the daemon's user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
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

/// What `status` shows of a zygote.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ZygoteStatus {
    /// The interpreter it runs.
    pub interpreter: std::path::PathBuf,
    /// The virtualenv that interpreter belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_env: Option<std::path::PathBuf>,
    /// `ready`, `starting` (or restarting), `stopped` (a signal stopped it: it is replaced at
    /// the next fork request) or `failed`.
    pub state: &'static str,
    /// Its process, once started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `Python 3.11.7`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Workers it forked.
    pub forks: u64,
    /// Modules of `python.preload` it imported.
    pub preloaded: Vec<String>,
    /// Modules of `python.preload` it could not import, and why.
    pub failed: Vec<FailedPreload>,
    /// Why it could not start, when `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A module the zygote could not preload, and why.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailedPreload {
    /// The module's name, as `python.preload` lists it.
    pub module: String,
    /// The exception its import raised: `ModuleNotFoundError: No module named 'x'`.
    pub error: String,
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
