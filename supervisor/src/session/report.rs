//! [`CellReport`]: what a session reports for one cell, before the host makes it a
//! [`CellResult`] (the worker's own word for how a cell ended is `cellvisor_ipc::CellOutcome`).

use crate::cell::{CellResult, CellSpec, CellStatus, Truncation};

/// What a session reports for one cell; the host adds index, title and language to make a
/// [`CellResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct CellReport {
    pub status: CellStatus,
    pub output: String,
    pub duration_ms: f64,
    pub displays: Vec<serde_json::Value>,
    pub status_events: Vec<serde_json::Value>,
    pub truncation: Truncation,
    pub notice: Option<String>,
}

impl CellReport {
    /// An error that happened outside user code; `message` is the whole output.
    pub fn error(message: String) -> CellReport {
        let mut message = message;
        if !message.ends_with('\n') {
            message.push('\n');
        }
        CellReport {
            status: CellStatus::Error,
            truncation: Truncation {
                truncated: false,
                total_bytes: message.len() as u64,
                total_lines: message.lines().count() as u64,
                artifact_path: None,
                artifact_error: None,
            },
            output: message,
            duration_ms: 0.0,
            displays: Vec::new(),
            status_events: Vec::new(),
            notice: None,
        }
    }

    /// A cell that could not be run at all (no worker, session failed, ...): an error whose
    /// output is `message`, as the host reports it.
    pub fn refused(index: usize, spec: &CellSpec, message: String) -> CellResult {
        CellReport::error(message).into_result(index, spec)
    }

    pub fn into_result(self, index: usize, spec: &CellSpec) -> CellResult {
        CellResult {
            index,
            cell_id: 0,
            title: spec.title.clone(),
            language: spec.language,
            exit_code: if matches!(self.status, CellStatus::Complete | CellStatus::Running) {
                0
            } else {
                1
            },
            status: self.status,
            output: self.output,
            duration_ms: self.duration_ms,
            displays: self.displays,
            status_events: self.status_events,
            truncation: self.truncation,
            notice: self.notice,
        }
    }
}
