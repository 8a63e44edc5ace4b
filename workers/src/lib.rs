//! cellvisor's worker processes. The `cellvisor` binary re-runs itself as
//! `cellvisor __worker <py|js|lua> --socket PATH`, and that lands in [`run`].
//!
//! What other crates use: [`run`], [`run_python`] and [`WorkerError`]; [`process_tree`]
//! (the supervisor's sampler and its cleanup); [`sandbox`] (the rules the supervisor
//! writes and the worker applies); [`python::interpreter`] (which Python a session runs).
//! The rest is the worker's own:
//!
//! - `runtime`: what every worker shares: the connection, the `Engine` trait, the `Outbox`,
//!   the write path and the read path (frames read by the engine thread between cells and
//!   by a control thread while a cell runs: pings, interrupts).
//! - `reader_token`: which of those two threads reads the socket when, as plain decisions.
//! - `js`: QuickJS (rquickjs) in-process.
//! - `lua`: Lua 5.4 (mlua) in-process.
//! - [`python`]: a shim that owns `python -u runner.py` and speaks NDJSON to it.
//! - `state`: snapshots of a session's namespace: the file every language shares (its
//!   integrity tag, its atomic write) and the state tasks run on an engine.
//! - `startup`: the user's and the project's startup modules, run at each worker start.
//! - [`sandbox`]: the Landlock confinement the supervisor asks for, applied once before the
//!   first cell (and the worker's own network namespace, entered first thing).
//! - [`locking`]: one way to lock a mutex a panic may have poisoned (the supervisor's too).
//! - `warden`: the worker as a subreaper: no process of a cell outlives the worker.
//! - [`process_tree`]: a process tree from `/proc`: find, measure, end.
//! - `text`: the line helpers (`sort`, `uniq`, `diff`) JavaScript and Lua share.
//! - `tools`: host tools in code mode: `ALL_TOOLS` with TypeScript declarations, tool
//!   identifiers, the `tools.tool_search` ranking.
//! - `helpers`: the cell helpers JavaScript and Lua share (`read`, `write`, `tree`,
//!   `output`, `store`/`load`), written once; the engines only convert values.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod helpers;
mod js;
pub mod locking;
mod lua;
pub mod process_tree;
pub mod python;
mod reader_token;
mod runtime;
pub mod sandbox;
mod startup;
mod state;
mod text;
mod tools;
mod warden;

use cellvisor_ipc::Language;
use std::path::Path;

pub use runtime::WorkerError;

/// Runs a worker for `language` until the supervisor says `Shutdown` or goes away.
pub fn run(language: Language, socket: &Path) -> Result<(), WorkerError> {
    match language {
        Language::JavaScript => runtime::serve(socket, js::JsEngine::new),
        Language::Lua => runtime::serve(socket, lua::LuaEngine::new),
        Language::Python => run_python(socket),
    }
}

/// Runs a Python worker: what [`run`] does for Python, without naming the in-process
/// engines, so a program that calls only this links no JavaScript or Lua (the small
/// `cellvisor-py-worker` program keeps an idle Python session's shim light).
pub fn run_python(socket: &Path) -> Result<(), WorkerError> {
    runtime::serve(socket, python::PythonEngine::new)
}
