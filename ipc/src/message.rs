//! Messages exchanged between the supervisor and a worker.
//!
//! Everything here is encoded with bincode, which cannot carry self-describing values such as
//! `serde_json::Value`; JSON payloads (display bundles) therefore travel as strings.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Bumped whenever a message changes shape; both sides refuse a peer with another version.
pub const PROTOCOL_VERSION: u32 = 4;

/// A cell language, and therefore a kind of worker. Serialized by its short name
/// (`py`, `js`, `lua`) in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Language {
    #[serde(rename = "py", alias = "python")]
    Python,
    #[serde(rename = "js", alias = "javascript")]
    JavaScript,
    #[serde(rename = "lua")]
    Lua,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::Python, Language::JavaScript, Language::Lua];

    /// The short name used on the command line, in requests and as the worker subcommand.
    pub fn short_name(self) -> &'static str {
        match self {
            Language::Python => "py",
            Language::JavaScript => "js",
            Language::Lua => "lua",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// The error for a language name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown language `{0}`: expected one of py, js, lua")]
pub struct UnknownLanguage(pub String);

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "py" | "python" => Ok(Language::Python),
            "js" | "javascript" => Ok(Language::JavaScript),
            "lua" => Ok(Language::Lua),
            other => Err(UnknownLanguage(other.to_string())),
        }
    }
}

/// Supervisor -> worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToWorker {
    /// First frame on every connection.
    Hello { version: u32 },
    /// Run one cell. The worker answers with any number of `Output`/`Display` and one `Done`.
    Execute(ExecuteCell),
    /// Stop the running cell if it is `cell_id`; the cell then ends `Interrupted`.
    Interrupt { cell_id: u64 },
    /// Liveness probe, answered from the worker's I/O thread even while a cell runs.
    Ping { seq: u64 },
    /// The host's answer to a `ToolCall`: the result as JSON, or an error message.
    ToolResult {
        call_id: u64,
        outcome: Result<String, String>,
    },
    /// Exit cleanly; the supervisor escalates to signals after its grace period.
    Shutdown,
}

/// One cell for a worker to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteCell {
    pub cell_id: u64,
    pub code: String,
    /// Directory the cell runs in; `None` keeps the worker's current one.
    pub cwd: Option<String>,
    /// Tools the host offers to this cell (`tool.<name>(args)`).
    pub tools: Vec<ToolInfo>,
    /// Variables of the session the cell belongs to (its name, its store directory), sent
    /// with a worker's first cell: a worker started ahead of demand (a prewarmed Python
    /// worker) learns them here, so its cells see what a worker started for the session
    /// would have. Empty on later cells.
    pub session_env: Vec<(String, String)>,
}

/// A host tool as a cell sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    /// The tool's JSON Schema for its arguments, as JSON text.
    pub input_schema_json: String,
}

/// Which stream an output chunk was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Worker -> supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// First frame on every connection.
    Hello {
        version: u32,
        pid: u32,
        language: Language,
        /// Engine and version, e.g. `QuickJS 2024-01-13` or `Python 3.11.7`.
        engine: String,
    },
    /// The worker has taken the cell and is about to run it. A cell whose worker dies
    /// before this frame never ran, so it can safely run on the replacement.
    Started { cell_id: u64 },
    /// A chunk of a cell's output, in the order it was produced.
    Output {
        cell_id: u64,
        stream: OutputStream,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A rich display: a MIME bundle as a JSON object (`{"text/plain": "...", ...}`).
    Display { cell_id: u64, bundle_json: String },
    /// The cell is over; all of its output was sent before this frame.
    Done { cell_id: u64, outcome: CellOutcome },
    /// The cell hands control back to its host (`yield_control()`) and goes on: the host
    /// answers its request with the output sent before this frame, and collects the rest
    /// later.
    Yield { cell_id: u64 },
    /// Answer to `Ping`.
    Pong { seq: u64 },
    /// The running cell calls a host tool; answered by `ToolResult` with the same `call_id`.
    ToolCall {
        cell_id: u64,
        call_id: u64,
        name: String,
        args_json: String,
    },
    /// The worker cannot go on (its interpreter died, say); it exits after sending this.
    Fatal { message: String },
    /// Something the next cell's result should tell (a startup module that failed), sent
    /// before any cell's frames.
    Notice { message: String },
}

/// How a cell ended, as the worker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellOutcome {
    Completed,
    /// The cell raised; the traceback was sent as output, `summary` is its last line.
    Failed {
        summary: String,
    },
    /// The cell was stopped by an `Interrupt`.
    Interrupted,
}
