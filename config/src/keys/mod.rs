//! Every configuration key in one table: its kind, its allowed range, when a change applies
//! and a line of documentation. Validation, environment overrides, `config show` and
//! `docs/config.md` all read this table, so a range is stated exactly once.
//!
//! - [`kind`]: what a key holds and which values are allowed; how values are written.
//! - [`applies`]: when a changed key takes effect in a running daemon.
//! - `field`: how a typed `Config` field becomes a [`Value`] and back.
//! - `table`: the table, [`KEYS`].

pub mod applies;
mod field;
pub mod kind;
mod table;

pub use applies::AppliesWhen;
pub use kind::{
    format_duration, format_size, is_env_name, is_module_name, is_sandbox_path, is_url,
    parse_listen, Kind, Value,
};
pub use table::KEYS;

use crate::schema::Config;

/// The sections of the file, in the order `config show` prints them.
pub const SECTIONS: &[&str] = &[
    "sessions",
    "cells",
    "output",
    "limits",
    "env",
    "python",
    "js",
    "lua",
    "daemon",
    "startup",
    "sandbox",
    "snapshots",
    "fleet",
    "isolation",
    "workspaces",
];

/// Prefix of the environment variables that override single keys.
pub const ENV_PREFIX: &str = "CELLVISOR_";

/// One key of the configuration file.
pub struct KeySpec {
    /// The table the key sits in (`cells` for `[cells]`).
    pub section: &'static str,
    /// The key's name in the file (kebab-case, as users write it).
    pub key: &'static str,
    /// What the key holds and which values are allowed; validation reads it.
    pub kind: Kind,
    /// When a changed value takes effect in a running daemon (the code that reads the key
    /// decides it; `config show` and the docs say it).
    pub applies: AppliesWhen,
    /// Whether the key may be left unset (and is by default).
    pub optional: bool,
    /// One line for `config show` and the docs: what the key does and why one would change it.
    pub doc: &'static str,
    /// Reads the key's value out of a configuration.
    pub get: fn(&Config) -> Value,
    /// Stores a validated value; a value of the wrong variant is ignored (validation never
    /// produces one).
    pub set: fn(&mut Config, Value),
}

impl KeySpec {
    /// `section.key`, the name errors and docs use.
    pub fn name(&self) -> String {
        format!("{}.{}", self.section, self.key)
    }

    /// The environment variable overriding this key.
    pub fn env_var(&self) -> String {
        format!(
            "{ENV_PREFIX}{}__{}",
            self.section.to_ascii_uppercase(),
            self.key.to_ascii_uppercase().replace('-', "_")
        )
    }
}

/// The spec of `section.key`, with its index in [`KEYS`].
pub fn find(section: &str, key: &str) -> Option<(usize, &'static KeySpec)> {
    KEYS.iter()
        .enumerate()
        .find(|(_, spec)| spec.section == section && spec.key == key)
}

/// The keys of one section.
pub fn section_keys(section: &str) -> impl Iterator<Item = &'static KeySpec> + '_ {
    KEYS.iter().filter(move |spec| spec.section == section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_keys_and_every_key_a_known_section() {
        for section in SECTIONS {
            assert!(section_keys(section).next().is_some(), "{section}");
        }
        for spec in KEYS {
            assert!(SECTIONS.contains(&spec.section), "{}", spec.name());
        }
    }
}
