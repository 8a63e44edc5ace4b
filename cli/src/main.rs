//! The `cellvisor` command: the host side of cellvisor, on top of the `cellvisor` library
//! (which holds the supervisor, the sessions and the workers).
//!
//! - `commands`: argument parsing and the subcommands (`eval`, `wait`, `terminate`,
//!   `status`, `interrupt`, `reset`, `close`, `stop`, `serve`, `mcp`, `config`, `check`), and
//!   which daemon they talk to (its socket, or `--connect URL` on the network).
//! - `daemon`: `cellvisor serve`, the JSON-RPC daemon on a Unix socket: the listener and its
//!   peer check, the daemon's life (signals, idle exit, config reload), connections, and the
//!   dispatch of each method.
//! - `mcp`: `cellvisor mcp`, an MCP server on stdio with an embedded supervisor (its tools
//!   and their schemas in `mcp::tools`).
//! - `jupyter`: Jupyter's kernel protocol mapped onto sessions (the daemon's Kernel Gateway API
//!   and the ZMQ kernel alike).
//! - `kernel`: `cellvisor kernel`, a ZeroMQ Jupyter kernel backed by a daemon session, and
//!   `kernel install`, its kernelspecs.
//! - `check`: `cellvisor check`, scored suites of cells with artifacts and a run summary.
//! - `render`: text for text hosts (CLI and MCP): cell headers, display bundles (HTML as
//!   Markdown), the status table, `Display` for the states.
//! - `allocator`: returning freed memory to the OS after the daemon's big requests.
//!
//! Its other program, `cellvisor-py-worker` (`src/bin/`), runs Python workers only.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod allocator;
mod check;
mod commands;
mod daemon;
mod jupyter;
mod kernel;
mod mcp;
mod render;

fn main() {
    cellvisor::worker_entry::run_worker_if_requested();
    std::process::exit(commands::main());
}
