//! The daemon as hosts see it: a long-lived supervisor reached over a Unix socket speaking
//! JSON-RPC 2.0, one JSON object per line (documented in `docs/protocol.md`). The server
//! itself, `cellvisor serve`, is the `cellvisor-cli` crate's.
//!
//! - [`protocol`]: the wire types, method names and error codes (from `cellvisor-client`).
//! - [`client`]: the client the CLI uses, including starting a daemon when none runs (from
//!   `cellvisor-client`, which hosts can use without the engines).
//! - [`socket_path`]: where the daemon listens.

pub use cellvisor_client::daemon as client;
pub use cellvisor_client::daemon::socket_path;
pub use cellvisor_client::protocol;
#[cfg(test)]
mod golden_tests;
