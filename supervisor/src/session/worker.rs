//! A session's worker over its life: start (a prewarmed one claimed with [`ClaimWorker`] when
//! one fits what the session [`Wanted`]), heartbeat, memory cap, reset and close, planned stop
//! (Shutdown frame, then SIGTERM, then SIGKILL, one `StopEscalation` each), policy kill and
//! reload. What its loss means is decided in [`loss`](super::loss).

use super::closing::AfterStop;
use super::link::Link;
use super::messages::{
    ClaimWorker, CloseSession, HeartbeatTick, MemoryTick, ResetSession, SessionEvent,
    StopEscalation, StopStep, UpdateConfig, WorkerNotice, WorkerStarted,
};
use super::outcome::{self, KillReason};
use super::slot::Beat;
use super::state::AfterSave;
use super::{Session, Worker};
use crate::python_choice::PythonChoice;
use crate::snapshots::policy::SaveReason;
use actix::prelude::*;
use cellvisor_ipc::ToWorker;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// What a session's worker would be started with, as far as a prewarmed one can differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The interpreter the request's Python choice names (`None`: none was found).
    pub program: Option<PathBuf>,
    /// The request's own `VIRTUAL_ENV`.
    pub virtual_env: Option<PathBuf>,
    /// The session's directory holds a virtual environment or startup modules of its own
    /// (a prewarmed worker loaded neither).
    pub project_specific: bool,
}

impl Wanted {
    /// What a session in `cwd` whose request chose `choice` wants.
    pub fn new(choice: Option<&PythonChoice>, cwd: Option<&Path>) -> Wanted {
        Wanted {
            program: choice.map(|c| c.program.clone()),
            virtual_env: choice.and_then(|c| c.virtual_env.clone()),
            project_specific: cwd.is_some_and(has_project_python),
        }
    }
}

/// Whether `dir` holds a virtual environment the Python worker would pick, or startup
/// modules of its own.
fn has_project_python(dir: &Path) -> bool {
    dir.join(".venv").is_dir()
        || dir.join("venv").is_dir()
        || dir.join(".cellvisor").join("startup").is_dir()
}

impl Handler<StopEscalation> for Session {
    type Result = ();
    /// A stopping worker outlived its grace: SIGTERM (the worker ends its descendants and
    /// exits), then SIGKILL to it and every descendant.
    fn handle(&mut self, msg: StopEscalation, ctx: &mut Context<Self>) {
        let Worker::Stopping {
            generation,
            process,
        } = &self.slot.worker
        else {
            return;
        };
        if *generation != msg.generation {
            return;
        }
        match msg.step {
            StopStep::Terminate => {
                process.signal_group(Signal::SIGTERM);
                ctx.notify_later(
                    StopEscalation {
                        generation: msg.generation,
                        step: StopStep::Kill,
                    },
                    self.setup.config.sessions.shutdown_grace,
                );
            }
            StopStep::Kill => process.kill_tree(),
        }
    }
}

impl Handler<WorkerStarted> for Session {
    type Result = ();
    fn handle(&mut self, msg: WorkerStarted, ctx: &mut Context<Self>) {
        if !self.slot.is_starting(msg.generation) {
            if let Ok(worker) = msg.result {
                actix::spawn(worker.discard());
            }
            return;
        }
        match msg.result {
            Ok(worker) => {
                tracing::info!(session = %self.setup.key, pid = worker.pid, engine = %worker.engine, "worker started");
                self.slot.start_error = None;
                self.setup.metrics.worker_started(self.setup.key.language);
                let link = Link::spawn(worker, msg.generation, ctx.address());
                self.slot.worker = Worker::Ready {
                    generation: msg.generation,
                    link,
                    last_heard: Instant::now(),
                    killed_for: None,
                    oom_before: super::kernel_oom::OomCounters::read(),
                };
                if self.closing.stop_pending() {
                    self.stop_worker(ctx);
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(session = %self.setup.key, "worker failed to start: {err}");
                self.slot.worker = Worker::None;
                let message = outcome::start_failed(self.setup.key.language, &err.to_string());
                self.slot.start_error = Some(message.clone());
                if self.closing.stop_pending() {
                    self.finish_stop(ctx);
                    return;
                }
                self.turns.refuse_next(message);
            }
        }
        self.pump(ctx);
    }
}

impl Handler<WorkerNotice> for Session {
    type Result = ();
    /// The worker said something for the next cell (a startup module failed): the first cell
    /// carries it, even one already running (the notice crossed it).
    fn handle(&mut self, msg: WorkerNotice, _: &mut Context<Self>) {
        if !self.slot.is_ready(msg.generation) {
            return;
        }
        match self.turns.running.as_mut() {
            Some(running) => running.notice.add(msg.message),
            None => self.notice.add(msg.message),
        }
    }
}

impl Handler<MemoryTick> for Session {
    type Result = ();
    /// The supervisor's sampler measured worker `pid`'s tree at `rss`.
    fn handle(&mut self, msg: MemoryTick, ctx: &mut Context<Self>) {
        let MemoryTick { pid, rss } = msg;
        let Some(cap) = self.setup.config.limits.max_rss.map(|c| c.as_u64()) else {
            return;
        };
        let current = matches!(&self.slot.worker, Worker::Ready { link, .. } if link.pid == pid);
        if let Some(running) = self.turns.running.as_mut().filter(|_| current) {
            running.peak_rss = running.peak_rss.max(rss);
        }
        if !current || rss <= cap || self.saving_before_stop() {
            return;
        }
        // An idle worker keeps its state across the recycle; a busy one is killed.
        if self.save_before_stop(ctx, SaveReason::MemoryRecycle, AfterSave::Recycle) {
            let reason = KillReason::OverMemory { rss, cap };
            self.add_notice(format!(
                "the worker was replaced: it {reason}; its state was saved first"
            ));
        } else {
            self.kill_worker(KillReason::OverMemory { rss, cap });
        }
    }
}

impl Handler<ResetSession> for Session {
    type Result = ();
    fn handle(&mut self, msg: ResetSession, ctx: &mut Context<Self>) {
        self.closing.reset_asked(msg.reply);
        self.forget_state();
        self.begin_reset(ctx, "the session was reset; earlier state is gone".into());
    }
}

impl Handler<CloseSession> for Session {
    type Result = ();
    fn handle(&mut self, msg: CloseSession, ctx: &mut Context<Self>) {
        let daemon_stops = msg.save == Some(SaveReason::DaemonStop);
        self.closing.asked(msg.reply, daemon_stops);
        let saving = !self.is_closing()
            && msg
                .save
                .is_some_and(|reason| self.save_before_stop(ctx, reason, AfterSave::Close));
        self.closing.begin(msg.eviction);
        if !saving && !self.saving_before_stop() {
            self.stop_worker(ctx);
        }
    }
}

impl Handler<UpdateConfig> for Session {
    type Result = ();
    fn handle(&mut self, msg: UpdateConfig, ctx: &mut Context<Self>) {
        let old_interval = self.setup.config.sessions.heartbeat_interval;
        self.setup.config = msg.0;
        self.slot
            .budget
            .set_limit(self.setup.config.sessions.restart_budget);
        if self.setup.config.sessions.heartbeat_interval != old_interval
            && self.slot.heartbeat_timer.is_some()
        {
            self.arm_heartbeat(ctx);
        }
    }
}

impl Handler<HeartbeatTick> for Session {
    type Result = ();
    /// Kills a silent worker, pings a live one; stops once no cell runs (an idle session
    /// costs the daemon nothing: a worker that dies while idle is seen by its connection
    /// closing, one that hangs while idle by the heartbeat of its next cell).
    fn handle(&mut self, _: HeartbeatTick, ctx: &mut Context<Self>) {
        if self.turns.running.is_none() {
            if let Some(timer) = self.slot.heartbeat_timer.take() {
                ctx.cancel_future(timer);
            }
            return;
        }
        let timeout = self.setup.config.sessions.heartbeat_timeout;
        if self.slot.beat(timeout) == Beat::Silent {
            self.kill_worker(KillReason::MissedHeartbeats { timeout });
        }
    }
}

impl Session {
    pub(super) fn start_worker(&mut self, ctx: &mut Context<Self>) {
        let generation = self.slot.begin_start();
        self.setup.make_tmp_dir();
        if let Some(worker) = self.slot.prestarted.take() {
            ctx.notify(WorkerStarted {
                generation,
                result: Ok(worker),
            });
            return;
        }
        // A prewarmed worker that fits (a Python session's replacement, say) saves the start;
        // never for a sandboxed session, whose worker confines itself from its start.
        let wanted = Wanted::new(
            self.env.python_choice.as_deref(),
            self.setup.spec.cwd.as_deref(),
        );
        let claim = self
            .slot
            .pool
            .as_ref()
            .filter(|_| self.env.sandbox.is_none())
            .map(|pool| pool.send(ClaimWorker { wanted }));
        let launcher = Arc::clone(&self.setup.launcher);
        let spec = self.setup.spec.clone();
        let me = ctx.address();
        // Not tied to the actor's lifetime: if the actor is gone when the worker is up, the
        // worker must still be stopped rather than leak.
        actix::spawn(async move {
            let claimed = match claim {
                Some(claim) => claim.await.ok().flatten(),
                None => None,
            };
            let result = match claimed {
                Some(worker) => Ok(worker),
                None => {
                    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
                    launcher.launch(spec, serial).await
                }
            };
            if let Err(actix::dev::SendError::Closed(WorkerStarted {
                result: Ok(worker), ..
            })) = me.try_send(WorkerStarted { generation, result })
            {
                worker.discard().await;
            }
        });
    }

    /// Asks the worker to exit: the Shutdown frame now, SIGTERM and SIGKILL later if needed.
    pub(super) fn stop_worker(&mut self, ctx: &mut Context<Self>) {
        match std::mem::replace(&mut self.slot.worker, Worker::None) {
            Worker::Ready {
                generation, link, ..
            } => {
                link.send(ToWorker::Shutdown);
                link.abandon_host();
                self.slot.worker = Worker::Stopping {
                    generation,
                    process: link.process.clone(),
                };
                // The link goes away here; the reader task keeps running until the worker exits.
                drop(link);
                ctx.notify_later(
                    StopEscalation {
                        generation,
                        step: StopStep::Terminate,
                    },
                    self.setup.config.sessions.shutdown_grace,
                );
            }
            starting @ Worker::Starting { .. } => {
                // Stopped once it is up (see on_started).
                self.slot.worker = starting;
            }
            stopping @ Worker::Stopping { .. } => self.slot.worker = stopping,
            Worker::None => self.finish_stop(ctx),
        }
        self.report();
    }

    /// The worker is gone on request: carry out what was asked.
    pub(super) fn finish_stop(&mut self, ctx: &mut Context<Self>) {
        self.slot.worker = Worker::None;
        let actions = self.closing.take_actions();
        if actions.forgets_tmp(&self.closing.fate) {
            self.setup.remove_tmp_dir();
        }
        if actions.closes() {
            let why = self.closing.why_closed(&self.setup.key);
            self.turns.refuse_all(&why);
            let (eviction, snapshot) = self.closing.closed();
            self.setup.events.do_send(SessionEvent::Stopped {
                key: self.setup.key.clone(),
                eviction,
                snapshot,
            });
            ctx.stop();
            return;
        }
        self.closing.reset_done();
        if actions.restarts() {
            self.start_worker(ctx);
        }
        self.pump(ctx);
    }

    pub(super) fn begin_reset(&mut self, ctx: &mut Context<Self>, notice: String) {
        // The namespace the latest snapshot held is gone on purpose.
        self.delete_latest();
        // Background cells from before the reset are gone with their state.
        let running = self.turns.running.as_ref().map(|r| r.cell_id);
        self.turns.uncollected.forget(running);
        self.saves.ledger = None;
        self.slot.failed = None;
        self.slot
            .budget
            .reset(self.setup.config.sessions.restart_budget);
        self.notice.replace(notice);
        self.closing.then(AfterStop::Restart);
        self.closing.then(AfterStop::ForgetTmp);
        self.stop_worker(ctx);
    }

    /// Deletes the session's snapshots and checkpoints in this language: a reset means
    /// "forget".
    pub(super) fn forget_state(&mut self) {
        self.saves.cancel_restore();
        self.forget_fenced();
        if let Some(store) = &self.saves.snapshots {
            if let Err(err) = store.forget(&self.setup.key.session, Some(self.setup.key.language)) {
                tracing::warn!(session = %self.setup.key, "cannot delete the session's snapshots: {err}");
            }
        }
    }

    /// Kills the live worker and every process under it for a policy; its exit arrives as
    /// `WorkerExited`.
    pub(super) fn kill_worker(&mut self, reason: KillReason) {
        if let Worker::Ready {
            link, killed_for, ..
        } = &mut self.slot.worker
        {
            if killed_for.is_none() {
                tracing::warn!(session = %self.setup.key, pid = link.pid, "killing worker: {reason}");
                self.setup
                    .metrics
                    .worker_killed(self.setup.key.language, &reason);
                *killed_for = Some(reason);
                link.abandon_host();
                link.process.kill_tree();
            }
        }
    }

    /// (Re)starts the heartbeat at the configured interval (when a cell starts on an idle
    /// session, or the interval changes). The worker gets a fresh allowance: silence
    /// measured against the old interval, or while idle, says nothing now.
    pub(super) fn arm_heartbeat(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.slot.heartbeat_timer.take() {
            ctx.cancel_future(timer);
        }
        if let Worker::Ready { last_heard, .. } = &mut self.slot.worker {
            *last_heard = Instant::now();
        }
        let interval = self.setup.config.sessions.heartbeat_interval;
        self.slot.heartbeat_timer =
            Some(ctx.run_interval(interval, |_, ctx| ctx.notify(HeartbeatTick)));
    }
}

#[cfg(test)]
mod tests {
    use super::Wanted;

    #[test]
    fn a_directory_with_a_venv_or_startup_modules_is_project_specific() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!Wanted::new(None, Some(dir.path())).project_specific);
        std::fs::create_dir_all(dir.path().join(".cellvisor/startup")).expect("mkdir");
        assert!(Wanted::new(None, Some(dir.path())).project_specific);
        assert!(!Wanted::new(None, None).project_specific);
    }
}
