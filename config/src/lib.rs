//! cellvisor's configuration: one TOML file, every key optional.
//!
//! - [`schema`]: the typed configuration and its defaults.
//! - [`load`]: finding the file and turning it into a [`Config`], with errors that name the key.

pub mod load;
pub mod schema;

pub use load::{load, load_file, locate, ConfigError};
pub use schema::{
    CellsConfig, Config, DaemonConfig, EngineConfig, EnvConfig, LimitsConfig, OutputConfig,
    PythonConfig, SessionsConfig,
};
