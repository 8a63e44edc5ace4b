//! Which zygote a worker spec belongs to, what a zygote is started with, and the request
//! that asks it for a worker.

use crate::spawn::WorkerSpec;
use cellvisor_ipc::Language;
use cellvisor_os::interpreter::{self, Discovered, Interpreter};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What makes two workers' zygotes interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ZygoteKey {
    /// The interpreter the worker would start.
    pub program: PathBuf,
    pub venv: Option<PathBuf>,
    /// The variables Python and the usual preloaded modules read while they load
    /// ([`read_while_loading`]), sorted.
    pub loaded_env: Vec<(OsString, OsString)>,
    pub preload: Vec<String>,
}

impl ZygoteKey {
    /// The zygote for a worker of `spec`; `None` when it must start its own interpreter: not
    /// Python, zygotes off, sandboxed with a network namespace (entered before the runner
    /// starts, which a forked runner cannot be), or an interpreter only a version-manager
    /// shim can name. A sandbox does not change which zygote serves a worker: the zygote is
    /// never confined, each forked runner is (see `zygote.py`).
    pub fn of(spec: &WorkerSpec) -> Option<ZygoteKey> {
        if spec.language != Language::Python || !spec.zygote || needs_own_start(spec) {
            return None;
        }
        let cwd = match &spec.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir().ok()?,
        };
        let lookup = |name: &str| spec.env.get(name).map(OsStr::to_owned);
        let Discovered::Found(found) =
            interpreter::discover(&cwd, &lookup, spec.env.configured_python()).ok()?
        else {
            return None;
        };
        let confined = own_dirs(spec);
        let mut loaded_env: Vec<(OsString, OsString)> = spec
            .env
            .render()
            .filter(|(name, _)| read_while_loading(name) && !(confined && set_by_sandbox(name)))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        loaded_env.sort();
        // What cellvisor sets itself, and what the daemon's own environment holds, are the
        // operator's; anything else came with a request.
        let operators = |name: &OsStr, value: &OsStr| {
            spec.env.sets(name) || std::env::var_os(name).as_deref() == Some(value)
        };
        if spec.uid.is_some()
            && !loads_only_the_daemons(found.venv.is_some(), &loaded_env, operators)
        {
            // The zygote runs as the daemon's user: at the uid level it may load nothing a
            // caller chose (a cell can write a `sitecustomize.py` or a `.venv/bin/python` in
            // its own directories, and a caller can point PYTHONPATH or cwd at them).
            return None;
        }
        Some(ZygoteKey {
            program: found.program,
            venv: found.venv,
            loaded_env,
            preload: spec.preload.clone(),
        })
    }

    fn interpreter(&self) -> Interpreter {
        Interpreter {
            program: self.program.clone(),
            venv: self.venv.clone(),
        }
    }
}

/// Whether a sandboxed `spec` must start its own interpreter: its rules ask for a network
/// namespace, or cannot be read (the worker then says why, on the plain path).
fn needs_own_start(spec: &WorkerSpec) -> bool {
    let Some(rules) = spec.env.get(cellvisor_ipc::env::SANDBOX) else {
        return false;
    };
    let rules = rules
        .to_str()
        .and_then(|text| serde_json::from_str::<cellvisor_os::sandbox::Rules>(text).ok());
    rules.is_none_or(|rules| rules.network_namespace)
}

/// Whether a zygote for an interpreter (`from_venv`: found in the caller's virtual
/// environment or cwd) with `loaded_env` would load only what the daemon's operator chose:
/// the configured or PATH's interpreter, and every variable read while loading one the
/// operator chose (`operators`: cellvisor's own, or as the daemon itself has it). Anything
/// else a worker of a session uid starts plainly, as that uid, before any of it is read.
fn loads_only_the_daemons(
    from_venv: bool,
    loaded_env: &[(OsString, OsString)],
    operators: impl Fn(&OsStr, &OsStr) -> bool,
) -> bool {
    !from_venv
        && loaded_env.iter().all(|(name, value)| {
            name.to_str() == Some(cellvisor_ipc::env::PYTHON_SHELL) || operators(name, value)
        })
}

/// Whether `spec`'s temporary directories are its session's own: sandboxed, running as its
/// session's uid, or given its session's temporary directory (every session's, at `none`).
fn own_dirs(spec: &WorkerSpec) -> bool {
    spec.env.is_confined() || spec.uid.is_some() || spec.env.has_session_tmp()
}

/// Variables a sandbox (or a session's own uid) points at the session's own directories (`TMPDIR`, and matplotlib's
/// cache under it): not part of the key (each sandboxed session has its own), and not given
/// to a zygote (the session's directory goes with the session).
fn set_by_sandbox(name: &OsStr) -> bool {
    name == "TMPDIR" || name == "MPLCONFIGDIR"
}

/// Variables whose value when an interpreter or a common scientific module loads decides
/// what it loaded: Python's own (`PYTHONPATH`, `PYTHONHASHSEED`, ...), the home directory
/// (user site-packages), the locale, matplotlib's and the numeric libraries' threading.
fn read_while_loading(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return true;
    };
    [
        "PYTHON",
        "LC_",
        "MPL",
        "OMP_",
        "OPENBLAS_",
        "MKL_",
        "NUMEXPR_",
        "VECLIB_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || matches!(name, "HOME" | "LANG" | "LANGUAGE")
        // Whether the zygote makes IPython's shell before it forks.
        || name == cellvisor_ipc::env::PYTHON_SHELL
}

/// The environment a zygote starts with: the spec's without cellvisor's own per-worker
/// variables (a forked runner gets the whole of its own before any cell), plus what the
/// runner's environment changes ([`cellvisor_worker_py::runner_env`]).
pub fn zygote_env(key: &ZygoteKey, spec: &WorkerSpec) -> Vec<(OsString, OsString)> {
    let confined = own_dirs(spec);
    let base: Vec<(OsString, OsString)> = spec
        .env
        .render()
        .filter(|(name, _)| {
            !name.to_string_lossy().starts_with("CELLVISOR_")
                || name.to_str() == Some(cellvisor_ipc::env::PYTHON_SHELL)
        })
        .filter(|(name, _)| !(confined && set_by_sandbox(name)))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    with_runner_changes(&key.interpreter(), base)
}

fn with_runner_changes(
    interpreter: &Interpreter,
    mut env: Vec<(OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let path = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone());
    let (set, unset) = cellvisor_worker_py::runner_env(interpreter, path.as_deref());
    env.retain(|(name, _)| !unset.contains(name) && !set.iter().any(|(s, _)| s == name));
    env.extend(set);
    env
}

/// The request for one worker: its command line and environment, its runner's environment,
/// its directory and rlimits, and whether its runner waits to be confined by the worker (a
/// sandboxed session's). `Err` when something cannot be written as JSON text (a
/// variable or path that is not UTF-8): that worker starts the plain way.
pub fn request(
    key: &ZygoteKey,
    spec: &WorkerSpec,
    argv: &[OsString],
    worker_env: &[(OsString, OsString)],
) -> Result<Vec<u8>, String> {
    let text = |value: &OsStr| {
        value
            .to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{} is not UTF-8", value.to_string_lossy()))
    };
    let map = |env: &[(OsString, OsString)]| -> Result<serde_json::Map<String, serde_json::Value>, String> {
        env.iter()
            .map(|(name, value)| Ok((text(name)?, serde_json::Value::String(text(value)?))))
            .collect()
    };
    let python_env = with_runner_changes(&key.interpreter(), worker_env.to_vec());
    let argv: Vec<String> = argv.iter().map(|a| text(a)).collect::<Result<_, _>>()?;
    let cwd = spec
        .cwd
        .as_deref()
        .map(|c| text(c.as_os_str()))
        .transpose()?;
    let rlimits: Vec<[i64; 3]> = spec
        .rlimits
        .iter()
        .map(|limit| {
            let value = i64::try_from(limit.value).unwrap_or(-1);
            [i64::from(limit.resource), value, value]
        })
        .collect();
    let request = serde_json::json!({
        "supervisor": std::process::id(),
        "argv": argv,
        "worker_env": map(worker_env)?,
        "python_env": map(&python_env)?,
        "cwd": cwd,
        "rlimits": rlimits,
        "program": text(key.program.as_os_str())?,
        "confine": spec.env.is_confined(),
        "uid": spec.uid,
    });
    serde_json::to_vec(&request).map_err(|e| e.to_string())
}

/// What on disk a zygote's loaded code came from: its interpreter, and its virtualenv's
/// configuration and site-packages. A zygote whose fingerprint changed is replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<Option<(u64, u64, i64, i64)>>);

impl Fingerprint {
    pub fn of(key: &ZygoteKey) -> Fingerprint {
        let mut paths = vec![std::fs::canonicalize(&key.program).unwrap_or(key.program.clone())];
        if let Some(venv) = &key.venv {
            paths.push(venv.join("pyvenv.cfg"));
            paths.extend(site_packages(venv));
        }
        Fingerprint(
            paths
                .iter()
                .map(|path| {
                    let meta = std::fs::metadata(path).ok()?;
                    Some((meta.dev(), meta.ino(), meta.mtime(), meta.mtime_nsec()))
                })
                .collect(),
        )
    }
}

fn site_packages(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages"))
        .filter(|dir| dir.is_dir())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_uid_level_a_zygote_loads_only_what_the_daemon_has() {
        let daemons = |name: &OsStr, value: &OsStr| match name.to_str() {
            Some("HOME") => value == "/root",
            Some("LANG") => value == "C.UTF-8",
            _ => false,
        };
        let env = |pairs: &[(&str, &str)]| -> Vec<(OsString, OsString)> {
            pairs
                .iter()
                .map(|(n, v)| (OsString::from(n), OsString::from(v)))
                .collect()
        };
        let same = env(&[("HOME", "/root"), ("LANG", "C.UTF-8")]);
        assert!(loads_only_the_daemons(false, &same, daemons));
        assert!(loads_only_the_daemons(false, &[], daemons));
        let shell = env(&[(cellvisor_ipc::env::PYTHON_SHELL, "ipython")]);
        assert!(loads_only_the_daemons(false, &shell, daemons));
        // A caller's virtual environment, PYTHONPATH or home directory: never in a zygote.
        assert!(!loads_only_the_daemons(true, &same, daemons));
        let path = env(&[("HOME", "/root"), ("PYTHONPATH", "/tmp/s/x")]);
        assert!(!loads_only_the_daemons(false, &path, daemons));
        let home = env(&[("HOME", "/tmp/s")]);
        assert!(!loads_only_the_daemons(false, &home, daemons));
    }

    #[test]
    fn variables_read_while_loading_are_python_locale_and_numeric_ones() {
        for name in [
            "PYTHONPATH",
            "PYTHONHASHSEED",
            "HOME",
            "LANG",
            "LC_ALL",
            "OMP_NUM_THREADS",
            "MPLBACKEND",
        ] {
            assert!(read_while_loading(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "USER", "CELLVISOR_SESSION", "MYAPP_TOKEN", "TERM"] {
            assert!(!read_while_loading(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn a_venv_runner_gets_its_bin_first_and_no_pythonhome() {
        let interpreter = Interpreter {
            program: "/v/bin/python".into(),
            venv: Some("/v".into()),
        };
        let env = with_runner_changes(
            &interpreter,
            vec![
                ("PATH".into(), "/usr/bin".into()),
                ("PYTHONHOME".into(), "/x".into()),
                ("A".into(), "1".into()),
            ],
        );
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        assert_eq!(get("PATH"), Some("/v/bin:/usr/bin".into()));
        assert_eq!(get("VIRTUAL_ENV"), Some("/v".into()));
        assert_eq!(get("PYTHONHOME"), None);
        assert_eq!(get("PYTHONUNBUFFERED"), Some("1".into()));
        assert_eq!(get("A"), Some("1".into()));
        assert_eq!(env.iter().filter(|(n, _)| n == "PATH").count(), 1);
    }

    #[test]
    fn a_changed_file_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("v");
        std::fs::create_dir_all(venv.join("lib/python3.11/site-packages")).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(venv.join("bin/python"), "").unwrap();
        let key = ZygoteKey {
            program: venv.join("bin/python"),
            venv: Some(venv.clone()),
            loaded_env: Vec::new(),
            preload: Vec::new(),
        };
        let before = Fingerprint::of(&key);
        assert_eq!(before, Fingerprint::of(&key));
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(venv.join("lib/python3.11/site-packages/newpkg")).unwrap();
        assert_ne!(before, Fingerprint::of(&key));
    }
}
