//! Which stops of a worker save its namespace, and what the next cell is told about its
//! state: plain data and text, decided here and carried out by the session.

use crate::session::outcome::Eviction;
use crate::session::state::SnapshotFate;
use crate::state::{SnapshotOrigin, StateLedger};
use cellvisor_config::{EveryCellAnswer, SnapshotWhen};
use cellvisor_ipc::state::{SnapshotMeta, StateRefusal};

/// Why a snapshot is taken; its text is the ledger's `from.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveReason {
    /// Before an eviction for `idle-timeout`.
    IdleEviction,
    /// Before an eviction to make room under `max-sessions`.
    LruEviction,
    /// Before a session is stopped by a drain of its node.
    DrainEviction,
    /// Before an idle worker over `limits.max-rss` is replaced.
    MemoryRecycle,
    /// Before the daemon stops (`cellvisor stop`, SIGTERM, its idle exit, an upgrade).
    DaemonStop,
    /// After a successful cell (`every-cell`).
    AfterCell,
    /// A host's named checkpoint.
    Checkpoint,
}

impl SaveReason {
    /// The words the ledger and the file keep.
    pub fn as_str(self) -> &'static str {
        match self {
            SaveReason::IdleEviction => "idle eviction",
            SaveReason::LruEviction => "lru eviction",
            SaveReason::DrainEviction => "drain",
            SaveReason::MemoryRecycle => "memory recycle",
            SaveReason::DaemonStop => "daemon stop",
            SaveReason::AfterCell => "after cell",
            SaveReason::Checkpoint => "checkpoint",
        }
    }
}

/// Whether `when` saves a snapshot for `reason`. A host's checkpoint is always taken.
pub fn saves(when: SnapshotWhen, reason: SaveReason) -> bool {
    match (when, reason) {
        (_, SaveReason::Checkpoint) => true,
        (SnapshotWhen::Never, _) => false,
        (SnapshotWhen::OnStop, SaveReason::AfterCell) => false,
        (SnapshotWhen::OnStop | SnapshotWhen::EveryCell, _) => true,
    }
}

/// What an `every-cell` cell's answer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerWaits {
    /// Its snapshot written: without etcd that is its state's commit; in etcd mode with
    /// `every-cell-answer = "async"`, the pointer's commit may follow the answer.
    Save,
    /// Its snapshot written and its pointer committed under the lease's fencing token.
    Commit,
}

/// What an `every-cell` cell's answer waits for under `setting`, with snapshots behind a
/// fenced pointer (`fenced`, etcd mode) or not: only a fenced store has a commit to wait for.
pub fn answer_waits(setting: EveryCellAnswer, fenced: bool) -> AnswerWaits {
    match (setting, fenced) {
        (EveryCellAnswer::Committed, true) => AnswerWaits::Commit,
        (EveryCellAnswer::Committed | EveryCellAnswer::Async, _) => AnswerWaits::Save,
    }
}

/// Whether a new worker restores the latest snapshot by itself (a host's checkpoints are
/// restored only on request).
pub fn restores_latest(when: SnapshotWhen) -> bool {
    when != SnapshotWhen::Never
}

/// The snapshot an eviction saves first, if any (a host's `close` means "forget").
pub fn save_for(eviction: &Eviction) -> Option<SaveReason> {
    match eviction {
        Eviction::Idle { .. } => Some(SaveReason::IdleEviction),
        Eviction::ForRoom { .. } => Some(SaveReason::LruEviction),
        Eviction::Drained { .. } => Some(SaveReason::DrainEviction),
        Eviction::Closed { .. } => None,
    }
}

/// What the next cell of an evicted session is told: nothing from here when its snapshot was
/// saved (its restore tells what came back), else why its state is gone.
pub fn eviction_notice(eviction: &Eviction, fate: &SnapshotFate) -> Option<String> {
    match fate {
        SnapshotFate::Saved => None,
        SnapshotFate::NotTried => Some(eviction.to_string()),
        SnapshotFate::Refused(refusal) => Some(format!("{eviction} ({})", not_saved(refusal))),
    }
}

/// The ledger of a snapshot brought back.
pub fn ledger(
    restored: Vec<String>,
    skipped: Vec<cellvisor_ipc::state::SkippedName>,
    meta: &SnapshotMeta,
    cells_since: u64,
    checkpoint: Option<String>,
) -> StateLedger {
    StateLedger {
        restored,
        skipped,
        from: SnapshotOrigin {
            taken_at: meta.taken_at.clone(),
            reason: meta.reason.clone(),
            cells_since,
            checkpoint,
            node: Some(meta.node.clone()).filter(|n| !n.is_empty()),
        },
        files: None,
    }
}

/// At most this many names are spelt out in a notice (the ledger has them all).
const NAMES_IN_NOTICE: usize = 12;

/// What the first cell on a restored worker is told; the node that took the snapshot is
/// named when it is not `this_node` (a session that moved).
pub fn restored_notice(ledger: &StateLedger, this_node: &str) -> String {
    let from = &ledger.from;
    let what = match &from.checkpoint {
        Some(name) => format!("checkpoint {name:?}"),
        None => "the snapshot".to_string(),
    };
    let on_node = from
        .node
        .as_ref()
        .filter(|node| node.as_str() != this_node)
        .map(|node| format!(" on node {node}"))
        .unwrap_or_default();
    let mut text = format!(
        "state restored from {what} taken at {}{on_node} ({}): {}",
        from.taken_at,
        from.reason,
        listed(&ledger.restored)
    );
    if from.cells_since > 0 {
        text.push_str(&format!(
            "; the {} cell(s) run after it are not in it",
            from.cells_since
        ));
    }
    if !ledger.skipped.is_empty() {
        let skipped: Vec<String> = ledger
            .skipped
            .iter()
            .map(|s| format!("{} ({})", s.name, s.why))
            .collect();
        text.push_str(&format!("; not restored: {}", listed(&skipped)));
    }
    text
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        return "no names".into();
    }
    let shown: Vec<&str> = names
        .iter()
        .take(NAMES_IN_NOTICE)
        .map(String::as_str)
        .collect();
    let more = names.len().saturating_sub(NAMES_IN_NOTICE);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// What the next cell is told when the latest snapshot could not be restored.
pub fn restore_failed_notice(refusal: &StateRefusal) -> String {
    format!(
        "the session's snapshot was not restored: {}; earlier state is lost",
        describe(refusal)
    )
}

/// The end of an eviction's notice when its snapshot was not written.
pub fn not_saved(refusal: &StateRefusal) -> String {
    format!("its state was not saved: {}", describe(refusal))
}

/// A refusal in words a host can act on.
pub fn describe(refusal: &StateRefusal) -> String {
    match refusal {
        StateRefusal::TooBig { bytes, max } => format!(
            "the snapshot would be over snapshots.max-size ({}; {} were written before it \
             stopped)",
            bytesize::ByteSize::b(*max),
            bytesize::ByteSize::b(*bytes)
        ),
        StateRefusal::Tampered { why } => {
            format!("the snapshot file failed its integrity check ({why}) and none of it was run")
        }
        StateRefusal::Missing => "there is no such snapshot".into(),
        StateRefusal::WrongEngine { wrote } => {
            format!("the snapshot was written by {wrote}, which this worker cannot read")
        }
        StateRefusal::Failed { why } => why.clone(),
    }
}

/// How long a change to a session's recorded workspace waits for the lock another holds:
/// a save's bound (`snapshots.timeout`), and on a fleet's node (`lease_ttl`) at most a
/// lease's time to live. The lock lives in the directory the nodes share, and a node
/// holding it longer than that was paused or is stuck: the session's lease, which the
/// waiting node holds, is no longer its. Waiting on would leave the waiting node's request
/// unanswered for as long as that node stays paused.
pub fn tree_lock_wait(
    timeout: std::time::Duration,
    lease_ttl: Option<std::time::Duration>,
) -> std::time::Duration {
    lease_ttl.map_or(timeout, |ttl| ttl.min(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::state::SkippedName;

    #[test]
    fn an_answer_waits_for_the_commit_only_where_there_is_one_and_committed_is_asked() {
        assert_eq!(
            answer_waits(EveryCellAnswer::Committed, true),
            AnswerWaits::Commit
        );
        assert_eq!(
            answer_waits(EveryCellAnswer::Async, true),
            AnswerWaits::Save
        );
        for setting in [EveryCellAnswer::Committed, EveryCellAnswer::Async] {
            assert_eq!(
                answer_waits(setting, false),
                AnswerWaits::Save,
                "{setting:?}"
            );
        }
        assert_eq!(
            cellvisor_config::SnapshotsConfig::default().every_cell_answer,
            EveryCellAnswer::Committed,
            "a fleet's default: no answer before its commit"
        );
    }

    #[test]
    fn on_stop_saves_before_every_planned_stop_but_not_after_cells() {
        use SaveReason::*;
        for reason in [
            IdleEviction,
            LruEviction,
            DrainEviction,
            MemoryRecycle,
            DaemonStop,
            Checkpoint,
        ] {
            assert!(saves(SnapshotWhen::OnStop, reason), "{reason:?}");
        }
        assert!(!saves(SnapshotWhen::OnStop, AfterCell));
        assert!(saves(SnapshotWhen::EveryCell, AfterCell));
        assert!(!saves(SnapshotWhen::Never, IdleEviction));
        assert!(saves(SnapshotWhen::Never, Checkpoint));
        assert!(!restores_latest(SnapshotWhen::Never));
        assert!(restores_latest(SnapshotWhen::OnStop));
    }

    #[test]
    fn the_notice_names_what_came_back_what_did_not_and_what_is_missing() {
        let meta = SnapshotMeta {
            language: cellvisor_ipc::Language::Python,
            taken_at: "2026-12-02T07:00:00Z".into(),
            reason: "idle eviction".into(),
            node: "node-a".into(),
            saved: Vec::new(),
            skipped: Vec::new(),
            payload_bytes: 0,
            engine: "Python 3.12.3".into(),
        };
        let skipped = vec![SkippedName {
            name: "conn".into(),
            why: "socket objects cannot be saved".into(),
        }];
        let ledger = ledger(
            vec!["df".into(), "np (module)".into()],
            skipped,
            &meta,
            1,
            None,
        );
        assert_eq!(
            restored_notice(&ledger, "node-a"),
            "state restored from the snapshot taken at 2026-12-02T07:00:00Z (idle eviction): \
             df, np (module); the 1 cell(s) run after it are not in it; not restored: conn \
             (socket objects cannot be saved)"
        );
        assert!(
            restored_notice(&ledger, "node-b")
                .starts_with("state restored from the snapshot taken at 2026-12-02T07:00:00Z on node node-a (idle eviction)"),
            "a session that moved is told where its state came from"
        );
        let many: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
        assert!(listed(&many).ends_with("v11 and 8 more"));
    }

    #[test]
    fn a_fleets_node_waits_for_a_workspace_lock_at_most_a_lease_and_a_save() {
        use std::time::Duration;
        let minute = Duration::from_secs(60);
        assert_eq!(tree_lock_wait(minute, None), minute);
        assert_eq!(
            tree_lock_wait(minute, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            tree_lock_wait(Duration::from_secs(5), Some(Duration::from_secs(30))),
            Duration::from_secs(5)
        );
    }
}
