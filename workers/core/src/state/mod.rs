//! A session's saved state, on the worker's side: the state tasks of
//! [`cellvisor_ipc::state`] carried out on an [`Engine`] (`run`), and the snapshot file
//! they write and read (`file`).
//!
//! What is common to every language lives here: the temporary file beside the snapshot
//! (mode 0600, renamed into place only once whole), the size cap, the integrity tag and its
//! check before any byte is handed to an engine, the engine-kind check. An engine only
//! writes its payload into a file it is given and reads it back from one
//! ([`Engine::save_state`], [`Engine::load_state`], [`Engine::list_names`]).

mod file;
/// What the engines' tests share: state tasks run on an engine, with a test key.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use crate::runtime::{Engine, Interrupt, Outbox, WorkerError};
use cellvisor_ipc::state::{
    LoadOrder, SaveOrder, SkippedName, SnapshotMeta, StateRefusal, StateReport, StateTask,
};
use cellvisor_ipc::{CellOutcome, FromWorker};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// What an engine saved into a payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedState {
    /// The names the payload holds.
    pub saved: Vec<String>,
    /// The names left out, and why.
    pub skipped: Vec<SkippedName>,
}

/// What an engine brought back from a payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedState {
    /// The names now in the namespace.
    pub restored: Vec<String>,
    /// The names that could not be brought back, and why.
    pub skipped: Vec<SkippedName>,
}

/// Why an engine did not carry out a state task.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// This engine keeps no snapshots.
    #[error("this worker cannot save or restore its state")]
    Unsupported,
    /// The payload grew past the order's cap; `bytes` is as far as it got.
    #[error("the snapshot grew past its cap ({bytes} bytes written)")]
    TooBig {
        /// How much had been written when the engine stopped.
        bytes: u64,
    },
    /// The task failed; the text says why. The engine goes on serving cells.
    #[error("{0}")]
    Failed(String),
    /// The engine itself can no longer run cells (its interpreter died): the worker exits.
    #[error(transparent)]
    Fatal(#[from] WorkerError),
}

/// Carries out a state task on `engine`: one `State` frame, then the outcome for the task's
/// `Done` (`Failed` when it was refused). `Err` is a fatal engine error.
pub fn run<E: Engine>(
    engine: &mut E,
    cell_id: u64,
    task: &StateTask,
    outbox: &Outbox,
    interrupt: &Interrupt,
) -> Result<CellOutcome, WorkerError> {
    let report = match task {
        StateTask::Code => return Ok(CellOutcome::Completed),
        StateTask::Save(order) => save(engine, order, interrupt),
        StateTask::Load(order) => load(engine, order, interrupt),
        StateTask::Names => engine
            .list_names(interrupt)
            .map(StateReport::Names)
            .map_err(refusal),
    };
    let report = match report {
        Ok(report) => report,
        Err(Refused::Fatal(err)) => return Err(err),
        Err(Refused::Refusal(refusal)) => StateReport::Refused(refusal),
    };
    let outcome = match &report {
        StateReport::Refused(_) if interrupt.is_raised() => CellOutcome::Interrupted,
        StateReport::Refused(refusal) => CellOutcome::Failed {
            summary: summary(refusal),
        },
        _ => CellOutcome::Completed,
    };
    outbox.send(FromWorker::State { cell_id, report });
    Ok(outcome)
}

/// The refusal in a line, for the task's `Done` (the supervisor words it for hosts from the
/// report itself).
fn summary(refusal: &StateRefusal) -> String {
    match refusal {
        StateRefusal::TooBig { bytes, max } => format!("snapshot over {max} bytes ({bytes})"),
        StateRefusal::Tampered { why } => format!("snapshot refused: {why}"),
        StateRefusal::Missing => "no such snapshot".into(),
        StateRefusal::WrongEngine { wrote } => format!("snapshot written by {wrote}"),
        StateRefusal::Failed { why } => why.clone(),
    }
}

/// A refused task, or an engine that can no longer go on.
enum Refused {
    Refusal(StateRefusal),
    Fatal(WorkerError),
}

fn refusal(err: StateError) -> Refused {
    match err {
        StateError::Fatal(err) => Refused::Fatal(err),
        StateError::TooBig { bytes } => Refused::Refusal(StateRefusal::TooBig { bytes, max: 0 }),
        other => Refused::Refusal(StateRefusal::Failed {
            why: other.to_string(),
        }),
    }
}

fn io_refusal(what: &str, path: &Path, err: std::io::Error) -> Refused {
    Refused::Refusal(StateRefusal::Failed {
        why: format!("cannot {what} {}: {err}", path.display()),
    })
}

fn save<E: Engine>(
    engine: &mut E,
    order: &SaveOrder,
    interrupt: &Interrupt,
) -> Result<StateReport, Refused> {
    let path = Path::new(&order.path);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_refusal("create the snapshot directory", dir, e))?;
    // Mode 0600 (tempfile's default), removed again if anything below fails.
    let temp = tempfile::Builder::new()
        .prefix(".snapshot-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| io_refusal("create a snapshot file in", dir, e))?;
    let saved = engine
        .save_state(temp.path(), order.max_bytes, interrupt)
        .map_err(|err| match err {
            StateError::TooBig { bytes } => Refused::Refusal(StateRefusal::TooBig {
                bytes,
                max: order.max_bytes,
            }),
            other => refusal(other),
        })?;
    // The engine may have replaced the file rather than written into it: reopen it by name.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(temp.path())
        .map_err(|e| io_refusal("reopen the snapshot file", temp.path(), e))?;
    let payload_bytes = file
        .metadata()
        .map_err(|e| io_refusal("measure the snapshot file", temp.path(), e))?
        .len();
    if payload_bytes > order.max_bytes {
        return Err(Refused::Refusal(StateRefusal::TooBig {
            bytes: payload_bytes,
            max: order.max_bytes,
        }));
    }
    let meta = SnapshotMeta {
        language: E::LANGUAGE,
        taken_at: order.taken_at.clone(),
        reason: order.reason.clone(),
        node: order.node.clone(),
        saved: saved.saved.clone(),
        skipped: saved.skipped.clone(),
        payload_bytes,
        engine: engine.engine_name(),
    };
    let bytes = file::seal(&mut file, &meta, &order.key)
        .map_err(|e| io_refusal("write the snapshot", temp.path(), e))?;
    drop(file);
    temp.persist(path)
        .map_err(|e| io_refusal("put the snapshot in place at", path, e.error))?;
    Ok(StateReport::Saved {
        bytes,
        saved: saved.saved,
        skipped: saved.skipped,
    })
}

fn load<E: Engine>(
    engine: &mut E,
    order: &LoadOrder,
    interrupt: &Interrupt,
) -> Result<StateReport, Refused> {
    let path = Path::new(&order.path);
    let (meta, payload_bytes) = file::open_verified(path, &order.key).map_err(Refused::Refusal)?;
    if meta.language != E::LANGUAGE
        || engine_kind(&meta.engine) != engine_kind(&engine.engine_name())
    {
        return Err(Refused::Refusal(StateRefusal::WrongEngine {
            wrote: meta.engine,
        }));
    }
    let loaded = engine
        .load_state(path, payload_bytes, order.replace, interrupt)
        .map_err(refusal)?;
    let mut skipped = meta.skipped.clone();
    skipped.extend(loaded.skipped);
    Ok(StateReport::Loaded {
        restored: loaded.restored,
        skipped,
        meta,
    })
}

/// The part of an engine's name whose payloads are interchangeable: its first word, and for
/// a version with dots its major and minor (`Python 3.12`: a payload of 3.12 is refused by
/// 3.13, whose code objects differ; `QuickJS`, `Lua 5.4`).
fn engine_kind(name: &str) -> String {
    let mut words = name.split_whitespace();
    let first = words.next().unwrap_or_default();
    match words.next() {
        Some(version) if version.contains('.') => {
            let major_minor: Vec<&str> = version.split('.').take(2).collect();
            format!("{first} {}", major_minor.join("."))
        }
        _ => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::engine_kind;

    #[test]
    fn payloads_move_between_patch_releases_only() {
        assert_eq!(engine_kind("Python 3.12.3"), engine_kind("Python 3.12.7"));
        assert_ne!(engine_kind("Python 3.12.3"), engine_kind("Python 3.13.0"));
        assert_ne!(engine_kind("PyPy 3.10.1"), engine_kind("Python 3.10.1"));
        assert_eq!(engine_kind("QuickJS 2024-01-13"), "QuickJS");
        assert_eq!(engine_kind("Lua 5.4"), "Lua 5.4");
    }
}
