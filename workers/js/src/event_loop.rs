//! A cell's event loop (`JsEngine::drive`, then `run_until_idle` after its value): QuickJS's
//! job queue, due timers and answered host tool calls, run until the cell's promise settles
//! and nothing it started is pending, sleeping (never spinning) while it waits, and
//! checking the interrupt flag at least every [`WAIT_SLICE`]. While a timer or tool call is
//! pending the cell goes on (code mode: an un-awaited `setTimeout` still fires); both live
//! only as long as the cell, so whatever an interrupted cell left pending is dropped and
//! never runs later, in another cell's output.

use super::{cell_value, JsEngine, LiveHooks, Settled};
use crate::runtime::ToolOutcome;
use rquickjs::convert::List;
use rquickjs::promise::PromiseState;
use rquickjs::{qjs, Ctx, Function, Persistent, Promise, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// The shortest interval of `setInterval`, so `setInterval(f, 0)` cannot starve the loop.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// How long an interrupted cell may spend killing the jobs it left queued.
const DISCARD_JOBS_BUDGET: Duration = Duration::from_millis(200);

/// The longest the event loop sleeps before looking at the interrupt flag again.
const WAIT_SLICE: Duration = Duration::from_millis(10);

/// What one step of the event loop did.
enum Turn<'js> {
    Progressed,
    /// The cell must end: interrupted, or a timer threw.
    Stopped(Settled<'js>),
    /// Nothing is queued, due or awaited.
    Idle,
}

/// What running a due timer did.
enum TimerRun<'js> {
    Idle,
    Ran,
    Threw(Value<'js>),
}

impl JsEngine {
    /// The cell's event loop: runs jobs, due timers and answered tool calls until `promise`
    /// (the cell's, then any promise its value is) settles.
    pub(super) fn drive<'js>(
        &self,
        ctx: &Ctx<'js>,
        hooks: &LiveHooks<'js>,
        promise: Promise<'js>,
    ) -> Settled<'js> {
        let mut promise = promise;
        let mut cell_promise = true;
        loop {
            if self.cell.exiting.get() {
                let _ = ctx.catch();
                return Settled::Exited;
            }
            match promise.state() {
                PromiseState::Pending => match self.turn(ctx) {
                    Turn::Progressed => {}
                    Turn::Stopped(settled) => return settled,
                    Turn::Idle => {
                        return Settled::Refused(
                            "Error: the cell awaits a promise that nothing is left to settle\n"
                                .into(),
                        )
                    }
                },
                PromiseState::Rejected => {
                    // The cell's own failure, reported as such rather than as unhandled.
                    self.cell.forget_rejection(ctx, promise.as_value());
                    let _ = promise.result::<Value>();
                    return Settled::Thrown(ctx.catch());
                }
                PromiseState::Resolved => {
                    let value = match promise.result::<Value>() {
                        Some(Ok(value)) => value,
                        _ => return Settled::Thrown(ctx.catch()),
                    };
                    let value = if cell_promise {
                        cell_promise = false;
                        match cell_value(hooks, &value) {
                            Ok(value) => value,
                            Err(_) => return Settled::Thrown(ctx.catch()),
                        }
                    } else {
                        value
                    };
                    // A trailing promise (an async helper's result, say) is awaited so its
                    // value is what the cell shows.
                    match value.as_promise() {
                        Some(next) => promise = next.clone(),
                        None => return Settled::Value(value),
                    }
                }
            }
        }
    }

    /// Whether the cell left jobs, timers or tool calls to run after its value.
    pub(super) fn anything_pending(&self, ctx: &Ctx<'_>) -> bool {
        // SAFETY: the runtime of a live context; JS_IsJobPending only reads its job list.
        let jobs = unsafe { qjs::JS_IsJobPending(qjs::JS_GetRuntime(ctx.as_raw().as_ptr())) };
        jobs || self.cell.timers.borrow().next_due().is_some()
            || !self.cell.calls.borrow().is_empty()
    }

    /// After the cell's value is known: runs what the cell left pending (timers, unanswered
    /// tool calls and the jobs they queue) until nothing remains, so an un-awaited
    /// `setTimeout` still fires. `exit()`, an interrupt or a throwing callback ends it.
    pub(super) fn run_until_idle<'js>(&self, ctx: &Ctx<'js>) -> Settled<'js> {
        loop {
            if self.cell.exiting.get() {
                let _ = ctx.catch();
                return Settled::Exited;
            }
            match self.turn(ctx) {
                Turn::Progressed => {}
                Turn::Stopped(settled) => return settled,
                Turn::Idle => return Settled::Value(Value::new_undefined(ctx.clone())),
            }
        }
    }

    /// One step of the event loop: a job, else a due timer, else answered tool calls, else
    /// a wait (at most [`WAIT_SLICE`]) for the next of them.
    fn turn<'js>(&self, ctx: &Ctx<'js>) -> Turn<'js> {
        if self.cell.stop_requested() {
            return Turn::Stopped(self.interrupted(ctx));
        }
        if ctx.execute_pending_job() {
            return Turn::Progressed;
        }
        match self.run_due_timer(ctx) {
            TimerRun::Ran => return Turn::Progressed,
            TimerRun::Threw(error) => return Turn::Stopped(Settled::Thrown(error)),
            TimerRun::Idle => {}
        }
        if self.settle_tool_calls(ctx) || self.wait_for_events() {
            Turn::Progressed
        } else {
            Turn::Idle
        }
    }

    /// Runs the first due timer, if any.
    fn run_due_timer<'js>(&self, ctx: &Ctx<'js>) -> TimerRun<'js> {
        let due = self.cell.timers.borrow_mut().take_due(Instant::now());
        let Some((id, callback)) = due else {
            return TimerRun::Idle;
        };
        let result = callback
            .restore(ctx)
            .and_then(|callback| callback.call::<_, Value>(()));
        self.cell.timers.borrow_mut().reschedule(id);
        match result {
            Ok(_) => TimerRun::Ran,
            Err(_) => TimerRun::Threw(ctx.catch()),
        }
    }

    /// Resolves the promises of tool calls whose answer arrived; `false` when none had.
    fn settle_tool_calls(&self, ctx: &Ctx<'_>) -> bool {
        let answered: Vec<_> = {
            let mut calls = self.cell.calls.borrow_mut();
            let mut answered = Vec::new();
            let mut index = 0;
            while index < calls.len() {
                match calls[index].poll() {
                    Some(outcome) => answered.push((calls.remove(index).resolve, outcome)),
                    None => index += 1,
                }
            }
            answered
        };
        let any = !answered.is_empty();
        for (resolve, outcome) in answered {
            let (ok, text) = match outcome {
                Ok(json) => (true, json),
                Err(message) => (false, message),
            };
            let delivered = resolve
                .restore(ctx)
                .and_then(|resolve| resolve.call::<_, ()>((List((ok, text)),)));
            if delivered.is_err() {
                let _ = ctx.catch();
            }
        }
        any
    }

    /// Waits (at most [`WAIT_SLICE`]) for a tool answer or the next timer; `false` when there
    /// is nothing to wait for.
    fn wait_for_events(&self) -> bool {
        let next_due = self.cell.timers.borrow().next_due();
        let mut calls = self.cell.calls.borrow_mut();
        if calls.is_empty() && next_due.is_none() {
            return false;
        }
        let slice = next_due.map_or(WAIT_SLICE, |due| {
            WAIT_SLICE.min(due.saturating_duration_since(Instant::now()))
        });
        match calls.first_mut() {
            Some(call) => call.wait(slice),
            None => std::thread::sleep(slice),
        }
        true
    }

    /// Runs what the cell left in the job queue (promise chains it did not await), so their
    /// output belongs to this cell. `false` when an interrupt stopped it.
    pub(super) fn drain_jobs(&self, ctx: &Ctx<'_>) -> bool {
        while !self.cell.stop_requested() {
            if !ctx.execute_pending_job() {
                return true;
            }
        }
        false
    }

    /// After an interrupt, gets rid of the job queue (an `await` loop would otherwise resume in
    /// the next cell). QuickJS cannot drop queued jobs, but with the interrupt still raised
    /// each job that polls for interrupts is killed, ending its chain. Bounded in time:
    /// whatever is left runs (interruptibly) in the next cell.
    pub(super) fn discard_jobs(&self, ctx: &Ctx<'_>) {
        let deadline = Instant::now() + DISCARD_JOBS_BUDGET;
        while Instant::now() < deadline && ctx.execute_pending_job() {
            let _ = ctx.catch();
        }
        let _ = ctx.catch();
    }

    /// The cell stopped on an interrupt: drop the uncatchable error QuickJS left behind.
    pub(super) fn interrupted<'js>(&self, ctx: &Ctx<'js>) -> Settled<'js> {
        let _ = ctx.catch();
        Settled::Interrupted
    }
}

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
