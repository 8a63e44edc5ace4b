//! The prewarm pool: idle Python workers started ahead of demand (`python.prewarm`) that no
//! session owns yet; a new Python session claims one instead of waiting for a start.

use super::messages::{PoolRetry, PoolWorkerReady};
use super::Supervisor;
use crate::spawn::StartedWorker;
use actix::prelude::*;
use cellvisor_ipc::Language;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static POOL_SERIAL: AtomicU64 = AtomicU64::new(1);

/// How long after a failed prewarm start the pool tries again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Whether a session in `dir` needs a worker of its own rather than a prewarmed one: `dir`
/// holds a virtual environment the Python worker would pick, or startup modules of its own.
fn needs_own_worker(dir: &Path) -> bool {
    dir.join(".venv").is_dir()
        || dir.join("venv").is_dir()
        || dir.join(".cellvisor").join("startup").is_dir()
}

impl Supervisor {
    /// Starts Python workers until `python.prewarm` of them wait unclaimed.
    pub(super) fn refill_pool(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        while self.pool.len() + self.pool_starting < self.config.python.prewarm {
            self.pool_starting += 1;
            let mut spec = self.worker_spec(Language::Python, None, None);
            // Started before anyone's directory is known: a project's startup modules are
            // not its to load (a session in such a project starts its own worker).
            let user_only = if self.config.startup.user { "user" } else { "" };
            spec.env
                .retain(|(name, _)| name != cellvisor_ipc::env::STARTUP);
            spec.env
                .push((cellvisor_ipc::env::STARTUP.into(), user_only.into()));
            let serial = 1_000_000 + POOL_SERIAL.fetch_add(1, Ordering::Relaxed);
            let launch = self.launcher.launch(spec, serial);
            let me = ctx.address();
            actix::spawn(async move {
                let result = launch.await;
                if let Err(actix::dev::SendError::Closed(PoolWorkerReady(Ok(worker)))) =
                    me.try_send(PoolWorkerReady(result))
                {
                    worker.discard().await;
                }
            });
        }
    }

    /// A prewarmed worker for a new Python session in `cwd`, if one fits: the interpreter was
    /// chosen in the supervisor's directory, so a session whose directory has a virtual
    /// environment (or startup modules) of its own starts its own worker.
    pub(super) fn claim_prewarmed(
        &mut self,
        cwd: Option<&Path>,
        ctx: &mut Context<Self>,
    ) -> Option<StartedWorker> {
        if cwd.is_some_and(needs_own_worker) {
            return None;
        }
        while let Some(mut worker) = self.pool.pop() {
            if worker.child.is_running() {
                self.refill_pool(ctx);
                return Some(worker);
            }
            actix::spawn(worker.discard());
        }
        self.refill_pool(ctx);
        None
    }

    /// Ends every pooled worker (a reload changed what new workers get, or we stop).
    pub(super) fn drain_pool(&mut self) {
        for worker in self.pool.drain(..) {
            actix::spawn(worker.discard());
        }
    }

    pub(super) fn on_pool_worker_ready(&mut self, msg: PoolWorkerReady, ctx: &mut Context<Self>) {
        self.pool_starting = self.pool_starting.saturating_sub(1);
        match msg.0 {
            Ok(worker) if self.pool.len() < self.config.python.prewarm && !self.stopping => {
                self.pool.push(worker)
            }
            Ok(worker) => {
                actix::spawn(worker.discard());
            }
            Err(err) => {
                tracing::warn!(
                    "could not prewarm a Python worker: {err}; retrying in {}",
                    humantime::format_duration(RETRY_AFTER)
                );
                // Counted as starting until the retry, so no refill starts another meanwhile.
                self.pool_starting += 1;
                ctx.notify_later(PoolRetry, RETRY_AFTER);
            }
        }
    }

    pub(super) fn on_pool_retry(&mut self, ctx: &mut Context<Self>) {
        self.pool_starting = self.pool_starting.saturating_sub(1);
        self.refill_pool(ctx);
    }
}
