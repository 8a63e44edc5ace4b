//! Workers are the cellvisor executable re-run as `<exe> __worker <lang> --socket PATH`.
//! The `cellvisor` binary routes that itself; a program embedding cellvisor can call
//! [`run_worker_if_requested`] first thing in `main` and keep using its own executable.

use cellvisor_ipc::Language;
use std::ffi::OsString;
use std::path::PathBuf;

/// The hidden subcommand name.
pub const WORKER_SUBCOMMAND: &str = "__worker";

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
    let parsed = (|| {
        let language: Language = args.first()?.to_str()?.parse().ok()?;
        if args.get(1)?.to_str()? != "--socket" {
            return None;
        }
        Some((language, PathBuf::from(args.get(2)?)))
    })();
    let Some((language, socket)) = parsed else {
        eprintln!(
            "usage: cellvisor {WORKER_SUBCOMMAND} <py|js|lua> --socket PATH (started by the supervisor, not by hand)"
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
    match cellvisor_workers::run(language, &socket) {
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
