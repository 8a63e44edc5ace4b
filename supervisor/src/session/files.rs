//! A closing session's workspace saved with its namespace: the latest tree a session that
//! moved to another node (or lost its node's disk) finds its files in. Only a daemon-made
//! workspace is recorded, never a caller's own directory.

use super::Session;
use crate::snapshots::policy::SaveReason;
use crate::snapshots::tree::session::Label;
use actix::prelude::*;
use std::path::PathBuf;

impl Session {
    /// The session's daemon-made workspace on this node, if it has one.
    pub(super) fn own_workspace(&self) -> Option<PathBuf> {
        let root = crate::workspaces::root(&self.setup.config.workspaces);
        let dir = crate::workspaces::Workspace::of(&root, &self.setup.key.session)
            .dir()
            .to_path_buf();
        dir.symlink_metadata()
            .is_ok_and(|m| m.is_dir())
            .then_some(dir)
    }

    /// Records the workspace as the session's latest tree (off the actor's thread, the
    /// session waiting for it, at most `snapshots.timeout`), then goes on with `then`. A failure is logged: the stop
    /// goes on, and the workspace stays where it is on this node.
    pub(super) fn save_files_then(
        &mut self,
        ctx: &mut Context<Self>,
        reason: SaveReason,
        then: impl FnOnce(&mut Session, &mut Context<Session>) + 'static,
    ) {
        let (Some(store), Some(dir)) = (self.saves.snapshots.clone(), self.own_workspace()) else {
            then(self, ctx);
            return;
        };
        let trees = store.trees(&self.setup.key.session);
        let session = self.setup.key.to_string();
        let work =
            tokio::task::spawn_blocking(move || trees.record(&dir, Label::Latest, reason.as_str()));
        // Bounded as a namespace's save is: past it the stop goes on (the recording, which
        // cannot be cancelled, finishes or fails on its own).
        let work = tokio::time::timeout(self.setup.config.snapshots.timeout, work);
        ctx.wait(
            actix::fut::wrap_future(work).map(move |done, act: &mut Session, ctx| {
                match done {
                    Ok(Ok(Ok(recorded))) => tracing::debug!(
                        session,
                        files = recorded.files,
                        new_bytes = recorded.new_bytes,
                        skipped = recorded.skipped.len(),
                        "workspace saved with the session"
                    ),
                    Ok(Ok(Err(err))) => tracing::warn!(session, "workspace not saved: {err}"),
                    Ok(Err(err)) => tracing::warn!(session, "workspace not saved: {err}"),
                    Err(_) => {
                        tracing::warn!(session, "workspace not saved within snapshots.timeout")
                    }
                }
                then(act, ctx);
            }),
        );
    }
}
