//! Validation: file text and override variables become a [`Config`], or every mistake in
//! them at once, each with the key, where it was written and what is allowed. Operators fix
//! a file in one pass instead of one error per restart.
//!
//! - `file`: the TOML file, key by key, with line and column.
//! - `env`: the `CELLVISOR_<SECTION>__<KEY>` override variables.
//! - `values`: durations, sizes and ranges, as both read them.
//! - `rules`: rules between keys, on the merged values.
//! - `hints`: "did you mean ..." for unknown names.

mod env;
mod file;
mod hints;
mod rules;
pub(crate) mod values;

pub(crate) use env::is_override;

use crate::keys::{self, Value, KEYS};
use crate::schema::Config;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a value came from, or where a mistake is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A config file; `line` and `column` are 1-based, 0 when unknown.
    File {
        /// The file.
        path: PathBuf,
        /// The line, 1-based; 0 when unknown.
        line: usize,
        /// The column, 1-based; 0 when unknown.
        column: usize,
    },
    /// An override variable.
    Env {
        /// The variable's name (`CELLVISOR_...`).
        var: String,
    },
}

impl Origin {
    /// The trailing comment `config show` writes after a value.
    pub fn comment(&self) -> String {
        match self {
            Origin::Default => "default".to_string(),
            Origin::File { path, line, .. } if *line > 0 => {
                format!("file {}:{line}", path.display())
            }
            Origin::File { path, .. } => format!("file {}", path.display()),
            Origin::Env { var } => format!("env {var}"),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("(defaults)"),
            Origin::File { path, line, column } if *line > 0 => {
                write!(f, "{}:{line}:{column}", path.display())
            }
            Origin::File { path, .. } => write!(f, "{}", path.display()),
            Origin::Env { var } => f.write_str(var),
        }
    }
}

/// One mistake in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// Where the mistake is: file, line and column, or the override variable.
    pub origin: Origin,
    /// The key, like `sessions.max-sessions`; `None` for TOML syntax errors.
    pub key: Option<String>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.origin, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

impl std::error::Error for KeyError {}

/// A validated configuration and where each of its values came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The configuration in force.
    pub config: Config,
    /// The file read, if any.
    pub path: Option<PathBuf>,
    /// The origin of each key, indexed like [`KEYS`].
    pub origins: Vec<Origin>,
}

impl Effective {
    /// Where `section.key` came from.
    pub fn origin(&self, section: &str, key: &str) -> Option<&Origin> {
        keys::find(section, key).and_then(|(index, _)| self.origins.get(index))
    }
}

/// Validates `file` (path and text) and then the override variables in `env`; returns the
/// configuration or every error, file errors in file order first.
pub fn resolve(
    file: Option<(&Path, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Effective, Vec<KeyError>> {
    let mut state = State {
        config: Config::default(),
        origins: vec![Origin::Default; KEYS.len()],
        failed: vec![false; KEYS.len()],
        errors: Vec::new(),
    };
    if let Some((path, text)) = file {
        file::check_file(&mut state, path, text);
    }
    env::check_env(&mut state, env);
    rules::check_rules(&mut state);
    if state.errors.is_empty() {
        Ok(Effective {
            config: state.config,
            path: file.map(|(path, _)| path.to_path_buf()),
            origins: state.origins,
        })
    } else {
        Err(state.errors)
    }
}

struct State {
    config: Config,
    origins: Vec<Origin>,
    /// Keys with a bad value: rules involving them are skipped, their error says enough.
    failed: Vec<bool>,
    errors: Vec<KeyError>,
}

impl State {
    fn accept(&mut self, index: usize, value: Value, origin: Origin) {
        (KEYS[index].set)(&mut self.config, value);
        self.origins[index] = origin;
    }
}
