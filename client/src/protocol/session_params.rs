//! The parameters of the methods that name a session (`interrupt`, `reset`, `close`,
//! `checkpoint`, `restore`, `checkpoints`, `names`, `wait`, `terminate`): each takes the
//! session and, under `sessions.key = "session+cwd"`, an optional `cwd` naming the pair.

use super::Events;
use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};

/// `interrupt`, `reset`, `close` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    /// The session addressed.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// Only this language's worker; all of the session's when absent.
    #[serde(default)]
    pub language: Option<Language>,
    /// `close` only: keep the session's workspace (its files) instead of removing it with
    /// the session (docs/workspaces.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_workspace: bool,
}

/// `checkpoint` and `restore` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    /// The session addressed.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// Only this language; every language with state (or with the checkpoint) when absent.
    #[serde(default)]
    pub language: Option<Language>,
    /// The checkpoint's name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot.
    pub name: String,
}

/// `checkpoints` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointsParams {
    /// The session addressed.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
}

/// `names` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NamesParams {
    /// The session addressed.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// The language whose namespace is listed.
    pub language: Language,
}

/// `wait` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// The session the cell runs in.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// The cell's id, from its `running` result.
    pub cell_id: u64,
    /// How long to watch before answering with the output so far (default 10 s).
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// Cap on the returned output, in tokens.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Which `eval/event` notifications the wait sends while it watches.
    #[serde(default, skip_serializing_if = "Events::is_all")]
    pub events: Events,
}

/// `terminate` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TerminateParams {
    /// The session the cell runs in.
    pub session: String,
    /// Under `sessions.key = "session+cwd"`, the directory of the pair addressed (see
    /// docs/protocol.md); ignored under the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// The cell's id, from its `running` result.
    pub cell_id: u64,
}
