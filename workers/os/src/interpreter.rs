//! Finding the Python interpreter a cell should run on.
//!
//! [`discover`] is pure (the caller passes the working directory, environment lookups and the
//! configured interpreter), so every rule is unit-tested on fake layouts. Version-manager shims
//! (pyenv, asdf, mise) are resolved to the real binary by reading the manager's files, because
//! running a pyenv shim costs 60-80 ms per start; only when that fails does `locate` run the
//! shim once and cache its answer in the runtime directory.

use crate::atomic_file::{write_atomically, Durability};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the fallback of running a shim may take.
const SHIM_RUN_TIMEOUT: Duration = Duration::from_secs(10);

/// The interpreter to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// The binary to exec (never a version-manager shim when that could be avoided).
    pub program: PathBuf,
    /// The virtualenv the binary belongs to: its `bin` goes first on the child's PATH and
    /// `VIRTUAL_ENV` names it.
    pub venv: Option<PathBuf>,
}

/// What [`discover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovered {
    /// An interpreter found from files alone, without running anything.
    Found(Interpreter),
    /// A shim whose target could not be worked out from files (pyenv `system`, an unknown
    /// manager): run it once to ask.
    UnresolvedShim(PathBuf),
}

/// Picks the interpreter: `$VIRTUAL_ENV/bin/python`, `<cwd>/.venv/bin/python`,
/// `<cwd>/venv/bin/python`, the configured one, then `python3` on PATH. A configured
/// interpreter that cannot be found is an error rather than a silent fallback.
pub fn discover(
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
    configured: Option<&OsStr>,
) -> Result<Discovered, String> {
    let mut venvs = Vec::new();
    if let Some(active) = env("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        venvs.push(cwd.join(active));
    }
    venvs.push(cwd.join(".venv"));
    venvs.push(cwd.join("venv"));
    for venv in venvs {
        let program = venv.join("bin").join("python");
        if is_executable(&program) {
            return Ok(Discovered::Found(Interpreter {
                program,
                venv: Some(venv),
            }));
        }
    }

    let path_var = env("PATH").unwrap_or_default();
    let candidate = match configured.filter(|c| !c.is_empty()) {
        Some(wanted) if wanted.as_bytes().contains(&b'/') => {
            let program = cwd.join(wanted);
            super::start_check::check_configured(&program)?;
            program
        }
        Some(wanted) => find_on_path(wanted, &path_var).ok_or_else(|| {
            format!(
                "the configured Python interpreter `{}` is not on PATH",
                wanted.to_string_lossy()
            )
        })?,
        None => find_on_path(OsStr::new("python3"), &path_var).ok_or_else(|| {
            format!(
                "no python3 on PATH (set {} to choose one)",
                cellvisor_ipc::env::PYTHON
            )
        })?,
    };
    Ok(resolve_shim(&candidate, cwd, env))
}

/// Discovers the interpreter for this process (its cwd and environment) and, if needed,
/// runs a shim once, caching the answer in `runtime_dir`.
pub fn locate(runtime_dir: &Path) -> Result<Interpreter, String> {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let env = |key: &str| std::env::var_os(key);
    let configured = std::env::var_os(cellvisor_ipc::env::PYTHON);
    match discover(&cwd, &env, configured.as_deref())? {
        Discovered::Found(interpreter) => Ok(interpreter),
        Discovered::UnresolvedShim(shim) => {
            let program = ask_shim_cached(&shim, &cwd, runtime_dir, &env)?;
            Ok(Interpreter {
                venv: venv_of(&program),
                program,
            })
        }
    }
}

/// A shim's real target when the manager's files say it; otherwise the candidate itself
/// (not a shim) or [`Discovered::UnresolvedShim`].
fn resolve_shim(
    candidate: &Path,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Discovered {
    let found = |program: PathBuf| {
        Discovered::Found(Interpreter {
            venv: venv_of(&program),
            program,
        })
    };
    let Some(shims_dir) = candidate
        .parent()
        .filter(|p| p.file_name() == Some(OsStr::new("shims")))
    else {
        return found(candidate.to_path_buf());
    };
    let Some(manager_root) = shims_dir.parent() else {
        return found(candidate.to_path_buf());
    };
    let name = candidate.file_name().unwrap_or(OsStr::new("python3"));
    let real = if manager_root.join("versions").is_dir() {
        let root = env("PYENV_ROOT")
            .filter(|r| !r.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| manager_root.to_path_buf());
        pyenv_target(&root, name, cwd, env)
    } else if manager_root.join("installs").is_dir() && !is_mise(manager_root) {
        asdf_target(manager_root, name, cwd, env)
    } else {
        None
    };
    match real {
        Some(program) => found(program),
        None => Discovered::UnresolvedShim(candidate.to_path_buf()),
    }
}

fn is_mise(root: &Path) -> bool {
    root.components()
        .any(|c| c.as_os_str().to_string_lossy().contains("mise"))
}

/// pyenv's rules: `PYENV_VERSION`, else the nearest `.python-version` up from `cwd`, else
/// `$PYENV_ROOT/version`; each may list several versions, tried in order. `system` (or no
/// version at all) cannot be resolved from files.
fn pyenv_target(
    root: &Path,
    name: &OsStr,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    let versions: Vec<String> = match env("PYENV_VERSION").filter(|v| !v.is_empty()) {
        Some(listed) => listed
            .to_string_lossy()
            .split(':')
            .map(str::to_string)
            .collect(),
        None => {
            let file = nearest_file(cwd, ".python-version")
                .or_else(|| Some(root.join("version")).filter(|f| f.is_file()))?;
            read_version_file(&file)
        }
    };
    for version in versions {
        if version == "system" {
            return None;
        }
        let versions_dir = root.join("versions");
        let exact = versions_dir.join(&version).join("bin").join(name);
        if is_executable(&exact) {
            return Some(exact);
        }
        if let Some(dir) = latest_with_prefix(&versions_dir, &version) {
            let program = dir.join("bin").join(name);
            if is_executable(&program) {
                return Some(program);
            }
        }
    }
    None
}

/// asdf's rules: `ASDF_PYTHON_VERSION`, else the `python` line of the nearest
/// `.tool-versions` up from `cwd`, else `$HOME/.tool-versions`.
fn asdf_target(
    root: &Path,
    name: &OsStr,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    let version = match env("ASDF_PYTHON_VERSION").filter(|v| !v.is_empty()) {
        Some(version) => version.to_string_lossy().into_owned(),
        None => {
            let file = nearest_file(cwd, ".tool-versions").or_else(|| {
                let home = PathBuf::from(env("HOME")?).join(".tool-versions");
                home.is_file().then_some(home)
            })?;
            let text = fs::read_to_string(file).ok()?;
            text.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("python"))
                    .then(|| words.next().map(str::to_string))
                    .flatten()
            })?
        }
    };
    if version == "system" {
        return None;
    }
    let program = root
        .join("installs")
        .join("python")
        .join(version)
        .join("bin")
        .join(name);
    is_executable(&program).then_some(program)
}

/// The newest installed version named `<prefix>.<digits...>` (pyenv accepts `3.11` for the
/// latest 3.11.x).
fn latest_with_prefix(versions_dir: &Path, prefix: &str) -> Option<PathBuf> {
    let wanted = format!("{prefix}.");
    let numeric = |name: &str| -> Option<Vec<u64>> {
        name.split('.').map(|part| part.parse().ok()).collect()
    };
    fs::read_dir(versions_dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let key = name.strip_prefix(&wanted).and(numeric(&name))?;
            Some((key, entry.path()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, path)| path)
}

fn read_version_file(file: &Path) -> Vec<String> {
    fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .filter(|word| !word.starts_with('#') && !word.contains(".."))
        .map(str::to_string)
        .collect()
}

fn nearest_file(start: &Path, name: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(name))
        .find(|file| file.is_file())
}

/// The virtualenv whose `bin` holds `program`, recognised by its `pyvenv.cfg`.
fn venv_of(program: &Path) -> Option<PathBuf> {
    let root = program.parent()?.parent()?;
    root.join("pyvenv.cfg")
        .is_file()
        .then(|| root.to_path_buf())
}

fn find_on_path(name: &OsStr, path_var: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|program| is_executable(program))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Runs `shim` once to learn `sys.executable`, remembering the answer per (shim, cwd,
/// version variables) in `runtime_dir` so later workers skip the slow shim.
fn ask_shim_cached(
    shim: &Path,
    cwd: &Path,
    runtime_dir: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, String> {
    let cache = runtime_dir.join(shim_cache_name(shim, cwd, env));
    if let Ok(cached) = fs::read(&cache) {
        let program = PathBuf::from(OsStr::from_bytes(&cached));
        if is_executable(&program) {
            return Ok(program);
        }
    }
    let program = ask_shim(shim, cwd)?;
    let _ = write_atomically(&cache, program.as_os_str().as_bytes(), Durability::Synced);
    Ok(program)
}

/// The name of the file that caches what `shim` answered in `cwd` under the version
/// variables of `env`: it names a file earlier runs wrote, so it must not change.
fn shim_cache_name(shim: &Path, cwd: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> String {
    let mut key = Vec::new();
    key.extend_from_slice(shim.as_os_str().as_bytes());
    key.push(0);
    key.extend_from_slice(cwd.as_os_str().as_bytes());
    for var in [
        "PYENV_VERSION",
        "ASDF_PYTHON_VERSION",
        "MISE_PYTHON_VERSION",
    ] {
        key.push(0);
        key.extend_from_slice(env(var).unwrap_or_default().as_bytes());
    }
    format!("python-shim-{:016x}", fnv1a(&key))
}

fn ask_shim(shim: &Path, cwd: &Path) -> Result<PathBuf, String> {
    let mut child = Command::new(shim)
        .args(["-c", "import sys; sys.stdout.write(sys.executable)"])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", shim.display()))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < SHIM_RUN_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not answer in time", shim.display()));
            }
        }
    };
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot read from {}: {e}", shim.display()))?;
    let answer = PathBuf::from(OsStr::from_bytes(output.stdout.trim_ascii()));
    if !status.success() || !is_executable(&answer) {
        return Err(format!(
            "{} failed to report its interpreter ({status}): {}",
            shim.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(answer)
}

/// The stable hash the worker names its cache files with (the one the supervisor uses too).
pub use cellvisor_ipc::stable_hash::fnv1a;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn executable(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn venv(root: &Path) -> PathBuf {
        executable(&root.join("bin/python"));
        fs::write(root.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        root.join("bin/python")
    }

    fn lookup(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        move |key| vars.get(key).cloned()
    }

    fn found(program: &Path, venv: Option<&Path>) -> Discovered {
        Discovered::Found(Interpreter {
            program: program.to_path_buf(),
            venv: venv.map(Path::to_path_buf),
        })
    }

    /// A pyenv root with versions 3.11.7 and 3.12.1 and `python3` on PATH as its shim.
    fn pyenv_layout(root: &Path) -> PathBuf {
        executable(&root.join("versions/3.11.7/bin/python3"));
        executable(&root.join("versions/3.12.1/bin/python3"));
        executable(&root.join("versions/3.12.10/bin/python3"));
        executable(&root.join("shims/python3"));
        root.join("shims")
    }

    #[test]
    fn active_virtualenv_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let active = dir.path().join("active");
        let program = venv(&active);
        venv(&dir.path().join(".venv"));
        let env = lookup(&[("VIRTUAL_ENV", &active), ("PATH", Path::new("/nowhere"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&program, Some(&active))
        );
    }

    #[test]
    fn dot_venv_then_venv_in_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let plain = venv(&dir.path().join("venv"));
        let env = lookup(&[("PATH", Path::new("/nowhere"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&plain, Some(&dir.path().join("venv")))
        );
        let dotted = venv(&dir.path().join(".venv"));
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&dotted, Some(&dir.path().join(".venv")))
        );
    }

    #[test]
    fn configured_by_path_or_name_before_python3_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        executable(&bin.join("python3"));
        let custom = bin.join("mypython");
        executable(&custom);
        let env = lookup(&[("PATH", &bin)]);
        assert_eq!(
            discover(dir.path(), &env, Some(custom.as_os_str())).unwrap(),
            found(&custom, None)
        );
        assert_eq!(
            discover(dir.path(), &env, Some(OsStr::new("mypython"))).unwrap(),
            found(&custom, None)
        );
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&bin.join("python3"), None)
        );
        let missing = discover(dir.path(), &env, Some(OsStr::new("nope"))).unwrap_err();
        assert!(missing.contains("`nope` is not on PATH"), "{missing}");
        assert!(discover(dir.path(), &lookup(&[]), None).is_err());
    }

    #[test]
    fn configured_venv_python_is_treated_as_a_venv() {
        let dir = tempfile::tempdir().unwrap();
        let program = venv(&dir.path().join("envs/tools"));
        let env = lookup(&[("PATH", Path::new("/nowhere"))]);
        assert_eq!(
            discover(dir.path(), &env, Some(program.as_os_str())).unwrap(),
            found(&program, Some(&dir.path().join("envs/tools")))
        );
    }

    #[test]
    fn pyenv_shim_resolves_from_version_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".pyenv");
        let shims = pyenv_layout(&root);
        let project = dir.path().join("project/sub");
        fs::create_dir_all(&project).unwrap();
        let v311 = root.join("versions/3.11.7/bin/python3");
        let v312 = root.join("versions/3.12.1/bin/python3");

        // Global version file.
        fs::write(root.join("version"), "3.12.1\n").unwrap();
        let env = lookup(&[("PATH", &shims)]);
        assert_eq!(discover(&project, &env, None).unwrap(), found(&v312, None));

        // The nearest .python-version wins over the global one (comments skipped).
        fs::write(
            dir.path().join("project/.python-version"),
            "# pinned\n3.11.7\n",
        )
        .unwrap();
        assert_eq!(discover(&project, &env, None).unwrap(), found(&v311, None));

        // PYENV_VERSION wins over both; a prefix means the newest match.
        let env = lookup(&[("PATH", &shims), ("PYENV_VERSION", Path::new("3.12"))]);
        assert_eq!(
            discover(&project, &env, None).unwrap(),
            found(&root.join("versions/3.12.10/bin/python3"), None)
        );

        // An explicit PYENV_ROOT is used for the versions.
        let other = dir.path().join("other-root");
        executable(&other.join("versions/3.11.7/bin/python3"));
        let env = lookup(&[("PATH", &shims), ("PYENV_ROOT", &other)]);
        assert_eq!(
            discover(&project, &env, None).unwrap(),
            found(&other.join("versions/3.11.7/bin/python3"), None)
        );
    }

    #[test]
    fn pyenv_system_or_missing_version_needs_the_shim() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".pyenv");
        let shims = pyenv_layout(&root);
        let env = lookup(&[("PATH", &shims), ("PYENV_VERSION", Path::new("system"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            Discovered::UnresolvedShim(shims.join("python3"))
        );
        let env = lookup(&[("PATH", &shims), ("PYENV_VERSION", Path::new("2.7.18"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            Discovered::UnresolvedShim(shims.join("python3"))
        );
    }

    #[test]
    fn pyenv_virtualenv_version_is_a_venv() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".pyenv");
        let shims = pyenv_layout(&root);
        let env_root = root.join("versions/tools");
        executable(&env_root.join("bin/python3"));
        fs::write(env_root.join("pyvenv.cfg"), "home = x\n").unwrap();
        let env = lookup(&[("PATH", &shims), ("PYENV_VERSION", Path::new("tools"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&env_root.join("bin/python3"), Some(&env_root))
        );
    }

    #[test]
    fn asdf_shim_resolves_from_tool_versions() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".asdf");
        let program = root.join("installs/python/3.11.7/bin/python3");
        executable(&program);
        executable(&root.join("shims/python3"));
        fs::write(
            dir.path().join(".tool-versions"),
            "nodejs 20.1.0\npython 3.11.7 3.10.1\n",
        )
        .unwrap();
        let env = lookup(&[("PATH", &root.join("shims"))]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            found(&program, None)
        );
    }

    #[test]
    fn unknown_shim_is_left_to_run() {
        let dir = tempfile::tempdir().unwrap();
        let shims = dir.path().join("mise/shims");
        executable(&shims.join("python3"));
        let env = lookup(&[("PATH", &shims)]);
        assert_eq!(
            discover(dir.path(), &env, None).unwrap(),
            Discovered::UnresolvedShim(shims.join("python3"))
        );
    }

    #[test]
    fn running_a_shim_is_cached() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real-python");
        executable(&real);
        let shim = dir.path().join("shims/python3");
        let counter = dir.path().join("runs");
        fs::create_dir_all(shim.parent().unwrap()).unwrap();
        fs::write(
            &shim,
            format!(
                "#!/bin/sh\necho run >> {}\nprintf '%s\\n' {}\n",
                counter.display(),
                real.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).unwrap();
        let env = lookup(&[]);
        for _ in 0..2 {
            assert_eq!(
                ask_shim_cached(&shim, dir.path(), dir.path(), &env).unwrap(),
                real
            );
        }
        assert_eq!(fs::read_to_string(&counter).unwrap(), "run\n");
    }

    #[test]
    fn shim_cache_names_stay_what_earlier_runs_wrote() {
        let env = lookup(&[("PYENV_VERSION", Path::new("3.12"))]);
        assert_eq!(
            shim_cache_name(
                Path::new("/home/u/.pyenv/shims/python3"),
                Path::new("/work/p"),
                &env
            ),
            "python-shim-9c7e212dba69dcae"
        );
    }
}
