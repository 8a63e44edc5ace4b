//! The daemon's client, as the CLI uses it.
