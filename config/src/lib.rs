//! cellvisor's configuration: one TOML file, every key optional, single keys overridable by
//! `CELLVISOR_<SECTION>__<KEY>` variables.
//!
//! - [`schema`]: the typed configuration and its defaults.
//! - [`keys`]: every key's kind, range, apply time and documentation, in one table.
//! - [`check`]: validation that reports every mistake with its key, line and column.
//! - [`load`]: finding the file and turning it into a [`Config`].
//! - [`show`]: the configuration as text: the effective one with the origin and apply time of
//!   each value, the changes between two, the docs' key table.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod check;
pub mod durability;
pub mod keys;
pub mod load;
pub mod schema;
pub mod show;
pub mod workspaces;

pub use check::{Effective, KeyError, Origin};
pub use durability::EveryCellAnswer;
pub use keys::AppliesWhen;
pub use load::{
    env_overrides, load, load_effective, load_file, locate, parse_str, resolve, ConfigError,
};
pub use schema::{
    CellsConfig, Config, DaemonConfig, EngineConfig, EnvConfig, FleetConfig, IsolationConfig,
    IsolationLevel, LimitsConfig, OutputConfig, PythonConfig, PythonShell, SandboxConfig,
    SandboxNetwork, SessionKeyBy, SessionMode, SessionsConfig, SnapshotWhen, SnapshotsConfig,
    StartupConfig, UidRange, WorkspacesConfig, DEFAULT_SANDBOX_READ,
};
pub use show::changes;

#[cfg(test)]
mod tests;
