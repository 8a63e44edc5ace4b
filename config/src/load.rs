//! Finding and reading the configuration file.

use crate::schema::Config;
use std::path::{Path, PathBuf};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The file to read: `explicit`, else `$CELLVISOR_CONFIG`, else
/// `$XDG_CONFIG_HOME/cellvisor/config.toml` (or `~/.config/...`) if it exists.
pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("CELLVISOR_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    let default = config_home.join("cellvisor").join("config.toml");
    default.is_file().then_some(default)
}

/// Loads the configuration found by [`locate`], or the defaults when there is none.
pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
    match locate(explicit) {
        Some(path) => load_file(&path),
        None => Ok(Config::default()),
    }
}

/// Loads one file.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        load_file(&path)
    }

    #[test]
    fn an_empty_file_is_all_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn durations_and_sizes_are_human() {
        let config = parse(
            "[sessions]\nheartbeat-interval = \"250ms\"\nmax-sessions = 2\n\
             [output]\nmax-bytes = \"1KiB\"\n",
        )
        .unwrap();
        assert_eq!(
            config.sessions.heartbeat_interval,
            Duration::from_millis(250)
        );
        assert_eq!(config.sessions.max_sessions, 2);
        assert_eq!(config.output.max_bytes.as_u64(), 1024);
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let err = parse("[sessions]\nmax-sesions = 2\n").unwrap_err();
        assert!(err.to_string().contains("max-sesions"), "{err}");
    }
}
