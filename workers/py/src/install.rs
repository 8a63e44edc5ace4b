//! The Python sources the worker runs, embedded in the binary and written once into the
//! runtime directory, where Python caches their bytecode: the launcher (as `runner.py`),
//! the runner, the prelude and the modules they import, the zygote.

use super::interpreter;
use crate::helpers::fs::{write_atomically, Durability};
use std::path::{Path, PathBuf};

pub(super) const RUNNER_SOURCE: &str = include_str!("runner.py");
pub(super) const LAUNCHER_SOURCE: &str = include_str!("launcher.py");
/// The module name the launcher (the `runner.py` python runs) imports the runner by, so
/// that its bytecode is cached.
pub(super) const RUNNER_MODULE_FILE: &str = "cellvisor_runner.py";
pub(super) const PRELUDE_SOURCE: &str = include_str!("prelude.py");
pub(super) const IPYTHON_SOURCE: &str = include_str!("ipython/ipython.py");
pub(super) const STATE_SOURCE: &str = include_str!("state.py");
/// The module name runner.py imports the prelude by.
pub(super) const PRELUDE_FILE: &str = "cellvisor_prelude.py";
/// The module name the prelude imports the IPython compatibility by, on first use.
pub(super) const IPYTHON_FILE: &str = "cellvisor_ipython.py";
/// The module name the runner imports the state module by, on the first state task.
pub(super) const STATE_FILE: &str = "cellvisor_state.py";
pub(super) const EXIT_SOURCE: &str = include_str!("exit.py");
pub(super) const ZYGOTE_SOURCE: &str = include_str!("zygote.py");
/// The module name the launcher imports the zygote by (a zygote is a launcher started with
/// `CELLVISOR_ZYGOTE=1`).
pub(super) const ZYGOTE_FILE: &str = "cellvisor_zygote.py";
/// The module name the runner and `exit()` import code mode's `exit()` by.
pub(super) const EXIT_FILE: &str = "cellvisor_exit.py";
/// The notebook layer (module file name, source): the execution count and history (with the
/// prelude), IPython's pretty printing, the magics beyond `ipython.py`'s and `obj?` help (on
/// first use), which shell runs the cells (IPython's own, `shell.py`), and the `IPython`
/// package of an interpreter without one (`ipython_shim.py`, `ipython_objects.py`). Written with the
/// runner, since the prelude imports the first.
pub(super) const NOTEBOOK_MODULES: [(&str, &str); 8] = [
    ("cellvisor_notebook.py", include_str!("ipython/notebook.py")),
    ("cellvisor_pretty.py", include_str!("ipython/pretty.py")),
    ("cellvisor_magics.py", include_str!("ipython/magics.py")),
    (
        "cellvisor_inspector.py",
        include_str!("ipython/inspector.py"),
    ),
    ("cellvisor_shell.py", include_str!("ipython/shell.py")),
    (
        "cellvisor_shell_ipython.py",
        include_str!("ipython/shell_ipython.py"),
    ),
    (
        "cellvisor_ipython_shim.py",
        include_str!("ipython/ipython_shim.py"),
    ),
    (
        "cellvisor_ipython_objects.py",
        include_str!("ipython/ipython_objects.py"),
    ),
];

/// Writes the runner, its launcher and the prelude into a directory of the runtime directory
/// whose name changes with their content, so workers of different builds never run each
/// other's files (and Python's bytecode cache there is never stale). The launcher goes last:
/// once it is there, so are the modules it imports.
pub fn install_runner(runtime_dir: &Path) -> Result<PathBuf, String> {
    let mut all = RUNNER_SOURCE.as_bytes().to_vec();
    all.extend_from_slice(LAUNCHER_SOURCE.as_bytes());
    all.extend_from_slice(PRELUDE_SOURCE.as_bytes());
    all.extend_from_slice(IPYTHON_SOURCE.as_bytes());
    all.extend_from_slice(STATE_SOURCE.as_bytes());
    all.extend_from_slice(EXIT_SOURCE.as_bytes());
    all.extend_from_slice(ZYGOTE_SOURCE.as_bytes());
    for (_, source) in NOTEBOOK_MODULES {
        all.extend_from_slice(source.as_bytes());
    }
    let hash = interpreter::fnv1a(&all);
    let dir = runtime_dir.join(format!("python-{:012x}", hash >> 16));
    let runner = dir.join("runner.py");
    if runner.is_file() {
        return Ok(runner);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, source) in NOTEBOOK_MODULES {
        let path = dir.join(name);
        write_atomically(&path, source.as_bytes(), Durability::Synced)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    for (name, source) in [
        (PRELUDE_FILE, PRELUDE_SOURCE),
        (STATE_FILE, STATE_SOURCE),
        (EXIT_FILE, EXIT_SOURCE),
        (ZYGOTE_FILE, ZYGOTE_SOURCE),
        (RUNNER_MODULE_FILE, RUNNER_SOURCE),
        ("runner.py", LAUNCHER_SOURCE),
    ] {
        let path = dir.join(name);
        write_atomically(&path, source.as_bytes(), Durability::Synced)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(runner)
}

/// Writes the IPython module beside `runner` if it is not there yet: whole or not at all (a
/// rename), but without waiting for the disk, since it runs while python starts and the
/// runtime directory does not outlive a reboot anyway. A failure only shows when a cell needs
/// the module (as an ImportError naming it).
pub fn install_ipython_module(runner: &Path) {
    let Some(dir) = runner.parent() else {
        return;
    };
    let path = dir.join(IPYTHON_FILE);
    if path.is_file() {
        return;
    }
    let _ = write_atomically(&path, IPYTHON_SOURCE.as_bytes(), Durability::Unsynced);
}
