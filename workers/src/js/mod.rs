//! JavaScript cells on QuickJS (quickjs-ng, through rquickjs).
//!
//! One runtime and one context live as long as the worker, so globals persist. Every cell is
//! evaluated as an async *global script* (`JS_EVAL_FLAG_ASYNC`): top-level `await` works, and
//! top-level declarations still land in the global scope (QuickJS keeps them there even in
//! async mode). Before that, `redeclare` rewrites the cell: top-level `let`/`const`/`class`
//! become `var`s (so a cell can run twice), static imports become `await import()`, and a
//! top-level `return` ends the cell with its value.
//!
//! The eval returns a promise of `{value: <completion value>}`; the worker's event loop
//! (`JsEngine::drive`) runs QuickJS's job queue, due timers and answered host tool calls
//! until that promise settles, sleeping (never spinning) while it waits for a timer or a tool
//! answer, and checking the interrupt flag at least every `WAIT_SLICE`.
//!
//! What cells see (defined by `prelude.js` on native hooks defined here; the file system
//! work is in `host`, modules in `modules`):
//! - `console.*`, `print`, `display(value)`; the cell's value (trailing expression or
//!   top-level `return`) is printed and, when it is an object or array, also displayed.
//! - Preludes, all `async`: `read(path, offset?, limit?)`, `write(path, content)`,
//!   `append(path, content)`, `sort(text, reverse?, unique?)`, `uniq(text, count?)`,
//!   `counter(items, limit?, reverse?)`, `diff(a, b)`, `tree(path?, max_depth?,
//!   show_hidden?)`, `env(key?, value?)` (`null` unsets), `output(...ids)`. Optional
//!   arguments may also be one options object (`read(p, {offset: 3})`). Each emits one
//!   `application/x-cellvisor-status` display when it succeeds.
//! - Code mode, synchronous as in the code-mode script API: `text(value)`,
//!   `image(dataUrl, detail?)`, `audio(dataUrl)`, `notify(value)`, `store(key, value)` /
//!   `load(key)`, `exit()`; `tool.<name>(args)` / `tools.<name>(args)` /
//!   `tools["list-dir"](args)` and `tools.tool_search({query, limit?})` (async), `ALL_TOOLS`
//!   (with TypeScript declarations, see [`crate::tools`]),
//!   `setTimeout`/`setInterval`/`clearTimeout`/`clearInterval`.
//!
//! Choices worth knowing:
//! - A cell ends when its promise has settled *and* nothing it started is pending: its value
//!   is shown when the promise settles, then timers and unanswered tool calls keep the cell
//!   running until none remain (a `setInterval` never cleared runs until the cell's timeout).
//!   Whatever an interrupted or timed-out cell left pending is dropped, never run later.
//! - `exit()` throws an error QuickJS marks uncatchable: it unwinds past every `catch` and
//!   `finally`, so nothing after it runs, and the cell is completed. Should code still run
//!   (an executor QuickJS turns the throw into a rejection for), the interrupt handler stops
//!   it at its next check; until then its output is dropped and helpers with effects refuse.
//! - Modules: see `modules` (edits to local files are picked up, packages are not).
//! - Node-style and web globals (`fetch`, `Buffer`, `process`, `require`, `URL`...): see
//!   `node`.
#[cfg(test)]
mod corpus_tests;
mod event_loop;
mod modules;
mod node;
mod redeclare;
#[cfg(test)]
mod tests;

pub use crate::helpers::HostDirs;

use crate::helpers;
use crate::runtime::{Engine, Interrupt, Outbox, WorkerContext, WorkerError};
use cellvisor_ipc::{env, CellOutcome, ExecuteCell, Language, OutputStream};
use event_loop::{PendingCall, Timers};
use modules::{CellLoader, CellResolver, SharedModuleState};
use rquickjs::context::EvalOptions;
use rquickjs::convert::List;
use rquickjs::function::Opt;
use rquickjs::promise::PromiseState;
use rquickjs::{
    qjs, Coerced, Context, Ctx, Exception, Function, Object, Persistent, Promise, Runtime, Value,
};
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Defines the globals; evaluates to a function that takes the native hooks and returns the
/// hooks the worker drives cells with.
const PRELUDE: &str = include_str!("prelude.js");

/// Replaces `JSON.stringify` with one that refuses values nested deeper than the worker's
/// stack allows (a catchable `RangeError` instead of a crash); evaluates to its installer.
const JSON_GUARD: &str = include_str!("json_guard.js");

/// Stack bytes allowed per nesting level of `JSON.stringify` when deciding its depth limit
/// (several times what one level of the engine's recursion takes, even unoptimised).
const STACK_PER_JSON_LEVEL: usize = 2048;

/// Room left between QuickJS's stack limit and the thread's real one, so QuickJS reports a
/// `RangeError` before the process overflows its stack.
const STACK_SAFETY_MARGIN: usize = 256 * 1024;

/// How long an interrupted cell may spend killing the jobs it left queued.
const DISCARD_JOBS_BUDGET: Duration = Duration::from_millis(200);

/// The longest the event loop sleeps before looking at the interrupt flag again.
const WAIT_SLICE: Duration = Duration::from_millis(10);

const MIB: usize = 1024 * 1024;

/// The largest display bundle sent; frames to the supervisor are capped at 16 MiB.
const MAX_DISPLAY_BYTES: usize = 8 * MIB;

/// Stream numbers the prelude passes to the native `write`.
const STDOUT: i32 = 0;

/// The JavaScript worker's engine: one QuickJS runtime whose global scope lives from cell to cell.
pub struct JsEngine {
    /// The prelude's hooks. Declared first: they must be dropped before the runtime, which
    /// aborts if a value outlives it.
    hooks: Hooks,
    context: Context,
    runtime: Runtime,
    cell: Rc<RunningCell>,
    modules: SharedModuleState,
    memory_limit: Option<usize>,
}

/// The functions `prelude.js` hands back.
struct Hooks {
    /// Formats a value as text (console.log's rules).
    format: Persistent<Function<'static>>,
    /// Shows a cell's value: text on stdout, plus a display when it has a rich form.
    show: Persistent<Function<'static>>,
    /// Resets per-cell state and declares the cell's tools (JSON list).
    begin_cell: Persistent<Function<'static>>,
    /// `[true, value]` when the cell ran a top-level `return`.
    take_return: Persistent<Function<'static>>,
}

/// The hooks, usable inside one `Context::with`.
struct LiveHooks<'js> {
    format: Function<'js>,
    show: Function<'js>,
    begin_cell: Function<'js>,
    take_return: Function<'js>,
}

impl Hooks {
    fn restore<'js>(&self, ctx: &Ctx<'js>) -> rquickjs::Result<LiveHooks<'js>> {
        Ok(LiveHooks {
            format: self.format.clone().restore(ctx)?,
            show: self.show.clone().restore(ctx)?,
            begin_cell: self.begin_cell.clone().restore(ctx)?,
            take_return: self.take_return.clone().restore(ctx)?,
        })
    }
}

/// What the native hooks, the event loop and the interrupt handler share about the cell that
/// runs now.
#[derive(Default)]
struct RunningCell {
    sink: RefCell<Option<(Outbox, u64)>>,
    interrupt: RefCell<Option<Arc<AtomicBool>>>,
    /// The interrupt handler stopped the cell (QuickJS threw its uncatchable "interrupted").
    interrupted: Cell<bool>,
    /// `exit()` was called: the cell ends successfully, and the interrupt handler stops
    /// whatever code still runs (a `catch` that swallowed exit's throw, say).
    exiting: Cell<bool>,
    /// Promises rejected with no handler (yet), as QuickJS's rejection tracker reports them.
    /// Emptied at the end of every cell: nothing may outlive the runtime.
    rejections: RefCell<Vec<Rejection>>,
    timers: RefCell<Timers>,
    calls: RefCell<Vec<PendingCall>>,
    /// The host tools the cell may call, for `tools.tool_search`.
    tools: RefCell<Vec<cellvisor_ipc::ToolInfo>>,
    /// The cell's value is being shown: its text is left in the socket's buffer, for the
    /// cell's `Done` to take along (one write, one wake-up of the supervisor).
    showing_value: Cell<bool>,
    /// Text was left in the socket's buffer while showing the value.
    value_unflushed: Cell<bool>,
}

struct Rejection {
    promise: Persistent<Value<'static>>,
    reason: Persistent<Value<'static>>,
}

impl RunningCell {
    fn begin(&self, outbox: &Outbox, cell: &ExecuteCell, interrupt: &Interrupt) {
        *self.sink.borrow_mut() = Some((outbox.clone(), cell.cell_id));
        self.tools.borrow_mut().clone_from(&cell.tools);
        *self.interrupt.borrow_mut() = Some(interrupt.flag());
        self.interrupted.set(false);
        self.exiting.set(false);
    }

    /// Forgets the cell, dropping what it left behind: timers, unanswered tool calls and
    /// rejections (their values must not outlive the runtime).
    fn end(&self) {
        self.sink.borrow_mut().take();
        self.interrupt.borrow_mut().take();
        self.rejections.borrow_mut().clear();
        self.timers.borrow_mut().clear_all();
        self.calls.borrow_mut().clear();
        self.exiting.set(false);
    }

    /// QuickJS's rejection tracker: remembers a rejection until someone handles it.
    fn track_rejection<'js>(
        &self,
        ctx: &Ctx<'js>,
        promise: Value<'js>,
        reason: Value<'js>,
        handled: bool,
    ) {
        if handled {
            self.forget_rejection(ctx, &promise);
        } else {
            self.rejections.borrow_mut().push(Rejection {
                promise: Persistent::save(ctx, promise),
                reason: Persistent::save(ctx, reason),
            });
        }
    }

    fn forget_rejection<'js>(&self, ctx: &Ctx<'js>, promise: &Value<'js>) {
        self.rejections.borrow_mut().retain(|rejection| {
            rejection
                .promise
                .clone()
                .restore(ctx)
                .map_or(true, |tracked| tracked != *promise)
        });
    }

    /// Output of the cell; nothing once `exit()` was called.
    fn write(&self, stream: OutputStream, text: &str) {
        if self.exiting.get() {
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            if self.showing_value.get() {
                outbox.output_unflushed(*cell_id, stream, text.as_bytes());
                self.value_unflushed.set(true);
            } else {
                outbox.output(*cell_id, stream, text.as_bytes());
            }
        }
    }

    /// Sends what showing the value left in the socket's buffer: the cell has more to run
    /// before its `Done`.
    fn flush_value(&self) {
        if self.value_unflushed.replace(false) {
            if let Some((outbox, _)) = &*self.sink.borrow() {
                outbox.flush();
            }
        }
    }

    /// Sends a display bundle. One over [`MAX_DISPLAY_BYTES`] could not cross the socket:
    /// it is dropped, with a note on stderr unless `quiet` (a trailing value's rich form,
    /// whose text already went to stdout).
    fn display(&self, bundle_json: String, quiet: bool) {
        if self.exiting.get() {
            return;
        }
        if bundle_json.len() > MAX_DISPLAY_BYTES {
            if !quiet {
                self.write(
                    OutputStream::Stderr,
                    &format!(
                        "display: a bundle of {} bytes was not sent (the limit is {} MiB)\n",
                        bundle_json.len(),
                        MAX_DISPLAY_BYTES / MIB
                    ),
                );
            }
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.display(*cell_id, bundle_json);
        }
    }

    /// `yield_control()`: the host gets the output so far now; the cell goes on.
    fn yield_control(&self) {
        if self.exiting.get() {
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.yield_control(*cell_id);
        }
    }

    fn interrupt_raised(&self) -> bool {
        self.interrupt
            .borrow()
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Whether the cell must stop (interrupt or `exit()`), whether or not QuickJS noticed yet.
    fn stop_requested(&self) -> bool {
        self.interrupted.get() || self.exiting.get() || self.interrupt_raised()
    }
}

/// How a cell's evaluation ended, before it is reported.
enum Settled<'js> {
    Value(Value<'js>),
    Thrown(Value<'js>),
    Interrupted,
    /// `exit()` ended the cell.
    Exited,
    /// The cell cannot finish for a reason of the worker's own (the report, ending in `\n`).
    Refused(String),
}

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
    /// Builds the engine with the limits from `CELLVISOR_MEMORY_LIMIT` / `CELLVISOR_STACK_SIZE`
    /// and the directories from `CELLVISOR_ARTIFACT_DIR` / `CELLVISOR_STORE_DIR`.
    pub fn new(_context: &WorkerContext) -> Result<Self, WorkerError> {
        Self::with_options(
            env::bytes(env::MEMORY_LIMIT)?,
            env::bytes(env::STACK_SIZE)?,
            HostDirs::from_env(),
        )
    }

    /// Builds the engine with an explicit heap limit and stack limit (bytes; `None` keeps
    /// QuickJS's defaults: no heap limit, 1 MiB of stack), directories from the environment.
    #[cfg(test)]
    pub fn with_limits(
        memory_limit: Option<usize>,
        stack_size: Option<usize>,
    ) -> Result<Self, WorkerError> {
        Self::with_options(memory_limit, stack_size, HostDirs::from_env())
    }

    /// Builds the engine with explicit limits and helper directories.
    pub fn with_options(
        memory_limit: Option<usize>,
        stack_size: Option<usize>,
        dirs: HostDirs,
    ) -> Result<Self, WorkerError> {
        let runtime = Runtime::new().map_err(engine_error("cannot create the QuickJS runtime"))?;
        if let Some(limit) = memory_limit {
            runtime.set_memory_limit(limit);
        }
        if let Some(size) = stack_size {
            runtime.set_max_stack_size(clamp_to_thread_stack(size));
        }
        let cell = Rc::new(RunningCell::default());
        runtime.set_interrupt_handler(Some(Box::new({
            let cell = Rc::clone(&cell);
            move || {
                let stop = cell.interrupt_raised() || cell.exiting.get();
                if stop {
                    cell.interrupted.set(true);
                }
                stop
            }
        })));
        runtime.set_host_promise_rejection_tracker(Some(Box::new({
            let cell = Rc::clone(&cell);
            move |ctx, promise, reason, handled| {
                cell.track_rejection(&ctx, promise, reason, handled)
            }
        })));
        let modules = SharedModuleState::default();
        runtime.set_loader(
            CellResolver {
                state: Rc::clone(&modules),
            },
            CellLoader,
        );
        let context =
            Context::full(&runtime).map_err(engine_error("cannot create the QuickJS context"))?;
        let dirs = Rc::new(dirs);
        let hooks = context
            .with(|ctx| install_prelude(&ctx, &cell, &dirs))
            .map_err(engine_error("cannot install the JavaScript prelude"))?;
        Ok(JsEngine {
            hooks,
            context,
            runtime,
            cell,
            modules,
            memory_limit,
        })
    }

    fn run_cell(&self, ctx: &Ctx<'_>, cell: &ExecuteCell, source: &str) -> CellOutcome {
        let hooks = match self.hooks.restore(ctx) {
            Ok(hooks) => hooks,
            Err(err) => return self.fail(&format!("InternalError: {err}\n")),
        };
        if hooks.begin_cell.call::<_, ()>((tools_json(cell),)).is_err() {
            let _ = ctx.catch();
            return self.fail("InternalError: cannot declare the cell's tools\n");
        }
        let settled = match evaluate(ctx, source) {
            Ok(promise) => self.drive(ctx, &hooks, promise),
            Err(thrown) => thrown,
        };
        let settled = match settled {
            Settled::Value(value) => {
                self.cell.showing_value.set(true);
                let shown = self.show_value(ctx, &hooks, value);
                self.cell.showing_value.set(false);
                match shown {
                    Settled::Value(_) => {
                        if self.anything_pending(ctx) {
                            self.cell.flush_value();
                        }
                        self.run_until_idle(ctx)
                    }
                    other => other,
                }
            }
            other => other,
        };
        let outcome = match settled {
            _ if self.cell.exiting.get() => CellOutcome::Completed,
            Settled::Value(_) | Settled::Exited => CellOutcome::Completed,
            Settled::Interrupted => CellOutcome::Interrupted,
            Settled::Refused(report) => self.fail(&report),
            Settled::Thrown(_) if self.cell.stop_requested() => CellOutcome::Interrupted,
            Settled::Thrown(error) => self.report_exception(ctx, &hooks.format, error, UNCAUGHT),
        };
        if outcome == CellOutcome::Interrupted || self.cell.exiting.get() || !self.drain_jobs(ctx) {
            self.discard_jobs(ctx);
            if self.cell.exiting.get() {
                return CellOutcome::Completed;
            }
            // A failure stays the headline even if the jobs after it were interrupted.
            return match outcome {
                CellOutcome::Failed { .. } => outcome,
                _ => CellOutcome::Interrupted,
            };
        }
        self.report_unhandled_rejections(ctx, &hooks.format, outcome)
    }

    /// Writes a thrown value's report to stderr; `Failed` with its one-line summary.
    fn report_exception<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        thrown: Value<'js>,
        prefixes: Prefixes,
    ) -> CellOutcome {
        let described = if thrown.is_null() && self.heap_nearly_full(ctx) {
            // The engine could not even allocate its out-of-memory error.
            Described {
                headline: "InternalError: out of memory".into(),
                stack: String::new(),
                is_error: true,
            }
        } else {
            describe_exception(ctx, format, thrown)
        };
        let prefix = if described.is_error {
            prefixes.error
        } else {
            prefixes.value
        };
        let headline = format!("{prefix}{}", described.headline);
        let mut report = format!("{headline}\n{}", described.stack);
        if !report.ends_with('\n') {
            report.push('\n');
        }
        self.cell.write(OutputStream::Stderr, &report);
        if headline.ends_with("out of memory") {
            self.report_out_of_memory(ctx);
        }
        CellOutcome::Failed {
            summary: first_line(&headline),
        }
    }

    /// Promises the cell rejected and nobody handled: reported like Node does, and the
    /// first one fails a cell that would otherwise have completed.
    fn report_unhandled_rejections<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        outcome: CellOutcome,
    ) -> CellOutcome {
        let rejections = std::mem::take(&mut *self.cell.rejections.borrow_mut());
        let mut outcome = outcome;
        for rejection in rejections {
            let Ok(reason) = rejection.reason.restore(ctx) else {
                continue;
            };
            let failure = self.report_exception(ctx, format, reason, UNCAUGHT_IN_PROMISE);
            if outcome == CellOutcome::Completed {
                outcome = failure;
            }
        }
        outcome
    }

    /// The cell's event loop: runs jobs, due timers and answered tool calls until `promise`
    /// (the cell's, then any promise its value is) settles.
    fn drive<'js>(
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
    fn anything_pending(&self, ctx: &Ctx<'_>) -> bool {
        // SAFETY: the runtime of a live context; JS_IsJobPending only reads its job list.
        let jobs = unsafe { qjs::JS_IsJobPending(qjs::JS_GetRuntime(ctx.as_raw().as_ptr())) };
        jobs || self.cell.timers.borrow().next_due().is_some()
            || !self.cell.calls.borrow().is_empty()
    }

    /// After the cell's value is known: runs what the cell left pending (timers, unanswered
    /// tool calls and the jobs they queue) until nothing remains, so an un-awaited
    /// `setTimeout` still fires. `exit()`, an interrupt or a throwing callback ends it.
    fn run_until_idle<'js>(&self, ctx: &Ctx<'js>) -> Settled<'js> {
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
    fn drain_jobs(&self, ctx: &Ctx<'_>) -> bool {
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
    fn discard_jobs(&self, ctx: &Ctx<'_>) {
        let deadline = Instant::now() + DISCARD_JOBS_BUDGET;
        while Instant::now() < deadline && ctx.execute_pending_job() {
            let _ = ctx.catch();
        }
        let _ = ctx.catch();
    }

    /// Shows the cell's value: text on stdout (nothing for `undefined`), and a display
    /// bundle when it has a rich form.
    fn show_value<'js>(
        &self,
        ctx: &Ctx<'js>,
        hooks: &LiveHooks<'js>,
        value: Value<'js>,
    ) -> Settled<'js> {
        match hooks.show.call::<_, ()>((value.clone(),)) {
            Ok(()) => Settled::Value(value),
            Err(_) if self.cell.stop_requested() => self.interrupted(ctx),
            Err(_) => Settled::Thrown(ctx.catch()),
        }
    }

    /// The cell stopped on an interrupt: drop the uncatchable error QuickJS left behind.
    fn interrupted<'js>(&self, ctx: &Ctx<'js>) -> Settled<'js> {
        let _ = ctx.catch();
        Settled::Interrupted
    }

    fn fail(&self, report: &str) -> CellOutcome {
        self.cell.write(OutputStream::Stderr, report);
        CellOutcome::Failed {
            summary: report.lines().next().unwrap_or_default().to_string(),
        }
    }

    /// Whether the heap is past half its limit: a `null` thrown then is an out-of-memory error
    /// the engine had no memory left to build.
    fn heap_nearly_full(&self, ctx: &Ctx<'_>) -> bool {
        let Some(limit) = self.memory_limit else {
            return false;
        };
        // SAFETY: the runtime of a live context; JS_ComputeMemoryUsage only fills `usage`.
        let used = unsafe {
            let mut usage = std::mem::zeroed::<qjs::JSMemoryUsage>();
            qjs::JS_ComputeMemoryUsage(qjs::JS_GetRuntime(ctx.as_raw().as_ptr()), &mut usage);
            usage.malloc_size
        };
        usize::try_from(used).is_ok_and(|used| used >= limit / 2)
    }

    /// Frees what the failed allocation left behind and tells the user what happened.
    fn report_out_of_memory(&self, ctx: &Ctx<'_>) {
        ctx.run_gc();
        let limit = match self.memory_limit {
            Some(limit) if limit >= MIB => format!(" of {} MiB", limit / MIB),
            Some(limit) => format!(" of {limit} bytes"),
            None => String::new(),
        };
        self.cell.write(
            OutputStream::Stderr,
            &format!(
                "The cell ran out of JavaScript heap memory (limit{limit}). Values it already \
                 stored in globals still hold their memory; set them to null to free it.\n"
            ),
        );
    }
}

impl Engine for JsEngine {
    const LANGUAGE: Language = Language::JavaScript;

    fn engine_name(&self) -> String {
        format!("QuickJS-ng {}", quickjs_version())
    }

    fn execute(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> Result<CellOutcome, WorkerError> {
        self.cell.begin(outbox, cell, interrupt);
        self.modules.borrow_mut().refresh();
        let source = redeclare::prepare_cell(&cell.code);
        let outcome = self.context.with(|ctx| self.run_cell(&ctx, cell, &source));
        self.cell.end();
        // Garbage from an interrupted or failed cell (cycles, half-built values) goes now
        // rather than at the next allocation threshold.
        if outcome != CellOutcome::Completed {
            self.runtime.run_gc();
        }
        Ok(outcome)
    }
}

/// The version of the QuickJS-ng library linked in.
fn quickjs_version() -> String {
    // SAFETY: JS_GetVersion returns a pointer to a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(qjs::JS_GetVersion()) };
    version.to_string_lossy().into_owned()
}

/// The cell's tools as `prelude.js`'s `beginCell` takes them (`ALL_TOOLS`' shape).
fn tools_json(cell: &ExecuteCell) -> String {
    crate::tools::all_tools_json(&cell.tools).to_string()
}

/// The cell's value: what a top-level `return` gave, else its completion value.
fn cell_value<'js>(hooks: &LiveHooks<'js>, wrapper: &Value<'js>) -> rquickjs::Result<Value<'js>> {
    let List((returned, value)): List<(bool, Value)> = hooks.take_return.call(())?;
    if returned {
        Ok(value)
    } else {
        completion_value(wrapper)
    }
}

/// A helper's failure as the `Error` its promise rejects with.
fn thrown<'js, M: std::fmt::Display>(ctx: Ctx<'js>) -> impl FnOnce(M) -> rquickjs::Error + 'js {
    move |message| Exception::throw_message(&ctx, &message.to_string())
}

/// Bytes from a helper as a JavaScript string (invalid UTF-8 shows as U+FFFD).
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// Defines the globals of `prelude.js` with their native hooks and returns its hooks.
fn install_prelude<'js>(
    ctx: &Ctx<'js>,
    cell: &Rc<RunningCell>,
    dirs: &Rc<HostDirs>,
) -> rquickjs::Result<Hooks> {
    let native = Object::new(ctx.clone())?;
    let def = |name: &str, function: Function<'js>| native.set(name, function);

    def(
        "write",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |stream: i32, text: Coerced<String>| {
                let stream = if stream == STDOUT {
                    OutputStream::Stdout
                } else {
                    OutputStream::Stderr
                };
                cell.write(stream, &text.0);
            }
        })?,
    )?;
    def(
        "display",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |bundle_json: Coerced<String>, quiet: Opt<bool>| {
                cell.display(bundle_json.0, quiet.0.unwrap_or(false))
            }
        })?,
    )?;
    def(
        "read",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, offset: f64, limit: f64, numbered: bool| {
                let limit = (limit >= 0.0).then_some(limit as usize);
                helpers::fs::read(Path::new(&path), offset as usize, limit, numbered)
                    .map(|(text, lines)| List((lossy(text), lines)))
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    def(
        "writeFile",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, content: String, append: bool| {
                helpers::fs::write(Path::new(&path), content.as_bytes(), append)
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    def(
        "sort",
        Function::new(ctx.clone(), |text: String, reverse: bool, unique: bool| {
            let (sorted, lines) = crate::text::sort(text.as_bytes(), reverse, unique);
            List((String::from_utf8_lossy(&sorted).into_owned(), lines))
        })?,
    )?;
    def(
        "diff",
        Function::new(ctx.clone(), |a: String, b: String| {
            let (text, added, removed) = crate::text::unified_diff(a.as_bytes(), b.as_bytes());
            List((String::from_utf8_lossy(&text).into_owned(), added, removed))
        })?,
    )?;
    def(
        "tree",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, max_depth: f64, show_hidden: bool| {
                helpers::fs::tree(Path::new(&path), max_depth as usize, show_hidden)
                    .map(|(text, entries)| List((lossy(text), entries)))
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    def(
        "envAll",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| {
            let all = Object::new(ctx)?;
            for (key, value) in std::env::vars_os() {
                all.set(
                    key.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )?;
            }
            Ok::<_, rquickjs::Error>(all)
        })?,
    )?;
    def(
        "envGet",
        Function::new(ctx.clone(), |key: String| {
            std::env::var_os(key).map(|value| value.to_string_lossy().into_owned())
        })?,
    )?;
    def(
        "envSet",
        Function::new(
            ctx.clone(),
            |key: String, value: Option<String>| match value {
                Some(value) => std::env::set_var(key, value),
                None => std::env::remove_var(key),
            },
        )?,
    )?;
    def(
        "output",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, ids: Vec<String>| {
                helpers::output::read_outputs(dirs.artifact_dir.as_deref(), &ids)
                    .map(|(text, bytes)| List((lossy(text), bytes)))
                    .map_err(thrown(ctx))
            }
        })?,
    )?;
    def(
        "storeWrite",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, key: String, json: String| {
                helpers::store::save(dirs.store_dir.as_deref(), &key, &json).map_err(thrown(ctx))
            }
        })?,
    )?;
    def(
        "storeRead",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, key: String| {
                helpers::store::load(dirs.store_dir.as_deref(), &key).map_err(thrown(ctx))
            }
        })?,
    )?;
    def(
        "yieldControl",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move || cell.yield_control()
        })?,
    )?;
    def(
        "exit",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>| -> rquickjs::Result<()> {
                cell.exiting.set(true);
                Err(throw_uncatchable(&ctx, "exit() ended the cell"))
            }
        })?,
    )?;
    def(
        "searchTools",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, query: String, limit: Option<f64>| {
                crate::tools::search(&cell.tools.borrow(), &query, limit)
                    .map(|found| found.to_string())
                    .map_err(|err| thrown(ctx)(err.to_string()))
            }
        })?,
    )?;
    def(
        "stopping",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move || cell.exiting.get()
        })?,
    )?;
    def(
        "setTimer",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, callback: Function<'js>, delay_ms: f64, repeat: bool| {
                let delay_ms = if delay_ms.is_finite() { delay_ms } else { 0.0 };
                let delay = Duration::from_secs_f64(delay_ms.clamp(0.0, 1e12) / 1000.0);
                let callback = Persistent::save(&ctx, callback);
                cell.timers.borrow_mut().add(callback, delay, repeat)
            }
        })?,
    )?;
    def(
        "clearTimer",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |id: f64| {
                if id >= 1.0 && id <= f64::from(u32::MAX) {
                    cell.timers.borrow_mut().clear(id as u32);
                }
            }
        })?,
    )?;
    def(
        "callTool",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, name: String, args_json: String| {
                let Some((outbox, cell_id)) = cell.sink.borrow().clone() else {
                    return Err(Exception::throw_message(
                        &ctx,
                        "tool calls are only possible while a cell runs",
                    ));
                };
                let (promise, resolve, _reject) = Promise::new(&ctx)?;
                let pending = outbox.call_tool(cell_id, &name, args_json);
                cell.calls.borrow_mut().push(PendingCall {
                    answer: pending.answer,
                    resolve: Persistent::save(&ctx, resolve),
                    outcome: None,
                });
                Ok(promise)
            }
        })?,
    )?;

    let guard: Function = ctx.eval(JSON_GUARD)?;
    guard.call::<_, ()>((json_depth_limit(),))?;
    node::define_natives(ctx, &native, cell)?;
    let setup: Function = ctx.eval(PRELUDE)?;
    let hooks: Object = setup.call((native.clone(),))?;
    node::install(ctx, native, hooks.get("format")?)?;
    let function = |name: &str| -> rquickjs::Result<Persistent<Function<'static>>> {
        Ok(Persistent::save(ctx, hooks.get::<_, Function>(name)?))
    };
    Ok(Hooks {
        format: function("format")?,
        show: function("show")?,
        begin_cell: function("beginCell")?,
        take_return: function("takeReturn")?,
    })
}

/// Throws an `Error` that no `catch` or `finally` sees (QuickJS unwinds past them, as
/// for its own "interrupted"): what `exit()` ends the cell with.
fn throw_uncatchable(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    let error = match Exception::from_message(ctx.clone(), message) {
        Ok(error) => error.into_value(),
        Err(err) => return err,
    };
    // SAFETY: both pointers are live for the duration of the call; the function only sets a
    // flag on the error object.
    unsafe { qjs::JS_SetUncatchableError(ctx.as_raw().as_ptr(), error.as_raw()) };
    ctx.throw(error)
}

/// Starts the cell as an async global script; `Err` holds why it could not start.
fn evaluate<'js>(ctx: &Ctx<'js>, source: &str) -> Result<Promise<'js>, Settled<'js>> {
    let mut options = EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.promise = true;
    match ctx.eval_with_options::<Value, _>(source, options) {
        Ok(value) => match value.into_promise() {
            Some(promise) => Ok(promise),
            None => Err(Settled::Refused(
                "InternalError: QuickJS did not return a promise for the cell\n".into(),
            )),
        },
        Err(rquickjs::Error::Exception) => Err(Settled::Thrown(ctx.catch())),
        Err(rquickjs::Error::InvalidString(_)) => Err(Settled::Refused(
            "SyntaxError: the cell contains a NUL character\n".into(),
        )),
        Err(err) => Err(Settled::Refused(format!("InternalError: {err}\n"))),
    }
}

/// The completion value out of the `{value}` object an async script resolves to.
fn completion_value<'js>(wrapper: &Value<'js>) -> rquickjs::Result<Value<'js>> {
    match wrapper.as_object() {
        Some(object) => object.get("value"),
        None => Ok(wrapper.clone()),
    }
}

/// What goes before a thrown value's headline: Errors read `Name: message` on their own,
/// other values `Uncaught 42`.
#[derive(Clone, Copy)]
struct Prefixes {
    error: &'static str,
    value: &'static str,
}

const UNCAUGHT: Prefixes = Prefixes {
    error: "",
    value: "Uncaught ",
};

const UNCAUGHT_IN_PROMISE: Prefixes = Prefixes {
    error: "Uncaught (in promise) ",
    value: "Uncaught (in promise) ",
};

/// A thrown value, taken apart for reporting.
struct Described {
    /// `Name: message` for an Error, the formatted value otherwise.
    headline: String,
    /// The Error's stack (frames, one a line), or empty.
    stack: String,
    is_error: bool,
}

fn describe_exception<'js>(
    ctx: &Ctx<'js>,
    format: &Function<'js>,
    thrown: Value<'js>,
) -> Described {
    let Some(error) = thrown.as_object().filter(|object| object.is_error()) else {
        let text = format.call::<_, String>((thrown,)).unwrap_or_else(|_| {
            let _ = ctx.catch();
            "<a value that cannot be printed>".into()
        });
        return Described {
            headline: text,
            stack: String::new(),
            is_error: false,
        };
    };
    let name = error
        .get::<_, Coerced<String>>("name")
        .map(|name| name.0)
        .unwrap_or_else(|_| "Error".into());
    let message = error
        .get::<_, Coerced<String>>("message")
        .map(|message| message.0)
        .unwrap_or_default();
    let stack = error
        .get::<_, Option<Coerced<String>>>("stack")
        .ok()
        .flatten()
        .map(|stack| stack.0)
        .unwrap_or_default();
    let _ = ctx.catch(); // a throwing getter must not leak into the next cell
    Described {
        headline: if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        },
        stack,
        is_error: true,
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

fn engine_error<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> WorkerError {
    move |err| WorkerError::Engine(format!("{what}: {err}"))
}

/// A byte count from the environment; unset or empty means no limit.
/// How deep a value `JSON.stringify` may walk on this thread's stack (its rlimit; 8 MiB when
/// unlimited).
fn json_depth_limit() -> usize {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let stack = match getrlimit(Resource::RLIMIT_STACK) {
        Ok((soft, _)) if soft != RLIM_INFINITY => usize::try_from(soft).unwrap_or(usize::MAX),
        _ => 8 * MIB,
    };
    (stack.saturating_sub(STACK_SAFETY_MARGIN) / STACK_PER_JSON_LEVEL).clamp(64, 100_000)
}

/// Keeps QuickJS's stack limit below the main thread's real stack (its rlimit), so a deep
/// recursion is a `RangeError` and not a crash.
fn clamp_to_thread_stack(requested: usize) -> usize {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    match getrlimit(Resource::RLIMIT_STACK) {
        Ok((soft, _)) if soft != RLIM_INFINITY => {
            let available = usize::try_from(soft)
                .unwrap_or(usize::MAX)
                .saturating_sub(STACK_SAFETY_MARGIN);
            requested.min(available)
        }
        _ => requested,
    }
}
