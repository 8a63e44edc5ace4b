//! Which program a worker runs: the cellvisor executable re-run as `__worker`, or for Python
//! the smaller `cellvisor-py-worker` beside it.

use crate::worker_entry::PYTHON_WORKER_PROGRAM;
use cellvisor_ipc::Language;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The programs workers run: the cellvisor executable, and for Python workers
/// [`PYTHON_WORKER_PROGRAM`] when it sits next to an executable named `cellvisor` (both are
/// built and installed together; a program embedding cellvisor runs itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPrograms {
    /// The executable that runs every language (`<exe> __worker <lang> ...`).
    pub main: PathBuf,
    /// The Python-only program, which keeps far fewer pages of itself resident in every idle
    /// Python session (told the supervisor's build, it hands another build's worker to
    /// `main`).
    pub python: Option<PathBuf>,
}

impl WorkerPrograms {
    /// The programs for workers of `exe`: the Python-only one is looked for beside it.
    pub fn beside(exe: PathBuf) -> WorkerPrograms {
        let python = (exe.file_name().and_then(|name| name.to_str()) == Some("cellvisor"))
            .then(|| exe.with_file_name(PYTHON_WORKER_PROGRAM))
            .filter(|program| is_executable_file(program));
        WorkerPrograms { main: exe, python }
    }

    /// The program to run instead when the one [`WorkerPrograms::command`] names cannot be
    /// started: the Python-only program can go away after the supervisor looked (removed, or
    /// replaced by an install), and `main` serves every language.
    pub fn fallback(&self, language: Language) -> Option<PathBuf> {
        match (language, &self.python) {
            (Language::Python, Some(_)) => Some(self.main.clone()),
            _ => None,
        }
    }

    /// The program a worker for `language` runs, and its arguments before the worker's own
    /// (`__worker <lang> --socket PATH`).
    pub fn command(&self, language: Language) -> (PathBuf, Vec<OsString>) {
        match (language, &self.python) {
            (Language::Python, Some(python)) => (
                python.clone(),
                crate::worker_entry::python_worker_args(&self.main),
            ),
            _ => (self.main.clone(), Vec::new()),
        }
    }
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_program(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, "").expect("write program");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn python_workers_run_the_python_program_only_when_it_sits_beside_cellvisor() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cellvisor = dir.path().join("cellvisor");
        write_program(&cellvisor, 0o755);
        let alone = WorkerPrograms::beside(cellvisor.clone());
        assert_eq!(alone.python, None);
        for language in [Language::Python, Language::JavaScript, Language::Lua] {
            assert_eq!(alone.command(language), (cellvisor.clone(), Vec::new()));
        }

        let python = dir.path().join(PYTHON_WORKER_PROGRAM);
        write_program(&python, 0o644);
        assert_eq!(
            WorkerPrograms::beside(cellvisor.clone()).python,
            None,
            "a file that cannot be run is not used"
        );
        write_program(&python, 0o755);
        let both = WorkerPrograms::beside(cellvisor.clone());
        assert_eq!(
            both.command(Language::Python),
            (python, crate::worker_entry::python_worker_args(&cellvisor))
        );
        assert_eq!(
            both.command(Language::JavaScript),
            (cellvisor.clone(), Vec::new())
        );
        assert_eq!(both.command(Language::Lua), (cellvisor.clone(), Vec::new()));
        // Only a Python worker has somewhere else to go when its program cannot start.
        assert_eq!(both.fallback(Language::Python), Some(cellvisor.clone()));
        assert_eq!(both.fallback(Language::JavaScript), None);
        assert_eq!(alone.fallback(Language::Python), None);

        // A program embedding cellvisor runs its own workers, whatever lies beside it.
        let embedding = dir.path().join("my-host");
        write_program(&embedding, 0o755);
        assert_eq!(WorkerPrograms::beside(embedding).python, None);
    }
}
