//! The daemon: a long-lived supervisor that hosts reach over a Unix socket speaking JSON-RPC
//! 2.0, one JSON object per line (documented in `docs/protocol.md`).
//!
//! - [`protocol`]: the wire types, method names and error codes (from `cellvisor-client`).
//! - `server`: `cellvisor serve`: the listener, connections, method dispatch.
//! - [`client`]: the client the CLI uses, including starting a daemon when none runs (from
//!   `cellvisor-client`, which hosts can use without the engines).

pub use cellvisor_client::daemon as client;
pub use cellvisor_client::daemon::socket_path;
pub use cellvisor_client::protocol;
#[cfg(test)]
mod golden_tests;
pub(crate) mod server;
