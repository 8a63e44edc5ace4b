//! The environment variables the supervisor gives a worker process.
//!
//! They are part of the protocol as much as the frames are: the supervisor sets them when it
//! spawns a worker and the worker reads them before its first frame, so both sides name them
//! through these constants and read their values through the functions here. The supervisor
//! writes them only through its one worker environment type (`cellvisor::environment`). The
//! Python files, which cannot import Rust, repeat the names they need; a test of the workers
//! crate checks that each copy matches.

use std::ffi::OsString;
use std::path::PathBuf;

/// The directory of spilled outputs (artifacts). Set by the supervisor for every worker (the
/// shared directory, or a sandboxed session's own); read by the workers' `artifacts` helper
/// and the Python prelude (`ARTIFACT_DIR_VAR` in `prelude.py`).
pub const ARTIFACT_DIR: &str = "CELLVISOR_ARTIFACT_DIR";
/// The prefix of an output's reference (`artifact://<id>`), the form hosts already hold for
/// spilled output: truncation notices print it, and `output()` takes it as well as the bare id.
pub const ARTIFACT_SCHEME: &str = "artifact://";

/// `artifact://<id>` for the spilled output at `path` (its file name without `.txt`).
pub fn artifact_reference(path: &std::path::Path) -> String {
    let id = path.file_stem().unwrap_or_default().to_string_lossy();
    format!("{ARTIFACT_SCHEME}{id}")
}
/// The session the worker runs for. Set by the supervisor when a session starts its worker
/// (absent on a prewarmed worker nobody owns yet, which gets it with its first cell); read by
/// the cells (it names their session).
pub const SESSION: &str = "CELLVISOR_SESSION";
/// The session's directory for `store`/`load`. Set by the supervisor like [`SESSION`]; read by
/// the workers' `store` helper and the Python prelude (`STORE_DIR_VAR` in `prelude.py`).
pub const STORE_DIR: &str = "CELLVISOR_STORE_DIR";
/// The heap limit of the JavaScript and Lua engines, in bytes. Set by the supervisor from
/// `js.memory-limit` / `lua.memory-limit`; read by those workers when they build the engine.
pub const MEMORY_LIMIT: &str = "CELLVISOR_MEMORY_LIMIT";
/// The stack limit of the JavaScript engine, in bytes. Set by the supervisor from
/// `js.stack-size`; read by the JavaScript worker.
pub const STACK_SIZE: &str = "CELLVISOR_STACK_SIZE";
/// `python.shell` (`auto`, `ipython` or `builtin`): what runs a Python worker's cells. Set by
/// the supervisor; read by the runner, and by a zygote, which makes IPython's shell before
/// it forks.
pub const PYTHON_SHELL: &str = "CELLVISOR_PYTHON_SHELL";

/// The Python interpreter configured for Python workers. Set by the supervisor from
/// `python.interpreter`; read by interpreter discovery (in the worker, and in the supervisor
/// when it chooses a request's Python).
pub const PYTHON: &str = "CELLVISOR_PYTHON";
/// Which startup-module levels to run, comma-separated (`user,project`). Set by the
/// supervisor from `[startup]`; read by the workers' startup-module loader.
pub const STARTUP: &str = "CELLVISOR_STARTUP";
/// The token the Python worker hands its interpreter child to prove the sync channel is its.
/// Set by the Python worker for its child; read (and removed) by `runner.py`.
pub const SYNC_TOKEN: &str = "CELLVISOR_SYNC_TOKEN";
/// The Landlock rules (JSON) a sandboxed worker applies to itself before its first cell. Set
/// by the supervisor for a sandboxed session's worker; read by the workers' `sandbox` module
/// (and `launcher.py`, which does not fork under a sandbox).
pub const SANDBOX: &str = "CELLVISOR_SANDBOX";
/// The file in which the worker records the cell it took (see [`crate::taken`]). Set by the
/// supervisor at spawn; read by the worker before its hello.
pub const TAKEN_RECORD: &str = "CELLVISOR_TAKEN_RECORD";

/// `1` on a Python zygote: its runner forks workers on request instead of running cells.
/// Set by the supervisor when it starts a zygote; read (and removed) by `launcher.py`.
pub const ZYGOTE: &str = "CELLVISOR_ZYGOTE";
/// The modules a zygote imports before it forks, comma-separated (`python.preload`). Set by
/// the supervisor with [`ZYGOTE`]; read (and removed) by `zygote.py`.
pub const PRELOAD: &str = "CELLVISOR_PRELOAD";
/// What a forked Python worker takes over from its zygote (its descriptors, token, program
/// and confinement). Set by `zygote.py` for each worker it forks; read by the Python worker.
pub const FORKED_PYTHON: &str = "CELLVISOR_FORKED_PYTHON";

/// A variable whose value is not what it must be.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name} must be a number of bytes, not `{value}`")]
pub struct BadBytes {
    /// The variable.
    pub name: &'static str,
    /// What it held.
    pub value: String,
}

/// A directory variable of this process: unset and empty both mean none.
pub fn directory(name: &str) -> Option<PathBuf> {
    directory_from(std::env::var_os(name))
}

/// A byte-count variable of this process: unset or blank means no limit.
pub fn bytes(name: &'static str) -> Result<Option<usize>, BadBytes> {
    bytes_from(name, std::env::var_os(name))
}

fn directory_from(value: Option<OsString>) -> Option<PathBuf> {
    value.filter(|value| !value.is_empty()).map(PathBuf::from)
}

fn bytes_from(name: &'static str, value: Option<OsString>) -> Result<Option<usize>, BadBytes> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    match text.trim() {
        "" => Ok(None),
        trimmed => trimmed.parse().map(Some).map_err(|_| BadBytes {
            name,
            value: text.into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_directories_are_none() {
        assert_eq!(directory_from(None), None);
        assert_eq!(directory_from(Some("".into())), None);
        assert_eq!(
            directory_from(Some("/x/y".into())),
            Some(PathBuf::from("/x/y"))
        );
    }

    #[test]
    fn byte_counts_are_whole_numbers_or_blank() {
        assert_eq!(bytes_from(MEMORY_LIMIT, None), Ok(None));
        assert_eq!(bytes_from(MEMORY_LIMIT, Some(" ".into())), Ok(None));
        assert_eq!(
            bytes_from(MEMORY_LIMIT, Some(" 1024 ".into())),
            Ok(Some(1024))
        );
        let bad = bytes_from(STACK_SIZE, Some("1MB".into())).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "CELLVISOR_STACK_SIZE must be a number of bytes, not `1MB`"
        );
    }
}
