//! A cell's end (`CellFinished`): a state task's report goes to its purpose; a code cell's
//! report is made from what its worker said and what its deadline decided, then held for
//! its save (`every-cell`) or answered, and a worker the cell left out of descriptors is
//! replaced.

use super::messages::CellFinished;
use super::outcome::{append_line, CancelCause};
use super::policy::Deadline;
use super::{Running, Session};
use crate::cell::CellStatus;
use crate::session::CellReport;
use actix::prelude::*;
use cellvisor_client::usage::{CellUsage, MemoryLimit, OutOfMemory};
use cellvisor_ipc::{CellOutcome as WorkerOutcome, Language};

impl Handler<CellFinished> for Session {
    type Result = ();
    fn handle(&mut self, mut msg: CellFinished, ctx: &mut Context<Self>) {
        if !self.slot.is_current(msg.generation) {
            return;
        }
        let Some(mut running) = self.turns.running.take_if(|r| r.cell_id == msg.cell_id) else {
            return;
        };
        for timer in running.timers.drain(..) {
            ctx.cancel_future(timer);
        }
        if let Some(state) = running.job.state.take() {
            let report = super::state::task_report(&msg.outcome, msg.output.text);
            // The host's report first: its reply follows and finds it there.
            self.state_task_done(state, msg.state, ctx);
            self.deliver_final(running, report);
            self.pump(ctx);
            return;
        }
        let descriptors = msg.descriptors.take();
        let outcome = self.cell_report(&mut running, msg);
        let complete = outcome.status == CellStatus::Complete;
        self.setup.count_cell(&outcome);
        self.saves.cell_ran();
        let held = self.hold(running, outcome);
        let unsaved = if !self.replace_if_out_of_descriptors(descriptors, ctx) && complete {
            self.save_after_cell(ctx, held)
        } else {
            Some(held)
        };
        if let Some(held) = unsaved {
            self.deliver_unsaved(held);
        }
        self.pump(ctx);
    }
}

impl Session {
    /// The report of the code cell `running` that its worker finished with `msg`; a cell
    /// that completed refills the restart budget.
    fn cell_report(&mut self, running: &mut Running, msg: CellFinished) -> CellReport {
        if msg.outcome == WorkerOutcome::Completed {
            self.slot.budget.refill();
        }
        let mut output = msg.output;
        let (reported, out_of_memory) = reported_status(&msg.outcome, self.setup.key.language);
        let mut status = settled_status(reported, &running.deadline, &mut output.text);
        if let Some(line) = self.enforce_tmp_quota() {
            append_line(&mut output.text, &line);
            status = CellStatus::Error;
        }
        self.turns.cells_run += 1;
        self.turns.touch();
        let duration_ms = running.started.elapsed().as_secs_f64() * 1000.0;
        let usage = CellUsage {
            processes_seen: Some(msg.processes_seen),
            ..msg
                .readings
                .usage(running.peak_rss, duration_ms, output.truncation.total_bytes)
        };
        CellReport {
            status,
            output: output.text,
            duration_ms,
            displays: msg.displays,
            status_events: msg.status_events,
            truncation: output.truncation,
            notice: running.notice.take(),
            state: running.ledger.take(),
            processes_ended: (msg.processes_ended > 0).then_some(msg.processes_ended),
            usage: Some(usage),
            out_of_memory,
            saved: None,
        }
    }
}

/// The status a worker's `outcome` reports, with the verdict of an engine that reached its
/// own heap limit.
fn reported_status(
    outcome: &WorkerOutcome,
    language: Language,
) -> (CellStatus, Option<OutOfMemory>) {
    match outcome {
        WorkerOutcome::Completed => (CellStatus::Complete, None),
        WorkerOutcome::Failed { .. } => (CellStatus::Error, None),
        WorkerOutcome::Interrupted => (CellStatus::Cancelled, None),
        WorkerOutcome::OutOfMemory {
            limit_bytes,
            used_bytes,
            ..
        } => (
            CellStatus::Error,
            engine_out_of_memory(language, *limit_bytes, *used_bytes),
        ),
    }
}

/// The cell's status once its `deadline` has its say: a cell cancelled (by its timeout or
/// its host) is `cancelled`, whatever the worker reported, and its output says why.
fn settled_status(reported: CellStatus, deadline: &Deadline, text: &mut String) -> CellStatus {
    if reported == CellStatus::Cancelled || deadline.timed_out() {
        let cause = match deadline.cause() {
            Some(timeout @ CancelCause::Timeout(_)) => timeout,
            _ => CancelCause::Interrupt,
        };
        append_line(text, &cause.line());
    }
    if deadline.cause().is_some() {
        CellStatus::Cancelled
    } else {
        reported
    }
}

/// The verdict of a cell whose engine reached its own heap limit (the JavaScript and Lua
/// engines have one; Python's has none to report).
fn engine_out_of_memory(
    language: Language,
    limit_bytes: u64,
    used_bytes: u64,
) -> Option<OutOfMemory> {
    let limit = match language {
        Language::JavaScript => MemoryLimit::JsHeap,
        Language::Lua => MemoryLimit::LuaHeap,
        Language::Python => return None,
    };
    Some(OutOfMemory {
        limit,
        limit_bytes,
        used_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn deadline() -> Deadline {
        Deadline::new(Duration::from_secs(1), Duration::from_secs(5))
    }

    #[test]
    fn an_engines_heap_limit_is_a_typed_verdict_and_pythons_has_none() {
        let oom = WorkerOutcome::OutOfMemory {
            summary: "out of memory".into(),
            limit_bytes: 64,
            used_bytes: 65,
        };
        let (status, verdict) = reported_status(&oom, Language::JavaScript);
        assert_eq!(status, CellStatus::Error);
        assert_eq!(
            verdict.map(|v| (v.limit, v.used_bytes)),
            Some((MemoryLimit::JsHeap, 65))
        );
        assert_eq!(reported_status(&oom, Language::Python).1, None);
        let done = reported_status(&WorkerOutcome::Completed, Language::Lua);
        assert_eq!(done, (CellStatus::Complete, None));
    }

    #[test]
    fn a_cancelled_cell_says_why_and_a_timed_out_one_is_cancelled_whatever_it_reported() {
        let mut text = String::from("so far\n");
        let status = settled_status(CellStatus::Complete, &deadline(), &mut text);
        assert_eq!((status, text.as_str()), (CellStatus::Complete, "so far\n"));
        let mut timed_out = deadline();
        timed_out.expired();
        let mut text = String::new();
        let status = settled_status(CellStatus::Complete, &timed_out, &mut text);
        assert_eq!(status, CellStatus::Cancelled);
        assert_eq!(text, "Command timed out after 1 seconds\n");
        let mut interrupted = deadline();
        interrupted.interrupted_by_host();
        let mut text = String::new();
        let status = settled_status(CellStatus::Cancelled, &interrupted, &mut text);
        assert_eq!(status, CellStatus::Cancelled);
        assert!(!text.contains("timed out"), "{text}");
    }
}
