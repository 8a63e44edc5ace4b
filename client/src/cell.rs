//! What hosts send and get back: requests of cells, and per-cell results (DESIGN.md §2).
//! Field names are snake_case in JSON everywhere (CLI `--json`, the daemon, MCP).

use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One cell as a host writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CellSpec {
    /// The language whose worker runs the cell.
    pub language: Language,
    /// The source, run as one unit in the session's worker for `language`.
    pub code: String,
    /// A label hosts show in the cell's header.
    #[serde(default)]
    pub title: Option<String>,
    /// Seconds; clamped to the configured range.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Restart this language's worker for the session before running the cell.
    #[serde(default)]
    pub reset: bool,
    /// Milliseconds to watch the cell before its request returns with the output so far and
    /// status `running`; the cell goes on in the background (see `wait`). Not a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_time_ms: Option<u64>,
}

impl CellSpec {
    /// A cell of `code` in `language`, with no title, the configured timeout, no reset and
    /// no yield.
    pub fn new(language: Language, code: impl Into<String>) -> CellSpec {
        CellSpec {
            language,
            code: code.into(),
            title: None,
            timeout: None,
            reset: false,
            yield_time_ms: None,
        }
    }
}

/// A request: cells run in order in one session; the first failure skips the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EvalRequest {
    /// The session whose workers (and state) run the cells; created on first use.
    #[serde(default = "default_session")]
    pub session: String,
    /// The directory the cells run in; `None` keeps the workers' current one.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The cells, run in order.
    pub cells: Vec<CellSpec>,
    /// Tools the host offers to the cells (`tool.<name>(args)`); the host answers the calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// The caller's `VIRTUAL_ENV`: the first place the Python interpreter is looked for (then
    /// `<cwd>/.venv`, `<cwd>/venv`, `python.interpreter`, `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_env: Option<PathBuf>,
    /// The caller's environment (its variables by name): the cells see it instead of the
    /// daemon's, as far as the operator's `[env]` rules pass it; a live worker gets the
    /// difference applied before the cell, with a notice naming the changed variables.
    /// `None` leaves the workers' environment as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Run the cells on new workers discarded after the request (like `sessions.mode =
    /// "per-call"`); the session's own workers and state are left alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
    /// Sandbox fields for this request: they may only tighten the operator's `[sandbox]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::SandboxRequest>,
    /// The session must exist already (live on this node, or saved in a snapshot): when it
    /// does not, the request is refused (`SESSION_UNKNOWN`) instead of starting an empty
    /// one, so a host never mistakes a fresh namespace for its old one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resume: bool,
    /// Seconds, for every cell that sets no `timeout` of its own (the gateway tool's
    /// request-level `timeout`); checked and clamped as a cell's is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Restart the first cell's worker before it runs, and before no other cell (the
    /// gateway tool's request-level `reset`): the first cell's own `reset`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// Which `eval/event` notifications the daemon sends while the request runs (hosts
    /// that embed the supervisor pass their own event channel instead).
    #[serde(default, skip_serializing_if = "crate::protocol::Events::is_all")]
    pub events: crate::protocol::Events,
    /// The client's name for this request (1-128 printable ASCII characters): a retry with
    /// the same id is answered with the first run's result instead of running again
    /// ([`crate::once`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl EvalRequest {
    /// Makes the cells what they run as: the request's `timeout` given to each cell without
    /// one, its `reset` to the first cell only. In place: a cell's code is never copied.
    pub fn apply_request_level(&mut self) {
        for cell in &mut self.cells {
            cell.timeout = cell.timeout.or(self.timeout);
        }
        if let Some(first) = self.cells.first_mut() {
            first.reset |= self.reset;
        }
    }
}

impl Default for EvalRequest {
    fn default() -> Self {
        EvalRequest {
            session: default_session(),
            cwd: None,
            cells: Vec::new(),
            tools: Vec::new(),
            virtual_env: None,
            env: None,
            fresh: false,
            sandbox: None,
            resume: false,
            timeout: None,
            reset: false,
            events: crate::protocol::Events::All,
            request_id: None,
        }
    }
}

/// A tool the host declares for a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The name cells call it by (`tool.<name>(args)`).
    pub name: String,
    /// Shown to cells by `tools.tool_search`, so code can find the right tool.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the arguments, shown to cells and used for the TypeScript declarations.
    #[serde(default = "empty_object")]
    pub input_schema: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

/// A cell's call of a host tool, handed to the host; `reply` carries the tool's result or
/// its error message.
#[derive(Debug)]
pub struct ToolCallRequest {
    /// The tool called.
    pub name: String,
    /// The arguments the cell passed, as JSON.
    pub arguments: serde_json::Value,
    /// Where the host sends the result (or an error message) back to the waiting cell.
    pub reply: tokio::sync::oneshot::Sender<Result<serde_json::Value, String>>,
}

/// The session used when a host names none.
pub fn default_session() -> String {
    "default".to_string()
}

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// The cell ran to its end.
    Complete,
    /// The cell raised, or could not be run; its output says why.
    Error,
    /// The cell was stopped: timeout, interrupt or a lost worker.
    Cancelled,
    /// The cell did not run because an earlier cell of its request failed.
    Skipped,
    /// The cell yielded (its `yield_time_ms` passed, or it called `yield_control()`) and goes
    /// on in the background: collect the rest with `wait`.
    Running,
}

impl CellStatus {
    /// The cell went wrong (an error, or it was cancelled): the one rule behind a cell's exit
    /// code, a request's `is_error`, the CLI's exit status and whether a text host prints the
    /// output as an error. A skipped cell did not go wrong; the one before it did.
    pub fn failed(self) -> bool {
        matches!(self, CellStatus::Error | CellStatus::Cancelled)
    }
}

impl std::fmt::Display for CellStatus {
    /// The status as the protocol spells it (`complete`, `error`, ...).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CellStatus::Complete => "complete",
            CellStatus::Error => "error",
            CellStatus::Cancelled => "cancelled",
            CellStatus::Skipped => "skipped",
            CellStatus::Running => "running",
        })
    }
}

/// Whether and how a cell's output was cut down to fit in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Truncation {
    /// Whether `output` is shorter than what the cell wrote.
    pub truncated: bool,
    /// Everything the cell wrote, in bytes, so a host can say how much was cut.
    pub total_bytes: u64,
    /// Everything the cell wrote, in lines.
    pub total_lines: u64,
    /// The whole output, when it did not fit.
    pub artifact_path: Option<PathBuf>,
    /// Why the whole output could not be kept (the artifact directory's cap, a full disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_error: Option<String>,
}

/// How one cell ran, as its session saw it: the part of a [`CellResult`] that does not depend
/// on the cell's place in its request, so a session can report it and the host wrap it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellReport {
    /// How the cell ended.
    pub status: CellStatus,
    /// What the cell wrote (stdout and stderr in order), truncated as `truncation` says.
    pub output: String,
    /// Wall-clock time of the cell in its worker.
    pub duration_ms: f64,
    /// MIME bundles the cell displayed (`{"image/png": ..., "text/plain": ...}`).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Vec<serde_json::Map<String, serde_json::Value>>")
    )]
    pub displays: Vec<serde_json::Value>,
    /// What the prelude helpers did (`{"op": "read", ...}`), for hosts that show progress.
    pub status_events: Vec<serde_json::Value>,
    /// How much of the output was kept, and where the rest went.
    pub truncation: Truncation,
    /// Set when the session was started, restarted or evicted before this cell.
    pub notice: Option<String>,
    /// Set when the session's namespace was restored from a snapshot before this cell: what
    /// came back and from when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::state::StateLedger>,
    /// Set when the cell was cancelled and processes it had started were ended with it
    /// (every one of them is gone before the session's next cell starts): how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_ended: Option<u32>,
    /// What the cell used (absent for a cell that never reached a worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::CellUsage>,
    /// Set when memory ended the cell: which limit, and the figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_memory: Option<crate::usage::OutOfMemory>,
    /// Set when the cell's state was to be saved before its answer (`snapshots.when =
    /// "every-cell"`): whether the save was written, and why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<crate::once::Saved>,
}

impl CellReport {
    /// An error that happened outside user code; `message` is the whole output.
    pub fn error(message: String) -> CellReport {
        let mut message = message;
        if !message.ends_with('\n') {
            message.push('\n');
        }
        CellReport::without_run(CellStatus::Error, message)
    }

    /// A cell that never ran in a worker: `output` is all there is to it.
    fn without_run(status: CellStatus, output: String) -> CellReport {
        CellReport {
            status,
            truncation: Truncation {
                truncated: false,
                total_bytes: output.len() as u64,
                total_lines: output.lines().count() as u64,
                artifact_path: None,
                artifact_error: None,
            },
            output,
            duration_ms: 0.0,
            displays: Vec::new(),
            status_events: Vec::new(),
            notice: None,
            state: None,
            processes_ended: None,
            usage: None,
            out_of_memory: None,
            saved: None,
        }
    }

    /// A cell that could not be run at all (no worker, session failed, ...): an error whose
    /// output is `message`, as the host reports it.
    pub fn refused(index: usize, cell_id: u64, spec: &CellSpec, message: String) -> CellResult {
        CellReport::error(message).into_result(index, cell_id, spec)
    }

    /// The result a host reports for this cell, the `index`-th of its request.
    pub fn into_result(self, index: usize, cell_id: u64, spec: &CellSpec) -> CellResult {
        CellResult {
            index,
            cell_id,
            title: spec.title.clone(),
            language: spec.language,
            exit_code: i32::from(self.status.failed()),
            report: self,
            node: String::new(),
        }
    }
}

/// One cell's result: its session's [`CellReport`] (flattened into the same JSON object)
/// and where it stood in its request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellResult {
    /// The cell's place in its request, from 0.
    pub index: usize,
    /// The cell's id in its session, for `wait` and `terminate` while it runs in the
    /// background.
    #[serde(default)]
    pub cell_id: u64,
    /// The cell's title, as the host sent it.
    pub title: Option<String>,
    /// The language the cell ran in.
    pub language: Language,
    /// 0 for a cell that completed or still runs, 1 otherwise: what a shell would expect.
    pub exit_code: i32,
    /// How the cell ran, as its session reported it.
    #[serde(flatten)]
    pub report: CellReport,
    /// The node (daemon) that ran it: `daemon.node` or its host name (empty from a daemon
    /// that predates nodes).
    #[serde(default)]
    pub node: String,
}

impl CellResult {
    /// The displays a text host should show besides `output`. A cell's trailing value is
    /// printed in its output and also sent as a bundle for hosts that want it rich; a JSON
    /// bundle that only repeats the printed value would show it twice.
    pub fn displays_beyond_output(&self) -> impl Iterator<Item = &serde_json::Value> {
        let printed = self.report.output.strip_suffix('\n').unwrap_or_default();
        self.report.displays.iter().filter(move |bundle| {
            let only_json_and_text = bundle.as_object().is_some_and(|o| {
                o.keys()
                    .all(|k| k == "application/json" || k == "text/plain")
            });
            let repeats = bundle
                .get("text/plain")
                .and_then(|t| t.as_str())
                .is_some_and(|text| !text.is_empty() && printed.ends_with(text));
            !(only_json_and_text && repeats)
        })
    }

    /// A cell that did not run because an earlier one failed.
    pub fn skipped(index: usize, cell_id: u64, spec: &CellSpec) -> CellResult {
        CellReport::without_run(CellStatus::Skipped, String::new())
            .into_result(index, cell_id, spec)
    }

    /// A cell that did not run because an earlier cell of its request went to the background:
    /// it would have queued behind that cell, so it is left to the host to send again.
    pub fn skipped_behind(index: usize, cell_id: u64, spec: &CellSpec, running: u64) -> CellResult {
        let output = format!(
            "skipped: cell {running} of this request is still running in the background; \
             `wait` for it, then send this cell again\n"
        );
        CellReport::without_run(CellStatus::Skipped, output).into_result(index, cell_id, spec)
    }
}

/// The result of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EvalResult {
    /// Whether any cell failed or was cancelled, so hosts need not scan the cells.
    pub is_error: bool,
    /// One result per cell of the request, in order, skipped ones included.
    pub cells: Vec<CellResult>,
    /// The node (daemon) that ran the request (empty from a daemon that predates nodes).
    #[serde(default)]
    pub node: String,
    /// The cell that failed or was cancelled (the later ones were skipped), so a host can
    /// name it without scanning the cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_cell: Option<FailedCell>,
    /// Totals over the cells, as an agent harness's tool details carry them.
    #[serde(default)]
    pub summary: EvalSummary,
    /// True when this is the remembered answer of an earlier run of the request's
    /// `request_id`: nothing ran again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// How many of the first cells are the answers of an earlier run of the request's
    /// `request_id` whose node stopped partway (their effects were already in the session's
    /// committed state, so they were not run again); the cells after them ran in this run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replayed_cells: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl EvalResult {
    /// The result of these cells; `is_error`, `failed_cell` and `summary` are computed from
    /// them so they cannot disagree.
    pub fn from_cells(cells: Vec<CellResult>) -> EvalResult {
        let is_error = cells.iter().any(|c| c.report.status.failed());
        let node = cells.first().map(|c| c.node.clone()).unwrap_or_default();
        let failed_cell = cells
            .iter()
            .find(|c| c.report.status.failed())
            .map(|c| FailedCell {
                index: c.index,
                title: c.title.clone(),
                status: c.report.status,
            });
        let summary = EvalSummary::of(&cells);
        EvalResult {
            is_error,
            cells,
            node,
            failed_cell,
            summary,
            replayed: false,
            replayed_cells: 0,
        }
    }
}

/// The first cell of a request that failed or was cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailedCell {
    /// Its place in the request, from 0.
    pub index: usize,
    /// Its title, as the host sent it.
    pub title: Option<String>,
    /// `error` or `cancelled`.
    pub status: CellStatus,
}

impl FailedCell {
    /// The line a text host ends a failed request with: `cell 2 of 3 ("load") failed with an
    /// error; the cell after it was skipped`.
    pub fn summary_line(&self, cells: &[CellResult]) -> String {
        let total = cells.len();
        let title = match &self.title {
            Some(title) => format!(" ({title:?})"),
            None => String::new(),
        };
        let how = match self.status {
            CellStatus::Cancelled => "was cancelled",
            _ => "failed with an error",
        };
        let skipped = cells
            .iter()
            .filter(|c| c.index > self.index && c.report.status == CellStatus::Skipped)
            .count();
        let after = match skipped {
            0 => String::new(),
            1 => "; the cell after it was skipped".to_string(),
            n => format!("; the {n} cells after it were skipped"),
        };
        format!("cell {} of {total}{title} {how}{after}", self.index + 1)
    }
}

/// Totals over a request's cells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EvalSummary {
    /// The languages the cells ran in, in the order of first use.
    pub languages: Vec<Language>,
    /// Displays that carried JSON (`application/json`).
    pub json_outputs: usize,
    /// Displays that carried an image.
    pub images: usize,
    /// What the helpers reported, over all cells.
    pub status_events: usize,
}

impl EvalSummary {
    fn of(cells: &[CellResult]) -> EvalSummary {
        let mut summary = EvalSummary::default();
        for cell in cells {
            if !summary.languages.contains(&cell.language) {
                summary.languages.push(cell.language);
            }
            for bundle in &cell.report.displays {
                let has = |wanted: &dyn Fn(&str) -> bool| {
                    bundle
                        .as_object()
                        .is_some_and(|bundle| bundle.keys().any(|mime| wanted(mime)))
                };
                summary.json_outputs += usize::from(has(&|mime| mime == "application/json"));
                summary.images += usize::from(has(&|mime| mime.starts_with("image/")));
            }
            summary.status_events += cell.report.status_events.len();
        }
        summary
    }
}

/// Progress a host can show while a request runs (the daemon streams these).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CellEvent {
    /// A cell began to run.
    CellStarted {
        /// The cell's place in its request.
        index: usize,
        /// The language it runs in.
        language: Language,
        /// Its title, as the host sent it.
        title: Option<String>,
    },
    /// A chunk of a cell's output, as the worker wrote it.
    Output {
        /// The cell's place in its request.
        index: usize,
        /// `"stdout"` or `"stderr"`.
        stream: &'static str,
        /// The text written (invalid UTF-8 replaced).
        text: String,
    },
    /// A MIME bundle the cell displayed.
    Display {
        /// The cell's place in its request.
        index: usize,
        /// The bundle (`{"image/png": ..., "text/plain": ...}`).
        bundle: serde_json::Value,
    },
    /// What a prelude helper did, e.g. `{"op": "read", "path": "src/main.rs", "lines": 120}`.
    Status {
        /// The cell's place in its request.
        index: usize,
        /// The helper's report.
        status: serde_json::Value,
    },
    /// The cell's trailing value as a MIME bundle (`text/plain` and its richer forms), sent
    /// before its text goes to stdout and its rich form goes out as a display. Only
    /// Jupyter's `execute_result` needs it told apart: JSON-RPC hosts are never sent it
    /// (see [`crate::protocol::Events::passes`]), they read the value as printed.
    Value {
        /// The cell's place in its request.
        index: usize,
        /// The value's bundle (`{"text/plain": "42"}`, plus `application/json`, HTML, ...).
        bundle: serde_json::Value,
    },
    /// The cell cleared its output (IPython's `clear_output`): what it showed before goes;
    /// with `wait`, only once its next output arrives (a progress line redrawn in place).
    ClearOutput {
        /// The cell's place in its request.
        index: usize,
        /// Whether the clear waits for the next output.
        wait: bool,
    },
    /// A cell ended.
    CellDone {
        /// The cell's place in its request.
        index: usize,
        /// How it ended.
        status: CellStatus,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(
        index: usize,
        language: Language,
        status: CellStatus,
        displays: Vec<serde_json::Value>,
    ) -> CellResult {
        let spec = CellSpec {
            title: (index == 1).then(|| "load".to_string()),
            ..CellSpec::new(language, "x")
        };
        let mut report = CellReport::without_run(status, String::new());
        report.displays = displays;
        report.status_events = vec![serde_json::json!({"op": "read"})];
        report.into_result(index, 0, &spec)
    }

    #[test]
    fn a_result_names_its_failed_cell_and_totals_its_outputs() {
        use serde_json::json;
        let png = json!({"image/png": "iVBO", "text/plain": "<Figure>"});
        let data = json!({"application/json": {"k": 1}, "text/plain": "{'k': 1}"});
        let result = EvalResult::from_cells(vec![
            cell(
                0,
                Language::JavaScript,
                CellStatus::Complete,
                vec![data.clone(), png],
            ),
            cell(1, Language::Python, CellStatus::Error, vec![data]),
            cell(2, Language::JavaScript, CellStatus::Skipped, vec![]),
            cell(3, Language::Lua, CellStatus::Skipped, vec![]),
        ]);
        let failed = result.failed_cell.clone().expect("a failed cell");
        assert_eq!((failed.index, failed.title.as_deref()), (1, Some("load")));
        assert_eq!(
            failed.summary_line(&result.cells),
            "cell 2 of 4 (\"load\") failed with an error; the 2 cells after it were skipped"
        );
        assert_eq!(
            result.summary,
            EvalSummary {
                languages: vec![Language::JavaScript, Language::Python, Language::Lua],
                json_outputs: 2,
                images: 1,
                status_events: 4,
            }
        );
        let cancelled =
            EvalResult::from_cells(vec![cell(0, Language::Lua, CellStatus::Cancelled, vec![])]);
        let failed = cancelled.failed_cell.clone().expect("a cancelled cell");
        assert_eq!(
            failed.summary_line(&cancelled.cells),
            "cell 1 of 1 was cancelled"
        );
        let fine =
            EvalResult::from_cells(vec![cell(0, Language::Lua, CellStatus::Complete, vec![])]);
        assert_eq!(fine.failed_cell, None);
        // Absent from the JSON of a request that did not fail; read back as absent.
        let text = serde_json::to_value(&fine).expect("serialize");
        assert!(text.get("failed_cell").is_none(), "{text}");
        let back: EvalResult = serde_json::from_value(text).expect("deserialize");
        assert_eq!(back, fine);
    }

    #[test]
    fn a_request_timeout_fills_cells_without_one_and_its_reset_goes_to_the_first() {
        let mut request: EvalRequest = serde_json::from_value(serde_json::json!({
            "timeout": 7, "reset": true, "cells": [
                {"language": "py", "code": "1"},
                {"language": "js", "code": "2", "timeout": 3},
                {"language": "lua", "code": "3"}]
        }))
        .expect("timeout and reset beside cells");
        request.apply_request_level();
        let cells = request.cells.clone();
        let timeouts: Vec<_> = cells.iter().map(|c| c.timeout).collect();
        assert_eq!(timeouts, [Some(7.0), Some(3.0), Some(7.0)]);
        let resets: Vec<_> = cells.iter().map(|c| c.reset).collect();
        assert_eq!(resets, [true, false, false]);
        let mut plain = EvalRequest {
            cells: cells.clone(),
            ..EvalRequest::default()
        };
        plain.apply_request_level();
        assert_eq!(plain.cells, cells, "nothing added without them");
    }

    #[test]
    fn requests_parse_with_defaults_and_short_language_names() {
        let request: EvalRequest =
            serde_json::from_str(r#"{"cells":[{"language":"js","code":"1"}]}"#).unwrap();
        assert_eq!(request.session, "default");
        assert_eq!(request.cells[0].language, Language::JavaScript);
        assert!(!request.cells[0].reset);
    }

    #[test]
    fn unknown_fields_and_languages_are_rejected() {
        assert!(serde_json::from_str::<CellSpec>(r#"{"language":"py","code":"1","x":1}"#).is_err());
        let err =
            serde_json::from_str::<CellSpec>(r#"{"language":"ruby","code":"1"}"#).unwrap_err();
        assert!(err.to_string().contains("ruby"), "{err}");
    }

    fn python_cell() -> CellSpec {
        CellSpec::new(Language::Python, "")
    }

    #[test]
    fn a_display_repeating_the_printed_value_is_not_shown_twice() {
        let spec = python_cell();
        let mut cell = CellResult::skipped(0, 0, &spec);
        cell.report.output = "{'k': 1}\n".into();
        cell.report.displays = vec![
            serde_json::json!({"application/json": {"k": 1}, "text/plain": "{'k': 1}"}),
            serde_json::json!({"application/json": {"k": 2}, "text/plain": "{'k': 2}"}),
            serde_json::json!({"image/png": "AA==", "text/plain": "{'k': 1}"}),
        ];
        let shown: Vec<_> = cell.displays_beyond_output().collect();
        assert_eq!(shown, [&cell.report.displays[1], &cell.report.displays[2]]);
    }

    #[test]
    fn result_serializes_snake_case() {
        let spec = python_cell();
        let json = serde_json::to_value(CellResult::skipped(2, 0, &spec)).unwrap();
        assert_eq!(json["status"], "skipped");
        assert_eq!(json["language"], "py");
        // The session's report is flattened: hosts see one object per cell.
        assert_eq!(json["output"], "");
        assert!(json.get("report").is_none(), "{json}");
        assert_eq!(json["truncation"]["artifact_path"], serde_json::Value::Null);
    }

    #[test]
    fn statuses_display_as_the_protocol_names_them() {
        for status in [
            CellStatus::Complete,
            CellStatus::Error,
            CellStatus::Cancelled,
            CellStatus::Skipped,
        ] {
            assert_eq!(
                serde_json::json!(status.to_string()),
                serde_json::json!(status)
            );
        }
    }
}
