//! What the engines' state tests share: run one state task on an engine, as the runtime
//! would, and take its report.

use super::run;
use crate::runtime::{Engine, Interrupt, Outbox};
use cellvisor_ipc::state::{LoadOrder, SaveOrder, StateReport, StateTask};
use cellvisor_ipc::{CellOutcome, FromWorker};
use std::path::Path;

/// The key the tests tag snapshots with.
pub const TEST_KEY: &[u8] = b"a session's test key";

/// Runs `task` on `engine`; its outcome and the report it sent.
pub fn run_task<E: Engine>(engine: &mut E, task: StateTask) -> (CellOutcome, StateReport) {
    let (outbox, frames) = Outbox::new(1000);
    let outcome = run(engine, 1, &task, &outbox, &Interrupt::default()).expect("not fatal");
    let report = frames
        .try_iter()
        .find_map(|frame| match frame {
            FromWorker::State { report, .. } => Some(report),
            _ => None,
        })
        .expect("a State frame");
    (outcome, report)
}

/// Saves `engine`'s namespace to `path` (cap: `max_bytes`).
pub fn save<E: Engine>(engine: &mut E, path: &Path, max_bytes: u64) -> StateReport {
    run_task(
        engine,
        StateTask::Save(Box::new(SaveOrder {
            path: path.display().to_string(),
            key: TEST_KEY.to_vec(),
            max_bytes,
            taken_at: "2026-12-02T07:00:00Z".into(),
            reason: "test".into(),
            node: "node-a".into(),
        })),
    )
    .1
}

/// Loads the snapshot at `path` into `engine`.
pub fn load<E: Engine>(engine: &mut E, path: &Path, replace: bool) -> StateReport {
    run_task(
        engine,
        StateTask::Load(Box::new(LoadOrder {
            path: path.display().to_string(),
            key: TEST_KEY.to_vec(),
            replace,
        })),
    )
    .1
}
