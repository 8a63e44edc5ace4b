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
//! - `host`: the library API, [`Cellvisor`].
//! - `request_error`: why a request is refused as a whole (the actors answer with it too).
//! - `supervisor`: the `Supervisor` actor: registry, cap, eviction, sampling, prewarm pool.
//! - `session`: the `Session` actor: one worker, its cells, heartbeats, deadlines, restarts,
//!   and the tasks on its worker connection.
//! - `spawn`: which program a worker runs, starting it, ending it and everything under it.
//! - [`socket_halves`]: sockets registered for reading only, so a peer reading what the daemon
//!   wrote does not wake it.
//! - `once`: requests that run once: a session remembers its recent `request_id`s' answers.
//! - `output`: a cell's bounded output sink with artifact spill.
//! - `artifacts`: the artifact directory: private files, no links followed, a total cap.
//! - [`paths`]: where files that outlive workers live (artifacts, session stores).
//! - `python_choice`: which Python a request runs on (its `VIRTUAL_ENV`, its cwd's venv).
//! - `environment`: the one typed environment of a worker (filtered inherited variables under
//!   what cellvisor sets), rendered once at spawn. `limits`: its rlimits.
//! - `sandbox`: a request's sandbox policy (the operator's, only tightened), checked against
//!   the kernel, and the Landlock rules of each session's worker.
//! - [`secrets`]: non-dumpable processes, so cells cannot read the supervisor's memory.
//! - `snapshots`: state that survives a worker: the snapshot directory, its keys and its
//!   sweep, and which stops save a snapshot.
//! - `locking`: one way to lock a mutex that a panic may have poisoned.
//! - `usage`: the sampler of workers' process trees (for `status` and the RSS cap).
//! - [`daemon`]: what hosts use of the JSON-RPC daemon: its protocol, its client, its socket
//!   path (the server, `cellvisor serve`, is in the `cellvisor-cli` crate, with the MCP
//!   server, the CLI, `cellvisor check` and the text renderers).
//! - `directive`: the `// @exec:` first line of code-mode JavaScript cells.
//! - [`worker_entry`]: the hidden `__worker` entry point for programs that embed cellvisor,
//!   and the `main` of `cellvisor-py-worker` (the program Python workers run).

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod artifacts;
pub use cellvisor_client::cell;
/// State that survives a worker: the ledger, checkpoints, `names` (from the client crate).
pub use cellvisor_client::state;
/// Hosts talk to a daemon through its client and protocol, and find its socket here.
pub mod daemon;
mod directive;
mod environment;
/// Leases that keep each session on one node of a fleet sharing a snapshot directory.
mod fleet;
mod host;
pub mod isolation;
mod limits;
mod locking;
/// OpenMetrics text of a supervisor (`Cellvisor::scrape`), and its content type.
pub mod metrics;
/// Session names and the one mapping from a name to a path component.
pub mod names;
/// Requests that run once: each session's remembered `request_id`s and their answers.
mod once;
mod output;
/// Where session files live: `cellvisor check` reads a session's store from
/// [`paths::session_store_dir`].
pub mod paths;
mod python_choice;
mod request_error;
mod sandbox;
/// Hosts that hold the user's environment (the daemon, the MCP server) make themselves
/// non-dumpable, so cells cannot read it back through /proc.
pub use cellvisor_os::secrets;
mod session;
mod snapshots;
/// The daemon splits its client connections the way sessions split their workers' sockets,
/// so a client reading its answers does not wake it.
pub mod socket_halves;
mod spawn;
mod supervisor;
#[cfg(test)]
mod testing;
mod usage;
mod zygote;
pub use zygote::ZygoteStatus;
/// A program that embeds cellvisor serves its own workers (`__worker`) through this.
pub mod worker_entry;
/// Each session's directory of files: where it is ([`workspaces::Workspace::of`]).
pub mod workspaces;

pub use cell::{
    CellEvent, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult, ToolCallRequest, ToolSpec,
};
pub use cellvisor_client::status::{SessionState, SessionStatus};
pub use cellvisor_config::Config;
pub use cellvisor_ipc::Language;
pub use environment::caller_environment;
pub use host::{
    Cellvisor, CloseOptions, DrainState, Health, Options, Origin, Readiness, RequestError,
    SessionRef, StartupError, WaitOptions, WatchEvent, Watched, HEALTH_BOUND, MAX_SESSION_NAME,
    MAX_WAIT_MS,
};
pub use names::{SessionName, SessionNameError};
pub use supervisor::ends::SessionEnded;
