//! The host's commands, fanned out to the sessions they name: `Control` (interrupt, reset,
//! close, discard), `ForCell` (a `wait` or `terminate`), `Status`; and the supervisor's own
//! `ReloadConfig` and `ShutdownAll`.

use super::messages::{
    CellCommand, Control, ControlAction, ForCell, ReloadConfig, SetMemoryCaps, ShutdownAll, Status,
    ZygoteRows,
};
use super::{sampling, Supervisor};
use crate::session::outcome::Eviction;
use crate::session::{
    CellReport, CloseSession, InterruptCell, QueryStatus, ResetSession, Session, SessionKey,
    SessionStatus, TerminateCell, UpdateConfig, WaitCell,
};
use crate::snapshots::policy::SaveReason;
use crate::spawn::StartedWorker;
use actix::prelude::*;
use cellvisor_ipc::Language;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Handler<Control> for Supervisor {
    type Result = ResponseFuture<usize>;
    fn handle(&mut self, msg: Control, _: &mut Context<Self>) -> Self::Result {
        let targets = self.matching(&msg.session, msg.language);
        // `close` and `reset` mean "forget": the snapshots and checkpoints go too, in the
        // languages that have no live worker as well.
        if matches!(msg.action, ControlAction::Close | ControlAction::Reset) {
            if let Some(store) = &self.base.snapshots {
                if let Err(err) = store.forget(&msg.session, msg.language) {
                    tracing::warn!(session = %msg.session, "cannot delete the session's snapshots: {err}");
                }
                if let Some(etcd) = store.fenced() {
                    for language in msg.language.map_or(Language::ALL.to_vec(), |l| vec![l]) {
                        etcd.forget(&msg.session, language);
                    }
                }
            }
        }
        if matches!(msg.action, ControlAction::Close | ControlAction::Discard) {
            for (key, _) in &targets {
                if let Some(entry) = self.sessions.get_mut(key) {
                    entry.closing = true;
                    if msg.action == ControlAction::Close {
                        let reason = crate::metrics::EvictionReason::Closed;
                        self.base.metrics.evicted(key.language, reason);
                    }
                }
            }
        }
        Box::pin(async move {
            let mut applied = 0;
            for (key, addr) in targets {
                let done = match msg.action {
                    ControlAction::Interrupt => addr.send(InterruptCell).await.unwrap_or(false),
                    ControlAction::Reset => {
                        let (tx, rx) = oneshot::channel();
                        addr.send(ResetSession { reply: Some(tx) }).await.is_ok()
                            && rx.await.is_ok()
                    }
                    ControlAction::Close | ControlAction::Discard => {
                        let eviction = (msg.action == ControlAction::Close)
                            .then(|| Eviction::Closed { key: key.clone() });
                        let (tx, rx) = oneshot::channel();
                        addr.send(CloseSession {
                            eviction,
                            save: None,
                            reply: Some(tx),
                        })
                        .await
                        .is_ok()
                            && rx.await.is_ok()
                    }
                };
                applied += usize::from(done);
            }
            applied
        })
    }
}

impl Handler<ForCell> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: ForCell, _: &mut Context<Self>) {
        let addr = self.sessions.get(&msg.key).map(|entry| entry.addr.clone());
        match (addr, msg.command) {
            (Some(addr), CellCommand::Wait(wait)) => addr.do_send(wait),
            (Some(addr), CellCommand::Terminate(terminate)) => addr.do_send(terminate),
            (None, CellCommand::Wait(WaitCell { reply, .. }))
            | (None, CellCommand::Terminate(TerminateCell { reply, .. })) => {
                let _ = reply.send(Err(crate::session::observation::Refusal::Unknown));
            }
        }
    }
}

impl Handler<Status> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<SessionStatus>>;
    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        let addrs: Vec<Addr<Session>> = self.sessions.values().map(|e| e.addr.clone()).collect();
        let sampler = Arc::clone(&self.sampler);
        Box::pin(
            async move {
                let mut rows = Vec::new();
                for addr in addrs {
                    if let Ok(row) = addr.send(QueryStatus).await {
                        rows.push(row);
                    }
                }
                rows.sort_by(|a, b| (&a.session, a.language).cmp(&(&b.session, b.language)));
                sampling::add_usage(&sampler, &mut rows).await;
                rows
            }
            .into_actor(self),
        )
    }
}

impl Handler<ZygoteRows> for Supervisor {
    type Result = Vec<crate::zygote::ZygoteStatus>;
    fn handle(&mut self, _: ZygoteRows, _: &mut Context<Self>) -> Self::Result {
        self.launcher.zygotes()
    }
}

impl Handler<ShutdownAll> for Supervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: ShutdownAll, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let pool: Vec<StartedWorker> = self.pool.drain(..).map(|p| p.into_worker()).collect();
        for submit in self.waiting.close() {
            let _ = submit
                .job
                .reply
                .send(CellReport::error("cellvisor is shutting down".into()));
        }
        let addrs: Vec<Addr<Session>> = self
            .sessions
            .values_mut()
            .map(|e| {
                e.closing = true;
                e.addr.clone()
            })
            .collect();
        let leases = self.base.leases.clone();
        Box::pin(async move {
            for worker in pool {
                worker.discard().await;
            }
            let mut pending = Vec::new();
            for addr in addrs {
                let (tx, rx) = oneshot::channel();
                addr.do_send(CloseSession {
                    eviction: None,
                    save: Some(SaveReason::DaemonStop),
                    reply: Some(tx),
                });
                pending.push(rx);
            }
            for rx in pending {
                let _ = rx.await;
            }
            // Every session has saved: another node may take them now.
            if let Some(leases) = leases {
                leases.release_all();
            }
        })
    }
}

impl Handler<SetMemoryCaps> for Supervisor {
    type Result = ();
    /// New caps apply at once to the live sessions they name, and to new ones.
    fn handle(&mut self, msg: SetMemoryCaps, ctx: &mut Context<Self>) {
        self.memory_caps = msg.0;
        for (key, entry) in &self.sessions {
            entry
                .addr
                .do_send(UpdateConfig(self.config_for(&key.session)));
        }
        self.arm_sampling(ctx);
    }
}

impl Handler<ReloadConfig> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: ReloadConfig, ctx: &mut Context<Self>) {
        let old = std::mem::replace(&mut self.config, msg.0);
        self.base
            .artifacts
            .set_max_total(self.config.output.artifact_max_total.as_u64());
        for (key, entry) in &self.sessions {
            entry
                .addr
                .do_send(UpdateConfig(self.config_for(&key.session)));
        }
        if self.config.sessions.sweep_interval != old.sessions.sweep_interval {
            self.arm_sweep(ctx);
        }
        if self.config.sessions.heartbeat_interval != old.sessions.heartbeat_interval
            || self.config.limits.max_rss != old.limits.max_rss
        {
            self.arm_sampling(ctx);
        }
        // New limits apply to new workers: the prewarmed ones were made under the old ones.
        self.drain_pool();
        self.refill_pool(ctx);
        self.drain_waiting(ctx);
    }
}

impl Supervisor {
    /// The sessions named `session`, of `language` or of every language.
    pub(super) fn matching(
        &self,
        session: &str,
        language: Option<Language>,
    ) -> Vec<(SessionKey, Addr<Session>)> {
        self.sessions
            .iter()
            .filter(|(k, _)| k.session == session && language.is_none_or(|l| l == k.language))
            .map(|(k, e)| (k.clone(), e.addr.clone()))
            .collect()
    }
}
