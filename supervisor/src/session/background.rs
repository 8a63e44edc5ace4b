//! Who watches a running cell: the request that started it until the cell yields (its
//! `yield_time_ms` passes, or it calls `yield_control()`), then one `wait` at a time; a
//! `terminate`; and where the final result goes (kept for a later `wait` when nobody
//! watches). The decisions are [`Observer`](super::observation::Observer)'s.

use super::messages::{CellYield, TerminateCell, WaitCell, WaitExpired};
use super::observation::{Handoff, YieldCause};
use super::{Running, Session, Waiter};
use crate::cell::{CellResult, CellStatus};
use crate::output::OutputSink;
use crate::session::CellReport;
use actix::prelude::*;

impl Handler<CellYield> for Session {
    type Result = ();
    /// The running cell yields: whoever watches gets the output so far, as `running`.
    fn handle(&mut self, msg: CellYield, ctx: &mut Context<Self>) {
        let Some(running) = self.turns.running_as(msg.cell_id) else {
            return;
        };
        // A yield_control() made the reader hold what came after it: let go unless cut below.
        let held = msg.cause == YieldCause::Control;
        if !running.job.may_yield {
            if held {
                running.output.release();
            }
            return;
        }
        let handoff = running.observer.on_yield(msg.cause);
        if matches!(handoff, Handoff::Requester(_)) {
            // Its request returns now: leaving no longer stops the cell.
            ctx.cancel_future(running.requester_watch);
            running.output.go_background();
            tracing::info!(session = %self.setup.key, cell_id = msg.cell_id, cause = ?msg.cause, "cell went to the background");
        }
        // Nobody looking: the output stays in the window for the next look.
        if matches!(handoff, Handoff::Nobody) {
            if held {
                running.output.release();
            }
            return;
        }
        self.report();
        match (handoff, self.snapshot()) {
            (Handoff::Requester(reply), Some((outcome, _))) => {
                let _ = reply.send(outcome);
            }
            (Handoff::Waiter(waiter), Some((_, result))) => self.answer(waiter, result),
            _ => {}
        }
    }
}

impl Handler<WaitCell> for Session {
    type Result = ();
    /// A `wait`: watch the running background cell, or collect a finished one's result.
    fn handle(&mut self, msg: WaitCell, ctx: &mut Context<Self>) {
        let ticket = self.turns.take_ticket();
        let waiter = Waiter {
            ticket,
            max_bytes: msg.max_bytes,
            reply: msg.reply,
        };
        let Some(running) = self.turns.running_as(msg.cell_id) else {
            self.collect(msg.cell_id, waiter);
            return;
        };
        // A waiter whose host went away (a client that disconnected) no longer counts.
        let _ = running.observer.take_waiter_if(|w| w.reply.is_closed());
        match running.observer.attach(waiter) {
            Ok(()) => {
                running.output.watch(msg.events);
                let timer = ctx.notify_later(
                    WaitExpired {
                        cell_id: msg.cell_id,
                        ticket,
                    },
                    msg.yield_time,
                );
                // One wait at a time: an earlier wait's timer has fired or is moot.
                if let Some(earlier) = running.wait_timer.replace(timer) {
                    ctx.cancel_future(earlier);
                }
            }
            Err((waiter, refusal)) => {
                let _ = waiter.reply.send(Err(refusal));
            }
        }
    }
}

impl Handler<WaitExpired> for Session {
    type Result = ();
    /// A wait's time passed with the cell still running: the output since the last look.
    fn handle(&mut self, msg: WaitExpired, _: &mut Context<Self>) {
        let Some(running) = self.turns.running_as(msg.cell_id) else {
            return;
        };
        let Some(waiter) = running.observer.take_waiter_if(|w| w.ticket == msg.ticket) else {
            return;
        };
        // The wait answers now: the cell's events go nowhere until the next one watches.
        running.output.watch(None);
        if let Some((_, result)) = self.snapshot() {
            self.answer(waiter, result);
        }
    }
}

impl Handler<TerminateCell> for Session {
    type Result = ();
    /// `terminate`: the host's interrupt (then grace, then kill) for a background cell; the
    /// terminator is answered with its final result. A wait in progress gets the output so
    /// far now.
    fn handle(&mut self, msg: TerminateCell, ctx: &mut Context<Self>) {
        let ticket = self.turns.take_ticket();
        let waiter = Waiter {
            ticket,
            max_bytes: None,
            reply: msg.reply,
        };
        let Some(running) = self.turns.running_as(msg.cell_id) else {
            self.collect(msg.cell_id, waiter);
            return;
        };
        match running.observer.take_over(waiter) {
            Ok(previous) => {
                if let Some(previous) = previous {
                    if let Some((_, result)) = self.snapshot() {
                        self.answer(previous, result);
                    }
                }
                tracing::info!(session = %self.setup.key, cell_id = msg.cell_id, "terminating a background cell");
                self.interrupt_by_host(Some(msg.cell_id), ctx);
            }
            Err((waiter, refusal)) => {
                let _ = waiter.reply.send(Err(refusal));
            }
        }
    }
}

impl Session {
    /// The running cell's output since the last look, as a `running` outcome and result.
    fn snapshot(&mut self) -> Option<(CellReport, CellResult)> {
        let running = self.turns.running.as_mut()?;
        let observed = running.output.cut();
        let outcome = CellReport {
            status: CellStatus::Running,
            output: observed.output.text,
            duration_ms: running.started.elapsed().as_secs_f64() * 1000.0,
            displays: observed.displays,
            status_events: observed.status_events,
            truncation: observed.output.truncation,
            notice: running.notice.take(),
            state: None,
            processes_ended: None,
            usage: None,
            out_of_memory: None,
            saved: None,
        };
        let result = result_of(running, outcome.clone());
        Some((outcome, result))
    }

    /// The result of a background cell that ended unobserved, handed over once.
    fn collect(&mut self, cell_id: u64, waiter: Waiter) {
        match self.turns.uncollected.collect(cell_id) {
            Ok(result) => self.answer(waiter, result),
            Err(refusal) => {
                let _ = waiter.reply.send(Err(refusal));
            }
        }
    }

    /// The cell ended: its final outcome goes to whoever watches, or is kept for a `wait`.
    pub(super) fn deliver_final(&mut self, mut running: Running, outcome: CellReport) {
        match running.observer.take() {
            Handoff::Requester(reply) => {
                let _ = reply.send(outcome);
            }
            Handoff::Waiter(waiter) => {
                let result = result_of(&running, outcome);
                self.answer(waiter, result);
            }
            Handoff::Nobody => {
                // A progress note waits for the next look while the cell runs; the cell ended
                // first, so its notes are dropped (they were news, not results).
                let mut outcome = outcome;
                outcome.status_events.retain(|event| !is_notify(event));
                let result = result_of(&running, outcome);
                let cap = self.setup.config.cells.max_uncollected;
                for dropped in self.turns.uncollected.keep(running.cell_id, result, cap) {
                    tracing::warn!(session = %self.setup.key, cell_id = dropped, cap, "dropped the uncollected result of a background cell: cells.max-uncollected reached");
                }
            }
        }
    }

    /// Answers a waiter, its output cut down to its `max_tokens` if it asked for less.
    fn answer(&self, waiter: Waiter, mut result: CellResult) {
        if let Some(max_bytes) = waiter.max_bytes {
            self.cap_output(&mut result, max_bytes);
        }
        let _ = waiter.reply.send(Ok(result));
    }

    /// Cuts `result`'s output to `max_bytes` with the sink's head + tail rules; the whole
    /// text goes to an artifact unless one already holds it.
    fn cap_output(&self, result: &mut CellResult, max_bytes: u64) {
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        if result.report.output.len() <= max_bytes {
            return;
        }
        let limits = (self.setup).wait_limits(max_bytes, result.cell_id, self.turns.peek_ticket());
        let mut sink = OutputSink::new(limits);
        sink.write(result.report.output.as_bytes());
        let cut = sink.finish();
        result.report.output = cut.text;
        result.report.truncation.truncated = true;
        if result.report.truncation.artifact_path.is_none() {
            result.report.truncation.artifact_path = cut.truncation.artifact_path;
            result.report.truncation.artifact_error = cut.truncation.artifact_error;
        } else if let Some(spare) = cut.truncation.artifact_path {
            self.setup.artifacts.discard(&spare);
        }
    }
}

/// Whether a status event is a `notify(...)` progress note.
fn is_notify(event: &serde_json::Value) -> bool {
    event.get("op").and_then(serde_json::Value::as_str) == Some("notify")
}

/// `outcome` as the result a `wait` returns: the cell's index, title, language and id.
fn result_of(running: &Running, outcome: CellReport) -> CellResult {
    outcome.into_result(running.job.index, running.cell_id, &running.job.spec)
}
