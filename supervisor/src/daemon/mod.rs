//! The daemon: a long-lived supervisor that hosts reach over a Unix socket speaking JSON-RPC
//! 2.0, one JSON object per line (documented in `docs/protocol.md`).
//!
//! - [`protocol`]: the wire types, method names and error codes.
//! - [`server`]: `cellvisor serve`: the listener, connections, method dispatch.
//! - [`client`]: the client the CLI uses, including starting a daemon when none runs.

pub mod client;
#[cfg(test)]
mod golden_tests;
pub mod protocol;
pub mod server;

use std::path::{Path, PathBuf};

/// The daemon socket: `explicit`, else `$CELLVISOR_SOCKET`, else the config's
/// `daemon.socket`, else `daemon.sock` in the per-user runtime directory.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    if let Some(path) = std::env::var_os("CELLVISOR_SOCKET").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    if let Some(path) = configured {
        return path.to_path_buf();
    }
    cellvisor_ipc::socket::default_runtime_dir().join("daemon.sock")
}
