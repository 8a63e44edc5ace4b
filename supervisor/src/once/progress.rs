//! How far a request with a `request_id` got, as the session's committed state says (etcd
//! mode, docs/fleet.md): the transaction that commits a language's state after a request's
//! cell `k` also puts, beside that language's pointer, the request's progress: its id, the
//! fingerprint of its cells and the results of its cells `0..=k`, under the same fencing
//! token. So every committed state says which cells of which request it includes, and a
//! retry on any node answers those from what was committed and runs only the rest. Plain
//! data: the host decides when to look; this decides what a retry runs and what it answers.
// Stored in etcd by the `etcd` feature; a build without it uses the rest.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use crate::cell::{CellResult, EvalResult};
use serde::{Deserialize, Serialize};

/// Past this many bytes of JSON, the outputs of a progress's earliest cells are left out
/// (their status stays): a transaction carries it, and etcd bounds a request's size.
pub const MAX_PROGRESS_BYTES: usize = 256 * 1024;

/// The cells of one request whose effects are in the session's committed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The request's id.
    pub id: String,
    /// The SHA-256 of its cells as sent (a retry sends the same ones).
    pub fingerprint: String,
    /// The results of its first cells, in order, as they were answered.
    pub cells: Vec<CellResult>,
}

impl Progress {
    /// The progress as stored in etcd.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored progress; `None` for a value no node wrote.
    pub fn from_bytes(bytes: &[u8]) -> Option<Progress> {
        serde_json::from_slice(bytes).ok()
    }

    /// This progress within `max_bytes` of JSON: the outputs and displays of its earliest
    /// cells are left out (each says so in its notice) until it fits or only the last cell's
    /// are left.
    pub fn within(mut self, max_bytes: usize) -> Progress {
        let size = |p: &Progress| serde_json::to_vec(p).map_or(0, |json| json.len());
        let last = self.cells.len().saturating_sub(1);
        for index in 0..last {
            if size(&self) <= max_bytes {
                break;
            }
            let Some(cell) = self.cells.get_mut(index) else {
                break;
            };
            let dropped = cell.report.output.len();
            cell.report.output.clear();
            cell.report.displays.clear();
            cell.report.status_events.clear();
            let line = format!(
                "this cell's output ({dropped} bytes) and displays were not kept with its \
                 request's progress (at most {max_bytes} bytes); the cell ran once"
            );
            cell.report.notice = Some(match cell.report.notice.take() {
                Some(earlier) => format!("{earlier}\n{line}"),
                None => line,
            });
        }
        self
    }
}

/// What a request carries to each of its cells' sessions, so the commit of the state after
/// that cell can say how far the request got.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The request's id.
    pub id: String,
    /// The SHA-256 of its cells.
    pub fingerprint: String,
    /// The results of the cells before this one.
    pub earlier: Vec<CellResult>,
}

impl Step {
    /// The request's progress once this cell's `result` is in the committed state.
    pub fn with(&self, result: CellResult) -> Progress {
        let mut cells = self.earlier.clone();
        cells.push(result);
        Progress {
            id: self.id.clone(),
            fingerprint: self.fingerprint.clone(),
            cells,
        }
        .within(MAX_PROGRESS_BYTES)
    }
}

/// What a request with an id runs, given the committed progress.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// No cell of it is in the committed state: run them all.
    Fresh,
    /// Its first cells are in the committed state: answer them with these results, run the
    /// rest.
    From(Vec<CellResult>),
    /// Every cell of it is in the committed state: answer this, run nothing.
    Done(EvalResult),
    /// The id's progress is of other cells.
    Conflict,
}

/// What request `id` with cells of `fingerprint` (`cells` of them) runs, given `committed`
/// (the progress each language's committed state carries). A request whose cells ran in
/// several languages got as far as the furthest of them: a cell's progress lists the cells
/// before it, whose states were committed before its own.
pub fn resume(committed: &[Progress], id: &str, fingerprint: &str, cells: usize) -> Resume {
    let mine: Vec<&Progress> = committed.iter().filter(|p| p.id == id).collect();
    if mine.iter().any(|p| p.fingerprint != fingerprint) {
        return Resume::Conflict;
    }
    let Some(progress) = mine.into_iter().max_by_key(|p| p.cells.len()) else {
        return Resume::Fresh;
    };
    if progress.cells.is_empty() {
        return Resume::Fresh;
    }
    // A cell that failed or went on in the background ended its request: the rest were
    // skipped, never to run.
    let ended = progress
        .cells
        .iter()
        .any(|c| c.exit_code != 0 || c.report.status == crate::cell::CellStatus::Running);
    if progress.cells.len() >= cells || ended {
        let answered = progress.cells.len();
        let mut result = EvalResult::from_cells(progress.cells.clone());
        result.replayed = true;
        result.replayed_cells = answered;
        return Resume::Done(result);
    }
    Resume::From(progress.cells.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellReport, CellSpec};
    use cellvisor_ipc::Language;

    fn result(index: usize, output: &str) -> CellResult {
        let spec = CellSpec::new(Language::Python, "x");
        let mut report = CellReport::error(String::new());
        report.status = crate::cell::CellStatus::Complete;
        report.output = output.into();
        let mut result = report.into_result(index, 10 + index as u64, &spec);
        result.exit_code = 0;
        result.node = "node-a".into();
        result
    }

    fn progress(id: &str, fingerprint: &str, cells: usize) -> Progress {
        Progress {
            id: id.into(),
            fingerprint: fingerprint.into(),
            cells: (0..cells).map(|i| result(i, &format!("{i}\n"))).collect(),
        }
    }

    #[test]
    fn a_request_with_no_committed_progress_runs_whole() {
        assert_eq!(resume(&[], "r", "f", 2), Resume::Fresh);
        let other = progress("other", "f", 1);
        assert_eq!(resume(&[other], "r", "f", 2), Resume::Fresh);
        assert_eq!(resume(&[progress("r", "f", 0)], "r", "f", 2), Resume::Fresh);
    }

    #[test]
    fn cells_in_the_committed_state_are_answered_and_only_the_rest_run() {
        let committed = progress("r", "f", 1);
        assert_eq!(
            resume(std::slice::from_ref(&committed), "r", "f", 3),
            Resume::From(committed.cells.clone())
        );
        assert_eq!(
            resume(std::slice::from_ref(&committed), "r", "other", 3),
            Resume::Conflict
        );
    }

    #[test]
    fn across_languages_the_furthest_progress_of_the_request_counts() {
        // Cell 0 in one language, cell 1 in another: the second's progress lists both.
        let furthest = progress("r", "f", 2);
        let committed = [
            progress("r", "f", 1),
            furthest.clone(),
            progress("q", "g", 5),
        ];
        assert_eq!(
            resume(&committed, "r", "f", 3),
            Resume::From(furthest.cells)
        );
    }

    #[test]
    fn a_request_whose_every_cell_is_committed_runs_nothing() {
        let committed = progress("r", "f", 2);
        let Resume::Done(answer) = resume(std::slice::from_ref(&committed), "r", "f", 2) else {
            panic!("answered whole");
        };
        assert!(answer.replayed);
        assert_eq!(answer.replayed_cells, 2);
        assert_eq!(answer.cells, committed.cells);
        assert!(!answer.is_error);
    }

    #[test]
    fn a_request_that_ended_at_a_committed_cell_runs_nothing_more() {
        let mut committed = progress("r", "f", 1);
        committed.cells[0].exit_code = 1;
        committed.cells[0].report.status = crate::cell::CellStatus::Error;
        assert!(matches!(
            resume(std::slice::from_ref(&committed), "r", "f", 3),
            Resume::Done(_)
        ));
    }

    #[test]
    fn a_step_adds_its_cell_and_a_large_progress_drops_its_earliest_outputs() {
        let step = Step {
            id: "r".into(),
            fingerprint: "f".into(),
            earlier: vec![result(0, &"a".repeat(2000))],
        };
        let full = step.with(result(1, "last\n"));
        assert_eq!(full.cells.len(), 2);
        assert_eq!(full.cells[0].report.output.len(), 2000);
        let slim = full.clone().within(1000);
        assert!(slim.cells[0].report.output.is_empty());
        assert!(slim.cells[0]
            .report
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("2000 bytes")));
        assert_eq!(
            slim.cells[1].report.output, "last\n",
            "the last cell's stays"
        );
        let stored = Progress::from_bytes(&slim.to_bytes()).expect("round trip");
        assert_eq!(stored, slim);
        assert_eq!(Progress::from_bytes(b"nope"), None);
    }
}
