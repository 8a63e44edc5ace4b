//! The session's decisions that need no actor: the restart budget and a cell's deadline.
//! Plain data, so each rule is unit-tested in isolation; the actor only carries them out.

use std::time::Duration;

/// How many unplanned worker replacements a session may have in a row (`restart-budget`).
/// A successful cell refills it; a reset restores it.
///
/// Only a loss that cost somebody's work spends it: a worker that dies while no cell runs on
/// it (killed from outside, stopped and caught by the heartbeat, over the memory cap between
/// cells) is replaced when the next cell arrives and spends nothing, so a session cannot be
/// failed before its user ran anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartBudget {
    limit: u32,
    left: u32,
    /// Replacements so far, idle ones included (shown by `status`).
    restarts: u32,
}

/// What a lost worker means, per the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Start a replacement now.
    Restart,
    /// The budget is used up: the session is failed until reset.
    Exhausted,
    /// Nothing ran on it: start a replacement when the next cell comes, free of charge.
    ReplaceOnDemand,
}

impl RestartBudget {
    pub fn new(limit: u32) -> RestartBudget {
        RestartBudget {
            limit,
            left: limit,
            restarts: 0,
        }
    }

    /// A worker was lost; `under_cell` says whether a cell was running on it or had been
    /// sent to it (a cell waiting on a worker is what an idle death never has).
    pub fn on_loss(&mut self, under_cell: bool) -> Verdict {
        if !under_cell {
            self.restarts += 1;
            return Verdict::ReplaceOnDemand;
        }
        if self.left == 0 {
            return Verdict::Exhausted;
        }
        self.left -= 1;
        self.restarts += 1;
        Verdict::Restart
    }

    /// A cell completed: the worker is sound again.
    pub fn refill(&mut self) {
        self.left = self.limit;
    }

    /// A reset: the budget is whole again, at the limit now configured.
    pub fn reset(&mut self, limit: u32) {
        self.limit = limit;
        self.left = limit;
    }

    /// A reloaded `restart-budget`: applies from the next refill or reset.
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn restarts(&self) -> u32 {
        self.restarts
    }
}

/// A running cell's way to its end when it does not end by itself: at its timeout it is
/// interrupted; if it is still running `interrupt-grace` after an interrupt (the timeout's or
/// the host's), its worker is killed. Each step happens once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadline {
    timeout: Duration,
    grace: Duration,
    phase: Phase,
    cause: Option<super::outcome::CancelCause>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Interrupted,
    Killed,
}

/// What the session must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send the interrupt, and come back after `grace` ([`Deadline::grace_expired`]).
    Interrupt { grace: Duration },
    /// Kill the worker: the cell ignored its interrupt.
    Kill,
    /// Nothing (already done).
    None,
}

impl Deadline {
    pub fn new(timeout: Duration, grace: Duration) -> Deadline {
        Deadline {
            timeout,
            grace,
            phase: Phase::Running,
            cause: None,
        }
    }

    /// When the timeout fires, from the cell's start.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The timeout passed.
    pub fn expired(&mut self) -> Step {
        self.cause = Some(super::outcome::CancelCause::Timeout(self.timeout));
        self.interrupt()
    }

    /// The host interrupted the cell, or went away.
    pub fn interrupted_by_host(&mut self) -> Step {
        if self.cause.is_none() {
            self.cause = Some(super::outcome::CancelCause::Interrupt);
        }
        self.interrupt()
    }

    fn interrupt(&mut self) -> Step {
        if self.phase != Phase::Running {
            return Step::None;
        }
        self.phase = Phase::Interrupted;
        Step::Interrupt { grace: self.grace }
    }

    /// The grace after the interrupt passed with the cell still running.
    pub fn grace_expired(&mut self) -> Step {
        if self.phase != Phase::Interrupted {
            return Step::None;
        }
        self.phase = Phase::Killed;
        Step::Kill
    }

    /// Why the cell is being cancelled, if it is.
    pub fn cause(&self) -> Option<super::outcome::CancelCause> {
        self.cause
    }

    pub fn timed_out(&self) -> bool {
        matches!(self.cause, Some(super::outcome::CancelCause::Timeout(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::outcome::CancelCause;
    use super::*;

    #[test]
    fn a_crash_under_a_cell_spends_the_budget_until_it_fails() {
        let mut budget = RestartBudget::new(1);
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.on_loss(true), Verdict::Exhausted);
        assert_eq!(budget.on_loss(true), Verdict::Exhausted);
        assert_eq!(budget.restarts(), 1);
    }

    #[test]
    fn a_completed_cell_refills_and_a_reset_restores() {
        let mut budget = RestartBudget::new(2);
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        budget.refill();
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.on_loss(true), Verdict::Exhausted);
        budget.reset(1);
        assert_eq!(budget.limit(), 1);
        assert_eq!(budget.on_loss(true), Verdict::Restart);
        assert_eq!(budget.on_loss(true), Verdict::Exhausted);
    }

    #[test]
    fn an_idle_death_costs_nothing_however_often() {
        let mut budget = RestartBudget::new(1);
        for _ in 0..5 {
            assert_eq!(budget.on_loss(false), Verdict::ReplaceOnDemand);
        }
        assert_eq!(budget.restarts(), 5);
        // The budget is still whole for a real crash.
        assert_eq!(budget.on_loss(true), Verdict::Restart);
    }

    #[test]
    fn a_zero_budget_fails_at_the_first_crash() {
        let mut budget = RestartBudget::new(0);
        assert_eq!(budget.on_loss(true), Verdict::Exhausted);
    }

    #[test]
    fn a_deadline_interrupts_then_kills_once_each() {
        let grace = Duration::from_secs(5);
        let mut deadline = Deadline::new(Duration::from_secs(30), grace);
        assert_eq!(
            deadline.grace_expired(),
            Step::None,
            "no grace before an interrupt"
        );
        assert_eq!(deadline.expired(), Step::Interrupt { grace });
        assert!(deadline.timed_out());
        assert_eq!(
            deadline.cause(),
            Some(CancelCause::Timeout(Duration::from_secs(30)))
        );
        assert_eq!(deadline.interrupted_by_host(), Step::None);
        assert_eq!(deadline.grace_expired(), Step::Kill);
        assert_eq!(deadline.grace_expired(), Step::None);
    }

    #[test]
    fn a_host_interrupt_arms_the_grace_and_the_timeout_keeps_its_cause() {
        let grace = Duration::from_millis(10);
        let mut deadline = Deadline::new(Duration::from_secs(1), grace);
        assert_eq!(deadline.cause(), None);
        assert_eq!(deadline.interrupted_by_host(), Step::Interrupt { grace });
        assert_eq!(deadline.cause(), Some(CancelCause::Interrupt));
        // The timeout passing afterwards names the timeout but interrupts no second time.
        assert_eq!(deadline.expired(), Step::None);
        assert!(deadline.timed_out());
        assert_eq!(deadline.grace_expired(), Step::Kill);
    }
}
