//! The sweep: sessions idle past `idle-timeout` are evicted, old spilled outputs and old
//! snapshots pruned.

use super::messages::SweepTick;
use super::Supervisor;
use crate::session::outcome::Eviction;
use crate::session::SessionKey;
use actix::prelude::*;
use std::time::{Duration, Instant};

impl Handler<SweepTick> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: SweepTick, _: &mut Context<Self>) {
        self.sweep();
    }
}

impl Supervisor {
    /// Deletes spilled outputs past `output.artifact-max-age`, at most once a minute.
    pub(super) fn prune_artifacts(&mut self) {
        let max_age = self.config.output.artifact_max_age;
        if max_age.is_zero()
            || self
                .last_prune
                .is_some_and(|at| at.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        self.last_prune = Some(Instant::now());
        let dir = self.base.artifacts.dir().to_path_buf();
        actix::spawn(async move {
            let pruned = tokio::task::spawn_blocking(move || {
                crate::artifacts::prune_artifacts(&dir, max_age)
            })
            .await
            .unwrap_or(0);
            if pruned > 0 {
                tracing::info!(pruned, "deleted old spilled outputs");
            }
        });
    }

    /// Deletes snapshots past `snapshots.ttl`, then the oldest over `snapshots.max-total`,
    /// at most once a minute.
    pub(super) fn prune_snapshots(&mut self) {
        let Some(store) = self.base.snapshots.clone() else {
            return;
        };
        let ttl = self.config.snapshots.ttl;
        if self
            .last_snapshot_prune
            .is_some_and(|at| at.elapsed() < ttl.min(Duration::from_secs(60)))
        {
            return;
        }
        self.last_snapshot_prune = Some(Instant::now());
        let max_total = self.config.snapshots.max_total.as_u64();
        actix::spawn(async move {
            let pruned = tokio::task::spawn_blocking(move || {
                let now = std::time::SystemTime::now();
                let trees: usize = store.all_trees().iter().map(|t| t.expire(ttl, now)).sum();
                crate::snapshots::prune::prune(store.root(), ttl, max_total) + trees
            })
            .await
            .unwrap_or(0);
            if pruned > 0 {
                tracing::info!(pruned, "deleted old snapshots");
            }
        });
    }

    pub(super) fn sweep(&mut self) {
        self.prune_artifacts();
        self.prune_snapshots();
        let idle_timeout = self.config.sessions.idle_timeout;
        if idle_timeout.is_zero() {
            return;
        }
        let expired: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, e)| e.evictable() && e.last_active.elapsed() > idle_timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            let eviction = Eviction::Idle {
                key: key.clone(),
                idle_timeout,
            };
            self.close_entry(&key, Some(eviction));
        }
    }

    /// (Re)starts the sweep at the configured interval.
    pub(super) fn arm_sweep(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.sweep_timer.take() {
            ctx.cancel_future(timer);
        }
        let interval = self.config.sessions.sweep_interval;
        self.sweep_timer = Some(ctx.run_interval(interval, |_, ctx| ctx.notify(SweepTick)));
    }
}
