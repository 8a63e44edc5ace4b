//! Where cellvisor keeps files that outlive a worker: spilled outputs and session stores.

use std::path::PathBuf;

/// `$XDG_STATE_HOME/cellvisor`, else `~/.local/state/cellvisor`, else the runtime directory.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("cellvisor");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/state/cellvisor");
    }
    cellvisor_ipc::socket::default_runtime_dir().join("state")
}

/// Where sessions' code-mode `store` / `load` keep their values, one directory per session.
pub fn stores_dir() -> PathBuf {
    state_dir().join("store")
}

/// The store directory of one session.
pub fn session_store_dir(session: &str) -> PathBuf {
    stores_dir().join(file_safe(session))
}

/// A session name made safe for a file name: anything but `A-Z a-z 0-9 - _` becomes `_`,
/// and a name that changed gets a short hash so two names never share a file.
pub fn file_safe(name: &str) -> String {
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
    // FNV-1a: stable across runs and platforms, unlike the std hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
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
}
