//! What every cellvisor worker shares, whatever its language: the engines (`cellvisor-worker-py`,
//! `-js`, `-lua`) build on this, and `cellvisor-workers` picks among them.
//!
//! - [`runtime`]: the connection, the `Engine` trait, the `Outbox`, the write path and the
//!   read path (frames read by the engine thread between cells and by a control thread while
//!   a cell runs: pings, interrupts).
//! - `reader_token`: which of those two threads reads the socket when, as plain decisions.
//! - [`entry`]: how a worker program starts (arguments, network namespace, non-dumpable),
//!   for `cellvisor __worker` and `cellvisor-py-worker` alike.
//! - [`state`]: snapshots of a session's namespace: the file every language shares (its
//!   integrity tag, its atomic write) and the state tasks run on an engine.
//! - `startup`: the user's and the project's startup modules, run at each worker start.
//! - `warden`: the worker as a subreaper: no process of a cell outlives the worker.
//! - [`text`]: the line helpers (`sort`, `uniq`, `diff`) JavaScript and Lua share.
//! - [`tools`]: host tools in code mode: `ALL_TOOLS` with TypeScript declarations, tool
//!   identifiers, the `tools.tool_search` ranking.
//! - [`helpers`]: the cell helpers JavaScript and Lua share (`read`, `write`, `tree`,
//!   `output`, `store`/`load`), written once; the engines only convert values.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod entry;
pub mod helpers;
mod reader_token;
pub mod runtime;
mod startup;
pub mod state;
pub mod text;
pub mod tools;
mod warden;

// The operating-system helpers the runtime and the warden use, under their old names.
use cellvisor_os::{locking, process_tree, sandbox};
