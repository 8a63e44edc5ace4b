//! JavaScript cells on QuickJS (quickjs-ng, through rquickjs).
//!
//! One runtime and one context live as long as the worker, so globals persist. Every cell is
//! evaluated as an async *global script* (`JS_EVAL_FLAG_ASYNC`): top-level `await` works, and
//! top-level declarations still land in the global scope (QuickJS keeps them there even in
//! async mode). Before that, `redeclare` rewrites the cell: top-level `let`/`const`/`class`
//! become `var`s (so a cell can run twice), static imports become `await import()`, and a
//! top-level `return` ends the cell with its value.
//!
//! The eval returns a promise of `{value: <completion value>}`; the cell's event loop
//! (`event_loop`) runs QuickJS's job queue, due timers and answered host tool calls until
//! that promise settles, sleeping (never spinning) while it waits for a timer or a tool
//! answer, and checking the interrupt flag at least every `WAIT_SLICE`.
//!
//! Here: the engine, how a cell starts and how its end becomes an outcome. Beside it:
//! - `prelude`: the globals, defined by `prelude.js` on the native hooks installed there
//!   (the file helpers' work is in [`crate::helpers`], the line helpers' in `crate::text`).
//! - `running_cell`: what the hooks, the event loop and the interrupt handler share about
//!   the cell that runs now.
//! - `event_loop`: the cell's loop, its timers and its tool calls in flight.
//! - `report`: thrown values, unhandled rejections and an exhausted heap, told on stderr.
//! - `redeclare`, `modules`, `node`: the cell's rewriting, ES modules, Node-style globals.
//! - `state`: snapshots of the user's globals (`state.js` encodes and decodes them).
//!
//! What cells see:
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

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The worker core's modules (and the OS helpers), under the names this engine has always
// used for them.
use cellvisor_worker_core::{helpers, runtime, text, tools};
#[cfg(test)]
mod corpus_tests;
mod event_loop;
mod modules;
mod node;
mod prelude;
mod redeclare;
mod report;
mod running_cell;
mod state;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod web_tests;

use crate::helpers::HostDirs;
use crate::runtime::{
    Engine, Interrupt, LoadedState, Outbox, SavedState, StateError, WorkerContext, WorkerError,
};
use cellvisor_ipc::state::NameInfo;
use cellvisor_ipc::{env, CellOutcome, ExecuteCell, Language};
use modules::{CellLoader, CellResolver, SharedModuleState};
use prelude::{install_prelude, Hooks, LiveHooks};
use report::UNCAUGHT;
use rquickjs::context::EvalOptions;
use rquickjs::convert::List;
use rquickjs::{qjs, Context, Ctx, Promise, Runtime, Value};
use running_cell::RunningCell;
use std::path::Path;
use std::rc::Rc;

/// Room left between QuickJS's stack limit and the thread's real one, so QuickJS reports a
/// `RangeError` before the process overflows its stack.
const STACK_SAFETY_MARGIN: usize = 256 * 1024;

const MIB: usize = 1024 * 1024;

/// Runs a JavaScript worker on `socket` until the supervisor says `Shutdown` or goes away.
pub fn serve(socket: &std::path::Path) -> Result<(), WorkerError> {
    runtime::serve(socket, JsEngine::new)
}

/// The JavaScript worker's engine: one QuickJS runtime whose global scope lives from cell to cell.
pub struct JsEngine {
    /// The prelude's hooks. Declared first: they must be dropped before the runtime, which
    /// aborts if a value outlives it.
    hooks: Hooks,
    /// `state.js`'s functions, once a state task ran (dropped before the runtime too).
    state_script: state::StateScript,
    /// The globals the context had once the prelude was installed: not the user's.
    host_names: Vec<String>,
    context: Context,
    runtime: Runtime,
    cell: Rc<RunningCell>,
    modules: SharedModuleState,
    memory_limit: Option<usize>,
    dirs: Rc<HostDirs>,
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
        let dirs = Rc::new(dirs);
        let (context, hooks, host_names) = new_context(&runtime, &cell, &dirs)?;
        Ok(JsEngine {
            hooks,
            state_script: None,
            host_names,
            context,
            runtime,
            cell,
            modules,
            memory_limit,
            dirs,
        })
    }

    /// Replaces the context by a new one with only the prelude's globals (what a restore
    /// that replaces the namespace starts from: globals made by `var` cannot be deleted).
    fn fresh_context(&mut self) -> Result<(), WorkerError> {
        let (context, hooks, host_names) = new_context(&self.runtime, &self.cell, &self.dirs)?;
        // The old context's values go before the old context itself.
        self.state_script = None;
        self.hooks = hooks;
        self.host_names = host_names;
        self.context = context;
        self.runtime.run_gc();
        Ok(())
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
                CellOutcome::Failed { .. } | CellOutcome::OutOfMemory { .. } => outcome,
                _ => CellOutcome::Interrupted,
            };
        }
        self.report_unhandled_rejections(ctx, &hooks.format, outcome)
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

    fn save_state(
        &mut self,
        payload: &Path,
        max_bytes: u64,
        interrupt: &Interrupt,
    ) -> Result<SavedState, StateError> {
        state::save(self, payload, max_bytes, interrupt)
    }

    fn load_state(
        &mut self,
        payload: &Path,
        len: u64,
        replace: bool,
        interrupt: &Interrupt,
    ) -> Result<LoadedState, StateError> {
        state::load(self, payload, len, replace, interrupt)
    }

    fn list_names(&mut self, interrupt: &Interrupt) -> Result<Vec<NameInfo>, StateError> {
        state::list_names(self, interrupt)
    }
}

/// A context with the prelude installed, its hooks and its global names.
fn new_context(
    runtime: &Runtime,
    cell: &Rc<RunningCell>,
    dirs: &Rc<HostDirs>,
) -> Result<(Context, Hooks, Vec<String>), WorkerError> {
    let context =
        Context::full(runtime).map_err(engine_error("cannot create the QuickJS context"))?;
    let (hooks, host_names) = context
        .with(|ctx| {
            let hooks = install_prelude(&ctx, cell, dirs)?;
            Ok::<_, rquickjs::Error>((hooks, state::host_names(&ctx)?))
        })
        .map_err(engine_error("cannot install the JavaScript prelude"))?;
    Ok((context, hooks, host_names))
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

fn engine_error<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> WorkerError {
    move |err| WorkerError::Engine(format!("{what}: {err}"))
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
