//! JavaScript cells on QuickJS (quickjs-ng, through rquickjs).
//!
//! One runtime and one context live as long as the worker, so globals persist. Every cell is
//! evaluated as an async *global script* (`JS_EVAL_FLAG_ASYNC`): top-level `await` works, and
//! top-level declarations still land in the global scope (QuickJS keeps them there even in
//! async mode). The eval returns a promise of `{value: <completion value>}`; the worker runs
//! the job queue until it settles, then shows the value. Before that, [`redeclare`] turns the
//! cell's top-level `let`/`const`/`class` into `var`s so a cell can be run twice.

mod redeclare;

use crate::runtime::{Engine, Interrupt, Outbox, WorkerContext, WorkerError};
use cellvisor_ipc::{CellOutcome, ExecuteCell, Language, OutputStream};
use rquickjs::context::EvalOptions;
use rquickjs::promise::PromiseState;
use rquickjs::{qjs, Coerced, Context, Ctx, Function, Persistent, Promise, Runtime, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Defines `console`, `print` and `display`; evaluates to a function that takes the two
/// native hooks and returns the value formatter.
const PRELUDE: &str = include_str!("prelude.js");

/// Env var: the QuickJS heap limit in bytes.
const MEMORY_LIMIT_VAR: &str = "CELLVISOR_MEMORY_LIMIT";
/// Env var: the QuickJS stack limit in bytes.
const STACK_SIZE_VAR: &str = "CELLVISOR_STACK_SIZE";

/// Room left between QuickJS's stack limit and the thread's real one, so QuickJS reports a
/// `RangeError` before the process overflows its stack.
const STACK_SAFETY_MARGIN: usize = 256 * 1024;

/// How long an interrupted cell may spend killing the jobs it left queued.
const DISCARD_JOBS_BUDGET: Duration = Duration::from_millis(200);

const MIB: usize = 1024 * 1024;

/// Stream numbers the prelude passes to the native `write`.
const STDOUT: i32 = 0;

pub struct JsEngine {
    /// Formats values for output (`prelude.js`). Declared first: it must be dropped before the
    /// runtime, which aborts if a value outlives it.
    format: Persistent<Function<'static>>,
    context: Context,
    runtime: Runtime,
    cell: Rc<RunningCell>,
    memory_limit: Option<usize>,
}

/// What the native hooks and the interrupt handler need to know about the cell that runs now.
#[derive(Default)]
struct RunningCell {
    sink: RefCell<Option<(Outbox, u64)>>,
    interrupt: RefCell<Option<Arc<AtomicBool>>>,
    /// The interrupt handler stopped the cell (QuickJS threw its uncatchable "interrupted").
    interrupted: Cell<bool>,
    /// Promises rejected with no handler (yet), as QuickJS's rejection tracker reports them.
    /// Emptied at the end of every cell: nothing may outlive the runtime.
    rejections: RefCell<Vec<Rejection>>,
}

struct Rejection {
    promise: Persistent<Value<'static>>,
    reason: Persistent<Value<'static>>,
}

impl RunningCell {
    fn begin(&self, outbox: &Outbox, cell_id: u64, interrupt: &Interrupt) {
        *self.sink.borrow_mut() = Some((outbox.clone(), cell_id));
        *self.interrupt.borrow_mut() = Some(interrupt.flag());
        self.interrupted.set(false);
    }

    fn end(&self) {
        self.sink.borrow_mut().take();
        self.interrupt.borrow_mut().take();
        self.rejections.borrow_mut().clear();
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

    fn write(&self, stream: OutputStream, text: &str) {
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.output(*cell_id, stream, text.as_bytes());
        }
    }

    fn display(&self, bundle_json: String) {
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.display(*cell_id, bundle_json);
        }
    }

    fn interrupt_raised(&self) -> bool {
        self.interrupt
            .borrow()
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Whether the cell was asked to stop, whether or not QuickJS noticed yet.
    fn stop_requested(&self) -> bool {
        self.interrupted.get() || self.interrupt_raised()
    }
}

/// How a cell's evaluation ended, before it is reported.
enum Settled<'js> {
    Value(Value<'js>),
    Thrown(Value<'js>),
    Interrupted,
    /// The cell cannot finish for a reason of the worker's own (the report, ending in `\n`).
    Refused(String),
}

impl JsEngine {
    /// Builds the engine with the limits from `CELLVISOR_MEMORY_LIMIT` / `CELLVISOR_STACK_SIZE`.
    pub fn new(_context: &WorkerContext) -> Result<Self, WorkerError> {
        Self::with_limits(
            limit_from_env(MEMORY_LIMIT_VAR)?,
            limit_from_env(STACK_SIZE_VAR)?,
        )
    }

    /// Builds the engine with an explicit heap limit and stack limit (bytes; `None` keeps
    /// QuickJS's defaults: no heap limit, 1 MiB of stack).
    pub fn with_limits(
        memory_limit: Option<usize>,
        stack_size: Option<usize>,
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
                let stop = cell.interrupt_raised();
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
        let context =
            Context::full(&runtime).map_err(engine_error("cannot create the QuickJS context"))?;
        let format = context
            .with(|ctx| install_prelude(&ctx, &cell))
            .map_err(engine_error("cannot install the JavaScript prelude"))?;
        Ok(JsEngine {
            format,
            context,
            runtime,
            cell,
            memory_limit,
        })
    }

    fn run_cell(&self, ctx: &Ctx<'_>, source: &str) -> CellOutcome {
        let format = match self.format.clone().restore(ctx) {
            Ok(format) => format,
            Err(err) => return self.fail(&format!("InternalError: {err}\n")),
        };
        let settled = match evaluate(ctx, source) {
            Ok(promise) => self.drive(ctx, promise),
            Err(thrown) => thrown,
        };
        let settled = match settled {
            Settled::Value(value) => self.show_value(ctx, &format, value),
            other => other,
        };
        let outcome = match settled {
            Settled::Value(_) => CellOutcome::Completed,
            Settled::Interrupted => CellOutcome::Interrupted,
            Settled::Refused(report) => self.fail(&report),
            Settled::Thrown(_) if self.cell.stop_requested() => CellOutcome::Interrupted,
            Settled::Thrown(error) => self.report_exception(ctx, &format, error, UNCAUGHT),
        };
        if outcome == CellOutcome::Interrupted || !self.drain_jobs(ctx) {
            self.discard_jobs(ctx);
            // A failure stays the headline even if the jobs after it were interrupted.
            return match outcome {
                CellOutcome::Failed { .. } => outcome,
                _ => CellOutcome::Interrupted,
            };
        }
        self.report_unhandled_rejections(ctx, &format, outcome)
    }

    /// Writes a thrown value's report to stderr; `Failed` with its one-line summary.
    fn report_exception<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        thrown: Value<'js>,
        prefixes: Prefixes,
    ) -> CellOutcome {
        let described = describe_exception(ctx, format, thrown);
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

    /// Runs jobs until `promise` (the cell's, then any promise it evaluated to) settles.
    fn drive<'js>(&self, ctx: &Ctx<'js>, promise: Promise<'js>) -> Settled<'js> {
        let mut promise = promise;
        let mut unwrap_completion = true;
        loop {
            match promise.state() {
                PromiseState::Pending => {
                    if self.cell.stop_requested() {
                        return self.interrupted(ctx);
                    }
                    if !ctx.execute_pending_job() {
                        return Settled::Refused(
                            "Error: the cell awaits a promise that nothing is left to settle\n"
                                .into(),
                        );
                    }
                }
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
                    let value = if unwrap_completion {
                        unwrap_completion = false;
                        match completion_value(&value) {
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

    /// Writes the trailing value to stdout (nothing for `undefined`).
    fn show_value<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        value: Value<'js>,
    ) -> Settled<'js> {
        if value.is_undefined() {
            return Settled::Value(value);
        }
        match format.call::<_, String>((value.clone(),)) {
            Ok(text) => {
                self.cell.write(OutputStream::Stdout, &(text + "\n"));
                Settled::Value(value)
            }
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
        // SAFETY: JS_GetVersion returns a pointer to a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(qjs::JS_GetVersion()) };
        format!("QuickJS-ng {}", version.to_string_lossy())
    }

    fn execute(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> Result<CellOutcome, WorkerError> {
        self.cell.begin(outbox, cell.cell_id, interrupt);
        let source = redeclare::make_redeclarable(&cell.code);
        let outcome = self.context.with(|ctx| self.run_cell(&ctx, &source));
        self.cell.end();
        // Garbage from an interrupted or failed cell (cycles, half-built values) goes now
        // rather than at the next allocation threshold.
        if outcome != CellOutcome::Completed {
            self.runtime.run_gc();
        }
        Ok(outcome)
    }
}

/// Defines the globals of `prelude.js` with their native hooks and returns the formatter.
fn install_prelude<'js>(
    ctx: &Ctx<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<Persistent<Function<'static>>> {
    let write = Function::new(ctx.clone(), {
        let cell = Rc::clone(cell);
        move |stream: i32, text: Coerced<String>| {
            let stream = if stream == STDOUT {
                OutputStream::Stdout
            } else {
                OutputStream::Stderr
            };
            cell.write(stream, &text.0);
        }
    })?;
    let display = Function::new(ctx.clone(), {
        let cell = Rc::clone(cell);
        move |bundle_json: Coerced<String>| cell.display(bundle_json.0)
    })?;
    let setup: Function = ctx.eval(PRELUDE)?;
    let format: Function = setup.call((write, display))?;
    Ok(Persistent::save(ctx, format))
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
fn limit_from_env(name: &str) -> Result<Option<usize>, WorkerError> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value.trim().parse().map(Some).map_err(|_| {
            WorkerError::Engine(format!("{name} must be a number of bytes, got `{value}`"))
        }),
        _ => Ok(None),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::FromWorker;
    use std::thread;

    /// What one cell produced.
    #[derive(Debug)]
    struct Ran {
        outcome: CellOutcome,
        stdout: String,
        stderr: String,
        displays: Vec<serde_json::Value>,
    }

    fn run_with(engine: &mut JsEngine, code: &str, interrupt: &Interrupt) -> Ran {
        let (outbox, rx) = Outbox::new(10_000);
        let cell = ExecuteCell {
            cell_id: 7,
            code: code.into(),
            cwd: None,
            tools: Vec::new(),
        };
        let outcome = engine
            .execute(&cell, &outbox, interrupt)
            .expect("the engine survives every cell");
        let mut ran = Ran {
            outcome,
            stdout: String::new(),
            stderr: String::new(),
            displays: Vec::new(),
        };
        for frame in rx.try_iter() {
            match frame {
                FromWorker::Output {
                    cell_id: 7,
                    stream,
                    data,
                } => {
                    let text = String::from_utf8(data).expect("utf-8 output");
                    match stream {
                        OutputStream::Stdout => ran.stdout.push_str(&text),
                        OutputStream::Stderr => ran.stderr.push_str(&text),
                    }
                }
                FromWorker::Display {
                    cell_id: 7,
                    bundle_json,
                } => ran
                    .displays
                    .push(serde_json::from_str(&bundle_json).expect("bundle is JSON")),
                other => panic!("unexpected frame {other:?}"),
            }
        }
        ran
    }

    fn run(engine: &mut JsEngine, code: &str) -> Ran {
        run_with(engine, code, &Interrupt::default())
    }

    fn engine() -> JsEngine {
        JsEngine::with_limits(None, None).expect("engine starts")
    }

    fn stdout_of(engine: &mut JsEngine, code: &str) -> String {
        let ran = run(engine, code);
        assert_eq!(ran.outcome, CellOutcome::Completed, "{code}: {ran:?}");
        ran.stdout
    }

    /// Runs `code` and raises the interrupt after a moment, as the I/O thread would.
    fn run_interrupted(engine: &mut JsEngine, code: &str) -> (Ran, Duration) {
        let interrupt = Interrupt::default();
        let flag = interrupt.flag();
        let raiser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            flag.store(true, Ordering::SeqCst);
        });
        let started = Instant::now();
        let ran = run_with(engine, code, &interrupt);
        let elapsed = started.elapsed();
        raiser.join().expect("raiser thread");
        (ran, elapsed)
    }

    #[test]
    fn engine_name_names_quickjs_and_its_version() {
        let name = engine().engine_name();
        assert!(name.starts_with("QuickJS"), "{name}");
        assert!(name.chars().any(|c| c.is_ascii_digit()), "{name}");
    }

    #[test]
    fn declarations_persist_between_cells() {
        let mut js = engine();
        stdout_of(
            &mut js,
            "let x = 2; const y = 3; var w = 4\nfunction f() { return x * y }\nclass K { v() { return 7 } }",
        );
        assert_eq!(stdout_of(&mut js, "f() + new K().v() + w"), "17\n");
        assert_eq!(stdout_of(&mut js, "x = 10; f()"), "30\n");
    }

    #[test]
    fn running_a_cell_again_redeclares_its_bindings() {
        let mut js = engine();
        let cell = "const a = 1; let b = [a]; class C {}\nb";
        assert_eq!(stdout_of(&mut js, cell), "[1]\n");
        assert_eq!(stdout_of(&mut js, cell), "[1]\n");
        assert_eq!(stdout_of(&mut js, "const a = 5; a + b[0]"), "6\n");
    }

    #[test]
    fn console_and_print_write_to_their_streams() {
        let mut js = engine();
        let ran = run(
            &mut js,
            "console.log('a', 1, {b: [1]}, [1, 2], null, undefined, true, 1.5, NaN)\n\
             console.info('i'); console.debug('d'); print('p', 2)\n\
             console.error('e', {x: 1}); console.warn('w')",
        );
        assert_eq!(ran.outcome, CellOutcome::Completed);
        assert_eq!(
            ran.stdout,
            "a 1 {\"b\":[1]} [1,2] null undefined true 1.5 NaN\ni\nd\np 2\n"
        );
        assert_eq!(ran.stderr, "e {\"x\":1}\nw\n");
    }

    #[test]
    fn unserializable_values_fall_back_to_string() {
        let mut js = engine();
        let out = stdout_of(
            &mut js,
            "const cyclic = {}; cyclic.self = cyclic\nconsole.log(cyclic, 10n, Symbol('s'))",
        );
        assert_eq!(out, "[object Object] 10 Symbol(s)\n");
    }

    #[test]
    fn the_trailing_value_is_shown() {
        let mut js = engine();
        assert_eq!(
            stdout_of(&mut js, "let t = [1, 2, 3]; t.map(v => v * 2)"),
            "[2,4,6]\n"
        );
        assert_eq!(stdout_of(&mut js, "'raw string'"), "raw string\n");
        assert_eq!(stdout_of(&mut js, "6 * 7"), "42\n");
        assert_eq!(
            stdout_of(&mut js, "({a: {b: true}})"),
            "{\"a\":{\"b\":true}}\n"
        );
        assert_eq!(
            stdout_of(&mut js, "(function add(a, b) { return a + b })"),
            "function add(a, b) { return a + b }\n"
        );
        assert_eq!(stdout_of(&mut js, "undefined"), "");
        assert_eq!(stdout_of(&mut js, "let quiet = 1"), "");
        assert_eq!(stdout_of(&mut js, "null"), "null\n");
    }

    #[test]
    fn top_level_await_works_and_its_bindings_persist() {
        let mut js = engine();
        assert_eq!(stdout_of(&mut js, "await Promise.resolve(5)"), "5\n");
        stdout_of(
            &mut js,
            "async function f() { await null; return 9 }\nlet a = await f()",
        );
        assert_eq!(stdout_of(&mut js, "a"), "9\n");
        // A trailing promise is awaited.
        assert_eq!(stdout_of(&mut js, "f()"), "9\n");
        // Chains the cell started but did not await still run before it ends.
        assert_eq!(
            stdout_of(
                &mut js,
                "Promise.resolve().then(() => console.log('later')); 1"
            ),
            "1\nlater\n"
        );
    }

    #[test]
    fn display_sends_mime_bundles() {
        let mut js = engine();
        let ran = run(&mut js, "display({k: [1, 2]}); display('hi'); display([1])");
        assert_eq!(ran.outcome, CellOutcome::Completed);
        assert_eq!(ran.stdout, "", "display returns undefined");
        assert_eq!(
            ran.displays,
            vec![
                serde_json::json!({"application/json": {"k": [1, 2]}, "text/plain": "{\"k\":[1,2]}"}),
                serde_json::json!({"text/plain": "hi"}),
                serde_json::json!({"application/json": [1], "text/plain": "[1]"}),
            ]
        );
    }

    #[test]
    fn an_error_reports_its_stack_and_summary() {
        let mut js = engine();
        stdout_of(&mut js, "let kept = 'still here'");
        let ran = run(
            &mut js,
            "function boom() { throw new Error('boom') }\nconsole.log('before')\nboom()",
        );
        assert_eq!(
            ran.outcome,
            CellOutcome::Failed {
                summary: "Error: boom".into()
            }
        );
        assert_eq!(ran.stdout, "before\n");
        assert!(
            ran.stderr.starts_with("Error: boom\n    at boom"),
            "{}",
            ran.stderr
        );
        assert!(ran.stderr.contains("at <eval>"), "{}", ran.stderr);
        assert!(ran.stderr.ends_with('\n'));
        assert_eq!(stdout_of(&mut js, "kept"), "still here\n");
    }

    #[test]
    fn thrown_values_rejections_and_syntax_errors_fail_the_cell() {
        let mut js = engine();
        let failed = |summary: &str| CellOutcome::Failed {
            summary: summary.into(),
        };
        let ran = run(&mut js, "throw 42");
        assert_eq!(ran.outcome, failed("Uncaught 42"));
        assert_eq!(ran.stderr, "Uncaught 42\n");
        let ran = run(&mut js, "throw {code: 1}");
        assert_eq!(ran.outcome, failed("Uncaught {\"code\":1}"));
        let ran = run(&mut js, "await Promise.reject(new TypeError('nope'))");
        assert_eq!(ran.outcome, failed("TypeError: nope"));
        assert_eq!(ran.stderr.matches("nope").count(), 1, "{ran:?}");
        let ran = run(&mut js, "(async () => { throw new RangeError('late') })()");
        assert_eq!(ran.outcome, failed("RangeError: late"));
        let ran = run(&mut js, "1 +");
        assert!(
            matches!(&ran.outcome, CellOutcome::Failed { summary } if summary.starts_with("SyntaxError")),
            "{ran:?}"
        );
        let ran = run(&mut js, "function deep() { return deep() + 1 } deep()");
        assert_eq!(
            ran.outcome,
            failed("RangeError: Maximum call stack size exceeded")
        );
        let ran = run(&mut js, "Promise.reject(new Error('lost')); 'value'");
        assert_eq!(ran.outcome, failed("Uncaught (in promise) Error: lost"));
        assert_eq!(ran.stdout, "value\n");
        assert!(
            ran.stderr
                .starts_with("Uncaught (in promise) Error: lost\n    at"),
            "{ran:?}"
        );
        let ran = run(
            &mut js,
            "const handled = Promise.reject(1); await null; handled.catch(() => {}); 2",
        );
        assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
        let ran = run(&mut js, "await new Promise(() => {})");
        assert!(matches!(ran.outcome, CellOutcome::Failed { .. }), "{ran:?}");
        let ran = run(&mut js, "'a\0b'");
        assert!(matches!(ran.outcome, CellOutcome::Failed { .. }), "{ran:?}");
        assert_eq!(stdout_of(&mut js, "'fine'"), "fine\n");
    }

    #[test]
    fn an_interrupt_stops_busy_loops_and_keeps_state() {
        let mut js = engine();
        stdout_of(&mut js, "let before = 1");
        for code in [
            "globalThis.during = 2; while (true) {}",
            "try { while (true) {} } catch (e) { console.log('caught', e) } finally { console.log('finally') }",
            "for (;;) { try { while (true) {} } catch (e) {} }",
            "await (async () => { while (true) { await null } })()",
            "(async () => { while (true) { await null } })(); 'not awaited'",
        ] {
            let (ran, elapsed) = run_interrupted(&mut js, code);
            assert_eq!(ran.outcome, CellOutcome::Interrupted, "{code}: {ran:?}");
            assert!(!ran.stdout.contains("caught"), "{code}: {ran:?}");
            assert!(elapsed < Duration::from_secs(1), "{code}: took {elapsed:?}");
        }
        assert_eq!(stdout_of(&mut js, "before + during"), "3\n");
    }

    #[test]
    fn running_out_of_memory_fails_the_cell_and_not_the_engine() {
        let mut js = JsEngine::with_limits(Some(64 * 1024 * 1024), None).expect("engine starts");
        let ran = run(
            &mut js,
            "let a = []; while (true) a.push(new Array(1e6).fill(1))",
        );
        assert!(
            matches!(&ran.outcome, CellOutcome::Failed { summary } if summary.contains("out of memory")),
            "{ran:?}"
        );
        assert!(ran.stderr.contains("out of"), "{}", ran.stderr);
        assert_eq!(stdout_of(&mut js, "1 + 1"), "2\n");
        assert_eq!(stdout_of(&mut js, "a = null; [1, 2].length"), "2\n");
        assert_eq!(
            stdout_of(&mut js, "new Array(1e6).fill(1).length"),
            "1000000\n"
        );
    }

    #[test]
    fn a_small_stack_limit_is_a_range_error() {
        let mut js = JsEngine::with_limits(None, Some(128 * 1024)).expect("engine starts");
        let ran = run(
            &mut js,
            "let depth = 0; function down() { depth++; down() } down()",
        );
        assert_eq!(
            ran.outcome,
            CellOutcome::Failed {
                summary: "RangeError: Maximum call stack size exceeded".into()
            }
        );
        assert_eq!(stdout_of(&mut js, "depth > 10"), "true\n");
    }

    #[test]
    fn limits_are_read_as_byte_counts() {
        let name = "CELLVISOR_TEST_JS_LIMIT";
        std::env::set_var(name, " 1048576 ");
        assert_eq!(limit_from_env(name).expect("a number"), Some(1_048_576));
        std::env::set_var(name, "1 GiB");
        assert!(limit_from_env(name).is_err());
        std::env::remove_var(name);
        assert_eq!(limit_from_env(name).expect("unset"), None);
    }
}
