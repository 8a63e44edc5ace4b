//! How a worker program starts, written once for `cellvisor __worker <lang>` and for
//! [`PYTHON_WORKER_PROGRAM`]: reading `<lang> --socket PATH`, entering the network namespace
//! the sandbox asks for, becoming non-dumpable, then serving.
//!
//! [`PYTHON_WORKER_PROGRAM`] is told the supervisor's build identity and hands the worker to
//! `cellvisor` when it is another build's (`cargo run` relinks only `cellvisor`); the build
//! identity itself is the Python engine's (`cellvisor_worker_py::BUILD_ID`), the sources that
//! program is made of.

use crate::runtime::WorkerError;
use cellvisor_ipc::Language;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The hidden subcommand name.
pub const WORKER_SUBCOMMAND: &str = "__worker";

/// The program that runs only Python workers, built and installed beside `cellvisor`.
pub const PYTHON_WORKER_PROGRAM: &str = "cellvisor-py-worker";

/// The arguments that put [`PYTHON_WORKER_PROGRAM`] of build `build` in charge of a Python
/// worker, before the worker's own (`__worker py --socket PATH`): the supervisor's build, and
/// the program that runs the worker instead when the builds differ.
pub fn python_worker_args(build: &str, instead: &Path) -> Vec<OsString> {
    vec![
        "--build".into(),
        build.into(),
        "--else".into(),
        instead.as_os_str().to_owned(),
    ]
}

/// What [`PYTHON_WORKER_PROGRAM`]'s arguments ask of it.
#[derive(Debug, PartialEq, Eq)]
enum PythonWorkerStart<'a> {
    /// Run the worker these arguments (after `__worker`) describe.
    Run(&'a [OsString]),
    /// The supervisor is another build: `program` runs the worker, with `args`.
    HandOver {
        program: &'a OsString,
        args: &'a [OsString],
    },
}

/// Reads `[--build ID --else PROGRAM] __worker <worker arguments>` for a program of build
/// `own_build`; `None` when they are not a worker's.
fn read_python_worker_args<'a>(
    args: &'a [OsString],
    own_build: &str,
) -> Option<PythonWorkerStart<'a>> {
    let (worker, hand_over) = match args {
        [build_flag, build, else_flag, program, worker @ ..]
            if build_flag == "--build" && else_flag == "--else" =>
        {
            (worker, (build != own_build).then_some(program))
        }
        worker => (worker, None),
    };
    let (subcommand, worker_args) = worker.split_first()?;
    if subcommand != WORKER_SUBCOMMAND {
        return None;
    }
    Some(match hand_over {
        Some(program) => PythonWorkerStart::HandOver {
            program,
            args: worker,
        },
        None => PythonWorkerStart::Run(worker_args),
    })
}

/// The whole of [`PYTHON_WORKER_PROGRAM`]'s `main` for a program of build `own_build`: runs
/// the Python worker its arguments ask for with `serve`, or hands it to `cellvisor` when the
/// supervisor is another build; returns the exit code.
pub fn run_python_worker(
    own_build: &str,
    serve: impl FnOnce(&Path) -> Result<(), WorkerError>,
) -> i32 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let worker_args = match read_python_worker_args(&args, own_build) {
        Some(PythonWorkerStart::Run(worker_args)) => worker_args,
        Some(PythonWorkerStart::HandOver { program, args }) => {
            use std::os::unix::process::CommandExt;
            // Only returns when the program could not be started.
            let err = std::process::Command::new(program).args(args).exec();
            eprintln!(
                "{PYTHON_WORKER_PROGRAM} is from another build than the supervisor, and {} cannot run the worker instead: {err}",
                Path::new(program).display()
            );
            return 1;
        }
        // Not a worker's arguments: say how it is run.
        None => &[],
    };
    start_worker(
        worker_args,
        PYTHON_WORKER_PROGRAM,
        Some(Language::Python),
        |_, socket| serve(socket),
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
    if let Err(err) = cellvisor_os::secrets::make_non_dumpable() {
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
fn enter_namespace_if_asked() -> Result<(), crate::sandbox::SandboxError> {
    match crate::sandbox::rules_from_env()? {
        Some(rules) if rules.network_namespace => match crate::sandbox::enter_network_namespace() {
            Err(err) if !rules.required => {
                eprintln!("warning: {err}; the worker keeps the host's network");
                Ok(())
            }
            entered => entered,
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &[&str]) -> Vec<OsString> {
        text.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_python_worker_program_runs_for_its_own_build_and_hands_over_to_another() {
        let worker = args(&["__worker", "py", "--socket", "/run/w.sock"]);
        let mut ours = args(&["--build", "abc", "--else", "/bin/cellvisor"]);
        ours.extend(worker.iter().cloned());
        assert_eq!(
            read_python_worker_args(&ours, "abc"),
            Some(PythonWorkerStart::Run(&worker[1..]))
        );
        assert_eq!(
            read_python_worker_args(&ours, "def"),
            Some(PythonWorkerStart::HandOver {
                program: &OsString::from("/bin/cellvisor"),
                args: &worker[..],
            })
        );
        // Started by hand with a worker's own arguments: no build to compare.
        assert_eq!(
            read_python_worker_args(&worker, "abc"),
            Some(PythonWorkerStart::Run(&worker[1..]))
        );
        assert_eq!(read_python_worker_args(&args(&["py"]), "abc"), None);
        assert_eq!(read_python_worker_args(&args(&[]), "abc"), None);
        assert_eq!(
            python_worker_args("abc", Path::new("/bin/cellvisor")),
            args(&["--build", "abc", "--else", "/bin/cellvisor"])
        );
    }
}
