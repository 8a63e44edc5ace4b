//! Which Python a request's cells run on, chosen per request: the caller's `VIRTUAL_ENV`,
//! then `<cwd>/.venv`, `<cwd>/venv`, `python.interpreter`, then `python3` on `PATH` (the
//! worker's own discovery rules, applied to the request's directory and environment). A
//! session whose live worker runs another interpreter replaces it before the cell.

use crate::environment::WorkerEnv;
use crate::locking::lock;
use crate::spawn::WorkerSpec;
use cellvisor_os::interpreter::{self, Discovered};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a remembered choice is trusted while its directory's entries stay as they were:
/// what a request's directory does not show (a new `python3` on `PATH`, a version-manager
/// file edited elsewhere) is noticed within this.
const REMEMBER_FOR: Duration = Duration::from_secs(1);
/// Choices remembered at once (directory and `VIRTUAL_ENV` pairs).
const REMEMBERED: usize = 64;

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

/// Recent choices, so that a session's cells, sent one after another, do not search the
/// filesystem for Python each time (the search is about 17 system calls; the check that a
/// remembered choice still holds is one): a choice holds while its directory's modification
/// time is unchanged (so a `.venv` made or removed there is seen at the next request) and for
/// at most [`REMEMBER_FOR`].
#[derive(Default)]
pub struct ChoiceCache {
    remembered: Mutex<Vec<Remembered>>,
}

struct Remembered {
    asked: Asked,
    seen: Seen,
    choice: Option<PythonChoice>,
}

/// What a choice was made for.
struct Asked {
    env: Arc<WorkerEnv>,
    cwd: Option<PathBuf>,
    virtual_env: Option<PathBuf>,
}

impl Asked {
    /// Whether this is the question `env`, `cwd`, `virtual_env` (compared in place: a
    /// remembered answer costs no allocation).
    fn is(&self, env: &Arc<WorkerEnv>, cwd: Option<&Path>, virtual_env: Option<&Path>) -> bool {
        Arc::ptr_eq(&self.env, env)
            && self.cwd.as_deref() == cwd
            && self.virtual_env.as_deref() == virtual_env
    }
}

/// When a choice was made, and how its directory looked then.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    at: Instant,
    dir_modified: Option<SystemTime>,
}

impl Seen {
    /// How `dir` looks now: its modification time as given (`known`, when the caller has
    /// just looked at the directory) or as read (one `statx`).
    fn now(dir: Option<&Path>, known: Option<SystemTime>) -> Seen {
        let dir_modified = known.or_else(|| {
            let dir = dir.unwrap_or(Path::new("."));
            std::fs::metadata(dir).and_then(|m| m.modified()).ok()
        });
        Seen {
            at: Instant::now(),
            dir_modified,
        }
    }

    /// Whether a choice seen as `self` still holds when its directory looks as `now` does.
    fn still_holds(&self, now: &Seen) -> bool {
        self.dir_modified.is_some()
            && self.dir_modified == now.dir_modified
            && now.at.saturating_duration_since(self.at) < REMEMBER_FOR
    }
}

impl ChoiceCache {
    /// [`choose`], or the same answer given a moment ago for the same question.
    /// `cwd_modified` is `cwd`'s modification time when the caller has just read it (the
    /// request's look at its workspace), so the directory is not read twice.
    pub fn choose(
        &self,
        worker_env: &Arc<WorkerEnv>,
        cwd: Option<&Path>,
        virtual_env: Option<&Path>,
        cwd_modified: Option<SystemTime>,
    ) -> Option<PythonChoice> {
        self.choose_as(worker_env, cwd, virtual_env, Seen::now(cwd, cwd_modified))
    }

    /// [`ChoiceCache::choose`] with the directory as `seen` (when, and its time).
    fn choose_as(
        &self,
        worker_env: &Arc<WorkerEnv>,
        cwd: Option<&Path>,
        virtual_env: Option<&Path>,
        seen: Seen,
    ) -> Option<PythonChoice> {
        let mut remembered = lock(&self.remembered);
        if let Some(hit) = remembered
            .iter()
            .find(|r| r.asked.is(worker_env, cwd, virtual_env) && r.seen.still_holds(&seen))
        {
            return hit.choice.clone();
        }
        remembered.retain(|r| {
            !r.asked.is(worker_env, cwd, virtual_env)
                && seen.at.saturating_duration_since(r.seen.at) < REMEMBER_FOR
        });
        let asked = Asked {
            env: Arc::clone(worker_env),
            cwd: cwd.map(Path::to_path_buf),
            virtual_env: virtual_env.map(Path::to_path_buf),
        };
        let choice = choose(worker_env, cwd, virtual_env);
        if remembered.len() >= REMEMBERED {
            remembered.remove(0);
        }
        remembered.push(Remembered {
            asked,
            seen,
            choice: choice.clone(),
        });
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(at: Instant, modified: Option<u64>) -> Seen {
        Seen {
            at,
            dir_modified: modified.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
        }
    }

    #[test]
    fn a_choice_holds_while_its_directory_is_unchanged_and_for_a_second_at_most() {
        let then = Instant::now();
        let made = seen(then, Some(100));
        assert!(made.still_holds(&seen(then + Duration::from_millis(10), Some(100))));
        // An entry made or removed there (a new `.venv`) changes the directory's time.
        assert!(!made.still_holds(&seen(then + Duration::from_millis(10), Some(101))));
        assert!(!made.still_holds(&seen(then + REMEMBER_FOR, Some(100))));
        // A directory whose time cannot be read is searched every time.
        let unreadable = seen(then, None);
        assert!(!unreadable.still_holds(&seen(then, None)));
    }

    /// A Python worker's environment with the default configuration.
    fn python_env() -> Arc<WorkerEnv> {
        let config = cellvisor_config::Config::default();
        Arc::new(WorkerEnv::for_worker(
            &config,
            cellvisor_ipc::Language::Python,
        ))
    }

    /// Makes `dir/.venv/bin/python` (an executable file), and answers its path.
    fn plant_venv(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let python = dir.join(".venv/bin/python");
        std::fs::create_dir_all(python.parent().unwrap()).unwrap();
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        python
    }

    #[test]
    fn a_new_venv_in_the_directory_is_chosen_at_the_next_request() {
        let dir = tempfile::tempdir().unwrap();
        let env = python_env();
        let cache = ChoiceCache::default();
        let before = cache.choose(&env, Some(dir.path()), None, None);
        let python = plant_venv(dir.path());
        // The directory's time changed when `.venv` appeared in it (make sure it reads so,
        // on a file system with coarse times).
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        let _ = std::fs::File::open(dir.path()).and_then(|d| d.set_modified(later));
        let after = cache.choose(&env, Some(dir.path()), None, None);
        assert_eq!(after.map(|c| c.program), Some(python));
        assert_ne!(
            before.map(|c| c.program),
            Some(dir.path().join(".venv/bin/python"))
        );
    }

    #[test]
    fn the_directory_time_a_caller_read_is_the_one_compared() {
        let dir = tempfile::tempdir().unwrap();
        let env = python_env();
        let cache = ChoiceCache::default();
        // One instant for every question: only the directory's time tells them apart.
        let at = Instant::now();
        let first = seen(at, Some(100));
        let before = cache.choose_as(&env, Some(dir.path()), None, first);
        let python = plant_venv(dir.path());
        // The caller says the directory is as it was: the remembered answer stands (the
        // directory itself, whose time did change, is not read).
        let same = cache.choose_as(&env, Some(dir.path()), None, first);
        assert_eq!(same, before);
        // The caller read a new time: the directory is searched again.
        let after = cache.choose_as(&env, Some(dir.path()), None, seen(at, Some(101)));
        assert_eq!(after.map(|c| c.program), Some(python));
    }
}
