//! The `uid` isolation level in the supervisor: a session's uid leased when its first worker
//! is planned, its directories given to that uid, and the uid taken back once the session's
//! last language stopped and every process that ran as it is gone (`UidReclaimed`).

use super::Supervisor;
use crate::isolation::turns::Handover;
use crate::isolation::{dirs, procs};
use crate::session::SessionKey;
use crate::spawn::WorkerSpec;
use actix::prelude::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Every process of a released uid is gone: it may be leased again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UidReclaimed {
    pub uid: u32,
}

/// How long ending a closed session's processes may take before the uid is held back.
const END_PATIENCE: Duration = Duration::from_secs(10);

impl Handler<UidReclaimed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: UidReclaimed, _: &mut Context<Self>) {
        if let Some(leases) = &mut self.uids {
            leases.reclaimed(msg.uid);
        }
    }
}

impl Supervisor {
    /// At the `uid` level, leases `key`'s session its uid and has the launcher give it its
    /// directories before the worker starts (off this thread, in the session's turn); the
    /// spec's worker then runs as that uid. At the other levels the session gets its own
    /// temporary directory (the inherited one is nobody's to clean). `Err` says why the
    /// session cannot start.
    pub(super) fn give_uid(
        &mut self,
        key: &SessionKey,
        spec: &mut WorkerSpec,
    ) -> Result<(), String> {
        let Some(leases) = &mut self.uids else {
            let tmp = self.session_tmp(key);
            cellvisor_ipc::socket::ensure_private_dir_nofollow(&tmp).map_err(|e| {
                format!(
                    "cannot make the session's temporary directory {}: {e}",
                    tmp.display()
                )
            })?;
            spec.env.set_session_tmp(&tmp);
            return Ok(());
        };
        let uid = leases.lease(&key.session).map_err(|e| e.to_string())?;
        let name = key.session.dir_name();
        let tmp = self.session_tmp(key);
        let artifacts = self.base.artifacts.dir().join(&name);
        let mut own = vec![tmp.clone(), artifacts];
        own.extend(spec.env.store_dir());
        // The workspace the session works in: the uid's, whatever subdirectory it runs in.
        // Only its own: a per-call session borrowing its named session's workspace leases a
        // uid of its own, and handing it the workspace would take it from the named
        // session's uid (and give it to the daemon when the per-call uid is released).
        let workspace = spec
            .cwd
            .as_deref()
            .and_then(|cwd| crate::workspaces::Workspace::containing(&self.base.workspaces, cwd))
            .filter(|w| {
                *w == crate::workspaces::Workspace::of(&self.base.workspaces, &key.session)
            });
        own.extend(workspace.map(|w| w.dir().to_path_buf()));
        let mut create = Vec::new();
        let mut traversable = Vec::new();
        if let Some(store) = self.base.snapshots.as_ref() {
            let dir = store.dir(key);
            create.push(dir.join("checkpoints"));
            if store.fenced().is_some() {
                create.push(dir.join(crate::fleet::pointer::BLOBS_DIR));
            }
            traversable.extend(dir.parent().map(Path::to_path_buf));
            own.push(dir);
        }
        let given = self.uid_dirs.entry(key.session.to_string()).or_default();
        for dir in &own {
            if !given.contains(dir) {
                given.push(dir.clone());
            }
        }
        // The walks run off this thread, before the worker starts, in the session's turn.
        let mut handover = Handover::new(uid, own, self.turns.ticket(key.session.as_str()));
        handover.create = create;
        handover.traversable = traversable;
        spec.handover = Some(Arc::new(handover));
        spec.env.set_session_tmp(&tmp);
        spec.uid = Some(uid);
        Ok(())
    }

    /// The session's temporary directory in this language, where the session's own
    /// `tmp_dir` finds it to remove it when the session forgets.
    fn session_tmp(&self, key: &SessionKey) -> std::path::PathBuf {
        self.base
            .run_dir
            .join("tmp")
            .join(key.session.dir_name())
            .join(key.language.short_name())
    }

    /// After `session`'s last language stopped: its uid's processes are ended (whatever
    /// they did: setsid, double forks) off the actors' thread, and the uid is reclaimed once
    /// none is left.
    pub(super) fn release_uid_if_unused(&mut self, session: &str, ctx: &mut Context<Self>) {
        if self.sessions.keys().any(|key| key.session == session) {
            return;
        }
        let Some(uid) = self
            .uids
            .as_mut()
            .and_then(|leases| leases.release(session))
        else {
            return;
        };
        let given = self.uid_dirs.remove(session).unwrap_or_default();
        let me = ctx.address();
        // Taken now, so a session of the same name started after this gets its directories
        // only once they were taken back.
        let ticket = self.turns.ticket(session);
        tokio::task::spawn_blocking(move || {
            if procs::end_all(uid, END_PATIENCE) {
                ticket.wait();
                // Nothing of the uid runs any more: its directories go back to the daemon
                // (walked by descriptors), so the uid's next session finds none of them.
                for dir in &given {
                    if let Err(err) = dirs::reclaim(dir) {
                        tracing::warn!(uid, "cannot take back {} from uid {uid}: {err}; the uid is not leased again", dir.display());
                        return;
                    }
                }
                me.do_send(UidReclaimed { uid });
            } else {
                tracing::warn!(
                    uid,
                    "processes of uid {uid} outlived their session's close: the uid is not \
                     leased again while they run"
                );
            }
        });
    }
}
