//! cellvisor: persistent Python, JavaScript and Lua cells, each session's code in its own
//! worker process, under an actor-based supervisor.
//!
//! Start with [`Cellvisor::start`] and [`Cellvisor::eval`].
//!
//! - [`cell`]: requests, results and progress events (the host-facing contract).
//! - [`check`]: `cellvisor check`, scored suites of cells with artifacts and a run summary.
//! - [`host`]: the library API, [`Cellvisor`].
//! - [`supervisor`]: the `Supervisor` actor: registry, cap, eviction, sampling, prewarm pool.
//! - [`session`]: the `Session` actor: one worker, its cells, heartbeats, deadlines, restarts,
//!   and the tasks on its worker connection.
//! - [`spawn`]: starting a worker process, ending it and everything under it.
//! - [`output`]: a cell's bounded output sink with artifact spill.
//! - [`allocator`]: returning freed memory to the OS after big requests.
//! - [`artifacts`]: the artifact directory: private files, no links followed, a total cap.
//! - [`paths`]: where files that outlive workers live (artifacts, session stores).
//! - [`python_choice`]: which Python a request runs on (its `VIRTUAL_ENV`, its cwd's venv).
//! - [`environment`], [`limits`]: what a worker inherits: filtered variables, rlimits.
//! - [`secrets`]: non-dumpable processes, so cells cannot read the supervisor's memory.
//! - [`usage`]: the sampler of workers' process trees (for `status` and the RSS cap).
//! - [`daemon`]: the JSON-RPC daemon, its protocol and its client.
//! - [`directive`]: the `// @exec:` first line of code-mode JavaScript cells.
//! - [`mcp`]: `cellvisor mcp`, an MCP server on stdio with an embedded supervisor.
//! - [`worker_entry`]: the hidden `__worker` entry point for programs that embed cellvisor.

pub mod allocator;
pub mod artifacts;
pub mod cell;
pub mod check;
pub mod daemon;
pub mod directive;
pub mod environment;
pub mod host;
pub mod limits;
pub mod mcp;
pub mod output;
pub mod paths;
pub mod python_choice;
pub mod secrets;
pub mod session;
pub mod spawn;
pub mod supervisor;
#[cfg(test)]
mod testing;
pub mod usage;
pub mod worker_entry;

pub use cell::{CellEvent, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult};
pub use cellvisor_config::Config;
pub use cellvisor_ipc::Language;
pub use host::{Cellvisor, Options, RequestError, StartupError, WaitOptions};
pub use session::{SessionState, SessionStatus};
