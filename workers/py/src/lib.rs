//! Python cells on a python child: the worker is a shim that owns `python -u runner.py`.
//!
//! - [`interpreter`]: which python to start (virtualenvs, the configured one, PATH, with
//!   version-manager shims resolved to the real binary).
//! - `engine`: [`PythonEngine`], the shim's side of a cell (start, pipes' threads,
//!   interrupts, state tasks, end), and [`serve`].
//! - `child`: spawning it with its pipes; `output_relay` and `events`: the threads that
//!   drain them (output with the `markers` cut out, and NDJSON events with host tool calls).
//! - `runner.py` (embedded, written once to the runtime directory as the module
//!   `cellvisor_runner`): runs the cells. Python starts `launcher.py` (written there as
//!   `runner.py`), which imports it, so that its bytecode is cached rather than compiled at
//!   every start (which also kept ~1 MB resident in every idle interpreter).
//! - `prelude.py` (embedded, written beside it as the module `cellvisor_prelude`): the
//!   helpers cells see in builtins, rich display, matplotlib capture and host tools. A module
//!   rather than part of the runner so that Python caches its bytecode.
//! - `ipython.py` (embedded, written beside it as `cellvisor_ipython`): `!cmd`, `%magic`,
//!   `%%magic` and `get_ipython()`, imported only by a cell that uses them.
//! - `NOTEBOOK_MODULES` (written beside it as `cellvisor_<name>`): `notebook.py` (the
//!   execution count, `In`/`Out` history, the first look at IPython syntax; imported with the
//!   prelude), `pretty.py` (IPython's text of a trailing value), `magics.py` (the magics
//!   beyond `ipython.py`'s) and `inspector.py` (`obj?` help), each imported on first use;
//!   `shell.py` and `shell_ipython.py` (IPython's own shell where it is installed), and
//!   `ipython_shim.py` with `ipython_objects.py` (an `IPython` package where it is not,
//!   found last on `sys.meta_path`).
//! - `state.py` (embedded, written beside it as `cellvisor_state`) and `state`: snapshots of
//!   the cells' names (save, restore, list), run by the runner as a task between cells.
//!
//! Host tools: the runner asks for one with a `tool_call` event; the event thread hands it
//! to the outbox and a short-lived thread waits for the answer and writes it to the runner's
//! command pipe, so the event reader never blocks on a host. `tools.tool_search` travels the
//! same way but the shim answers it itself, with the ranking of `crate::tools`.
//!
//! The child's stdout and stderr are pipes of their own, relayed as `Stdout` and `Stderr`
//! (prints, tracebacks and the output of `os.system` alike). After each cell the runner
//! writes a sync marker to the output pipe before its `done` event (and the output thread
//! drains the error pipe before it passes a marker on), and `execute` reports
//! the cell done only once the marker came through, so no output of a cell trails its `Done`.
//! A cell that sent nothing on the event pipe and ended ok or interrupted has no `done` event:
//! its marker carries the status, in the same write as its trailing value, and the output
//! thread leaves that output in the socket's buffer for the `Done` frame to take along, so a
//! quick cell costs python one write and the supervisor one wake-up.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The worker core's modules (and the OS helpers), under the names this engine has always
// used for them.
use cellvisor_os::{interpreter, locking, process_tree, sandbox, start_check};
use cellvisor_worker_core::{helpers, runtime, tools};

mod child;
mod engine;
mod events;
pub use child::runner_env;
mod forked;
mod install;
mod markers;
mod output_relay;
pub use engine::{serve, PythonEngine};
pub use install::{install_ipython_module, install_runner};

/// This build's identity: a hash of the sources a Python worker is made of (`build.rs`). The
/// supervisor hands it to `cellvisor-py-worker`, which runs only for its own build.
pub const BUILD_ID: &str = env!("CELLVISOR_BUILD_ID");

#[cfg(test)]
mod zygote_constants_tests;
