//! Lua cells on Lua 5.4 (mlua, vendored).
//!
//! One `Lua` state lives as long as the worker, so globals persist between cells (top-level
//! `local`s do not, exactly as in the standalone `lua` REPL). A cell is compiled the way that
//! REPL does it: first as `return <code>`, so a bare expression shows its value(s), and if that
//! does not compile, as a chunk (whose explicit top-level `return` values are shown too).
//!
//! Each cell runs as a coroutine so that an interrupt can stop it even inside `pcall`; see
//! `interrupt`. A `coroutine.yield()` at the top level of a cell is an error
//! ("attempt to yield from outside a coroutine", as in the standalone interpreter): there is no
//! resumer to receive the values, and resuming silently would hide the mistake.
//!
//! `print`, `io.write` and writes to `io.stdout`/`io.stderr` go to the cell's output; reading
//! stdin is an error. Output written by child processes (`os.execute`) is not captured.
//!
//! The helpers of PRELUDE.md (`read`, `write`, `tree`, `diff`, `tool.<name>`, ...) are global
//! functions defined in `helpers.lua` on top of Rust host functions (`host_table`), since Lua
//! has no directory API and a unified diff is one Rust crate call away.
//!
//! The code-mode helpers (`text`, `image`, `audio`, `notify`, `store`, `load`, `exit`,
//! `yield_control`,
//! `tools.tool_search`) are in `code_mode.lua`. Lua's own `load` stays reachable as
//! `lua_load`; `exit()` and `os.exit(status)` end the cell, never the worker (see
//! `interrupt`).
//!
//! Snapshots of the user's globals (values, tables, functions as bytecode with their
//! upvalues) are in `state`. A cell's values as one bundle for a host that asked (Jupyter's
//! `execute_result`) are in `value`.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The worker core's modules (and the OS helpers), under the names this engine has always
// used for them.
use cellvisor_os::locking;
use cellvisor_worker_core::{helpers, runtime, text, tools};

mod host_table;
mod interrupt;
mod json;
mod state;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
mod value;

use crate::locking::lock;
use crate::runtime::{
    Engine, Interrupt, LoadedState, Outbox, SavedState, StateError, WorkerContext, WorkerError,
};
use cellvisor_ipc::state::NameInfo;
use cellvisor_ipc::{
    env, CellOutcome, ExecuteCell, Language, OutputStream, ToolInfo, MAX_FRAME_BYTES,
};
use interrupt::InterruptHook;
use mlua::{
    ChunkMode, Function, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, ThreadStatus, Value,
};
use serde_json::{Map, Value as Json};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Routes output, stubs stdin and guards the interrupt hook; see the file itself.
const PRELUDE: &str = include_str!("prelude.lua");
/// The helpers every language offers (PRELUDE.md), on top of `host_table`.
const HELPERS: &str = include_str!("helpers.lua");
/// Makes `load`, `loadfile`, `dofile` and `require` accept source text only (before code mode
/// renames `load` to `lua_load`).
const TEXT_ONLY: &str = include_str!("text_only.lua");
/// The code-mode helpers (`text`, `store`, `load`, ...); Lua's own `load` becomes `lua_load`.
const CODE_MODE: &str = include_str!("code_mode.lua");

/// A display bundle larger than this could not travel in one frame.
const MAX_DISPLAY_BYTES: usize = MAX_FRAME_BYTES / 2;

/// What a top-level `coroutine.yield()` reports, worded like the standalone interpreter.
const STRAY_YIELD_MESSAGE: &str = "attempt to yield from outside a coroutine";

/// The running cell, where `print`, `display` and the helpers send; `None` between cells.
type CellSink = Arc<Mutex<Option<RunningCell>>>;

/// What host functions need to know about the running cell.
struct RunningCell {
    cell_id: u64,
    outbox: Outbox,
    /// Checked while a tool call waits for the host.
    interrupt: Arc<AtomicBool>,
    /// The host tools this cell may call.
    tools: Vec<ToolInfo>,
}

/// Runs a Lua worker on `socket` until the supervisor says `Shutdown` or goes away.
pub fn serve(socket: &std::path::Path) -> Result<(), WorkerError> {
    runtime::serve(socket, LuaEngine::new)
}

/// Runs Lua cells in one persistent Lua 5.4 state.
pub struct LuaEngine {
    lua: Lua,
    hook: InterruptHook,
    sink: CellSink,
    /// The standard `tostring` and `debug.traceback`, kept because cells may replace the globals.
    tostring: Function,
    traceback: Function,
    /// `io.stdout` and `io.stderr`: what `io.write(...)` returns, not worth showing as a value.
    std_handles: [Value; 2],
    memory_limit: Option<usize>,
    /// The heap limit in force: `memory_limit`, or the worker's default without one.
    heap_limit: usize,
    /// Numbers the chunks (`cell[3]`) so tracebacks say which cell a function came from.
    cells_run: u64,
    /// The namespace as the worker started: what snapshots leave out.
    baseline: state::Baseline,
}

impl LuaEngine {
    /// The engine the worker runs, with the heap limit from `CELLVISOR_MEMORY_LIMIT` if set.
    pub fn new(_context: &WorkerContext) -> Result<Self, WorkerError> {
        Self::with_memory_limit(env::bytes(env::MEMORY_LIMIT)?)
    }

    /// An engine whose Lua heap may grow to `memory_limit` bytes (`None`: unlimited).
    pub fn with_memory_limit(memory_limit: Option<usize>) -> Result<Self, WorkerError> {
        let startup = |err: mlua::Error| WorkerError::Engine(format!("cannot start Lua: {err}"));
        // SAFETY: "unsafe" in mlua's sense only: the `debug` library (kept because cells use
        // `debug.traceback`) and C modules can break mlua's invariants. A cell that does so
        // takes down its own worker, which the supervisor treats as a crash.
        let lua = unsafe {
            Lua::unsafe_new_with(StdLib::ALL_SAFE | StdLib::DEBUG, LuaOptions::default())
        };
        let hook = InterruptHook::install(&lua).map_err(startup)?;
        let sink = CellSink::default();
        let globals = lua.globals();
        let tostring: Function = globals.get("tostring").map_err(startup)?;
        let traceback: Function = globals
            .get::<Table>("debug")
            .and_then(|debug| debug.get("traceback"))
            .map_err(startup)?;
        let std_handles = globals
            .get::<Table>("io")
            .and_then(|io| Ok([io.get("stdout")?, io.get("stderr")?]))
            .map_err(startup)?;
        let write_stdout = output_function(&lua, &sink, OutputStream::Stdout).map_err(startup)?;
        let write_stderr = output_function(&lua, &sink, OutputStream::Stderr).map_err(startup)?;
        let display = display_function(&lua, &sink, tostring.clone()).map_err(startup)?;
        lua.load(PRELUDE)
            .set_name("=cellvisor prelude")
            .set_mode(ChunkMode::Text)
            .call::<()>((write_stdout, write_stderr, display))
            .map_err(startup)?;
        let host = host_table::host_table(&lua, &sink).map_err(startup)?;
        lua.load(HELPERS)
            .set_name("=cellvisor helpers")
            .set_mode(ChunkMode::Text)
            .call::<()>(&host)
            .map_err(startup)?;
        lua.load(TEXT_ONLY)
            .set_name("=cellvisor text-only loading")
            .set_mode(ChunkMode::Text)
            .exec()
            .map_err(startup)?;
        lua.load(CODE_MODE)
            .set_name("=cellvisor code mode")
            .set_mode(ChunkMode::Text)
            .call::<()>(&host)
            .map_err(startup)?;
        install_exit(&lua).map_err(startup)?;
        let baseline = state::Baseline::capture(&lua).map_err(startup)?;
        // Without a limit, an allocation the OS refuses aborts the worker; under a limit it is
        // a Lua "not enough memory" error the cell can catch.
        let heap_limit = memory_limit.unwrap_or_else(default_heap_limit);
        lua.set_memory_limit(heap_limit).map_err(startup)?;
        Ok(LuaEngine {
            lua,
            hook,
            sink,
            tostring,
            traceback,
            std_handles,
            memory_limit,
            heap_limit,
            cells_run: 0,
            baseline,
        })
    }

    fn run_cell(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> CellOutcome {
        let chunk_name = format!("=cell[{}]", self.cells_run);
        let thread = match self
            .compile(&cell.code, &chunk_name)
            .and_then(|function| self.lua.create_thread(function))
        {
            Ok(thread) => thread,
            Err(err) => return self.report_error(cell, outbox, interrupt, &err),
        };
        self.hook.arm(&self.lua, interrupt.flag(), &thread);
        let result = thread.resume::<MultiValue>(());
        match result {
            Ok(_) if thread.status() == ThreadStatus::Resumable => {
                let outcome = if let Some(status) = self.hook.exit_status() {
                    exit_outcome(cell, outbox, status)
                } else if self.hook.yielded_for_interrupt() || interrupt.is_raised() {
                    CellOutcome::Interrupted
                } else {
                    self.report_stray_yield(cell, outbox, &thread)
                };
                self.close_suspended(cell, outbox, &thread);
                outcome
            }
            Ok(values) => match self.render_values(&values) {
                Ok(Some(line)) => {
                    value::send_if_wanted(&self.lua, cell.cell_id, outbox, &values, &line);
                    // The cell's `Done` follows at once and takes the line along: one write.
                    outbox.output_unflushed(cell.cell_id, OutputStream::Stdout, &line);
                    self.display_tables(cell.cell_id, outbox, &values);
                    CellOutcome::Completed
                }
                Ok(None) => CellOutcome::Completed,
                Err(err) => self.report_error(cell, outbox, interrupt, &err),
            },
            Err(err) => self.report_error(cell, outbox, interrupt, &err),
        }
    }

    /// Compiles `code` as an expression if it is one (like the standalone REPL), else as a chunk.
    fn compile(&self, code: &str, chunk_name: &str) -> mlua::Result<Function> {
        let load = |source: &str| {
            self.lua
                .load(source)
                .set_name(chunk_name)
                .set_mode(ChunkMode::Text)
                .into_function()
        };
        let as_expression = format!("return {code}");
        if load(&as_expression).is_err() {
            return load(code);
        }
        // Passing the values through a call keeps the cell's own frame on the stack: in
        // `return f()` the call is a tail call, and tracebacks would lose the cell's line.
        load(&format!("return (function(...) return ... end)({code}\n)"))
            .or_else(|_| load(&as_expression))
    }

    /// The text shown for a cell's values, as the standalone REPL shows them: nothing when
    /// there are none (or only the file `io.write` returns), else the values tab-separated,
    /// `nil` included (tables as JSON when they are plain data).
    fn render_values(&self, values: &MultiValue) -> mlua::Result<Option<Vec<u8>>> {
        let is_std_handle = |value: &Value| {
            self.std_handles
                .iter()
                .any(|handle| handle.to_pointer() == value.to_pointer())
        };
        if values.iter().all(is_std_handle) {
            return Ok(None);
        }
        let mut line = Vec::new();
        for (index, value) in values.iter().enumerate() {
            if index > 0 {
                line.push(b'\t');
            }
            match value {
                Value::Table(table) => match json::plain_table_json(table) {
                    Some(json) => line.extend_from_slice(json.to_string().as_bytes()),
                    None => line.extend_from_slice(&self.tostring_bytes(value)?),
                },
                _ => line.extend_from_slice(&self.tostring_bytes(value)?),
            }
        }
        line.push(b'\n');
        Ok(Some(line))
    }

    /// Trailing tables that are plain data also go out as `application/json` bundles, so
    /// hosts that render JSON get them (their text is already in the output).
    fn display_tables(&self, cell_id: u64, outbox: &Outbox, values: &MultiValue) {
        for value in values {
            let Value::Table(table) = value else {
                continue;
            };
            if let Some(json) = json::plain_table_json(table) {
                let bundle = table_bundle(json);
                if bundle.len() <= MAX_DISPLAY_BYTES {
                    outbox.display(cell_id, bundle);
                }
            }
        }
    }

    fn tostring_bytes(&self, value: &Value) -> mlua::Result<Vec<u8>> {
        let text: mlua::String = self.tostring.call(value)?;
        Ok(text.as_bytes().to_vec())
    }

    /// Writes the error and its traceback to stderr; an error while an interrupt is pending
    /// (the hook's `interrupted`, or anything it caused) counts as the interrupt.
    fn report_error(
        &self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
        err: &mlua::Error,
    ) -> CellOutcome {
        if let Some(status) = self.hook.exit_status() {
            return exit_outcome(cell, outbox, status);
        }
        if interrupt.is_raised() {
            return CellOutcome::Interrupted;
        }
        let (text, summary) = describe_error(err, self.memory_limit);
        outbox.output(
            cell.cell_id,
            OutputStream::Stderr,
            format!("{text}\n").as_bytes(),
        );
        if is_memory_error(err) {
            // Before the collection after the cell frees what the failed allocation left.
            return CellOutcome::OutOfMemory {
                summary,
                limit_bytes: self.heap_limit as u64,
                used_bytes: self.lua.used_memory() as u64,
            };
        }
        CellOutcome::Failed { summary }
    }

    fn report_stray_yield(
        &self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        thread: &Thread,
    ) -> CellOutcome {
        let text = self
            .traceback
            .call::<String>((thread, STRAY_YIELD_MESSAGE))
            .unwrap_or_else(|_| STRAY_YIELD_MESSAGE.to_string());
        outbox.output(
            cell.cell_id,
            OutputStream::Stderr,
            format!("{text}\n").as_bytes(),
        );
        CellOutcome::Failed {
            summary: STRAY_YIELD_MESSAGE.to_string(),
        }
    }

    /// Ends a cell coroutine that will never be resumed, running its pending `<close>` handlers.
    fn close_suspended(&self, cell: &ExecuteCell, outbox: &Outbox, thread: &Thread) {
        if let Err(err) = thread.reset(self.tostring.clone()) {
            let (text, _) = describe_error(&err, self.memory_limit);
            let message =
                format!("error while closing the cell's to-be-closed variables: {text}\n");
            outbox.output(cell.cell_id, OutputStream::Stderr, message.as_bytes());
        }
    }
}

impl Engine for LuaEngine {
    const LANGUAGE: Language = Language::Lua;

    fn engine_name(&self) -> String {
        self.lua
            .globals()
            .get::<String>("_VERSION")
            .unwrap_or_else(|_| "Lua 5.4".to_string())
    }

    fn execute(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> Result<CellOutcome, WorkerError> {
        self.cells_run += 1;
        *lock(&self.sink) = Some(RunningCell {
            cell_id: cell.cell_id,
            outbox: outbox.clone(),
            interrupt: interrupt.flag(),
            tools: cell.tools.clone(),
        });
        let declared = host_table::all_tools(&self.lua, &cell.tools)
            .and_then(|tools| self.lua.globals().set("ALL_TOOLS", tools));
        let outcome = match declared {
            Ok(()) => self.run_cell(cell, outbox, interrupt),
            Err(err) => self.report_error(cell, outbox, interrupt, &err),
        };
        if outcome != CellOutcome::Completed {
            // A failed or stopped cell often leaves a lot of garbage (or hit the heap limit):
            // collect it now so the next cell starts with room.
            let _ = self.lua.gc_collect();
        }
        self.hook.disarm();
        *lock(&self.sink) = None;
        Ok(outcome)
    }

    fn save_state(
        &mut self,
        payload: &Path,
        max_bytes: u64,
        interrupt: &Interrupt,
    ) -> Result<SavedState, StateError> {
        self.baseline.save(&self.lua, payload, max_bytes, interrupt)
    }

    fn load_state(
        &mut self,
        payload: &Path,
        len: u64,
        replace: bool,
        interrupt: &Interrupt,
    ) -> Result<LoadedState, StateError> {
        self.baseline
            .load(&self.lua, payload, len, replace, interrupt)
    }

    fn list_names(&mut self, interrupt: &Interrupt) -> Result<Vec<NameInfo>, StateError> {
        self.baseline.names(&self.lua, interrupt)
    }
}

/// `exit()` and `os.exit(status)` as the cell's functions (they end the cell, never the worker).
fn install_exit(lua: &Lua) -> mlua::Result<()> {
    // SAFETY: `exit_cell` only touches the Lua stack of the state that calls it and the hook's
    // control block, which `InterruptHook::install` set up before this.
    let exit = unsafe { lua.create_c_function(interrupt::exit_cell)? };
    let globals = lua.globals();
    globals.set("exit", exit.clone())?;
    globals.get::<Table>("os")?.set("exit", exit)
}

/// How a cell that called `exit(status)` ended: completed for 0, else failed with the status.
fn exit_outcome(cell: &ExecuteCell, outbox: &Outbox, status: i64) -> CellOutcome {
    if status == 0 {
        return CellOutcome::Completed;
    }
    let summary = format!("exit({status}): the cell ended with status {status}");
    outbox.output(
        cell.cell_id,
        OutputStream::Stderr,
        format!("{summary}\n").as_bytes(),
    );
    CellOutcome::Failed { summary }
}

/// The full text of an error (message and traceback) and its one-line summary.
fn describe_error(err: &mlua::Error, memory_limit: Option<usize>) -> (String, String) {
    match err {
        mlua::Error::RuntimeError(text) => (text.clone(), summary_of(text)),
        mlua::Error::SyntaxError { message, .. } => (message.clone(), summary_of(message)),
        mlua::Error::MemoryError(message) => {
            let text = match memory_limit {
                Some(limit) => format!(
                    "{message} (the Lua heap is limited to {}; {})",
                    human_bytes(limit),
                    env::MEMORY_LIMIT
                ),
                None => message.clone(),
            };
            (text, summary_of(message))
        }
        mlua::Error::CallbackError { cause, .. } => {
            let mut root = cause.as_ref();
            while let mlua::Error::CallbackError { cause, .. } = root {
                root = cause.as_ref();
            }
            let text = err.to_string();
            (text.trim_end().to_string(), summary_of(&root.to_string()))
        }
        other => {
            let text = other.to_string();
            let summary = summary_of(&text);
            (text, summary)
        }
    }
}

/// Whether the heap limit ended the cell: a memory error, also when raised under a callback.
fn is_memory_error(err: &mlua::Error) -> bool {
    let mut root = err;
    while let mlua::Error::CallbackError { cause, .. } = root {
        root = cause.as_ref();
    }
    matches!(root, mlua::Error::MemoryError(_))
}

/// The first line of an error message, without the traceback.
fn summary_of(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("error")
        .to_string()
}

fn human_bytes(bytes: usize) -> String {
    const MIB: usize = 1024 * 1024;
    let mebibytes = bytes / MIB;
    if mebibytes > 0 && mebibytes * MIB == bytes {
        format!("{mebibytes} MiB")
    } else {
        format!("{bytes} bytes")
    }
}

/// The heap limit of a Lua worker configured without one: a third of what its address-space
/// rlimit leaves free now (the rest is for the allocator's overhead and the process's own
/// needs: each thread that allocates may reserve an arena of 64 MiB of address space, and
/// the worker's threads allocate while a cell runs), or the machine's memory.
fn default_heap_limit() -> usize {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_AS) {
        if soft != RLIM_INFINITY {
            let mapped = cellvisor_os::proc::memory(None)
                .map_or(0, |m| usize::try_from(m.mapped_bytes).unwrap_or(usize::MAX));
            let soft = usize::try_from(soft).unwrap_or(usize::MAX);
            return (soft.saturating_sub(mapped) / 3).max(1024 * 1024);
        }
    }
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    usize::try_from(pages).map_or(usize::MAX, |pages| pages.saturating_mul(page))
}

/// A Lua function that sends its string argument to the running cell's `stream`.
fn output_function(lua: &Lua, sink: &CellSink, stream: OutputStream) -> mlua::Result<Function> {
    let sink = Arc::clone(sink);
    lua.create_function(move |_, text: mlua::String| {
        if let Some(cell) = &*lock(&sink) {
            cell.outbox.output(cell.cell_id, stream, &text.as_bytes());
        }
        Ok(())
    })
}

/// The `display(value)` global: sends a MIME bundle for `value` and returns nothing.
fn display_function(lua: &Lua, sink: &CellSink, tostring: Function) -> mlua::Result<Function> {
    let sink = Arc::clone(sink);
    lua.create_function(move |_, value: Value| {
        let bundle = display_bundle(&value, &tostring)?;
        if bundle.len() > MAX_DISPLAY_BYTES {
            return Err(mlua::Error::runtime(format!(
                "display: the value is too large to display ({} as JSON, limit {})",
                human_bytes(bundle.len()),
                human_bytes(MAX_DISPLAY_BYTES)
            )));
        }
        if let Some(cell) = &*lock(&sink) {
            cell.outbox.display(cell.cell_id, bundle);
        }
        Ok(())
    })
}

/// Plain-data tables as `application/json` plus a Lua-literal `text/plain`; anything else as
/// `text/plain` through `tostring`.
fn display_bundle(value: &Value, tostring: &Function) -> mlua::Result<String> {
    let mut bundle = Map::new();
    let plain = match value {
        Value::Table(table) => json::plain_table_json(table),
        _ => None,
    };
    match plain {
        Some(json) => Ok(table_bundle(json)),
        None => {
            let text: mlua::String = tostring.call(value)?;
            bundle.insert("text/plain".into(), Json::String(text.to_string_lossy()));
            Ok(Json::Object(bundle).to_string())
        }
    }
}

/// The bundle of a plain-data table: its JSON and, as text, a Lua table constructor.
fn table_bundle(json: Json) -> String {
    let mut bundle = Map::new();
    bundle.insert("text/plain".into(), Json::String(json::lua_literal(&json)));
    bundle.insert("application/json".into(), json);
    Json::Object(bundle).to_string()
}
