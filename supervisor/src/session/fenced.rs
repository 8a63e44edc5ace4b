//! A session's snapshots in etcd mode (docs/fleet.md): each save goes to a new immutable
//! blob named by the lease's fencing token, and becomes current only once etcd commits its
//! pointer under that token; a restore loads the blob the pointer names, and only if its
//! SHA-256 is the pointer's. Blobs no pointer names are collected after each commit.

use super::Session;
use crate::fleet::pointer::{self, Pointer};
use actix::prelude::*;
use cellvisor_ipc::state::{LoadOrder, StateTask};
use std::path::{Path, PathBuf};

impl Session {
    /// Where the next save of the latest snapshot goes: a new blob under the lease's token
    /// in etcd mode, `None` when this node holds no lease on the session (nothing it saved
    /// could become current); `latest.snap` otherwise.
    pub(super) fn latest_save_path(&self) -> Option<PathBuf> {
        let store = self.snapshots.as_ref()?;
        let Some(etcd) = store.fenced() else {
            return Some(store.latest(&self.key));
        };
        let (name, _) = etcd.next_blob(&self.key.session)?;
        Some(store.blob(&self.key, &name))
    }

    /// After a save of the latest snapshot to `saved` was written: in etcd mode, commits the
    /// pointer to it (fenced by its token), then collects the blobs nothing names.
    pub(super) fn commit_saved(&mut self, ctx: &mut Context<Self>, task: Option<&StateTask>) {
        let (Some(store), Some(StateTask::Save(order))) = (self.snapshots.clone(), task) else {
            return;
        };
        let Some(etcd) = store.fenced().cloned() else {
            return;
        };
        let path = PathBuf::from(&order.path);
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return;
        };
        let Some(token) = name.split('-').next().and_then(|t| t.parse::<i64>().ok()) else {
            return; // a checkpoint's file, not a blob
        };
        let (sha256, bytes) = match pointer::file_digest(&path) {
            Ok(digest) => digest,
            Err(err) => {
                tracing::warn!(session = %self.key, "snapshot {name} not committed: {err}");
                return;
            }
        };
        let pointer = Pointer {
            blob: name.clone(),
            sha256,
            bytes,
            cells: self.cells_run,
            node: store.node().to_string(),
            token,
        };
        let answer = etcd.commit(&self.key.session, self.key.language, pointer);
        let key = self.key.clone();
        let blobs = path.parent().map(Path::to_path_buf);
        ctx.spawn(
            async move {
                match answer.await {
                    Ok(Ok(())) => {
                        tracing::debug!(session = %key, blob = %name, "snapshot committed");
                        for stale in
                            blobs.map_or_else(Vec::new, |d| pointer::unreferenced(&d, &name))
                        {
                            let _ = std::fs::remove_file(stale);
                        }
                    }
                    Ok(Err(err)) => {
                        tracing::warn!(session = %key, "snapshot {name} not committed: {err}");
                    }
                    Err(_) => tracing::warn!(session = %key, "snapshot {name}: no commit answer"),
                }
            }
            .into_actor(self),
        );
    }

    /// The task that restores the latest snapshot: in etcd mode the blob the session's
    /// pointer names, refused (with the reason, for the next cell's notice) unless its hash
    /// is the pointer's. `Ok(None)`: nothing to restore.
    pub(super) fn latest_restore_task(&self) -> Result<Option<StateTask>, String> {
        let Some(store) = self.snapshots.as_ref() else {
            return Ok(None);
        };
        let path = match store.fenced() {
            None => store.latest(&self.key),
            Some(etcd) => {
                let Some(current) = etcd.pointer(&self.key.session, self.key.language) else {
                    return Ok(None);
                };
                let path = store.blob(&self.key, &current.blob);
                pointer::check_blob(&current, &path).map_err(|refusal| refusal.to_string())?;
                path
            }
        };
        Ok(Some(StateTask::Load(Box::new(LoadOrder {
            path: path.display().to_string(),
            key: store.session_key(&self.key),
            replace: false,
        }))))
    }

    /// In etcd mode, drops the session's pointer in this language (fenced): its namespace
    /// is gone on purpose. True: it was etcd's to drop.
    pub(super) fn forget_fenced(&self) -> bool {
        let Some(etcd) = self.snapshots.as_ref().and_then(|s| s.fenced()) else {
            return false;
        };
        etcd.forget(&self.key.session, self.key.language);
        true
    }
}
