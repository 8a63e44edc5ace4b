//! Who looks at a running cell, as plain data: the request that started it, then (once it
//! yielded) nobody or one `wait` at a time; and the results of background cells that ended
//! with nobody looking, kept until collected.
//!
//! The session actor holds the reply channels in these types and does what their methods
//! decide; the decisions themselves are unit-tested here without an actor.

use std::collections::VecDeque;
use std::fmt;

/// Why a cell yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YieldCause {
    /// Its `yield_time_ms` passed: only the request that started it stops watching.
    Time,
    /// It called `yield_control()`: whoever watches gets the output so far.
    Control,
}

/// Who gets a running cell's output next. `R` is the requester's reply, `W` a waiter's.
#[derive(Debug)]
pub enum Observer<R, W> {
    /// The request that started the cell waits for it.
    Requester(R),
    /// The cell runs in the background and nobody waits on it.
    Detached,
    /// One `wait` (or `terminate`) waits on it.
    Waiting(W),
}

/// Whom to answer, taken out of an [`Observer`].
#[derive(Debug, PartialEq, Eq)]
pub enum Handoff<R, W> {
    Requester(R),
    Waiter(W),
    Nobody,
}

/// Why a `wait` or `terminate` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The session has no running or uncollected background cell of that id.
    Unknown,
    /// The cell's result was dropped uncollected: the session kept `cap` newer ones.
    Dropped { cap: usize },
    /// The cell has not yielded: its request still waits for it.
    NotYielded,
    /// Another `wait` already waits on the cell.
    Observed,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unknown => f.write_str("no running or uncollected background cell"),
            Refusal::Dropped { cap } => write!(f, "dropped past {cap} uncollected results"),
            Refusal::NotYielded => f.write_str("not yielded"),
            Refusal::Observed => f.write_str("already observed"),
        }
    }
}

impl<R, W> Observer<R, W> {
    /// The cell yields: who gets its output so far (and stops watching).
    pub fn on_yield(&mut self, cause: YieldCause) -> Handoff<R, W> {
        match (cause, &self) {
            (YieldCause::Time, Observer::Waiting(_)) => Handoff::Nobody,
            _ => self.take(),
        }
    }

    /// Whoever watches, now that the cell ended (or their wait is over); nobody watches after.
    pub fn take(&mut self) -> Handoff<R, W> {
        match std::mem::replace(self, Observer::Detached) {
            Observer::Requester(reply) => Handoff::Requester(reply),
            Observer::Waiting(waiter) => Handoff::Waiter(waiter),
            Observer::Detached => Handoff::Nobody,
        }
    }

    /// The waiter whose wait time passed, if `is_it` says it is still the one waiting.
    pub fn take_waiter_if(&mut self, is_it: impl FnOnce(&W) -> bool) -> Option<W> {
        match self {
            Observer::Waiting(waiter) if is_it(waiter) => match self.take() {
                Handoff::Waiter(waiter) => Some(waiter),
                _ => None,
            },
            _ => None,
        }
    }

    /// A `wait` asks to watch: refused while the requester or another waiter watches.
    pub fn attach(&mut self, waiter: W) -> Result<(), (W, Refusal)> {
        match self {
            Observer::Requester(_) => Err((waiter, Refusal::NotYielded)),
            Observer::Waiting(_) => Err((waiter, Refusal::Observed)),
            Observer::Detached => {
                *self = Observer::Waiting(waiter);
                Ok(())
            }
        }
    }

    /// A `terminate` takes over from any waiter (answered now with the output so far, which
    /// is returned); refused while the requester watches.
    pub fn take_over(&mut self, waiter: W) -> Result<Option<W>, (W, Refusal)> {
        match self {
            Observer::Requester(_) => Err((waiter, Refusal::NotYielded)),
            _ => match std::mem::replace(self, Observer::Waiting(waiter)) {
                Observer::Waiting(previous) => Ok(Some(previous)),
                _ => Ok(None),
            },
        }
    }

    /// Whether a `wait` (or `terminate`) watches the cell.
    pub fn is_waiting(&self) -> bool {
        matches!(self, Observer::Waiting(_))
    }

    /// Whether the request that started the cell still waits for it.
    pub fn is_requester(&self) -> bool {
        matches!(self, Observer::Requester(_))
    }
}

/// How many ids of dropped results are remembered, so a `wait` for one says why it is gone.
const DROPPED_REMEMBERED: usize = 256;

/// Results of background cells that ended while nobody waited, oldest first, until a `wait`
/// collects them. At most `cap` (`cells.max-uncollected`): beyond that the oldest is
/// dropped, and its id remembered so its `wait` is told so instead of "unknown".
#[derive(Debug)]
pub struct Uncollected<T> {
    results: VecDeque<(u64, T)>,
    /// Ids of dropped results, oldest first, with the cap that dropped them.
    dropped: VecDeque<(u64, usize)>,
    /// Ids below this were forgotten by a reset: their results are never kept.
    floor: u64,
}

impl<T> Default for Uncollected<T> {
    fn default() -> Self {
        Uncollected::new()
    }
}

impl<T> Uncollected<T> {
    pub fn new() -> Uncollected<T> {
        Uncollected {
            results: VecDeque::new(),
            dropped: VecDeque::new(),
            floor: 0,
        }
    }

    /// A reset: the results kept so far go, and so does that of `running` (the cell the
    /// reset cancels) when it ends, so no id from before the reset is ever answered.
    pub fn forget(&mut self, running: Option<u64>) {
        self.results.clear();
        self.dropped.clear();
        if let Some(id) = running {
            self.floor = self.floor.max(id.saturating_add(1));
        }
    }

    /// Keeps `result` of cell `id`, at most `cap` in all (a reloaded cap applies at the next
    /// keep); answers the ids of the results dropped to make room.
    pub fn keep(&mut self, id: u64, result: T, cap: usize) -> Vec<u64> {
        if id < self.floor {
            return Vec::new();
        }
        let cap = cap.max(1);
        let mut dropped = Vec::new();
        while self.results.len() >= cap {
            let Some((old, _)) = self.results.pop_front() else {
                break;
            };
            if self.dropped.len() >= DROPPED_REMEMBERED {
                self.dropped.pop_front();
            }
            self.dropped.push_back((old, cap));
            dropped.push(old);
        }
        self.results.push_back((id, result));
        dropped
    }

    /// The result of cell `id`, removed; if it was dropped, the refusal saying so (once).
    pub fn collect(&mut self, id: u64) -> Result<T, Refusal> {
        if let Some(at) = self.results.iter().position(|(kept, _)| *kept == id) {
            if let Some((_, result)) = self.results.remove(at) {
                return Ok(result);
            }
        }
        match self.dropped.iter().position(|(gone, _)| *gone == id) {
            Some(at) => {
                let cap = self.dropped.remove(at).map_or(0, |(_, cap)| cap);
                Err(Refusal::Dropped { cap })
            }
            None => Err(Refusal::Unknown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Obs = Observer<&'static str, u64>;

    #[test]
    fn the_yield_time_hands_the_requester_the_output_once() {
        let mut observer: Obs = Observer::Requester("req");
        assert_eq!(
            observer.on_yield(YieldCause::Time),
            Handoff::Requester("req")
        );
        assert_eq!(observer.on_yield(YieldCause::Time), Handoff::Nobody);
        assert!(!observer.is_requester());
    }

    #[test]
    fn yield_control_answers_a_waiter_but_the_yield_time_does_not() {
        let mut observer: Obs = Observer::Detached;
        assert!(observer.attach(1).is_ok());
        assert_eq!(observer.on_yield(YieldCause::Time), Handoff::Nobody);
        assert_eq!(observer.on_yield(YieldCause::Control), Handoff::Waiter(1));
        assert_eq!(observer.on_yield(YieldCause::Control), Handoff::Nobody);
    }

    #[test]
    fn one_waiter_at_a_time_and_none_before_the_cell_yielded() {
        let mut observer: Obs = Observer::Requester("req");
        assert_eq!(observer.attach(1).unwrap_err(), (1, Refusal::NotYielded));
        assert_eq!(observer.take_over(2).unwrap_err(), (2, Refusal::NotYielded));
        let _ = observer.take();
        assert!(observer.attach(1).is_ok());
        assert!(observer.is_waiting());
        assert_eq!(observer.attach(2).unwrap_err(), (2, Refusal::Observed));
        // A terminate takes over; the waiter it replaces is answered by the caller.
        assert_eq!(observer.take_over(3), Ok(Some(1)));
        assert_eq!(observer.take(), Handoff::Waiter(3));
    }

    #[test]
    fn only_the_current_waiter_is_timed_out() {
        let mut observer: Obs = Observer::Detached;
        assert!(observer.attach(7).is_ok());
        assert_eq!(observer.take_waiter_if(|w| *w == 6), None);
        assert_eq!(observer.take_waiter_if(|w| *w == 7), Some(7));
        assert!(observer.attach(8).is_ok());
    }

    #[test]
    fn uncollected_results_are_bounded_and_taken_once() {
        let mut kept = Uncollected::new();
        assert_eq!(kept.keep(1, "a", 2), [0u64; 0]);
        assert_eq!(kept.keep(2, "b", 2), [0u64; 0]);
        assert_eq!(kept.keep(3, "c", 2), [1u64]);
        assert_eq!(kept.collect(1), Err(Refusal::Dropped { cap: 2 }));
        assert_eq!(kept.collect(1), Err(Refusal::Unknown), "said once");
        assert_eq!(kept.collect(3), Ok("c"));
        assert_eq!(kept.collect(3), Err(Refusal::Unknown));
        assert_eq!(kept.collect(2), Ok("b"));
    }

    #[test]
    fn a_lowered_cap_drops_down_to_it_at_the_next_keep() {
        let mut kept = Uncollected::new();
        for id in 1..=4 {
            kept.keep(id, id, 8);
        }
        assert_eq!(kept.keep(5, 5, 2), [1u64, 2, 3]);
        assert_eq!(kept.collect(2), Err(Refusal::Dropped { cap: 2 }));
        assert_eq!(kept.collect(4), Ok(4));
    }

    #[test]
    fn a_reset_forgets_kept_results_and_the_cancelled_one() {
        let mut kept = Uncollected::new();
        kept.keep(1, "a", 4);
        kept.forget(Some(2));
        assert_eq!(kept.collect(1), Err(Refusal::Unknown));
        assert_eq!(kept.keep(2, "cancelled", 4), [0u64; 0]);
        assert_eq!(kept.collect(2), Err(Refusal::Unknown));
        kept.keep(3, "after", 4);
        assert_eq!(kept.collect(3), Ok("after"));
    }

    #[test]
    fn a_reset_forgets_dropped_ids_too() {
        let mut kept = Uncollected::new();
        kept.keep(1, "a", 1);
        kept.keep(2, "b", 1);
        kept.forget(None);
        assert_eq!(kept.collect(1), Err(Refusal::Unknown));
    }
}
