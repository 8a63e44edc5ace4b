//! What a cell's event loop waits for besides QuickJS's job queue: timers and host tool
//! calls. While any is pending the cell goes on (code mode: an un-awaited `setTimeout` still
//! fires); both live only as long as the cell, so whatever an interrupted cell left pending
//! is dropped and never runs later, in another cell's output.

use crate::runtime::ToolOutcome;
use rquickjs::{Function, Persistent};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// The shortest interval of `setInterval`, so `setInterval(f, 0)` cannot starve the loop.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

type Callback = Persistent<Function<'static>>;

struct Timer {
    callback: Callback,
    /// `Some` for `setInterval`.
    every: Option<Duration>,
    /// Its place in the queue, while it is queued.
    queued_at: Option<(Instant, u64)>,
}

/// `setTimeout`/`setInterval` timers, run in order of due time, then of creation.
#[derive(Default)]
pub(super) struct Timers {
    next_id: u32,
    serial: u64,
    queue: BTreeMap<(Instant, u64), u32>,
    by_id: HashMap<u32, Timer>,
}

impl Timers {
    /// Schedules `callback` after `delay` (and every `delay` after that when `repeat`).
    pub(super) fn add(&mut self, callback: Callback, delay: Duration, repeat: bool) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let id = self.next_id;
        let every = repeat.then(|| delay.max(MIN_INTERVAL));
        self.by_id.insert(
            id,
            Timer {
                callback,
                every,
                queued_at: None,
            },
        );
        self.enqueue(id, Instant::now() + delay);
        id
    }

    fn enqueue(&mut self, id: u32, due: Instant) {
        self.serial += 1;
        let key = (due, self.serial);
        if let Some(timer) = self.by_id.get_mut(&id) {
            timer.queued_at = Some(key);
            self.queue.insert(key, id);
        }
    }

    pub(super) fn clear(&mut self, id: u32) {
        if let Some(timer) = self.by_id.remove(&id) {
            if let Some(key) = timer.queued_at {
                self.queue.remove(&key);
            }
        }
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.queue.keys().next().map(|(due, _)| *due)
    }

    /// The first timer due at `now`, taken off the queue (an interval stays known, to be
    /// [`Timers::reschedule`]d after it ran).
    pub(super) fn take_due(&mut self, now: Instant) -> Option<(u32, Callback)> {
        let (&key, &id) = self
            .queue
            .iter()
            .next()
            .filter(|((due, _), _)| *due <= now)?;
        self.queue.remove(&key);
        let timer = self.by_id.get_mut(&id)?;
        timer.queued_at = None;
        let callback = timer.callback.clone();
        if timer.every.is_none() {
            self.by_id.remove(&id);
        }
        Some((id, callback))
    }

    /// Queues an interval again after its callback ran (unless the callback cleared it).
    pub(super) fn reschedule(&mut self, id: u32) {
        let every = self
            .by_id
            .get(&id)
            .filter(|timer| timer.queued_at.is_none())
            .and_then(|timer| timer.every);
        if let Some(every) = every {
            self.enqueue(id, Instant::now() + every);
        }
    }

    /// Drops every timer (their callbacks must not outlive the runtime).
    pub(super) fn clear_all(&mut self) {
        self.queue.clear();
        self.by_id.clear();
    }
}

/// A host tool call the cell awaits.
pub(super) struct PendingCall {
    pub(super) answer: Receiver<ToolOutcome>,
    /// Resolves the call's promise with `[ok, text]`.
    pub(super) resolve: Callback,
    /// The answer, once it arrived while we were waiting on this call.
    pub(super) outcome: Option<ToolOutcome>,
}

/// Why the answer channel closed without an answer.
const NO_ANSWER: &str = "the host dropped the call without answering";

impl PendingCall {
    /// The answer, if it is there.
    pub(super) fn poll(&mut self) -> Option<ToolOutcome> {
        if let Some(outcome) = self.outcome.take() {
            return Some(outcome);
        }
        match self.answer.try_recv() {
            Ok(outcome) => Some(outcome),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(NO_ANSWER.into())),
        }
    }

    /// Blocks for at most `timeout` for the answer, keeping it for [`PendingCall::poll`].
    pub(super) fn wait(&mut self, timeout: Duration) {
        if self.outcome.is_some() {
            return;
        }
        match self.answer.recv_timeout(timeout) {
            Ok(outcome) => self.outcome = Some(outcome),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.outcome = Some(Err(NO_ANSWER.into())),
        }
    }
}
