//! The MCP tools' arguments: the types each tool parses its arguments into, and from which
//! its input schema is derived (`tools`), so what a client is told and what the server takes
//! cannot part. The cells are the protocol's own [`CellSpec`].

use cellvisor::cell::CellSpec;
use cellvisor::Language;
use schemars::JsonSchema;
use serde::Deserialize;

/// The `eval` tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EvalArgs {
    /// Cells to run in order, at least one.
    pub cells: Vec<CellSpec>,
    /// Directory the cells run in, e.g. the project's (default: the server's own); helpers
    /// like read() resolve paths against it.
    #[serde(default)]
    pub cwd: Option<std::path::PathBuf>,
    /// Your name for this call (1-128 printable ASCII characters, no spaces). Retrying with
    /// the same id and cells returns the first run's result instead of running the cells again.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// The `reset` tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResetArgs {
    /// The runtime to reset; omit to reset all of them.
    #[serde(default)]
    pub language: Option<Language>,
}

/// The `wait` tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitArgs {
    /// The id from the eval result that said the cell is still running.
    pub cell_id: u64,
    /// How long to watch before returning the output so far (default 10000).
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// Cap on the returned output, in tokens (head and tail are kept).
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// The `terminate` tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TerminateArgs {
    /// The id from the eval result that said the cell is still running.
    pub cell_id: u64,
}

/// The `checkpoint` and `restore` tools' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckpointArgs {
    /// The checkpoint's name.
    pub name: String,
    /// Only this language; every language with state (or with the checkpoint) when absent.
    #[serde(default)]
    pub language: Option<Language>,
}

/// The `names` tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NamesArgs {
    /// The language whose names are listed.
    pub language: Language,
}

/// The tools without arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArgs {}
