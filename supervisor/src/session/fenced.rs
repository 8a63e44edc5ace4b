//! A session's snapshots in etcd mode (docs/fleet.md): each save goes to a new immutable
//! blob named by the lease's fencing token, and becomes current only once etcd commits its
//! pointer under that token; a restore loads the blob the pointer names, and only if its
//! SHA-256 is the pointer's. Blobs no pointer names are collected after each commit. A
//! cell's answer waits for its commit unless `snapshots.every-cell-answer = "async"`; a
//! host's named checkpoint is committed the same way, and restored only as committed.

use super::saved::{self, HeldCell};
use super::Session;
use crate::fleet::etcd::CommitError;
use crate::fleet::pointer::{self, Pointer};
use crate::once::progress::Progress;
use crate::snapshots::policy::{self, AnswerWaits};
use actix::prelude::*;
use cellvisor_ipc::state::{LoadOrder, StateRefusal, StateReport, StateTask};
use std::path::{Path, PathBuf};

/// What [`Session::start_commit`] began.
enum Begun {
    /// No commit: no fenced store, or not a blob (a checkpoint).
    Nothing,
    /// The blob cannot be committed (it cannot be read back).
    Failed(String),
    /// Under way: etcd's answer comes on `answer`.
    Started {
        answer: tokio::sync::oneshot::Receiver<Result<(), CommitError>>,
        name: String,
        blobs: Option<PathBuf>,
    },
}

/// etcd's `answer` to the commit of blob `name` (of session `key`): once committed, the
/// blobs in `blobs` that nothing names are removed; `Err` says why it was not.
async fn committed(
    answer: tokio::sync::oneshot::Receiver<Result<(), CommitError>>,
    key: super::SessionKey,
    name: String,
    blobs: Option<PathBuf>,
) -> Result<(), String> {
    let result = match answer.await {
        Ok(Ok(())) => {
            tracing::debug!(session = %key, blob = %name, "snapshot committed");
            if let Some(dir) = blobs {
                // The listing and the deletions in the blocking pool: on the actors' thread
                // they would hold every session's messages behind this directory's disk.
                let kept = name.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    for stale in pointer::unreferenced(&dir, &kept) {
                        let _ = std::fs::remove_file(stale);
                    }
                })
                .await;
            }
            Ok(())
        }
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err("no answer from the lease's task (the lease was let go)".into()),
    };
    if let Err(why) = &result {
        tracing::warn!(session = %key, "snapshot {name} not committed: {why}");
    }
    result
}

/// Why a cell's written snapshot is not its saved state.
pub(super) fn uncommitted(why: &str) -> String {
    format!(
        "its snapshot was written but not committed as the session's state in etcd ({why}); \
         this node may no longer hold the session"
    )
}

impl Session {
    /// Where the next save of the latest snapshot goes: a new blob under the lease's token
    /// in etcd mode, `None` when this node holds no lease on the session (nothing it saved
    /// could become current); `latest.snap` otherwise.
    pub(super) fn latest_save_path(&self) -> Option<PathBuf> {
        let store = self.saves.snapshots.as_ref()?;
        let Some(etcd) = store.fenced() else {
            return Some(store.latest(&self.setup.key));
        };
        let (name, _) = etcd.next_blob(&self.setup.key.session)?;
        Some(store.blob(&self.setup.key, &name))
    }

    /// After a save of the latest snapshot was written: in etcd mode, commits the pointer to
    /// its blob (fenced by its token), then collects the blobs nothing names. `held`, the
    /// cell whose save it was, is handed back to be answered now as saved, unless its answer
    /// waits for the commit ([`policy::answer_waits`]): then it is answered once etcd has
    /// decided, `saved: false` with the reason when the commit was refused or failed.
    pub(super) fn commit_saved(
        &mut self,
        ctx: &mut Context<Self>,
        task: Option<&StateTask>,
        held: Option<HeldCell>,
    ) -> Option<HeldCell> {
        let waits = policy::answer_waits(
            self.setup.config.snapshots.every_cell_answer,
            self.saves.fenced(),
        );
        let progress = self.saves.progress.clone();
        let (now, waiting) = match waits {
            AnswerWaits::Save => (held, None),
            AnswerWaits::Commit => (None, held),
        };
        let (answer, name, blobs) = match self.start_commit(task, progress) {
            Begun::Nothing => return now.or(waiting),
            Begun::Failed(why) => {
                tracing::warn!(session = %self.setup.key, "snapshot not committed: {why}");
                if let Some(held) = waiting {
                    self.deliver_held(held, saved::not_written(uncommitted(&why)));
                }
                return now;
            }
            Begun::Started {
                answer,
                name,
                blobs,
            } => (answer, name, blobs),
        };
        let key = self.setup.key.clone();
        let waiting = waiting.map(|held| self.saves.committing.wait(held));
        ctx.spawn(committed(answer, key, name, blobs).into_actor(self).map(
            move |result, session, _| {
                if let Some(held) = waiting.and_then(|n| session.saves.committing.take(n)) {
                    let saved = match result {
                        Ok(()) => saved::written(),
                        Err(why) => saved::not_written(uncommitted(&why)),
                    };
                    session.deliver_held(held, saved);
                }
            },
        ));
        now
    }

    /// Starts the commit of the blob a save task wrote (etcd mode), with `progress` (how far
    /// the request of the cell it follows got) in the same transaction.
    fn start_commit(&self, task: Option<&StateTask>, progress: Option<Progress>) -> Begun {
        let (Some(store), Some(StateTask::Save(order))) = (self.saves.snapshots.as_ref(), task)
        else {
            return Begun::Nothing;
        };
        let Some(etcd) = store.fenced() else {
            return Begun::Nothing;
        };
        let path = PathBuf::from(&order.path);
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return Begun::Nothing;
        };
        let in_blobs = path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == pointer::BLOBS_DIR);
        let Some((token, _)) = pointer::blob_order(&name).filter(|_| in_blobs) else {
            return Begun::Nothing; // a checkpoint's file, not a blob
        };
        let (sha256, bytes) = match pointer::file_digest(&path) {
            Ok(digest) => digest,
            Err(err) => return Begun::Failed(format!("{name}: {err}")),
        };
        let pointer = Pointer {
            blob: name.clone(),
            sha256,
            bytes,
            cells: self.turns.cells_run,
            node: store.node().to_string(),
            token,
        };
        Begun::Started {
            answer: etcd.commit_with_progress(
                &self.setup.key.session,
                self.setup.key.language,
                pointer,
                progress,
            ),
            blobs: path.parent().map(Path::to_path_buf),
            name,
        }
    }

    /// The task that restores the latest snapshot: in etcd mode the blob the session's
    /// pointer names, refused (with the reason, for the next cell's notice) unless its hash
    /// is the pointer's. `Ok(None)`: nothing to restore.
    pub(super) fn latest_restore_task(&self) -> Result<Option<StateTask>, String> {
        let Some(store) = self.saves.snapshots.as_ref() else {
            return Ok(None);
        };
        let path = match store.fenced() {
            None => store.latest(&self.setup.key),
            Some(etcd) => {
                let Some(current) = etcd.pointer(&self.setup.key.session, self.setup.key.language)
                else {
                    return Ok(None);
                };
                let path = store.blob(&self.setup.key, &current.blob);
                pointer::check_blob(&current, &path).map_err(|refusal| refusal.to_string())?;
                path
            }
        };
        Ok(Some(StateTask::Load(Box::new(LoadOrder {
            path: path.display().to_string(),
            key: store.session_key(&self.setup.key),
            replace: false,
        }))))
    }

    /// After a host's checkpoint `name` was written (`report`): in etcd mode commits its
    /// pointer (the file's SHA-256, fenced by the lease's token) and answers `reply` once etcd
    /// decided, refusing the checkpoint when the commit was; answers at once otherwise.
    pub(super) fn commit_checkpoint(
        &mut self,
        ctx: &mut Context<Self>,
        name: &str,
        report: StateReport,
        reply: tokio::sync::oneshot::Sender<StateReport>,
    ) {
        let Some((store, etcd)) = self
            .saves
            .snapshots
            .as_ref()
            .and_then(|s| Some((s, s.fenced()?.clone())))
        else {
            let _ = reply.send(report);
            return;
        };
        let owned = name.to_string();
        let refused = move |why: String| {
            StateReport::Refused(StateRefusal::Failed {
                why: format!("checkpoint {owned} was written but not committed in etcd: {why}"),
            })
        };
        let committed = match self.checkpoint_pointer(store, &etcd, name) {
            Ok(pointer) => pointer,
            Err(why) => {
                let _ = reply.send(refused(why));
                return;
            }
        };
        let answer = etcd.commit_checkpoint(
            &self.setup.key.session,
            self.setup.key.language,
            name,
            committed,
        );
        ctx.spawn(
            async move {
                let outcome = match answer.await {
                    Ok(Ok(())) => report,
                    Ok(Err(err)) => refused(err.to_string()),
                    Err(_) => refused("no answer from the lease's task".into()),
                };
                let _ = reply.send(outcome);
            }
            .into_actor(self),
        );
    }

    /// The pointer to checkpoint `name`'s file as written: its SHA-256, fenced by the
    /// lease's token; `Err` says why there is none.
    fn checkpoint_pointer(
        &self,
        store: &crate::snapshots::SnapshotStore,
        etcd: &crate::fleet::etcd::EtcdLeases,
        name: &str,
    ) -> Result<Pointer, String> {
        let path = store.checkpoint(&self.setup.key, name);
        let Some(token) = etcd.token(&self.setup.key.session) else {
            return Err("this node holds no lease on the session".into());
        };
        let (sha256, bytes) = pointer::file_digest(&path).map_err(|err| err.to_string())?;
        Ok(Pointer {
            blob: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sha256,
            bytes,
            cells: self.turns.cells_run,
            node: store.node().to_string(),
            token,
        })
    }

    /// In etcd mode, why a host's restore of checkpoint `name` must not run: none is
    /// committed under that name, or its file is not the one committed (an older checkpoint
    /// copied over it, a stale node's save). `None`: it may run.
    pub(super) fn checkpoint_refusal(&self, name: &str) -> Option<String> {
        let store = self.saves.snapshots.as_ref()?;
        let etcd = store.fenced()?;
        let Some(current) = etcd.checkpoint(&self.setup.key.session, self.setup.key.language, name)
        else {
            return Some(format!(
                "no checkpoint named {name} is committed in etcd for this session"
            ));
        };
        let path = store.checkpoint(&self.setup.key, name);
        pointer::check_blob(&current, &path)
            .err()
            .map(|refusal| format!("checkpoint {name}: {refusal}"))
    }

    /// In etcd mode, drops the session's pointer in this language (fenced), with the request
    /// progress its state carried: its namespace is gone on purpose. True: it was etcd's to
    /// drop.
    pub(super) fn forget_fenced(&mut self) -> bool {
        self.saves.progress = None;
        let Some(etcd) = self.saves.snapshots.as_ref().and_then(|s| s.fenced()) else {
            return false;
        };
        etcd.forget(&self.setup.key.session, self.setup.key.language);
        true
    }
}
