//! Which Python a request's cells run on, chosen per request: the caller's `VIRTUAL_ENV`,
//! then `<cwd>/.venv`, `<cwd>/venv`, `python.interpreter`, then `python3` on `PATH` (the
//! worker's own discovery rules, applied to the request's directory and environment). A
//! session whose live worker runs another interpreter replaces it before the cell.

use crate::environment::WorkerEnv;
use crate::spawn::WorkerSpec;
use cellvisor_workers::python::interpreter::{self, Discovered};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The Python a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonChoice {
    /// The interpreter the worker will run (or the version-manager shim it will ask).
    pub program: PathBuf,
    /// The caller's `VIRTUAL_ENV`, passed to the worker.
    pub virtual_env: Option<PathBuf>,
    /// The directory the worker starts in (its discovery looks there too).
    pub cwd: Option<PathBuf>,
}

/// The choice for a request in `cwd` (default: the supervisor's) from a caller whose
/// `VIRTUAL_ENV` is `virtual_env`, given the environment workers get. `None` when no Python
/// can be found: the worker's start then says why.
pub fn choose(
    worker_env: &WorkerEnv,
    cwd: Option<&Path>,
    virtual_env: Option<&Path>,
) -> Option<PythonChoice> {
    let here;
    let dir = match cwd {
        Some(dir) => dir,
        None => {
            here = std::env::current_dir().ok()?;
            here.as_path()
        }
    };
    let lookup = |key: &str| -> Option<OsString> {
        if key == "VIRTUAL_ENV" {
            if let Some(venv) = virtual_env {
                return Some(venv.as_os_str().to_owned());
            }
        }
        worker_env.get(key).map(OsStr::to_owned)
    };
    let program = match interpreter::discover(dir, &lookup, worker_env.configured_python()).ok()? {
        Discovered::Found(found) => found.program,
        Discovered::UnresolvedShim(shim) => shim,
    };
    Some(PythonChoice {
        program,
        virtual_env: virtual_env.map(Path::to_path_buf),
        cwd: cwd.map(Path::to_path_buf),
    })
}

/// Makes `spec` start workers that discover `choice`: its directory and `VIRTUAL_ENV`.
pub fn apply(spec: &mut WorkerSpec, choice: &PythonChoice) {
    if let Some(cwd) = &choice.cwd {
        spec.cwd = Some(cwd.clone());
    }
    if let Some(venv) = &choice.virtual_env {
        spec.env.set_virtual_env(venv);
    }
}

/// What the first cell on the replacement worker is told.
pub fn change_notice(from: &Path, to: &Path) -> String {
    format!(
        "this request's Python is {} (the session ran {}): a new worker was started with it and \
         earlier state is lost",
        to.display(),
        from.display()
    )
}
