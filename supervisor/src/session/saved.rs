//! A cell's answer under `every-cell` snapshots waits for its save (and in etcd mode, unless
//! `snapshots.every-cell-answer = "async"`, for its pointer's commit), so it can say whether
//! the cell's state was saved: `saved: {saved: false, why}` and a notice when the save
//! failed (a full disk, `snapshots.max-size`, a save that timed out) or its commit was
//! refused or failed, never only a log line.

use super::{Running, Session};
use crate::once::progress::Progress;
use crate::session::CellReport;
use cellvisor_client::once::Saved;

/// A finished cell whose answer waits for its save.
pub struct HeldCell {
    running: Running,
    outcome: CellReport,
}

impl HeldCell {
    pub(super) fn new(running: Running, outcome: CellReport) -> HeldCell {
        HeldCell { running, outcome }
    }

    /// How far this cell's request got once the state after it is committed (a request
    /// with a `request_id`): its earlier cells and this one, answered as saved on `node`
    /// (the progress is committed only with a state that includes the cell).
    fn progress(&self, node: &str) -> Option<Progress> {
        let step = self.running.job.once.as_ref()?;
        let job = &self.running.job;
        let mut outcome = self.outcome.clone();
        outcome.saved = Some(written());
        let mut result = outcome.into_result(job.index, self.running.cell_id, &job.spec);
        result.node = node.to_string();
        Some(step.with(result))
    }
}

/// Cells whose answers wait for their commit, by commit number (the session answers them
/// when etcd decides, or when it stops first).
#[derive(Default)]
pub struct Committing {
    next: u64,
    waiting: std::collections::BTreeMap<u64, HeldCell>,
}

impl Committing {
    /// Keeps `held` until its commit is decided; the number to take it back with.
    pub(super) fn wait(&mut self, held: HeldCell) -> u64 {
        self.next += 1;
        self.waiting.insert(self.next, held);
        self.next
    }

    /// The cell of commit `number`, unless it was answered already.
    pub(super) fn take(&mut self, number: u64) -> Option<HeldCell> {
        self.waiting.remove(&number)
    }
}

/// The save was written.
pub(super) fn written() -> Saved {
    Saved {
        saved: true,
        why: None,
    }
}

/// The save was not written, for `why`.
pub(super) fn not_written(why: String) -> Saved {
    Saved {
        saved: false,
        why: Some(why),
    }
}

/// The notice of a cell whose state was not saved.
pub(super) fn unsaved_notice(why: &str) -> String {
    format!(
        "this cell's state was not saved: {why}; the session goes on, but a crash, a restart \
         or a move to another node before the next save loses this cell's effects"
    )
}

impl Session {
    /// Holds a finished cell for its answer; in etcd mode, a cell of a request with a
    /// `request_id` becomes that request's progress, which the next commit of this
    /// language's state carries (the state includes the cell from now on).
    pub(super) fn hold(&mut self, running: Running, outcome: CellReport) -> HeldCell {
        let held = HeldCell::new(running, outcome);
        let fenced = self
            .saves
            .snapshots
            .as_ref()
            .filter(|s| s.fenced().is_some());
        if let Some(progress) = fenced.and_then(|store| held.progress(store.node())) {
            self.saves.progress = Some(progress);
        }
        held
    }

    /// Answers a held cell, saying whether its save was written.
    pub(super) fn deliver_held(&mut self, held: HeldCell, saved: Saved) {
        let HeldCell {
            running,
            mut outcome,
        } = held;
        if let Some(why) = saved.why.as_deref().filter(|_| !saved.saved) {
            let line = unsaved_notice(why);
            outcome.notice = Some(super::notice::joined(outcome.notice.take(), line));
        }
        outcome.saved = Some(saved);
        self.deliver_final(running, outcome);
    }

    /// Answers every cell still waiting for its commit: not saved, for `why`.
    pub(super) fn answer_uncommitted(&mut self, why: &str) {
        let waiting = std::mem::take(&mut self.saves.committing.waiting);
        for held in waiting.into_values() {
            self.deliver_held(held, not_written(why.to_string()));
        }
    }

    /// Answers a cell no save follows (it failed, no snapshot is due, the session closes).
    pub(super) fn deliver_unsaved(&mut self, held: HeldCell) {
        self.deliver_final(held.running, held.outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_says_why_and_what_is_at_risk() {
        let line = unsaved_notice("the snapshot passed snapshots.max-size (1 KiB)");
        assert!(line.starts_with("this cell's state was not saved: the snapshot passed"));
        assert!(line.contains("loses this cell's effects"));
        assert_eq!(written().why, None);
        assert!(!not_written("full".into()).saved);
    }
}
