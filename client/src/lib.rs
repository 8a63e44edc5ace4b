//! What a Rust host needs to talk to cellvisor, and nothing that runs cells: build this crate
//! alone and neither QuickJS, Lua nor the actor system is compiled. The `cellvisor` crate
//! re-exports all of it, so embedding hosts and daemon clients speak the same types.
//!
//! - [`cell`]: requests of cells, per-cell results and progress events (DESIGN.md §2).
//! - [`sandbox`]: a request's sandbox fields, and a session's sandbox in `status`.
//! - [`status`]: the rows of `status`.
//! - [`once`]: requests that run once (`request_id`), and whether a cell's state was saved.
//! - [`usage`]: a cell's resource verdict: what it used, and the limit memory ran into.
//! - [`state`]: state that survives a worker: the ledger, checkpoints, `names`.
//! - [`protocol`]: the daemon's JSON-RPC wire types, method names and error codes.
//! - [`daemon`]: the daemon's client (on its socket, starting one, or over the network), and
//!   where its socket is.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod cell;
pub mod daemon;
pub mod once;
pub mod protocol;
pub mod sandbox;
pub mod state;
pub mod status;
pub mod usage;

pub use cell::{CellEvent, CellReport, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult};
pub use cellvisor_ipc::Language;
pub use daemon::{Client, ClientError};
pub use status::{SessionState, SessionStatus};
