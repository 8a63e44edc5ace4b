//! Messages exchanged between the supervisor and a worker.
//!
//! Everything here is encoded with bincode, which cannot carry self-describing values such as
//! `serde_json::Value`; JSON payloads (display bundles) therefore travel as strings.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Bumped whenever a message changes shape; both sides refuse a peer with another version.
pub const PROTOCOL_VERSION: u32 = 11;

/// What a worker measured of itself when a cell ended, sent in its `Done`: the supervisor's
/// per-cell usage and its descriptor check come from here instead of its own `/proc` reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneUsage {
    /// CPU time of the worker's process tree (every member, and the children they waited
    /// for), in clock ticks; a cell's CPU is the difference from the previous `Done`.
    pub cpu_ticks: u64,
    /// Resident memory of the tree's live members, in bytes.
    pub rss_bytes: u64,
    /// Descriptors open in the process that runs the cells (Python's interpreter, or the
    /// engine's worker itself); 0 when they could not be counted.
    pub descriptors_open: u64,
    /// That process's soft `RLIMIT_NOFILE`; 0 when unknown or unlimited (nothing to check).
    pub descriptors_limit: u64,
}

/// A cell language, and therefore a kind of worker. Serialized by its short name
/// (`py`, `js`, `lua`) in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Language {
    /// CPython, run by the Python worker's interpreter process.
    #[serde(rename = "py", alias = "python")]
    Python,
    /// QuickJS, embedded in the worker.
    #[serde(rename = "js", alias = "javascript")]
    JavaScript,
    /// Lua 5.4, embedded in the worker.
    #[serde(rename = "lua")]
    Lua,
}

impl Language {
    /// Every language, in the order hosts list them.
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
    Hello {
        /// The sender's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION), refused if it differs.
        version: u32,
    },
    /// Run one cell. The worker answers with any number of `Output`/`Display` and one `Done`.
    Execute(ExecuteCell),
    /// Stop the running cell if it is `cell_id`; the cell then ends `Interrupted`.
    Interrupt {
        /// The cell to stop; an interrupt for a cell that already ended is ignored.
        cell_id: u64,
    },
    /// Liveness probe, answered by the worker even while a cell runs.
    Ping {
        /// Echoed in the `Pong`, so a late answer is not taken for a fresh one.
        seq: u64,
    },
    /// The host's answer to a `ToolCall`: the result as JSON, or an error message.
    ToolResult {
        /// The `call_id` of the `ToolCall` this answers.
        call_id: u64,
        /// The tool's result as JSON text, or why it failed.
        outcome: Result<String, String>,
    },
    /// Exit cleanly; the supervisor escalates to signals after its grace period.
    Shutdown,
}

/// One cell for a worker to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteCell {
    /// The cell's id in its session; every frame about the cell carries it.
    pub cell_id: u64,
    /// The source code, as the host sent it.
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
    /// The caller's environment, as far as it differs from what the worker's cells saw so
    /// far: a value to set, or `None` to remove the variable, applied before the cell runs
    /// (Python's `os.environ`, JavaScript's `process.env`, Lua's `os.getenv`).
    pub env_changes: Vec<(String, Option<String>)>,
    /// What to do: run `code` (every host cell), or save, load or list the namespace.
    pub task: crate::state::StateTask,
}

/// A host tool as a cell sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The name cells call it by (`tool.<name>`).
    pub name: String,
    /// What the tool does, shown to the cell's author by the helpers.
    pub description: String,
    /// The tool's JSON Schema for its arguments, as JSON text.
    pub input_schema_json: String,
}

/// Which stream an output chunk was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputStream {
    /// The cell's standard output.
    Stdout,
    /// The cell's standard error.
    Stderr,
}

/// Worker -> supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// First frame on every connection.
    Hello {
        /// The worker's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION), refused if it differs.
        version: u32,
        /// The worker's process id, for signals and process-tree accounting.
        pid: u32,
        /// The language it runs, checked against the one the supervisor started.
        language: Language,
        /// Engine and version, e.g. `QuickJS 2024-01-13` or `Python 3.11.7`.
        engine: String,
    },
    /// A chunk of a cell's output, in the order it was produced.
    Output {
        /// The cell that wrote it.
        cell_id: u64,
        /// Which stream it was written to.
        stream: OutputStream,
        /// The raw bytes: output need not be valid UTF-8.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A rich display: a MIME bundle as a JSON object (`{"text/plain": "...", ...}`).
    Display {
        /// The cell that displayed it.
        cell_id: u64,
        /// The bundle as JSON text (bincode cannot carry arbitrary JSON values).
        bundle_json: String,
    },
    /// The cell is over; all of its output was sent before this frame.
    Done {
        /// The cell that ended.
        cell_id: u64,
        /// How it ended.
        outcome: CellOutcome,
        /// How many processes the cell started were ended with it (a cancelled cell's: see
        /// the worker's `warden`); 0 for a cell that ended by itself.
        processes_ended: u32,
        /// How many processes of the cell the worker saw: those under it at the cell's end
        /// (the dead not yet reaped included) or ended with it, and its orphans the worker
        /// reaped while it ran. A process that started and was reaped between two looks
        /// (`subprocess.run(["true"])`) is not seen.
        processes_seen: u32,
        /// The worker's tree and descriptors as the cell left them, read by the worker so
        /// that the supervisor reads no `/proc` per cell.
        usage: DoneUsage,
    },
    /// The cell hands control back to its host (`yield_control()`) and goes on: the host
    /// answers its request with the output sent before this frame, and collects the rest
    /// later.
    Yield {
        /// The cell that goes on in the background.
        cell_id: u64,
    },
    /// Answer to `Ping`.
    Pong {
        /// The `seq` of the `Ping` this answers.
        seq: u64,
    },
    /// The running cell calls a host tool; answered by `ToolResult` with the same `call_id`.
    ToolCall {
        /// The cell that calls.
        cell_id: u64,
        /// Chosen by the worker, unique among its open calls, echoed by `ToolResult`.
        call_id: u64,
        /// The tool's name.
        name: String,
        /// The arguments as JSON text.
        args_json: String,
    },
    /// The worker cannot go on (its interpreter died, say); it exits after sending this.
    Fatal {
        /// What went wrong, for the supervisor's log and the cell's result.
        message: String,
    },
    /// The answer to a state task (see [`StateTask`](crate::state::StateTask)), sent once,
    /// before the task's `Done`.
    State {
        /// The task's cell id.
        cell_id: u64,
        /// What became of it.
        report: crate::state::StateReport,
    },
    /// Something the next cell's result should tell (a startup module that failed), sent
    /// before any cell's frames.
    Notice {
        /// The text to show.
        message: String,
    },
}

/// How a cell ended, as the worker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellOutcome {
    /// The cell ran to its end.
    Completed,
    /// The cell raised; the traceback was sent as output, `summary` is its last line.
    Failed {
        /// The exception's last line, e.g. `ZeroDivisionError: division by zero`.
        summary: String,
    },
    /// The cell was stopped by an `Interrupt`.
    Interrupted,
    /// The cell raised because the engine's own heap limit was reached (QuickJS's memory
    /// limit, Lua's): a failure like `Failed`, told apart so hosts get a typed
    /// out-of-memory verdict with the figures instead of an error text to parse.
    OutOfMemory {
        /// The error's last line, as `Failed` would carry it.
        summary: String,
        /// The heap limit the engine ran with, in bytes.
        limit_bytes: u64,
        /// What the heap held when the allocation failed, in bytes.
        used_bytes: u64,
    },
}

impl CellOutcome {
    /// The one-line summary of a cell that raised (`Failed` or `OutOfMemory`).
    pub fn failure_summary(&self) -> Option<&str> {
        match self {
            CellOutcome::Failed { summary } | CellOutcome::OutOfMemory { summary, .. } => {
                Some(summary)
            }
            CellOutcome::Completed | CellOutcome::Interrupted => None,
        }
    }
}
