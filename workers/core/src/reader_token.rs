//! Who reads the supervisor's socket: the engine thread between cells, the control thread
//! while a cell runs.
//!
//! A quick cell should cost the worker one wake-up (the engine's `recv` of its `Execute`), so
//! the engine thread reads frames itself whenever it is between cells. While a cell runs
//! somebody must still answer `Ping`, act on `Interrupt` and deliver `ToolResult`: the
//! control thread takes the *reader token* once the cell has run for [`GRACE`] (at once
//! when the cell waits for a tool's answer), reads frames while the cell goes on, and hands
//! the token back with the first frame it reads after the cell ended.
//!
//! The control thread sleeps without a timeout while no cell runs, so an idle worker costs
//! no CPU: the engine wakes it when a cell starts, and only then; while cells keep coming it
//! wakes once per [`GRACE`], not once per cell.
//!
//! [`Handoff`] holds every decision as plain data (tested below); [`ReaderToken`] wraps it
//! in the mutex and condition variables the two threads wait on.

use crate::locking::lock;
use cellvisor_ipc::ToWorker;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a cell runs before the control thread starts reading frames under it. It bounds
/// how late a `Ping` is answered and an `Interrupt` acted on while a cell runs; a cell
/// quicker than this (most are) costs the control thread no wake-up of its own. Short
/// enough to be unnoticeable for interrupts, long enough that a loop of quick cells wakes
/// the control thread about once per grace rather than once per cell.
pub const GRACE: Duration = Duration::from_millis(1);

/// A cell id that names no cell (ids start at 1).
pub const NO_CELL: u64 = 0;

/// Which thread may read the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The engine thread: it reads between cells, and nobody reads while its cell runs.
    Engine,
    /// The control thread: it reads while a cell runs and hands the token back after.
    Control,
}

/// What the control thread is doing, so that the engine wakes it only when it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Asleep until a cell starts.
    Parked,
    /// Asleep until a deadline (a running cell's grace, or one more grace while cells flow).
    Timing,
    /// Woken (or about to run): looks at the state before sleeping again.
    Woken,
    /// Holds the token and reads frames.
    Reading,
}

/// What the control thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlStep {
    /// Sleep until the engine wakes it.
    Park,
    /// Sleep until this instant, or until woken.
    WaitUntil(Instant),
    /// Take the token and read frames.
    Read,
}

/// Where the engine thread's next frame comes from.
#[derive(Debug, PartialEq)]
pub enum EngineStep {
    /// A frame the control thread read and handed over.
    Frame(ToWorker),
    /// The engine holds the token: it reads the socket itself.
    ReadSocket,
    /// The control thread reads: wait for it to hand a frame over.
    Wait,
}

/// What becomes of a frame the control thread read.
#[derive(Debug, PartialEq)]
pub enum ControlRead {
    /// A cell runs: the control thread handles the frame itself and reads on.
    Handle(ToWorker),
    /// The frame is the engine's (the cell ended, or it is the next cell): handed over.
    /// With `token_back`, the engine reads from now on and the control thread stops reading.
    Forwarded {
        /// The engine now holds the token.
        token_back: bool,
        /// The engine is waiting for a frame and must be woken.
        wake_engine: bool,
    },
}

/// What starting a cell calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellStart {
    /// An interrupt for the cell came before it started: it starts with its flag raised.
    pub interrupted: bool,
    /// The control thread was parked and must be woken to watch the cell.
    pub wake_control: bool,
}

/// What an `Interrupt` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptAction {
    /// The cell runs: raise its flag and stop it.
    Raise,
    /// The cell was received and has not started: it starts with its flag raised.
    Remember,
    /// The cell ended, or was never received: nothing to do.
    Ignore,
}

/// The state both threads share, and every decision about the token.
#[derive(Debug)]
pub struct Handoff {
    reader: Reader,
    control: Control,
    /// The running cell, or [`NO_CELL`] between cells.
    running: u64,
    /// When the running cell started.
    started_at: Option<Instant>,
    /// How many cells have started, and how many had when the control thread last looked:
    /// if cells came since, it waits one more grace instead of parking.
    cells_started: u64,
    seen_started: u64,
    /// The running cell waits for a tool's answer: the control thread reads at once.
    tool_waiting: bool,
    /// The last cell received (read from the socket), finished, and meant by an interrupt.
    received: u64,
    finished: u64,
    interrupted: u64,
    /// Frames the control thread read for the engine, oldest first.
    forwarded: VecDeque<ToWorker>,
    /// The engine waits for a forwarded frame.
    engine_waiting: bool,
    /// The last cell whose `Done` a thread other than the engine's sent (see
    /// [`Handoff::ends_early`]).
    done_sent_early: u64,
}

impl Default for Handoff {
    fn default() -> Handoff {
        Handoff {
            reader: Reader::Engine,
            control: Control::Woken,
            running: NO_CELL,
            started_at: None,
            cells_started: 0,
            seen_started: 0,
            tool_waiting: false,
            received: NO_CELL,
            finished: NO_CELL,
            interrupted: NO_CELL,
            forwarded: VecDeque::new(),
            engine_waiting: false,
            done_sent_early: NO_CELL,
        }
    }
}

impl Handoff {
    /// Who holds the token now.
    #[cfg(test)]
    pub fn reader(&self) -> Reader {
        self.reader
    }

    /// The engine starts `cell_id` at `now`. A parked control thread is woken once, however
    /// many cells start before it runs.
    pub fn cell_starts(&mut self, cell_id: u64, now: Instant) -> CellStart {
        self.running = cell_id;
        self.received = cell_id;
        self.started_at = Some(now);
        self.cells_started += 1;
        let wake_control = self.control == Control::Parked;
        if wake_control {
            self.control = Control::Woken;
        }
        CellStart {
            interrupted: self.interrupted == cell_id,
            wake_control,
        }
    }

    /// The engine finished `cell_id` (before its `Done` is sent, so whatever the supervisor
    /// sends after it finds the engine between cells).
    pub fn cell_ends(&mut self, cell_id: u64) {
        self.running = NO_CELL;
        self.started_at = None;
        self.finished = cell_id;
        self.tool_waiting = false;
    }

    /// Another thread of the engine learned that `cell_id` completed before `execute`
    /// returned (the Python worker's output thread reads the runner's done marker) and would
    /// send its `Done` now, so the supervisor does not wait for the engine thread to wake.
    /// Allowed only for the running cell with no interrupt raised (an interrupted cell's
    /// `Done` waits for its processes to end). The cell then counts as ended: an `Interrupt`
    /// for it stops nothing, and frames after its `Done` find the engine between cells.
    pub fn ends_early(&mut self, cell_id: u64) -> bool {
        if cell_id == NO_CELL || self.running != cell_id || self.interrupted == cell_id {
            return false;
        }
        self.cell_ends(cell_id);
        self.done_sent_early = cell_id;
        true
    }

    /// The engine finished `cell_id`; returns whether its `Done` already went out (see
    /// [`Handoff::ends_early`]).
    pub fn engine_ends(&mut self, cell_id: u64) -> bool {
        if self.done_sent_early == cell_id {
            return true;
        }
        self.cell_ends(cell_id);
        false
    }

    /// The running cell asked a tool and waits for the answer: the control thread should
    /// read at once. Returns whether it must be woken for that.
    pub fn tool_call_waits(&mut self) -> bool {
        if self.running == NO_CELL || self.reader == Reader::Control {
            return false;
        }
        self.tool_waiting = true;
        let wake = matches!(self.control, Control::Parked | Control::Timing);
        if wake {
            self.control = Control::Woken;
        }
        wake
    }

    /// What the control thread does next, looking at the state at `now`.
    pub fn control_step(&mut self, now: Instant) -> ControlStep {
        let cells_came = self.cells_started != self.seen_started;
        self.seen_started = self.cells_started;
        if self.reader == Reader::Control {
            // Still reading (a spurious wake-up): nothing changes.
            self.control = Control::Reading;
            return ControlStep::Read;
        }
        let step = match self.started_at {
            None if cells_came => ControlStep::WaitUntil(now + GRACE),
            None => ControlStep::Park,
            Some(_) if self.tool_waiting => ControlStep::Read,
            Some(started) if now >= started + GRACE => ControlStep::Read,
            Some(started) => ControlStep::WaitUntil(started + GRACE),
        };
        self.control = match step {
            ControlStep::Park => Control::Parked,
            ControlStep::WaitUntil(_) => Control::Timing,
            ControlStep::Read => {
                self.reader = Reader::Control;
                self.tool_waiting = false;
                Control::Reading
            }
        };
        step
    }

    /// The control thread woke from a wait (timeout, notification or spurious).
    pub fn control_woke(&mut self) {
        self.control = Control::Woken;
    }

    /// The control thread read `frame`. While a cell runs it handles the frame itself, except
    /// an `Execute`, which it keeps for the engine; between cells every frame goes to the
    /// engine with the token.
    pub fn control_read(&mut self, frame: ToWorker) -> ControlRead {
        let between_cells = self.running == NO_CELL;
        if !between_cells {
            let ToWorker::Execute(cell) = &frame else {
                return ControlRead::Handle(frame);
            };
            self.received = cell.cell_id;
        } else if let ToWorker::Execute(cell) = &frame {
            self.received = cell.cell_id;
        }
        self.forwarded.push_back(frame);
        if between_cells {
            self.reader = Reader::Engine;
            self.control = Control::Woken;
        }
        let wake_engine = std::mem::take(&mut self.engine_waiting);
        ControlRead::Forwarded {
            token_back: between_cells,
            wake_engine,
        }
    }

    /// Where the engine's next frame comes from (between cells).
    pub fn engine_step(&mut self) -> EngineStep {
        if let Some(frame) = self.forwarded.pop_front() {
            self.engine_waiting = false;
            return EngineStep::Frame(frame);
        }
        match self.reader {
            Reader::Engine => EngineStep::ReadSocket,
            Reader::Control => {
                self.engine_waiting = true;
                EngineStep::Wait
            }
        }
    }

    /// What an `Interrupt` for `cell_id` does (read by either thread).
    pub fn interrupt(&mut self, cell_id: u64) -> InterruptAction {
        if cell_id == NO_CELL {
            return InterruptAction::Ignore;
        }
        if self.running == cell_id {
            self.interrupted = cell_id;
            return InterruptAction::Raise;
        }
        if self.received == cell_id && self.finished != cell_id {
            self.interrupted = cell_id;
            return InterruptAction::Remember;
        }
        InterruptAction::Ignore
    }
}

/// [`Handoff`] shared by the engine thread, the control thread, and whoever makes a tool
/// call.
#[derive(Default)]
pub struct ReaderToken {
    state: Mutex<Handoff>,
    /// Wakes the control thread.
    control_wake: Condvar,
    /// Wakes the engine thread waiting for a forwarded frame.
    engine_wake: Condvar,
}

impl ReaderToken {
    /// The state, locked; a thread that panicked holding it left it consistent (every change
    /// is a few assignments).
    pub fn lock(&self) -> MutexGuard<'_, Handoff> {
        lock(&self.state)
    }

    /// Runs `change` on the state and wakes the control thread if it says so.
    pub fn update_waking_control<T>(&self, change: impl FnOnce(&mut Handoff) -> (T, bool)) -> T {
        let (result, wake) = change(&mut self.lock());
        if wake {
            self.control_wake.notify_one();
        }
        result
    }

    /// The running cell waits for a tool's answer: have the control thread read now.
    pub fn tool_call_waits(&self) {
        self.update_waking_control(|state| ((), state.tool_call_waits()));
    }

    /// The engine's next frame between cells: one the control thread handed over, or `None`
    /// when the engine holds the token and reads the socket itself.
    pub fn engine_frame(&self) -> Option<ToWorker> {
        let mut state = self.lock();
        loop {
            match state.engine_step() {
                EngineStep::Frame(frame) => return Some(frame),
                EngineStep::ReadSocket => return None,
                EngineStep::Wait => {
                    state = self
                        .engine_wake
                        .wait(state)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    /// The control thread sleeps until it must read (it then holds the token).
    pub fn control_wait_for_turn(&self) {
        let mut state = self.lock();
        loop {
            let step = state.control_step(Instant::now());
            state = match step {
                ControlStep::Read => return,
                ControlStep::Park => self
                    .control_wake
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner()),
                ControlStep::WaitUntil(deadline) => {
                    let timeout = deadline.saturating_duration_since(Instant::now());
                    self.control_wake
                        .wait_timeout(state, timeout)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            state.control_woke();
        }
    }

    /// The control thread read `frame`: returns the frame if the control thread handles it
    /// itself (`None` when it went to the engine), and whether it still holds the token.
    pub fn control_read(&self, frame: ToWorker) -> (Option<ToWorker>, bool) {
        let read = self.lock().control_read(frame);
        match read {
            ControlRead::Handle(frame) => (Some(frame), true),
            ControlRead::Forwarded {
                token_back,
                wake_engine,
            } => {
                if wake_engine {
                    self.engine_wake.notify_one();
                }
                (None, !token_back)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::ExecuteCell;

    fn execute(cell_id: u64) -> ToWorker {
        ToWorker::Execute(ExecuteCell {
            cell_id,
            code: String::new(),
            cwd: None,
            tools: Vec::new(),
            session_env: Vec::new(),
            env_changes: Vec::new(),
            task: Default::default(),
        })
    }

    /// A handoff whose control thread has looked once and parked.
    fn parked() -> (Handoff, Instant) {
        let mut state = Handoff::default();
        let now = Instant::now();
        assert_eq!(state.control_step(now), ControlStep::Park);
        (state, now)
    }

    #[test]
    fn an_idle_control_thread_parks_and_a_starting_cell_wakes_it_once() {
        let (mut state, now) = parked();
        assert!(state.cell_starts(1, now).wake_control);
        state.cell_ends(1);
        // Not yet run: the next cell does not wake it again.
        assert!(!state.cell_starts(2, now).wake_control);
    }

    #[test]
    fn a_cell_past_its_grace_gives_the_control_thread_the_token() {
        let (mut state, now) = parked();
        state.cell_starts(1, now);
        state.control_woke();
        assert_eq!(state.control_step(now), ControlStep::WaitUntil(now + GRACE));
        state.control_woke();
        assert_eq!(state.control_step(now + GRACE), ControlStep::Read);
        assert_eq!(state.reader(), Reader::Control);
        // A spurious wake-up while reading changes nothing.
        assert_eq!(state.control_step(now + 2 * GRACE), ControlStep::Read);
    }

    #[test]
    fn quick_cells_cost_the_control_thread_one_wake_up_per_grace_then_it_parks() {
        let (mut state, now) = parked();
        state.cell_starts(1, now);
        state.cell_ends(1);
        state.control_woke();
        // Cells came since it last looked: one more grace.
        let later = now + GRACE / 2;
        assert_eq!(
            state.control_step(later),
            ControlStep::WaitUntil(later + GRACE)
        );
        for cell in 2..10 {
            let start = state.cell_starts(cell, later);
            assert!(
                !start.wake_control,
                "a timing control thread is not woken per cell"
            );
            state.cell_ends(cell);
        }
        state.control_woke();
        let again = later + GRACE;
        assert_eq!(
            state.control_step(again),
            ControlStep::WaitUntil(again + GRACE)
        );
        // A grace with no cell: park, and the next cell wakes it.
        state.control_woke();
        assert_eq!(state.control_step(again + GRACE), ControlStep::Park);
        assert!(state.cell_starts(10, again + GRACE).wake_control);
    }

    #[test]
    fn a_tool_call_gives_the_control_thread_the_token_at_once() {
        let (mut state, now) = parked();
        state.cell_starts(1, now);
        state.control_woke();
        assert!(matches!(state.control_step(now), ControlStep::WaitUntil(_)));
        assert!(state.tool_call_waits(), "a timing control thread is woken");
        assert!(!state.tool_call_waits(), "once");
        state.control_woke();
        assert_eq!(state.control_step(now), ControlStep::Read);
        // Already reading: nothing to wake.
        assert!(!state.tool_call_waits());
    }

    #[test]
    fn no_tool_call_wakes_anyone_between_cells() {
        let (mut state, _) = parked();
        assert!(!state.tool_call_waits());
    }

    #[test]
    fn while_a_cell_runs_the_control_thread_handles_frames_and_keeps_an_execute() {
        let (mut state, now) = parked();
        state.cell_starts(1, now);
        state.control_woke();
        assert_eq!(state.control_step(now + GRACE), ControlStep::Read);
        let ping = ToWorker::Ping { seq: 7 };
        assert_eq!(state.control_read(ping.clone()), ControlRead::Handle(ping));
        assert_eq!(
            state.control_read(execute(2)),
            ControlRead::Forwarded {
                token_back: false,
                wake_engine: false
            }
        );
        assert_eq!(state.reader(), Reader::Control);
        // The cell ends: the engine takes the kept Execute, then waits for the control thread.
        state.cell_ends(1);
        assert_eq!(state.engine_step(), EngineStep::Frame(execute(2)));
        assert_eq!(state.engine_step(), EngineStep::Wait);
        // The first frame after the cell ended goes to the engine with the token.
        assert_eq!(
            state.control_read(ToWorker::Ping { seq: 8 }),
            ControlRead::Forwarded {
                token_back: true,
                wake_engine: true
            }
        );
        assert_eq!(state.reader(), Reader::Engine);
        assert_eq!(
            state.engine_step(),
            EngineStep::Frame(ToWorker::Ping { seq: 8 })
        );
        assert_eq!(state.engine_step(), EngineStep::ReadSocket);
    }

    #[test]
    fn a_done_sent_early_ends_the_cell_once_and_never_for_an_interrupted_cell() {
        let now = Instant::now();
        let mut state = Handoff::default();
        // Not running: nothing to end.
        assert!(!state.ends_early(7));
        state.cell_starts(7, now);
        assert!(!state.ends_early(8), "only the running cell");
        assert!(state.ends_early(7));
        // Ended: an interrupt for it stops nothing, and the engine does not send Done again.
        assert_eq!(state.interrupt(7), InterruptAction::Ignore);
        assert!(state.engine_ends(7));
        // The next cell is the engine's to end, and an interrupted one cannot end early.
        state.cell_starts(9, now);
        assert_eq!(state.interrupt(9), InterruptAction::Raise);
        assert!(!state.ends_early(9));
        assert!(!state.engine_ends(9));
        assert_eq!(state.interrupt(9), InterruptAction::Ignore);
    }

    #[test]
    fn interrupts_follow_the_cell_they_name() {
        let (mut state, now) = parked();
        assert_eq!(state.interrupt(NO_CELL), InterruptAction::Ignore);
        assert_eq!(
            state.interrupt(1),
            InterruptAction::Ignore,
            "never received"
        );
        state.cell_starts(1, now);
        assert_eq!(state.interrupt(1), InterruptAction::Raise);
        state.cell_ends(1);
        assert_eq!(state.interrupt(1), InterruptAction::Ignore, "finished");
        // An Execute kept for the engine, then an interrupt for it: it starts interrupted.
        state.cell_starts(2, now);
        state.control_woke();
        state.control_step(now + GRACE);
        state.control_read(execute(3));
        assert_eq!(state.interrupt(3), InterruptAction::Remember);
        state.cell_ends(2);
        assert!(state.cell_starts(3, now).interrupted);
        state.cell_ends(3);
        assert!(!state.cell_starts(4, now).interrupted);
    }
}
