//! `cellvisor config check|show`: catch a wrong value before the daemon trips over it, and
//! see which value is in force and why.

use super::{Globals, EXIT_USAGE};
use cellvisor_config::ConfigError;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Report every mistake in a config file (and in CELLVISOR_<SECTION>__<KEY> overrides);
    /// exit 2 if there is any.
    Check {
        /// The file to check (default: the one `--config` or the usual search finds).
        file: Option<PathBuf>,
    },
    /// Print the effective configuration, each key with where its value came from.
    Show,
}

pub fn run(args: ConfigArgs, globals: &Globals) -> i32 {
    let env = cellvisor_config::env_overrides();
    match args.command {
        ConfigCommand::Check { file } => {
            let path = file.or_else(|| globals.config_path());
            match cellvisor_config::resolve(path.as_deref(), env) {
                Ok(_) => {
                    match path {
                        Some(path) => println!("{}: ok", path.display()),
                        None => println!("no config file; defaults in force"),
                    }
                    0
                }
                Err(err) => report(&err),
            }
        }
        ConfigCommand::Show => {
            match cellvisor_config::resolve(globals.config_path().as_deref(), env) {
                Ok(effective) => {
                    print!("{}", effective.show());
                    0
                }
                Err(err) => report(&err),
            }
        }
    }
}

/// Prints every error, one per line, and returns the usage exit code.
fn report(err: &ConfigError) -> i32 {
    match err {
        ConfigError::Invalid { errors, .. } => {
            for error in errors {
                eprintln!("{error}");
            }
            let s = if errors.len() == 1 { "" } else { "s" };
            eprintln!("{} error{s} in the configuration", errors.len());
        }
        ConfigError::Read { .. } => eprintln!("error: {err}"),
    }
    EXIT_USAGE
}
