//! The `uid` isolation level in the supervisor: a session's uid leased when its first worker
//! is planned, its directories given to that uid, and the uid taken back once the session's
//! last language stopped and every process that ran as it is gone (`UidReclaimed`).

use super::Supervisor;
use crate::isolation::{dirs, procs};
use crate::session::SessionKey;
use crate::spawn::WorkerSpec;
use actix::prelude::*;
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
    /// At the `uid` level, leases `key`'s session its uid and gives it its directories; the
    /// spec's worker then runs as that uid. `Err` says why the session cannot start.
    pub(super) fn give_uid(
        &mut self,
        key: &SessionKey,
        spec: &mut WorkerSpec,
    ) -> Result<(), String> {
        let Some(leases) = &mut self.uids else {
            return Ok(());
        };
        let uid = leases.lease(&key.session).map_err(|e| e.to_string())?;
        let name = key.session.dir_name();
        // The session's temporary directory in this language, where the session's own
        // `tmp_dir` finds it to remove it when the session forgets.
        let tmp = self
            .base
            .run_dir
            .join("tmp")
            .join(&name)
            .join(key.language.short_name());
        let artifacts = self.base.artifacts.dir().join(&name);
        let mut own = vec![tmp.clone(), artifacts];
        own.extend(spec.env.store_dir());
        // The workspace the session works in (its own, or the one a per-call request on its
        // name borrows): the uid's, whatever subdirectory it runs in.
        let workspace = spec
            .cwd
            .as_deref()
            .and_then(|cwd| crate::workspaces::Workspace::containing(&self.base.workspaces, cwd));
        own.extend(workspace.map(|w| w.dir().to_path_buf()));
        let snapshots = self.base.snapshots.as_ref().map(|store| store.dir(key));
        if let Some(dir) = &snapshots {
            let _ = std::fs::create_dir_all(dir.join("checkpoints"));
            if let Some(root) = dir.parent() {
                dirs::traversable(root)
                    .map_err(|e| format!("cannot open {}: {e}", root.display()))?;
            }
            own.push(dir.clone());
        }
        for dir in &own {
            dirs::own(dir, uid).map_err(|e| {
                format!(
                    "cannot give the session's directory {} to uid {uid}: {e}",
                    dir.display()
                )
            })?;
        }
        let given = self.uid_dirs.entry(key.session.to_string()).or_default();
        for dir in own {
            if !given.contains(&dir) {
                given.push(dir);
            }
        }
        spec.env.set_session_tmp(&tmp);
        spec.uid = Some(uid);
        Ok(())
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
        tokio::task::spawn_blocking(move || {
            if procs::end_all(uid, END_PATIENCE) {
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
