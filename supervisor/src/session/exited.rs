//! A worker's end (`WorkerExited`) carried out: how it ended (a planned stop, a policy kill,
//! an end by itself, the kernel's OOM killer), what became of the cell or state task that
//! was running, and the [`loss::plan`](super::loss::plan) for the cell and the session.

use super::kernel_oom::{self, OomCounters, OomSource};
use super::link::CellProducts;
use super::loss::{plan, Aftermath, CellAtLoss, ForCell, How, Lost, Plan};
use super::messages::WorkerExited;
use super::outcome::{self, WorkerEnd, WorkerLoss};
use super::{Running, Session, Worker};
use crate::cell::{CellStatus, Truncation};
use crate::session::CellReport;
use crate::usage::CellReadings;
use actix::prelude::*;
use cellvisor_client::usage::OutOfMemory;

impl Handler<WorkerExited> for Session {
    type Result = ();

    /// Carries out the [`plan`] for the worker's end.
    fn handle(&mut self, msg: WorkerExited, ctx: &mut Context<Self>) {
        if !self.slot.is_current(msg.generation) {
            return;
        }
        let (how, kernel_oom) = self.how_it_ended(msg.ended);
        let mut running = self.turns.running.take();
        if let Some(running) = &running {
            for timer in &running.timers {
                ctx.cancel_future(*timer);
            }
        }
        // A state task is not a cell: it is over, and the loss is planned as if none ran.
        if let Some(task) = running.take_if(|r| r.job.state.is_some()) {
            self.state_task_cut_short(task, &how);
            if !matches!(how, How::Planned(_)) && self.closing.stop_pending() {
                self.finish_stop(ctx);
                return;
            }
        }
        // What the reader collected belongs to the running cell (it is handed over first).
        let partial = msg
            .partial
            .filter(|p| running.as_ref().is_some_and(|r| r.cell_id == p.cell_id));
        let mut remains = Remains::of(partial);
        let verdict = oom_verdict(&how, kernel_oom, running.as_ref(), &remains.readings);
        let cell = running.as_ref().map(|r| remains.cell_at_loss(r));
        let lost = Lost {
            key: &self.setup.key,
            how,
            stderr_tail: &msg.stderr_tail,
            cell,
        };
        match plan(lost, &mut self.slot.budget) {
            Plan::Stopped { cancelled } => self.stopped_under(running, cancelled, ctx),
            Plan::Lost {
                loss,
                cell,
                session,
            } => {
                tracing::warn!(session = %self.setup.key, "worker gone: {loss}");
                self.settle_cell(cell, running, &loss, remains, verdict);
                self.after_loss(session, &loss, ctx);
            }
        }
    }
}

/// What the reader collected of the running cell before the worker's end.
#[derive(Default)]
struct Remains {
    /// Whether the worker took the cell.
    taken: bool,
    readings: CellReadings,
    produced: String,
    displays: Vec<serde_json::Value>,
    truncation: Truncation,
}

impl Remains {
    fn of(partial: Option<CellProducts>) -> Remains {
        match partial {
            Some(p) => Remains {
                taken: p.started,
                readings: p.readings,
                produced: p.output.text,
                displays: p.displays,
                truncation: p.output.truncation,
            },
            None => Remains::default(),
        }
    }

    /// The cell `running` as the plan sees it (its output taken from here).
    fn cell_at_loss(&mut self, running: &Running) -> CellAtLoss {
        CellAtLoss {
            taken: self.taken,
            with_requester: running.observer.is_requester(),
            produced: std::mem::take(&mut self.produced),
            cancel: running.deadline.cause(),
        }
    }
}

/// The out-of-memory verdict of a cell whose worker ended `how`: the policy's kill over the
/// memory cap, or the kernel's OOM killer, with the most the worker's tree was seen to use.
fn oom_verdict(
    how: &How,
    kernel_oom: Option<OomSource>,
    running: Option<&Running>,
    readings: &CellReadings,
) -> Option<OutOfMemory> {
    match how {
        How::Killed(reason) => reason.out_of_memory(),
        _ => kernel_oom.map(|source| {
            // The figure known: the most the tree was sampled at during the cell.
            let sampled = running.map_or(0, |r| r.peak_rss);
            let read = readings.before.rss_bytes.max(readings.after.rss_bytes);
            outcome::kernel_out_of_memory(source, sampled.max(read))
        }),
    }
}

/// Why a state task was cut short by its worker's end `how`.
fn why_cut_short(how: &How) -> String {
    match how {
        How::Planned(_) => "it was stopped".to_string(),
        How::Killed(reason) => reason.to_string(),
        How::Ended(end) => end.to_string(),
    }
}

impl Session {
    /// Empties the slot and tells how its worker ended (`ended`, as the reader saw it): a
    /// planned stop, a policy kill, or an end by itself, which a SIGKILL nobody here sent
    /// and a risen OOM count make the kernel's OOM killer's (its verdict comes too).
    fn how_it_ended(&mut self, ended: WorkerEnd) -> (How, Option<OomSource>) {
        let worker = std::mem::replace(&mut self.slot.worker, Worker::None);
        let (how, oom_before): (How, Option<OomCounters>) = match worker {
            Worker::Stopping { .. } => (How::Planned(self.closing.cause), None),
            Worker::Ready {
                killed_for: Some(reason),
                ..
            } => (How::Killed(reason), None),
            Worker::Ready { oom_before, .. } => (How::Ended(ended), Some(oom_before)),
            _ => (How::Ended(ended), None),
        };
        let kernel_oom = match (&how, oom_before) {
            (How::Ended(end), Some(before)) => kernel_oom::verdict(
                end.unsent_sigkill(),
                &before,
                &OomCounters::read(),
                kernel_oom::cgroup_limit(),
            ),
            _ => None,
        };
        let how = match how {
            How::Ended(end) if kernel_oom.is_some() => How::Ended(end.by_kernel_oom()),
            how => how,
        };
        if matches!(how, How::Ended(_)) {
            self.setup.metrics.worker_crashed(self.setup.key.language);
        }
        (how, kernel_oom)
    }

    /// The state task `task` was running when its worker ended `how`: it is over.
    fn state_task_cut_short(&mut self, mut task: Running, how: &How) {
        let Some(job) = task.job.state.take() else {
            return;
        };
        let why = why_cut_short(how);
        self.state_task_lost(job, &why);
        self.deliver_final(task, CellReport::error(format!("the worker ended: {why}")));
    }

    /// A planned stop ended the worker: the cell under it is `cancelled` with that text,
    /// and the stop carries on.
    fn stopped_under(
        &mut self,
        running: Option<Running>,
        cancelled: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        if let (Some(running), Some(text)) = (running, cancelled) {
            let mut outcome = CellReport::error(text);
            outcome.status = CellStatus::Cancelled;
            outcome.duration_ms = running.started.elapsed().as_secs_f64() * 1000.0;
            self.setup.count_cell(&outcome);
            self.deliver_final(running, outcome);
        }
        self.finish_stop(ctx);
    }

    /// Carries out what the plan decided for the cell that was `running` at the `loss`.
    fn settle_cell(
        &mut self,
        cell: ForCell,
        running: Option<Running>,
        loss: &WorkerLoss,
        remains: Remains,
        verdict: Option<OutOfMemory>,
    ) {
        match (cell, running) {
            (ForCell::Requeue, Some(running)) => match running.into_requeued() {
                Ok(job) => self.turns.queue.push_front(job),
                // Not planned (the plan requeues only a cell its requester waits for).
                Err(running) => {
                    let outcome = CellReport::error(loss.to_string());
                    self.setup.count_cell(&outcome);
                    self.deliver_final(*running, outcome);
                }
            },
            (ForCell::Report { status, text }, Some(mut running)) => {
                let mut outcome =
                    running.report_at_loss(status, text, remains.truncation, remains.readings);
                outcome.displays = remains.displays;
                outcome.out_of_memory = verdict;
                self.setup.count_cell(&outcome);
                self.deliver_final(running, outcome);
                self.turns.cells_run += 1;
                self.saves.cell_ran();
            }
            _ => {}
        }
    }

    /// Carries out what the plan decided for the session: a replacement now or on demand
    /// (its first cell told, and told its state comes back when a snapshot is restored), or
    /// the failure.
    fn after_loss(&mut self, session: Aftermath, loss: &WorkerLoss, ctx: &mut Context<Self>) {
        let restoring = self.restore_after_loss();
        let kept = |notice: String| match restoring {
            true => outcome::replaced_restoring_notice(self.setup.key.language, loss),
            false => notice,
        };
        match session {
            Aftermath::Restart { notice } => {
                self.notice.replace(kept(notice));
                self.start_worker(ctx);
            }
            Aftermath::ReplaceOnDemand { notice } => self.notice.replace(kept(notice)),
            Aftermath::Failed { reason } => self.slot.failed = Some(reason),
        }
        self.pump(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::outcome::{Exit, KillReason, StopCause};

    #[test]
    fn a_state_task_cut_short_says_how() {
        assert_eq!(
            why_cut_short(&How::Planned(StopCause::ResetOrClosed)),
            "it was stopped"
        );
        let killed = How::Killed(KillReason::OverMemory { rss: 2, cap: 1 });
        assert!(why_cut_short(&killed).contains("(limits.max-rss)"));
        let ended = How::Ended(WorkerEnd {
            exit: Exit::Signal(11),
            fatal: None,
        });
        assert_eq!(why_cut_short(&ended), "killed by signal 11 (SIGSEGV)");
    }

    #[test]
    fn the_kernels_oom_verdict_takes_the_most_the_tree_was_seen_to_use() {
        let readings = CellReadings::default();
        let source = OomSource::Cgroup {
            limit: Some(1 << 20),
        };
        let ended = How::Ended(WorkerEnd {
            exit: Exit::Signal(9),
            fatal: None,
        });
        let verdict = oom_verdict(&ended, Some(source), None, &readings).expect("a verdict");
        assert_eq!(verdict.limit_bytes, 1 << 20);
        assert_eq!(oom_verdict(&ended, None, None, &readings), None);
        // The policy's kill over the cap is its own verdict.
        let over = How::Killed(KillReason::OverMemory { rss: 3, cap: 2 });
        let verdict = oom_verdict(&over, None, None, &readings).expect("a verdict");
        assert_eq!((verdict.limit_bytes, verdict.used_bytes), (2, 3));
    }
}
