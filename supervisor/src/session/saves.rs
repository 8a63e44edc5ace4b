//! The session's state and snapshots: the snapshot directory, whether the latest snapshot
//! is to be restored before the next cell (and the cells run since it was taken), what the
//! last restore brought back, the ids of the session's own state tasks, and in etcd mode the
//! cells waiting for their commit and the progress of the request the state includes.

use super::saved::Committing;
use crate::once::progress::Progress;
use crate::snapshots::SnapshotStore;
use crate::state::StateLedger;
use std::sync::Arc;

/// Ids of the session's own state tasks: far above any the host hands out.
const OWN_TASK_IDS: u64 = 1 << 62;

/// The state and snapshots part (see the module).
pub(super) struct Saves {
    /// The snapshot directory (none when it could not be opened).
    pub snapshots: Option<Arc<SnapshotStore>>,
    /// A restore of the latest snapshot is due before the next cell; the cells run since it
    /// was taken.
    restore_due: Option<u64>,
    /// Code cells run since the last snapshot was written or restored.
    cells_since_snapshot: u64,
    /// What the last restore brought back, for the next host cell.
    pub ledger: Option<StateLedger>,
    /// The session's own state tasks so far.
    own_tasks: u64,
    /// Cells whose answers wait for their state's commit in etcd, by commit number.
    pub committing: Committing,
    /// How far the request with a `request_id` whose cell last ran here got (etcd mode):
    /// committed with every later save of the state, which includes those cells.
    pub progress: Option<Progress>,
}

impl Saves {
    /// The part of a session whose snapshots go to `snapshots`; `restore`: its first worker
    /// restores the latest one.
    pub fn new(snapshots: Option<Arc<SnapshotStore>>, restore: bool) -> Saves {
        Saves {
            snapshots,
            restore_due: restore.then_some(0),
            cells_since_snapshot: 0,
            ledger: None,
            own_tasks: 0,
            committing: Committing::default(),
            progress: None,
        }
    }

    /// Whether saves go through etcd (fenced blobs and pointers).
    pub fn fenced(&self) -> bool {
        self.snapshots
            .as_ref()
            .is_some_and(|store| store.fenced().is_some())
    }

    /// The id of the session's next own state task.
    pub fn next_own_task(&mut self) -> u64 {
        self.own_tasks += 1;
        OWN_TASK_IDS + self.own_tasks
    }

    /// A code cell ran (to its end, or to its worker's loss): the state moved on.
    pub fn cell_ran(&mut self) {
        self.cells_since_snapshot += 1;
    }

    /// The namespace was just written to or read from a snapshot.
    pub fn in_step(&mut self) {
        self.cells_since_snapshot = 0;
    }

    /// The latest snapshot is restored before the next cell: after a loss, it lacks the
    /// cells run since it was taken; after a recycle (`fresh`), none.
    pub fn restore_next(&mut self, fresh: bool) {
        self.restore_due = Some(match fresh {
            true => 0,
            false => self.cells_since_snapshot,
        });
    }

    /// No restore is due any more (the namespace is gone on purpose).
    pub fn cancel_restore(&mut self) {
        self.restore_due = None;
    }

    /// The restore due now, if one is: the cells its snapshot lacks.
    pub fn take_restore(&mut self) -> Option<u64> {
        self.restore_due.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_task_ids_are_far_above_the_hosts_and_never_repeat() {
        let mut saves = Saves::new(None, false);
        let first = saves.next_own_task();
        assert!(first > u64::from(u32::MAX) * 1024);
        assert_eq!(saves.next_own_task(), first + 1);
        assert!(!saves.fenced());
    }

    #[test]
    fn a_restore_after_a_loss_knows_the_cells_its_snapshot_lacks() {
        let mut saves = Saves::new(None, true);
        assert_eq!(saves.take_restore(), Some(0), "the first worker restores");
        assert_eq!(saves.take_restore(), None, "once");
        saves.cell_ran();
        saves.cell_ran();
        saves.restore_next(false);
        assert_eq!(saves.take_restore(), Some(2));
        saves.in_step();
        saves.cell_ran();
        saves.restore_next(false);
        saves.cancel_restore();
        assert_eq!(saves.take_restore(), None);
        saves.restore_next(true);
        assert_eq!(
            saves.take_restore(),
            Some(0),
            "a recycle's snapshot is fresh"
        );
    }
}
