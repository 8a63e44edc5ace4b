//! The prewarm pool: idle Python workers started ahead of demand (`python.prewarm`) that no
//! session owns yet. A new Python session, a per-call request's throw-away session and a
//! session replacing its worker (crash, reset, change of Python; an evicted session comes
//! back as a new one) claim one instead of waiting for a start, and the pool refills in the
//! background. Only a worker started the way the session's own would be is handed out
//! ([`fits`]); the session's own variables reach it with its first cell.

use super::messages::{PoolRetry, PoolWorkerReady, PrewarmedCount};
use super::Supervisor;
use crate::environment::StartupLevels;
use crate::session::{ClaimWorker, Wanted};
use crate::spawn::StartedWorker;
use actix::prelude::*;
use cellvisor_ipc::Language;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static POOL_SERIAL: AtomicU64 = AtomicU64::new(1);

/// How long after a failed prewarm start the pool tries again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long after a claim the pool starts the claimed worker's successor when it has to
/// start an interpreter: that takes most of a core for tens of milliseconds, which would
/// otherwise compete with the first cell on the claimed worker (on two cores, a crash's
/// replacement answered in 15-19 ms instead of 8-9). A successor forked from a zygote starts
/// at once: it costs a few milliseconds, and sessions opened back to back find it ready.
const REFILL_AFTER_CLAIM: Duration = Duration::from_millis(100);

/// How often the pool looks again while the zygote it would fork from starts.
const WHILE_THE_ZYGOTE_STARTS: Duration = Duration::from_millis(50);

/// A prewarmed worker waiting to be claimed.
pub(super) struct Pooled {
    worker: StartedWorker,
    /// The interpreter it runs (what discovery picked in the supervisor's directory).
    program: Option<PathBuf>,
}

impl Pooled {
    pub(super) fn into_worker(self) -> StartedWorker {
        self.worker
    }
}

/// Whether a prewarmed worker running `pooled` may serve a session that wants `wanted`:
/// the same interpreter, and nothing of the session's own (a venv the caller named, a
/// project's venv or startup modules) that the prewarmed worker was started without.
pub fn fits(pooled: Option<&Path>, wanted: &Wanted) -> bool {
    !wanted.project_specific
        && wanted.virtual_env.is_none()
        && pooled.is_some()
        && pooled == wanted.program.as_deref()
}

impl Handler<PoolWorkerReady> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PoolWorkerReady, ctx: &mut Context<Self>) {
        self.pool_starting = self.pool_starting.saturating_sub(1);
        match msg.result {
            Ok(worker) if self.pool.len() < self.config.python.prewarm && !self.stopping => {
                self.pool.push(Pooled {
                    worker,
                    program: msg.program,
                });
                // Forked refills go one at a time: the next one now.
                self.refill_pool(ctx);
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
}

impl Handler<PoolRetry> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: PoolRetry, ctx: &mut Context<Self>) {
        self.pool_starting = self.pool_starting.saturating_sub(1);
        self.refill_pool(ctx);
    }
}

impl Handler<ClaimWorker> for Supervisor {
    type Result = Option<StartedWorker>;
    fn handle(&mut self, msg: ClaimWorker, ctx: &mut Context<Self>) -> Self::Result {
        self.claim_prewarmed(&msg.wanted, ctx)
    }
}

impl Handler<PrewarmedCount> for Supervisor {
    type Result = usize;
    fn handle(&mut self, _: PrewarmedCount, _: &mut Context<Self>) -> usize {
        self.pool.len()
    }
}

impl Supervisor {
    /// Starts Python workers until `python.prewarm` of them wait unclaimed. Workers forked
    /// from a zygote are started one at a time, each as the last one is ready: a burst of
    /// claims then does not fork a burst of successors that would compete with the claimed
    /// workers' first cells, and sessions opened back to back still find one ready.
    pub(super) fn refill_pool(&mut self, ctx: &mut Context<Self>) {
        // Sandboxed sessions never take a prewarmed worker (it has no session to confine
        // to), so under an operator's sandbox a pool would only cost memory.
        // Nor do sessions with uids of their own: a pooled worker runs as no session's uid.
        if self.stopping || self.config.sandbox.enabled || self.uids.is_some() {
            return;
        }
        let spec = self.pool_spec();
        if self.launcher.zygote_starting(&spec) {
            // A worker started now would lack what the zygote preloads (`python.preload`),
            // and a session would claim it: the pool fills once the zygote is up (or gave
            // up), looking again in a moment.
            if self.pool_starting == 0 && self.pool.len() < self.config.python.prewarm {
                self.pool_starting += 1;
                ctx.notify_later(PoolRetry, WHILE_THE_ZYGOTE_STARTS);
            }
            return;
        }
        let one_at_a_time = self.launcher.forks_now(&spec);
        while self.pool.len() + self.pool_starting < self.config.python.prewarm
            && !(one_at_a_time && self.pool_starting > 0)
        {
            self.pool_starting += 1;
            let spec = self.pool_spec();
            // The worker starts in the supervisor's directory with no request's venv: the
            // same discovery, run here, names its interpreter.
            let program = crate::python_choice::choose(&spec.env, None, None).map(|c| c.program);
            let serial = 1_000_000 + POOL_SERIAL.fetch_add(1, Ordering::Relaxed);
            let launch = self.launcher.launch(spec, serial);
            let me = ctx.address();
            actix::spawn(async move {
                let ready = PoolWorkerReady {
                    result: launch.await,
                    program,
                };
                if let Err(actix::dev::SendError::Closed(PoolWorkerReady {
                    result: Ok(worker),
                    ..
                })) = me.try_send(ready)
                {
                    worker.discard().await;
                }
            });
        }
    }

    /// How a pooled worker starts: as a session's Python worker, but before anyone's
    /// directory is known, so a project's startup modules are not its to load (a session in
    /// such a project starts its own worker).
    fn pool_spec(&self) -> crate::spawn::WorkerSpec {
        let mut spec = self.worker_spec(Language::Python, None, None);
        spec.env.set_startup(StartupLevels {
            user: self.config.startup.user,
            project: false,
        });
        spec
    }

    /// A prewarmed worker for a session that wants `wanted`, if one fits; the pool refills
    /// either way (a claim is a sign of demand), a moment after a claim.
    pub(super) fn claim_prewarmed(
        &mut self,
        wanted: &Wanted,
        ctx: &mut Context<Self>,
    ) -> Option<StartedWorker> {
        let mut claimed = None;
        let mut index = 0;
        while index < self.pool.len() {
            let pooled = &mut self.pool[index];
            if !pooled.worker.child.is_running() {
                actix::spawn(self.pool.swap_remove(index).into_worker().discard());
                continue;
            }
            if fits(pooled.program.as_deref(), wanted) {
                claimed = Some(self.pool.swap_remove(index).into_worker());
                break;
            }
            index += 1;
        }
        if claimed.is_some() {
            if self.launcher.forks_now(&self.pool_spec()) {
                self.refill_pool(ctx);
            } else {
                // Counted as starting until then, so no other refill starts one meanwhile.
                self.pool_starting += 1;
                ctx.notify_later(PoolRetry, REFILL_AFTER_CLAIM);
            }
        } else {
            self.refill_pool(ctx);
        }
        claimed
    }

    /// Ends every pooled worker (a reload changed what new workers get, or we stop).
    pub(super) fn drain_pool(&mut self) {
        for pooled in self.pool.drain(..) {
            actix::spawn(pooled.into_worker().discard());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(program: &str) -> Wanted {
        Wanted {
            program: Some(program.into()),
            virtual_env: None,
            project_specific: false,
        }
    }

    #[test]
    fn a_prewarmed_worker_serves_a_session_that_wants_its_interpreter() {
        let pooled = Path::new("/usr/bin/python3");
        assert!(fits(Some(pooled), &wanted("/usr/bin/python3")));
    }

    #[test]
    fn another_interpreter_a_named_venv_or_a_project_of_its_own_start_their_own_worker() {
        let pooled = Some(Path::new("/usr/bin/python3"));
        assert!(!fits(pooled, &wanted("/usr/bin/python3.12")));
        let venv = Wanted {
            virtual_env: Some("/work/venv".into()),
            ..wanted("/usr/bin/python3")
        };
        assert!(!fits(pooled, &venv));
        let project = Wanted {
            project_specific: true,
            ..wanted("/usr/bin/python3")
        };
        assert!(!fits(pooled, &project));
    }

    #[test]
    fn an_unknown_interpreter_on_either_side_is_no_fit() {
        let nothing_found = Wanted {
            program: None,
            ..wanted("/usr/bin/python3")
        };
        assert!(!fits(Some(Path::new("/usr/bin/python3")), &nothing_found));
        assert!(!fits(None, &nothing_found));
        assert!(!fits(None, &wanted("/usr/bin/python3")));
    }
}
