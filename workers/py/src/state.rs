//! Snapshots of the cells' names, the shim's side: a state task is one NDJSON command to the
//! runner (`snapshot`, `restore` or `names`), which `state.py` carries out between cells and
//! answers with a `state` event holding its report, then the sync marker and `done` a cell
//! ends with. The payload's format is `state.py`'s business (see its docstring); the shim
//! only names the file, its cap and its length.
//!
//! A task is interrupted like a cell (SIGINT to python), and a python that dies under one
//! ends the worker as under a cell ([`StateError::Fatal`]). What python prints meanwhile
//! (a library's warning) is kept for the next cell, as start-up output is.

use super::events::{self, Event};
use super::PythonEngine;
use crate::runtime::{Interrupt, LoadedState, SavedState, StateError, WorkerError};
use cellvisor_ipc::state::{NameInfo, SkippedName};
use serde::Deserialize;
use std::io::Write;
use std::path::Path;

/// State tasks are numbered from here, far above any cell id, so that their markers and
/// events are never taken for a cell's.
const FIRST_TASK_ID: u64 = 1 << 62;

/// What `state.py` answers, whichever the task: a failure, a cap passed, or the task's own
/// fields.
#[derive(Debug, Default, Deserialize)]
struct Report {
    failed: Option<String>,
    too_big: Option<u64>,
    #[serde(default)]
    saved: Vec<String>,
    #[serde(default)]
    restored: Vec<String>,
    #[serde(default)]
    skipped: Vec<SkippedName>,
    #[serde(default)]
    names: Vec<NameInfo>,
}

/// Writes the namespace's user names into `payload`.
pub(super) fn save(
    engine: &mut PythonEngine,
    payload: &Path,
    max_bytes: u64,
    interrupt: &Interrupt,
) -> Result<SavedState, StateError> {
    let command = serde_json::json!({
        "type": "snapshot",
        "path": path_text(payload)?,
        "max_bytes": max_bytes,
    });
    let report = run(engine, command, interrupt)?;
    Ok(SavedState {
        saved: report.saved,
        skipped: report.skipped,
    })
}

/// Reads the names back from the first `len` bytes of `payload`.
pub(super) fn load(
    engine: &mut PythonEngine,
    payload: &Path,
    len: u64,
    replace: bool,
    interrupt: &Interrupt,
) -> Result<LoadedState, StateError> {
    let command = serde_json::json!({
        "type": "restore",
        "path": path_text(payload)?,
        "len": len,
        "replace": replace,
    });
    let report = run(engine, command, interrupt)?;
    Ok(LoadedState {
        restored: report.restored,
        skipped: report.skipped,
    })
}

/// The namespace's user names, as a snapshot would see them.
pub(super) fn names(
    engine: &mut PythonEngine,
    interrupt: &Interrupt,
) -> Result<Vec<NameInfo>, StateError> {
    let report = run(engine, serde_json::json!({"type": "names"}), interrupt)?;
    Ok(report.names)
}

fn path_text(path: &Path) -> Result<&str, StateError> {
    path.to_str().ok_or_else(|| {
        StateError::Failed(format!(
            "the snapshot path {} is not UTF-8 text",
            path.display()
        ))
    })
}

/// Sends one state task to the runner and waits for its report and its end.
fn run(
    engine: &mut PythonEngine,
    mut command: serde_json::Value,
    interrupt: &Interrupt,
) -> Result<Report, StateError> {
    if let Some(how) = &engine.dead {
        return Err(WorkerError::Engine(how.clone()).into());
    }
    engine.state_tasks += 1;
    let id = FIRST_TASK_ID + engine.state_tasks;
    command["id"] = id.into();
    {
        // No cell owns what python prints now: it waits for the next cell.
        let mut routing = engine.routing.lock();
        routing.cell_id = id;
        routing.outbox = None;
        routing.last_marker = None;
    }
    let mut line = command.to_string();
    line.push('\n');
    let written = events::lock_commands(&engine.commands).write_all(line.as_bytes());
    if written.is_err() {
        let how = engine.reap();
        return Err(engine.died(how).into());
    }
    if interrupt.is_raised() {
        engine.send_interrupt();
    }
    let mut report = None;
    let (status, summary, marker) = engine.wait_done(id, |event| {
        if let Event::State {
            id: of,
            report: sent,
        } = event
        {
            if of == id {
                report = Some(sent);
            }
        }
    })?;
    if marker {
        drop(engine.routing.wait_until(super::SYNC_TIMEOUT, |s| {
            s.last_marker == Some(id) || s.closed
        }));
    }
    match status.as_str() {
        "ok" => {}
        "interrupted" => return Err(StateError::Failed("interrupted".into())),
        _ => {
            let why = summary.unwrap_or_else(|| "the state task failed".into());
            return Err(StateError::Failed(why));
        }
    }
    let report = report.ok_or_else(|| StateError::Failed("python sent no report".into()))?;
    let report: Report = serde_json::from_value(report)
        .map_err(|e| StateError::Failed(format!("python's report is not understood: {e}")))?;
    if let Some(bytes) = report.too_big {
        return Err(StateError::TooBig { bytes });
    }
    if let Some(why) = report.failed {
        return Err(StateError::Failed(why));
    }
    Ok(report)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
