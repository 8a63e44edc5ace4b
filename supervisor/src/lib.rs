//! cellvisor: persistent Python, JavaScript and Lua cells, each session's code in its own
//! worker process, under an actor-based supervisor.
//!
//! Start with [`Cellvisor::start`] and [`Cellvisor::eval`]. The public surface is
//! [`Cellvisor`], [`Options`] and the host-facing types of `cellvisor-client` (re-exported
//! here: [`cell`], [`daemon`]'s client and protocol, the status rows); everything below is
//! the crate's own.
//!
//! - [`cell`]: requests, results and progress events (the host-facing contract), from the
//!   light `cellvisor-client` crate, with the daemon's client and protocol.
//! - `check`: `cellvisor check`, scored suites of cells with artifacts and a run summary.
//! - `host`: the library API, [`Cellvisor`].
//! - `supervisor`: the `Supervisor` actor: registry, cap, eviction, sampling, prewarm pool.
//! - `session`: the `Session` actor: one worker, its cells, heartbeats, deadlines, restarts,
//!   and the tasks on its worker connection.
//! - `spawn`: which program a worker runs, starting it, ending it and everything under it.
//! - `socket_halves`: sockets registered for reading only, so a peer reading what the daemon
//!   wrote does not wake it.
//! - `output`: a cell's bounded output sink with artifact spill.
//! - `allocator`: returning freed memory to the OS after big requests.
//! - `artifacts`: the artifact directory: private files, no links followed, a total cap.
//! - `paths`: where files that outlive workers live (artifacts, session stores).
//! - `python_choice`: which Python a request runs on (its `VIRTUAL_ENV`, its cwd's venv).
//! - `environment`: the one typed environment of a worker (filtered inherited variables under
//!   what cellvisor sets), rendered once at spawn. `limits`: its rlimits.
//! - `sandbox`: a request's sandbox policy (the operator's, only tightened), checked against
//!   the kernel, and the Landlock rules of each session's worker.
//! - `secrets`: non-dumpable processes, so cells cannot read the supervisor's memory.
//! - `usage`: the sampler of workers' process trees (for `status` and the RSS cap).
//! - [`daemon`]: the JSON-RPC daemon, its protocol and its client.
//! - `directive`: the `// @exec:` first line of code-mode JavaScript cells.
//! - `mcp`: `cellvisor mcp`, an MCP server on stdio with an embedded supervisor.
//! - `render`: text for text hosts (CLI and MCP): cell headers, display bundles (HTML as
//!   Markdown), the status table, `Display` for the states.
//! - [`worker_entry`]: the hidden `__worker` entry point for programs that embed cellvisor,
//!   and the `main` of `cellvisor-py-worker` (the program Python workers run).

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod allocator;
mod artifacts;
pub use cellvisor_client::cell;
mod check;
mod cli;
pub mod daemon;
mod directive;
mod environment;
mod host;
mod limits;
mod mcp;
mod output;
mod paths;
mod python_choice;
mod render;
mod sandbox;
mod secrets;
mod session;
mod socket_halves;
mod spawn;
mod supervisor;
#[cfg(test)]
mod testing;
mod usage;
pub mod worker_entry;

pub use cell::{
    CellEvent, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult, ToolCallRequest, ToolSpec,
};
pub use cellvisor_client::status::{SessionState, SessionStatus};
pub use cellvisor_config::Config;
pub use cellvisor_ipc::Language;
pub use cli::main as command_line;
pub use host::{Cellvisor, Options, RequestError, StartupError, WaitOptions};
