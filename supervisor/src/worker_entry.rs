//! Workers are the cellvisor executable re-run as `<exe> __worker <lang> --socket PATH`.
//! The `cellvisor` binary routes that itself; a program embedding cellvisor can call
//! [`run_worker_if_requested`] first thing in `main` and keep using its own executable.
//!
//! Python workers have a program of their own, [`PYTHON_WORKER_PROGRAM`], taken with the
//! same arguments when it sits next to the `cellvisor` executable: an idle Python session's
//! shim then maps a small program instead of one holding every engine. It is told the
//! supervisor's [`BUILD_ID`] and hands the worker to `cellvisor` when it is another build's
//! (`cargo run` relinks only `cellvisor`). Both programs start a worker through
//! `cellvisor_worker_core::entry::start_worker`, so what a worker does first (its network
//! namespace, being non-dumpable) is written once.

use std::ffi::OsString;
use std::path::Path;

pub use cellvisor_workers::entry::{PYTHON_WORKER_PROGRAM, WORKER_SUBCOMMAND};

/// If this process was started as a worker, runs it and exits; otherwise returns.
pub fn run_worker_if_requested() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) != Some(WORKER_SUBCOMMAND) {
        return;
    }
    std::process::exit(run_worker(&args[2..]));
}

/// Runs a worker from its arguments (`<lang> --socket PATH`); returns the exit code.
pub fn run_worker(args: &[OsString]) -> i32 {
    cellvisor_workers::entry::start_worker(args, "cellvisor", None, cellvisor_workers::run)
}

/// This build's identity: a hash of the sources Python workers are made of (the Python
/// engine's `build.rs`). The supervisor hands it to [`PYTHON_WORKER_PROGRAM`], which runs
/// only for its own build.
pub const BUILD_ID: &str = cellvisor_worker_py::BUILD_ID;

/// The arguments that put [`PYTHON_WORKER_PROGRAM`] in charge of a Python worker, before the
/// worker's own (`__worker py --socket PATH`): the supervisor's [`BUILD_ID`], and the program
/// that runs the worker instead when the builds differ.
pub(crate) fn python_worker_args(instead: &Path) -> Vec<OsString> {
    cellvisor_workers::entry::python_worker_args(BUILD_ID, instead)
}
