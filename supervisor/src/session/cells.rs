//! A session's cells: the queue, one cell's run on the worker and its deadline (timeout ->
//! interrupt -> grace -> kill, decided by [`Deadline`]); its end is in `finished`.

use super::link::ActiveCell;
use super::messages::{
    CellDeadline, CellYield, GraceExpired, InterruptCell, RequesterGone, RunCell,
};
use super::notice::Notice;
use super::observation::{Observer, YieldCause};
use super::outcome::KillReason;
use super::policy::{Deadline, Step};
use super::window::CellOutput;
use super::{CellJob, Running, Session, Worker};
use crate::session::CellReport;
use actix::prelude::*;
use cellvisor_ipc::state::StateTask;
use cellvisor_ipc::{ExecuteCell, ToWorker};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

impl Handler<CellDeadline> for Session {
    type Result = ();
    fn handle(&mut self, msg: CellDeadline, ctx: &mut Context<Self>) {
        let CellDeadline { cell_id } = msg;
        let Some(running) = self.turns.running_as(cell_id) else {
            return;
        };
        let step = running.deadline.expired();
        let elapsed = running.started.elapsed();
        // Operators tell a long cell from a stuck one by these lines (info: the policy doing
        // its job; warn: a cell that ignored its interrupt).
        tracing::info!(
            session = %self.setup.key,
            cell_id,
            elapsed_ms = elapsed.as_millis() as u64,
            timeout_ms = running.deadline.timeout().as_millis() as u64,
            "cell timeout fired: the cell ran past its timeout"
        );
        self.take_step(step, ctx);
    }
}

impl Handler<GraceExpired> for Session {
    type Result = ();
    fn handle(&mut self, msg: GraceExpired, _: &mut Context<Self>) {
        let GraceExpired { cell_id } = msg;
        let Some(running) = self.turns.running_as(cell_id) else {
            return;
        };
        if running.deadline.grace_expired() == Step::Kill {
            let grace = self.setup.config.sessions.interrupt_grace;
            tracing::warn!(
                session = %self.setup.key,
                cell_id,
                grace_ms = grace.as_millis() as u64,
                "cell interrupt grace ran out: the cell did not stop after its interrupt; killing its worker"
            );
            self.kill_worker(KillReason::IgnoredInterrupt { grace });
        }
    }
}

impl Handler<RunCell> for Session {
    type Result = ();
    fn handle(&mut self, msg: RunCell, ctx: &mut Context<Self>) {
        self.turns.receive();
        if self.is_closing() {
            let _ = msg.0.reply.send(CellReport::error(format!(
                "session {} is closing",
                self.setup.key
            )));
            return;
        }
        self.turns.queue.push_back(msg.0);
        self.pump(ctx);
    }
}

impl Handler<InterruptCell> for Session {
    type Result = bool;
    fn handle(&mut self, _: InterruptCell, ctx: &mut Context<Self>) -> bool {
        self.interrupt_by_host(None, ctx)
    }
}

impl Handler<RequesterGone> for Session {
    type Result = ();
    fn handle(&mut self, msg: RequesterGone, ctx: &mut Context<Self>) {
        // Only a cell its request still waits for: one that went to the background belongs
        // to no request any more, and its watch may still fire once, its cancel having come
        // in the same turn as the request's end.
        let awaited = self
            .turns
            .running
            .as_ref()
            .is_some_and(|r| r.cell_id == msg.cell_id && r.observer.is_requester());
        if awaited && self.interrupt_by_host(Some(msg.cell_id), ctx) {
            tracing::info!(session = %self.setup.key, cell_id = msg.cell_id, "requester gone: interrupting its cell");
        }
    }
}

impl Session {
    /// Starts queued work if nothing is running.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        loop {
            if self.turns.running.is_some() || self.slot.in_transition() {
                break;
            }
            if !self.turns.drop_abandoned() {
                break;
            }
            let Some(front) = self.turns.queue.front_mut() else {
                break;
            };
            if front.spec.reset {
                front.spec.reset = false;
                self.forget_state();
                self.begin_reset(ctx, "the session was reset before this cell".into());
                break;
            }
            // A state task runs on the worker as it is: it must not replace it.
            let code = front.state.is_none();
            if code && (self.switch_python(ctx) || self.switch_sandbox(ctx)) {
                break;
            }
            if let Some(why) = &self.slot.failed {
                self.turns.refuse_next(why.clone());
                continue;
            }
            if self.slot.is_empty() {
                self.start_worker(ctx);
                break;
            }
            if self.restore_if_due(ctx) {
                break;
            }
            if let Some(job) = self.turns.queue.pop_front() {
                self.run_cell(ctx, job);
            }
        }
        self.report();
    }

    /// Runs `job` on the ready worker (back to the queue's front if there is none): its
    /// output's sink to the reader, its `Execute` frame, then its watch and timers.
    pub(super) fn run_cell(&mut self, ctx: &mut Context<Self>, job: CellJob) {
        let Some(link) = self.slot.link() else {
            self.turns.queue.push_front(job);
            return;
        };
        let limits = (self.setup).sink_limits(
            job.max_output_bytes,
            link.pid,
            job.cell_id,
            self.env.sandbox.is_some(),
        );
        let output = Arc::new(CellOutput::new(limits));
        let declared: Vec<String> = job.tools.iter().map(|t| t.name.clone()).collect();
        link.begin(
            ActiveCell::new(
                job.cell_id,
                job.index,
                Arc::clone(&output),
                job.events.clone(),
            )
            .with_tools(declared, job.tool_host.clone()),
        );
        let task = match job.state.as_ref().map(|s| self.state_task(s)) {
            None => StateTask::Code,
            Some(Ok(task)) => task,
            Some(Err(why)) => {
                self.refuse_state_job(job, why);
                return;
            }
        };
        self.execute(&job, task);
        // The heartbeat runs while cells do (it stops itself once the session is idle).
        if self.slot.heartbeat_timer.is_none() {
            self.arm_heartbeat(ctx);
        }
        let running = self.running_of(ctx, job, output);
        self.turns.running = Some(running);
        self.turns.touch();
    }

    /// Sends the worker `job`'s `Execute` frame for `task`: a code cell carries the session's
    /// variables to a worker that has not had them, and the caller's environment (a change
    /// to a live worker is told in the notice).
    fn execute(&mut self, job: &CellJob, task: StateTask) {
        let Some(generation) = self.slot.ready_generation() else {
            return;
        };
        let own_task = job.state.is_some();
        let session_env = match !own_task && self.env.session_vars_due(generation) {
            true => self.setup.spec.env.session_vars(),
            false => Vec::new(),
        };
        let (env_changes, env_notice) = match job.caller_env.as_ref().filter(|_| !own_task) {
            None => (Vec::new(), None),
            Some(caller) => (self.env).caller_changes(&self.setup.spec.env, caller, generation),
        };
        if let Some(link) = self.slot.link() {
            link.send(ToWorker::Execute(ExecuteCell {
                cell_id: job.cell_id,
                code: job.spec.code.clone(),
                cwd: job.cwd.as_ref().map(|p| p.to_string_lossy().into_owned()),
                tools: job.tools.to_vec(),
                session_env,
                env_changes,
                task,
            }));
        }
        if let Some(notice) = env_notice {
            self.add_notice(notice);
        }
    }

    /// `job` as the running cell: its requester watched, its deadline, yield and timers
    /// armed, its reply with the observer; a code cell takes the notice and the ledger (a
    /// state task leaves them to the next host cell).
    fn running_of(
        &mut self,
        ctx: &mut Context<Self>,
        mut job: CellJob,
        output: Arc<CellOutput>,
    ) -> Running {
        let cell_id = job.cell_id;
        let own_task = job.state.is_some();
        let mut requester = job.requester.clone();
        let requester_watch = ctx.spawn(
            async move {
                // Only an error ends this: the requester's side was dropped.
                while requester.changed().await.is_ok() {}
            }
            .into_actor(self)
            .map(move |(), _, ctx| ctx.notify(RequesterGone { cell_id })),
        );
        let config = &self.setup.config;
        let timeout = match own_task {
            true => config.snapshots.timeout,
            false => config.cells.timeout_for(job.spec.timeout),
        };
        let deadline = Deadline::new(timeout, config.sessions.interrupt_grace);
        let mut timers = vec![
            ctx.notify_later(CellDeadline { cell_id }, deadline.timeout()),
            requester_watch,
        ];
        if let Some(yield_time) = job.yield_time.filter(|_| job.may_yield) {
            let cause = YieldCause::Time;
            timers.push(ctx.notify_later(CellYield { cell_id, cause }, yield_time));
        }
        // The reply travels with the observer; the job keeps a dead end until a requeue.
        let reply = std::mem::replace(&mut job.reply, oneshot::channel().0);
        Running {
            cell_id,
            job,
            observer: Observer::Requester(reply),
            output,
            requester_watch,
            wait_timer: None,
            started: Instant::now(),
            deadline,
            timers,
            notice: match own_task {
                true => Notice::default(),
                false => std::mem::take(&mut self.notice),
            },
            ledger: if own_task { None } else { self.take_ledger() },
            peak_rss: 0,
        }
    }

    /// The host interrupts the running cell (`cell_id`, or whichever runs); whether one was
    /// running.
    pub(super) fn interrupt_by_host(
        &mut self,
        cell_id: Option<u64>,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Some(running) = self
            .turns
            .running
            .as_mut()
            .filter(|r| cell_id.is_none_or(|id| id == r.cell_id))
        else {
            return false;
        };
        let step = running.deadline.interrupted_by_host();
        self.take_step(step, ctx);
        true
    }

    /// Carries out what the running cell's [`Deadline`] decided.
    fn take_step(&mut self, step: Step, ctx: &mut Context<Self>) {
        let Some(running) = self.turns.running.as_mut() else {
            return;
        };
        match step {
            Step::Interrupt { grace } => {
                let cell_id = running.cell_id;
                if let Worker::Ready { link, .. } = &self.slot.worker {
                    link.send(ToWorker::Interrupt { cell_id });
                }
                tracing::info!(
                    session = %self.setup.key,
                    cell_id,
                    grace_ms = grace.as_millis() as u64,
                    "cell interrupt sent: the worker has the interrupt grace to stop the cell"
                );
                running
                    .timers
                    .push(ctx.notify_later(GraceExpired { cell_id }, grace));
            }
            Step::Kill => {
                let grace = self.setup.config.sessions.interrupt_grace;
                self.kill_worker(KillReason::IgnoredInterrupt { grace });
            }
            Step::None => {}
        }
    }
}
