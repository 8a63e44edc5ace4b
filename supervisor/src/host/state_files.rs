//! A session's workspace in its checkpoints and snapshots, as hosts see it: a checkpoint
//! records the files, `restore` brings them back (the ledger lists what changed), and a
//! session whose workspace is missing on this node (it moved, or the node lost its disk)
//! finds its files from the latest recording. Only a daemon-made workspace travels; a
//! caller's own directory (the local CLI's cwd) is never recorded nor written.

use super::{Cellvisor, RequestError};
use crate::cell::{EvalRequest, EvalResult};
use crate::names::SessionName;
use crate::snapshots::tree::session::{Label, Restored};
use crate::snapshots::tree::TreeError;
use crate::state::{FileChanges, FilesRecorded, SkippedName, SnapshotOrigin, StateLedger};
use std::path::PathBuf;

impl Cellvisor {
    /// The daemon-made workspace of `session` on this node, if it has one.
    fn existing_workspace(&self, session: &SessionName) -> Option<PathBuf> {
        let dir = self.workspace(session).dir().to_path_buf();
        dir.symlink_metadata()
            .is_ok_and(|m| m.is_dir())
            .then_some(dir)
    }

    /// Records the workspace of `session` as checkpoint `name` (none recorded when the
    /// session has no workspace of the daemon's).
    pub(super) async fn checkpoint_files(
        &self,
        session: &SessionName,
        shown: &str,
        name: &str,
    ) -> Result<Option<FilesRecorded>, RequestError> {
        let (Some(store), Some(dir)) = (self.snapshots.clone(), self.existing_workspace(session))
        else {
            return Ok(None);
        };
        let lock = self.request_lock(session);
        let _turn = lock.lock().await;
        let trees = store.trees(session);
        let name = name.to_string();
        let recorded = tokio::task::spawn_blocking(move || {
            trees.record(&dir, Label::Checkpoint(&name), "checkpoint")
        })
        .await
        .map_err(|err| RequestError::Workspace(format!("session {shown}: {err}")))?
        .map_err(|err| refused(shown, err))?;
        Ok(Some(FilesRecorded {
            files: recorded.files,
            bytes: recorded.bytes,
            new_bytes: recorded.new_bytes,
            skipped: recorded
                .skipped
                .into_iter()
                .map(|s| SkippedName {
                    name: s.path,
                    why: s.why,
                })
                .collect(),
        }))
    }

    /// Restores the workspace of `session` from checkpoint `name`, if it recorded one
    /// (making the workspace when it is missing on this node).
    pub(super) async fn restore_files(
        &self,
        session: &SessionName,
        shown: &str,
        name: &str,
    ) -> Result<Option<FileChanges>, RequestError> {
        let Some(store) = self.snapshots.clone() else {
            return Ok(None);
        };
        let trees = store.trees(session);
        if !trees.has(Label::Checkpoint(name)) {
            return Ok(None);
        }
        let lock = self.request_lock(session);
        let _turn = lock.lock().await;
        let dir = self.made_workspace(session, shown)?;
        let name = name.to_string();
        let restored =
            tokio::task::spawn_blocking(move || trees.restore(&dir, Label::Checkpoint(&name)))
                .await
                .map_err(|err| RequestError::Workspace(format!("session {shown}: {err}")))?
                .map_err(|err| refused(shown, err))?;
        Ok(Some(restored.changes))
    }

    fn made_workspace(&self, session: &SessionName, shown: &str) -> Result<PathBuf, RequestError> {
        let workspace = self.workspace(session);
        workspace.create().map_err(|e| {
            RequestError::Workspace(format!(
                "cannot make session {shown}'s workspace {}: {e}",
                workspace.dir().display()
            ))
        })?;
        Ok(workspace.dir().to_path_buf())
    }

    /// Before a request without a caller directory makes its workspace: the session's
    /// workspace is missing on this node (as the request's `look` found it) but it has a
    /// latest recording, so its files are brought back once the session is admitted here
    /// ([`Cellvisor::bring_back`]).
    pub(super) fn files_to_bring_back(
        &self,
        request: &EvalRequest,
        look: Option<&super::workspace::WorkspaceLook>,
    ) -> Option<PendingFiles> {
        let look = look?;
        let store = self.snapshots.as_ref()?;
        if look.found.is_some() || !store.trees(&look.name).has(Label::Latest) {
            return None;
        }
        Some(PendingFiles {
            session: look.name.clone(),
            shown: request.session.clone(),
            dir: look.dir.clone(),
        })
    }

    /// Restores the latest recording into the workspace `pending` names (the request holds
    /// the session's turn). A recording that fails its check is refused once, deleted, and
    /// said to the first cell, as a namespace's snapshot is: the session goes on without it.
    pub(super) async fn bring_back(
        &self,
        pending: PendingFiles,
    ) -> Result<FilesBack, RequestError> {
        let store = self.snapshots.clone().ok_or_else(|| {
            RequestError::Workspace(format!("session {}: snapshots are off", pending.shown))
        })?;
        let trees = store.trees(&pending.session);
        let dir = self.made_workspace(&pending.session, &pending.shown)?;
        let made = dir.clone();
        let done = tokio::task::spawn_blocking(move || {
            let done = trees.restore(&dir, Label::Latest);
            if matches!(
                done,
                Err(TreeError::Manifest { .. } | TreeError::Tampered { .. })
            ) {
                let _ = trees.forget(Label::Latest);
            }
            done
        })
        .await
        .map_err(|err| RequestError::Workspace(format!("session {}: {err}", pending.shown)))?;
        match done {
            Ok(restored) => Ok(FilesBack::Restored(restored)),
            Err(err @ (TreeError::Manifest { .. } | TreeError::Tampered { .. })) => {
                tracing::warn!(session = %pending.shown, "{err}");
                Ok(FilesBack::Refused(format!(
                    "{err}; it was deleted, and the session goes on with an empty workspace"
                )))
            }
            Err(err) => {
                // Refused, mostly before any file was written (a missing blob is found
                // first), but perhaps midway (a blob gone between its check and its copy, a
                // write that failed): the workspace this request made goes whole, so the next
                // request brings the files back instead of running in a partial or empty
                // workspace that hides them. The request holds the session's turn: nothing
                // else wrote there.
                let _ = std::fs::remove_dir_all(&made);
                Err(refused(&pending.shown, err))
            }
        }
    }
}

/// What became of a workspace brought back from the latest recording.
pub(super) enum FilesBack {
    /// Its files came back.
    Restored(Restored),
    /// The recording was refused; the first cell is told why.
    Refused(String),
}

/// A workspace to bring back from the session's latest recording, once admitted.
pub(super) struct PendingFiles {
    session: SessionName,
    shown: String,
    dir: PathBuf,
}

impl PendingFiles {
    /// The request was not admitted here: the workspace it made (still empty) goes, so
    /// the request that is admitted finds it missing and brings the files back.
    pub(super) fn undo(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Tells the first cell of `result` what became of its workspace: its ledger gains the
/// files (a ledger of its own when the namespace had nothing to restore), or its notice says
/// why the recording was refused.
pub(super) fn tell_files(result: &mut EvalResult, back: FilesBack) {
    let Some(first) = result.cells.first_mut() else {
        return;
    };
    let restored = match back {
        FilesBack::Restored(restored) => restored,
        FilesBack::Refused(why) => {
            first.report.notice = Some(match first.report.notice.take() {
                Some(notice) => format!("{notice}\n{why}"),
                None => why,
            });
            return;
        }
    };
    let ledger = first.report.state.get_or_insert_with(|| StateLedger {
        restored: Vec::new(),
        skipped: Vec::new(),
        from: SnapshotOrigin {
            taken_at: restored.taken_at.clone(),
            reason: restored.reason.clone(),
            cells_since: 0,
            checkpoint: None,
            node: Some(restored.node.clone()).filter(|n| !n.is_empty()),
        },
        files: None,
    });
    ledger.files = Some(restored.changes);
}

fn refused(shown: &str, err: TreeError) -> RequestError {
    RequestError::Workspace(format!("session {shown}: {err}"))
}
