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
pub fn session_store_dir(session: &str) -> PathBuf {
    stores_dir().join(file_safe(session))
}

/// A session name made safe for a file name: anything but `A-Z a-z 0-9 - _` becomes `_`,
/// and a name that changed gets a short hash so two names never share a file. A pair's key
/// (`sessions.key = "session+cwd"`) keeps its `@<hash>`: no plain name's file name holds `@`.
pub fn file_safe(name: &str) -> String {
    if let Some((session, hash)) = crate::host::split_pair(name) {
        return format!("{}@{hash}", file_safe(session));
    }
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == name {
        return safe;
    }
    let hash = cellvisor_ipc::stable_hash::fnv1a(name.as_bytes());
    format!("{safe}-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::file_safe;

    #[test]
    fn names_stay_readable_and_distinct() {
        assert_eq!(file_safe("agent-1_x"), "agent-1_x");
        assert_ne!(file_safe("a.b"), file_safe("a:b"));
        assert!(file_safe("a.b").starts_with("a_b-"));
    }

    #[test]
    fn changed_names_keep_the_directory_names_they_had() {
        // Session stores on disk are found by these names: they must never change.
        assert_eq!(file_safe("a.b"), "a_b-0466522c");
        assert_eq!(file_safe("my session/1"), "my_session_1-1c9950a7");
    }
}
