//! Where cellvisor keeps files that outlive a worker: spilled outputs and session stores.

use std::path::PathBuf;

/// `$XDG_STATE_HOME/cellvisor`, else `~/.local/state/cellvisor`, else the runtime directory.
fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("cellvisor");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/cellvisor");
    }
    cellvisor_ipc::socket::default_runtime_dir().join("state")
}

/// Where sessions' code-mode `store` / `load` keep their values, one directory per session.
pub(crate) fn stores_dir() -> PathBuf {
    state_dir().join("store")
}

/// Where sessions' snapshots live by default (`snapshots.dir` overrides it).
pub(crate) fn snapshots_dir() -> PathBuf {
    state_dir().join("snapshots")
}

/// The store directory of one session.
pub fn session_store_dir(session: &crate::names::SessionName) -> PathBuf {
    stores_dir().join(session.dir_name())
}

/// Where sessions' workspaces live by default (`workspaces.root` overrides it).
pub(crate) fn workspaces_dir() -> PathBuf {
    state_dir().join("workspaces")
}
