//! The answers of the methods whose result is a small object of its own, and the params of
//! the daemon's `tool/call` request: typed, so the schema names their fields.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The answer of `interrupt`, `reset` and `close`: how many sessions the command reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionsReached {
    /// Sessions (workers) the command reached; 0 when none matched.
    pub sessions: usize,
}

/// The answer of `own`: how many sessions the calling connection owns now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OwnResult {
    /// Sessions this connection owns, the one just named included.
    pub owned: usize,
}

/// The answer of `shutdown`, sent before the daemon stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShutdownResult {
    /// Always true: the daemon stops after this answer.
    pub stopping: bool,
}

/// The answer of `config/reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReloadResult {
    /// Always true once the file was read and applied.
    pub reloaded: bool,
    /// What changed, one line per setting.
    pub changes: Vec<String>,
}

/// `tool/call` parameters: the daemon asks the client to run one of the tools its `eval`
/// declared; the client answers the request's `id` with the tool's result or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCallParams {
    /// The id of the `eval` whose cell called the tool.
    #[cfg_attr(feature = "schema", schemars(schema_with = "request_id_schema"))]
    pub request_id: Value,
    /// The tool's name, as the `eval` declared it.
    pub name: String,
    /// The arguments the cell passed.
    pub arguments: Value,
}

/// A request's id as the daemon echoes it: a string or a number.
#[cfg(feature = "schema")]
fn request_id_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": ["string", "integer"]})
}
