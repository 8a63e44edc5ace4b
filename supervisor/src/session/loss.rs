//! What the end of a worker means for its session: `WorkerExited` → its handler → [`plan`].
//!
//! [`plan`] is a plain function of how the worker ended (a planned stop, a policy kill, or an
//! end by itself), the cell that was running on it if any (whether the worker took it, what
//! it produced, whether its requester still waits, why it was being cancelled) and the
//! [`RestartBudget`]'s verdict; it returns a [`Plan`]: run the cell again, or report it with
//! this text; replace the worker now, on demand, or fail the session with the budget's
//! message. The handler (in `exited`) only carries the plan out.

use super::outcome::{
    self, append_line, CancelCause, Consequence, KillReason, StopCause, WorkerEnd, WorkerLoss,
};
use super::policy::{RestartBudget, Verdict};
use super::SessionKey;
use crate::cell::CellStatus;

/// How the worker ended, as the session saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum How {
    /// The session stopped it on purpose (reset, close, the daemon's stop): not a loss.
    Planned(StopCause),
    /// The session killed it for a policy.
    Killed(KillReason),
    /// It ended by itself.
    Ended(WorkerEnd),
}

/// The cell that was running on the worker when it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct CellAtLoss {
    /// Whether the worker took the cell (its taken record names it): it may have run.
    pub taken: bool,
    /// Whether the request that sent it still waits for it (it did not go to the
    /// background), so it can run again on the replacement.
    pub with_requester: bool,
    /// The output it produced before the end.
    pub produced: String,
    /// Why it was being cancelled, if it was (its timeout, or a host's interrupt).
    pub cancel: Option<CancelCause>,
}

/// Everything [`plan`] decides from.
#[derive(Debug, Clone, PartialEq)]
pub struct Lost<'a> {
    pub key: &'a SessionKey,
    pub how: How,
    /// What the worker wrote last on stderr.
    pub stderr_tail: &'a str,
    pub cell: Option<CellAtLoss>,
}

/// What to do about a worker's end.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A planned stop: the running cell, if any, is cancelled with this text, the budget is
    /// not touched, and the stop carries on.
    Stopped { cancelled: Option<String> },
    /// The worker was lost.
    Lost {
        loss: WorkerLoss,
        cell: ForCell,
        session: Aftermath,
    },
}

/// What a loss means for the cell that was running.
#[derive(Debug, Clone, PartialEq)]
pub enum ForCell {
    /// No cell was running.
    None,
    /// The worker never took it: it runs again, first, on the replacement.
    Requeue,
    /// It is over: report it with this status and text.
    Report { status: CellStatus, text: String },
}

/// What a loss means for the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Aftermath {
    /// Start a replacement now (the budget was charged); the notice goes to its first cell.
    Restart { notice: String },
    /// Nothing waited on the worker: no charge, a replacement starts with the next cell,
    /// which gets the notice.
    ReplaceOnDemand { notice: String },
    /// Over the restart budget: the session refuses cells with this reason until reset.
    Failed { reason: String },
}

/// Decides what a worker's end means (see the module's doc), charging `budget` for a loss
/// that cost a cell.
pub fn plan(lost: Lost<'_>, budget: &mut RestartBudget) -> Plan {
    let Lost {
        key,
        how,
        stderr_tail,
        cell,
    } = lost;
    let end = match how {
        How::Planned(why) => {
            let cancelled = cell.map(|cell| {
                let mut text = cell.produced;
                append_line(&mut text, &CancelCause::SessionStopped(why).line());
                text
            });
            return Plan::Stopped { cancelled };
        }
        How::Killed(reason) => Err(reason),
        How::Ended(end) => Ok(end),
    };
    // A cell the dead worker never took did not cause its death: it runs on the next. It was
    // still waiting on this worker, so the loss is charged all the same: a worker that dies at
    // every start (no threads, no processes left) ends as `failed`, not as an endless round
    // of replacements. One that went to the background has nobody to rerun it for: it is lost.
    let under_cell = cell.is_some();
    let requeue = cell.as_ref().is_some_and(|c| !c.taken && c.with_requester);
    let reported = cell.filter(|_| !requeue);
    let loss = match end {
        Err(reason) => WorkerLoss::Killed(reason),
        // A crash under a reported cell shows the whole stderr there instead.
        Ok(end) => WorkerLoss::crashed(
            end.to_string(),
            reported
                .is_none()
                .then(|| stderr_tail.lines().last())
                .flatten(),
        ),
    };
    let (consequence, session) = aftermath(key, &loss, budget, under_cell);
    let cell = match reported {
        None if requeue => ForCell::Requeue,
        None => ForCell::None,
        Some(cell) => cell_report(cell, &loss, consequence, stderr_tail),
    };
    Plan::Lost {
        loss,
        cell,
        session,
    }
}

/// What `loss` means for the session, as the budget (charged for a loss under a cell)
/// decides.
fn aftermath(
    key: &SessionKey,
    loss: &WorkerLoss,
    budget: &mut RestartBudget,
    under_cell: bool,
) -> (Consequence, Aftermath) {
    match budget.on_loss(under_cell) {
        Verdict::Restart => (
            Consequence::Restarted,
            Aftermath::Restart {
                notice: outcome::replaced_notice(key.language, loss),
            },
        ),
        Verdict::ReplaceOnDemand => (
            Consequence::ReplacedOnDemand,
            Aftermath::ReplaceOnDemand {
                notice: outcome::replaced_notice(key.language, loss),
            },
        ),
        Verdict::Exhausted => {
            let limit = budget.limit();
            (
                Consequence::Failed { budget: limit },
                Aftermath::Failed {
                    reason: outcome::failed_reason(key, loss, limit),
                },
            )
        }
    }
}

/// The report of the cell the worker was lost under: what it produced, its timeout if a
/// kill cancelled it, the loss's line and (unless killed) the worker's stderr.
fn cell_report(
    cell: CellAtLoss,
    loss: &WorkerLoss,
    consequence: Consequence,
    stderr_tail: &str,
) -> ForCell {
    let mut text = cell.produced;
    let killed = matches!(loss, WorkerLoss::Killed(_));
    let cancelled = killed && cell.cancel.is_some();
    if let Some(timeout @ CancelCause::Timeout(_)) = cell.cancel.filter(|_| cancelled) {
        append_line(&mut text, &timeout.line());
    }
    let mut line = outcome::loss_line(loss, consequence, cancelled);
    if !stderr_tail.is_empty() && !killed {
        line.push_str(&format!("\nworker stderr:\n{stderr_tail}"));
    }
    append_line(&mut text, &line);
    let status = if cancelled {
        CellStatus::Cancelled
    } else {
        CellStatus::Error
    };
    ForCell::Report { status, text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::outcome::Exit;
    use std::time::Duration;

    fn segfault() -> How {
        How::Ended(WorkerEnd {
            exit: Exit::Signal(11),
            fatal: None,
        })
    }

    fn cell(taken: bool, produced: &str) -> CellAtLoss {
        CellAtLoss {
            taken,
            with_requester: true,
            produced: produced.into(),
            cancel: None,
        }
    }

    fn lose(
        how: How,
        stderr_tail: &str,
        cell: Option<CellAtLoss>,
        budget: &mut RestartBudget,
    ) -> Plan {
        let key = SessionKey::for_tests();
        plan(
            Lost {
                key: &key,
                how,
                stderr_tail,
                cell,
            },
            budget,
        )
    }

    /// The text a reported cell gets, or a panic naming what was planned instead.
    fn report(plan: &Plan) -> (CellStatus, &str) {
        match plan {
            Plan::Lost {
                cell: ForCell::Report { status, text },
                ..
            } => (*status, text),
            other => panic!("no report: {other:?}"),
        }
    }

    /// What was planned for the cell and for the session, by name.
    fn decided(plan: &Plan) -> (&'static str, &'static str) {
        match plan {
            Plan::Stopped { .. } => ("stopped", "stopped"),
            Plan::Lost { cell, session, .. } => (
                match cell {
                    ForCell::None => "none",
                    ForCell::Requeue => "requeue",
                    ForCell::Report { .. } => "report",
                },
                match session {
                    Aftermath::Restart { .. } => "restart",
                    Aftermath::ReplaceOnDemand { .. } => "on demand",
                    Aftermath::Failed { .. } => "failed",
                },
            ),
        }
    }

    #[test]
    fn a_death_with_no_cell_running_costs_nothing_and_is_told_to_the_next_cell() {
        let mut budget = RestartBudget::new(1);
        let planned = lose(segfault(), "thread spawn failed\n", None, &mut budget);
        assert_eq!(
            planned,
            Plan::Lost {
                loss: WorkerLoss::Crashed(
                    "killed by signal 11 (SIGSEGV): thread spawn failed".into()
                ),
                cell: ForCell::None,
                session: Aftermath::ReplaceOnDemand {
                    notice: "the previous py worker is gone (killed by signal 11 (SIGSEGV): \
                             thread spawn failed); a new worker was started and earlier state \
                             is lost"
                        .into()
                },
            }
        );
        // The budget is still whole: a crash under a cell restarts.
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.restarts(), 2, "the idle death counts as a restart");
    }

    #[test]
    fn a_cell_the_worker_never_took_runs_again_and_the_loss_is_charged() {
        let mut budget = RestartBudget::new(1);
        let planned = lose(segfault(), "", Some(cell(false, "")), &mut budget);
        assert_eq!(decided(&planned), ("requeue", "restart"));
        assert_eq!(budget.on_loss(true), Verdict::Exhausted, "charged");
    }

    #[test]
    fn a_cell_never_taken_but_gone_to_the_background_is_lost_not_rerun() {
        let mut budget = RestartBudget::new(1);
        let background = CellAtLoss {
            with_requester: false,
            ..cell(false, "half\n")
        };
        let planned = lose(segfault(), "", Some(background), &mut budget);
        assert_eq!(
            report(&planned),
            (
                CellStatus::Error,
                "half\nworker crashed: killed by signal 11 (SIGSEGV); session restarted, state \
                 lost\n"
            )
        );
    }

    #[test]
    fn a_crash_during_a_cell_reports_it_with_the_crash_story_and_stderr() {
        let mut budget = RestartBudget::new(1);
        let planned = lose(segfault(), "boom", Some(cell(true, "so far")), &mut budget);
        assert_eq!(
            report(&planned),
            (
                CellStatus::Error,
                "so far\nworker crashed: killed by signal 11 (SIGSEGV); session restarted, \
                 state lost\nworker stderr:\nboom\n"
            )
        );
        assert_eq!(decided(&planned), ("report", "restart"));
        // Its own last word, not the exit code that only repeats it.
        let fatal = How::Ended(WorkerEnd {
            exit: Exit::Code(1),
            fatal: Some("python exited with code 3".into()),
        });
        let planned = lose(fatal, "", Some(cell(true, "")), &mut RestartBudget::new(1));
        assert_eq!(
            report(&planned).1,
            "worker crashed: python exited with code 3; session restarted, state lost\n"
        );
    }

    #[test]
    fn over_budget_the_session_fails_with_the_budgets_message() {
        let mut budget = RestartBudget::new(0);
        let planned = lose(segfault(), "", Some(cell(true, "")), &mut budget);
        assert_eq!(
            report(&planned).1,
            "worker crashed: killed by signal 11 (SIGSEGV); restart budget used up \
             (restart-budget = 0): session failed, reset it to start over\n"
        );
        let Plan::Lost {
            session: Aftermath::Failed { reason },
            ..
        } = planned
        else {
            panic!("not failed: {planned:?}");
        };
        assert_eq!(
            reason,
            "the py worker of session s was lost (killed by signal 11 (SIGSEGV)) with its \
             restart budget used up (restart-budget = 0); the session is failed: reset it to \
             start over"
        );
        // A cell never taken still fails the session over budget: no endless replacements.
        let planned = lose(segfault(), "", Some(cell(false, "")), &mut budget);
        assert_eq!(decided(&planned), ("requeue", "failed"));
    }

    #[test]
    fn a_kill_names_its_reason_and_leaves_the_stderr_out() {
        let heartbeats = How::Killed(KillReason::MissedHeartbeats {
            timeout: Duration::from_secs(15),
        });
        let planned = lose(
            heartbeats,
            "noise",
            Some(cell(true, "")),
            &mut RestartBudget::new(1),
        );
        assert_eq!(
            report(&planned),
            (
                CellStatus::Error,
                "worker killed: it missed heartbeats (no answer for 15s, heartbeat-timeout); \
                 session restarted, state lost\n"
            )
        );
        let memory = How::Killed(KillReason::OverMemory {
            rss: 2 << 20,
            cap: 1 << 20,
        });
        let planned = lose(
            memory.clone(),
            "",
            Some(cell(true, "")),
            &mut RestartBudget::new(1),
        );
        assert_eq!(
            report(&planned).1,
            "worker killed: it used 2.0 MiB of memory (RSS), over the cap of 1.0 MiB \
             (limits.max-rss); session restarted, state lost\n"
        );
        // Over the cap between cells: free, and the next cell is told.
        let mut budget = RestartBudget::new(1);
        let planned = lose(memory, "", None, &mut budget);
        let Plan::Lost {
            session: Aftermath::ReplaceOnDemand { notice },
            ..
        } = planned
        else {
            panic!("not replaced on demand: {planned:?}");
        };
        assert!(notice.contains("(limits.max-rss)"), "{notice}");
        assert_eq!(budget.on_loss(true), Verdict::Restart);
    }

    #[test]
    fn a_cell_that_ignored_its_interrupt_is_cancelled_and_names_its_timeout() {
        let grace = How::Killed(KillReason::IgnoredInterrupt {
            grace: Duration::from_secs(5),
        });
        let timed_out = CellAtLoss {
            cancel: Some(CancelCause::Timeout(Duration::from_secs(1))),
            ..cell(true, "")
        };
        let planned = lose(
            grace.clone(),
            "",
            Some(timed_out),
            &mut RestartBudget::new(1),
        );
        assert_eq!(
            report(&planned),
            (
                CellStatus::Cancelled,
                "Command timed out after 1 seconds\nworker did not stop within interrupt-grace \
                 (5s) after the interrupt; killed it; session restarted, state lost\n"
            )
        );
        // Interrupted by its host: cancelled, without a timeout line.
        let interrupted = CellAtLoss {
            cancel: Some(CancelCause::Interrupt),
            ..cell(true, "")
        };
        let planned = lose(grace, "", Some(interrupted), &mut RestartBudget::new(1));
        assert_eq!(
            report(&planned),
            (
                CellStatus::Cancelled,
                "worker did not stop within interrupt-grace (5s) after the interrupt; killed \
                 it; session restarted, state lost\n"
            )
        );
        // A crash is not a cancel, even of a cell being interrupted.
        let interrupted = CellAtLoss {
            cancel: Some(CancelCause::Interrupt),
            ..cell(true, "")
        };
        let planned = lose(
            segfault(),
            "",
            Some(interrupted),
            &mut RestartBudget::new(1),
        );
        assert_eq!(report(&planned).0, CellStatus::Error);
    }

    #[test]
    fn a_planned_stop_is_no_loss_and_cancels_the_running_cell() {
        let mut budget = RestartBudget::new(1);
        // A daemon's stop says so (issue 27 item 7), not "reset or closed".
        for (why, line) in [
            (StopCause::ResetOrClosed, "the session was reset or closed"),
            (StopCause::DaemonStopped, "the daemon stopped"),
        ] {
            let planned = lose(
                How::Planned(why),
                "x",
                Some(cell(true, "so far")),
                &mut budget,
            );
            let cancelled = Some(format!("so far\nInterrupted: {line}\n"));
            assert_eq!(planned, Plan::Stopped { cancelled });
        }
        let reset = How::Planned(StopCause::ResetOrClosed);
        let planned = lose(reset, "", None, &mut budget);
        assert_eq!(planned, Plan::Stopped { cancelled: None });
        assert_eq!(budget.restarts(), 0);
        assert_eq!(budget.on_loss(true), Verdict::Restart, "not charged");
    }

    #[test]
    fn a_reset_restores_the_budget_a_loss_used_up() {
        let mut budget = RestartBudget::new(1);
        lose(segfault(), "", Some(cell(true, "")), &mut budget);
        let failed = lose(segfault(), "", Some(cell(true, "")), &mut budget);
        assert_eq!(decided(&failed), ("report", "failed"));
        budget.reset(1);
        let again = lose(segfault(), "", Some(cell(true, "")), &mut budget);
        assert_eq!(decided(&again), ("report", "restart"));
    }
}
