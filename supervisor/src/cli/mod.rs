//! Command-line interface: argument parsing and the subcommands.

mod eval;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit status for bad input (flags, files, languages).
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "cellvisor",
    version,
    about = "Persistent Python, JavaScript and Lua cells in supervised worker processes"
)]
struct Cli {
    /// Configuration file (default: $CELLVISOR_CONFIG, then $XDG_CONFIG_HOME/cellvisor/config.toml).
    #[arg(long, global = true, env = "CELLVISOR_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run cells and print their results.
    Eval(eval::EvalArgs),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = err.print();
            return code;
        }
    };
    init_logging();
    match cli.command {
        Command::Eval(args) => eval::run(args, cli.config.as_deref()),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CELLVISOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
