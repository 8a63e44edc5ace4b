//! Finding and reading the configuration file.

use crate::check::{self, Effective, KeyError};
use crate::schema::Config;
use std::path::{Path, PathBuf};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists but cannot be read: refused rather than silently ignored.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// Every mistake found, one per line when displayed.
    #[error("{}", lines(.errors))]
    Invalid {
        /// The file read, if any (the errors may also be in override variables).
        path: Option<PathBuf>,
        /// What was wrong with which key, and what is allowed.
        errors: Vec<KeyError>,
    },
}

fn lines(errors: &[KeyError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
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

/// Loads the configuration found by [`locate`], or the defaults when there is none, with the
/// process's override variables applied.
pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
    load_effective(explicit, env_overrides()).map(|effective| effective.config)
}

/// Like [`load`] with the override variables taken from `env`, keeping where each value came
/// from (for `config show`).
pub fn load_effective(
    explicit: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Effective, ConfigError> {
    resolve(locate(explicit).as_deref(), env)
}

/// Loads one file, without override variables.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    resolve(Some(path), std::iter::empty()).map(|effective| effective.config)
}

/// Reads `path` (if any) and applies the overrides in `env`.
pub fn resolve(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Effective, ConfigError> {
    let text = match path {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?,
        ),
        None => None,
    };
    let file = path.zip(text.as_deref());
    check::resolve(file, env).map_err(|errors| ConfigError::Invalid {
        path: path.map(Path::to_path_buf),
        errors,
    })
}

/// Validates `text` as if read from `path`, with the overrides in `env`.
pub fn parse_str(
    text: &str,
    path: &Path,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Effective, ConfigError> {
    check::resolve(Some((path, text)), env).map_err(|errors| ConfigError::Invalid {
        path: Some(path.to_path_buf()),
        errors,
    })
}

/// The process's override variables (`CELLVISOR_<SECTION>__<KEY>`); values that are not
/// UTF-8 are passed on lossily and fail validation where that matters.
pub fn env_overrides() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            check::is_override(&name).then(|| (name, value.to_string_lossy().into_owned()))
        })
        .collect()
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
