//! Workers are the cellvisor executable re-run as `<exe> __worker <lang> --socket PATH`.
//! The `cellvisor` binary routes that itself; a program embedding cellvisor can call
//! [`run_worker_if_requested`] first thing in `main` and keep using its own executable.
//!
//! Python workers have a program of their own, [`PYTHON_WORKER_PROGRAM`], taken with the
//! same arguments when it sits next to the `cellvisor` executable: an idle Python session's
//! shim then maps a small program instead of one holding every engine. Both programs start a
//! worker through [`start_worker`], so what a worker does first (its network namespace, being
//! non-dumpable) is written once.

use cellvisor_ipc::Language;
use cellvisor_workers::WorkerError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The hidden subcommand name.
pub const WORKER_SUBCOMMAND: &str = "__worker";

/// The program that runs only Python workers, built and installed beside `cellvisor`.
pub const PYTHON_WORKER_PROGRAM: &str = "cellvisor-py-worker";

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
    start_worker(args, "cellvisor", None, cellvisor_workers::run)
}

/// The whole of [`PYTHON_WORKER_PROGRAM`]'s `main`: runs the Python worker its arguments
/// (`__worker py --socket PATH`, as `cellvisor` takes them) ask for; returns the exit code.
pub fn run_python_worker() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    let after_subcommand = match args.get(1).and_then(|a| a.to_str()) {
        Some(WORKER_SUBCOMMAND) => &args[2..],
        // Without the subcommand the arguments cannot be a worker's: say how it is run.
        _ => &[],
    };
    start_worker(
        after_subcommand,
        PYTHON_WORKER_PROGRAM,
        Some(Language::Python),
        |_, socket| cellvisor_workers::run_python(socket),
    )
}

/// What every worker program does: reads `<lang> --socket PATH` (a language `only` allows),
/// enters its network namespace when the sandbox asks, becomes non-dumpable, then `serve`s;
/// returns the exit code. `program` names it in messages.
pub fn start_worker(
    args: &[OsString],
    program: &str,
    only: Option<Language>,
    serve: impl FnOnce(Language, &Path) -> Result<(), WorkerError>,
) -> i32 {
    let parsed = (|| {
        let language: Language = args.first()?.to_str()?.parse().ok()?;
        if args.get(1)?.to_str()? != "--socket" {
            return None;
        }
        Some((language, PathBuf::from(args.get(2)?)))
    })();
    let Some((language, socket)) =
        parsed.filter(|(language, _)| only.is_none_or(|o| o == *language))
    else {
        let languages = match only {
            Some(language) => language.short_name().to_string(),
            None => "py|js|lua".to_string(),
        };
        eprintln!(
            "usage: {program} {WORKER_SUBCOMMAND} <{languages}> --socket PATH (started by the supervisor, not by hand)"
        );
        return 2;
    };
    // While the worker has one thread, and before it is non-dumpable (its own /proc files
    // then belong to root, and it could not write its uid map).
    if let Err(err) = enter_namespace_if_asked() {
        eprintln!("cellvisor {language} worker: {err}");
        return 1;
    }
    // Reset by exec: a worker hides its own memory from other sessions' cells.
    if let Err(err) = crate::secrets::make_non_dumpable() {
        eprintln!("cellvisor {language} worker: cannot make it non-dumpable: {err}");
    }
    match serve(language, &socket) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("cellvisor {language} worker: {err}");
            1
        }
    }
}

/// Enters the worker's own network namespace when its sandbox rules ask for one; a sandbox
/// that is not required goes on without it (said on stderr, which the log keeps).
fn enter_namespace_if_asked() -> Result<(), cellvisor_workers::sandbox::SandboxError> {
    match cellvisor_workers::sandbox::rules_from_env()? {
        Some(rules) if rules.network_namespace => {
            match cellvisor_workers::sandbox::enter_network_namespace() {
                Err(err) if !rules.required => {
                    eprintln!("warning: {err}; the worker keeps the host's network");
                    Ok(())
                }
                entered => entered,
            }
        }
        _ => Ok(()),
    }
}
