//! The one environment a worker process is started with: the supervisor's variables as the
//! operator's filter passes them ([`inherited`]), under the values cellvisor itself sets
//! (the session's names and directories, the sandbox, the Python choice, the engines' limits).
//!
//! It is the second supervisor↔worker protocol (the names are `cellvisor_ipc::env`'s), so
//! every value is set and read through the typed methods of [`WorkerEnv`], and the worker
//! gets it whole at spawn ([`WorkerEnv::render`]): workers are started with exactly this
//! environment, never the supervisor's with names removed afterwards, so no worker process
//! ever held a denied value.

mod inherited;

/// This process's environment as a caller sends it with a request (`EvalRequest::env`):
/// every variable except the credentials the built-in denylist (or the caller's own
/// `[env] deny`) names, which never leave the caller. The allow rules and `set` values are
/// the daemon's to apply (its operator's `[env]`, [`caller_vars`]), not the caller's.
pub fn caller_environment(rules: &cellvisor_config::EnvConfig) -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| !inherited::denied(k, v, &rules.deny))
        .collect()
}

/// The variables of a caller's environment a worker may see: `[env]`'s allow and deny rules,
/// as for the supervisor's own, then its `set` values over them.
pub fn caller_vars(
    vars: &BTreeMap<String, String>,
    rules: &cellvisor_config::EnvConfig,
) -> BTreeMap<String, String> {
    let vars = vars
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    inherited::filter(vars, rules)
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

use cellvisor_config::Config;
use cellvisor_ipc::env as names;
use cellvisor_ipc::Language;
use cellvisor_os::sandbox::Rules;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The caller's virtual environment, which Python discovery reads.
const VIRTUAL_ENV: &str = "VIRTUAL_ENV";
/// A sandboxed worker's own temporary directory.
const TMPDIR: &str = "TMPDIR";
/// Matplotlib's cache, moved where a confined cell may write it.
const MPLCONFIGDIR: &str = "MPLCONFIGDIR";
/// Python's output unbuffered and in UTF-8, whatever the supervisor's locale.
const PYTHON_FIXED: [(&str, &str); 2] = [("PYTHONUNBUFFERED", "1"), ("PYTHONIOENCODING", "utf-8")];

/// Which levels of startup modules a worker runs ([`names::STARTUP`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupLevels {
    /// The user's (`~/.config/cellvisor/startup`).
    pub user: bool,
    /// The project's (`<cwd>/.cellvisor/startup`).
    pub project: bool,
}

/// The environment of one worker: what it inherits, and what cellvisor sets over that.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerEnv {
    /// The supervisor's variables the filter passed, in their order.
    inherited: Vec<(OsString, OsString)>,
    /// What cellvisor sets, over an inherited value of the same name; `None` keeps an
    /// inherited value out.
    own: BTreeMap<&'static str, Option<OsString>>,
}

impl WorkerEnv {
    /// The environment of a `language` worker under `config`, inheriting from this process.
    pub fn for_worker(config: &Config, language: Language) -> WorkerEnv {
        WorkerEnv::from_vars(std::env::vars_os(), config, language)
    }

    /// The environment of a `language` worker under `config` whose supervisor has `vars`.
    pub fn from_vars(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        config: &Config,
        language: Language,
    ) -> WorkerEnv {
        let mut env = WorkerEnv {
            inherited: inherited::filter(vars, &config.env),
            own: BTreeMap::new(),
        };
        for (name, value) in PYTHON_FIXED {
            env.set(name, value);
        }
        let engine = match language {
            Language::JavaScript => Some(&config.js),
            Language::Lua => Some(&config.lua),
            Language::Python => None,
        };
        if let Some(engine) = engine {
            if let Some(limit) = engine.memory_limit {
                env.set(names::MEMORY_LIMIT, limit.as_u64().to_string());
            }
            if let Some(stack) = engine.stack_size {
                env.set(names::STACK_SIZE, stack.as_u64().to_string());
            }
        }
        env.set_startup(StartupLevels {
            user: config.startup.user,
            project: config.startup.project,
        });
        if language == Language::Python {
            if let Some(interpreter) = &config.python.interpreter {
                env.set(names::PYTHON, interpreter);
            }
            env.set(names::PYTHON_SHELL, config.python.shell.as_str());
        }
        env
    }

    fn set(&mut self, name: &'static str, value: impl Into<OsString>) {
        self.own.insert(name, Some(value.into()));
    }

    fn get_path(&self, name: &str) -> Option<PathBuf> {
        self.get(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    }

    /// The value the worker will see for `name`.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        match self.own.get(name) {
            Some(own) => own.as_deref(),
            None => self
                .inherited
                .iter()
                .find(|(inherited, _)| inherited == name)
                .map(|(_, value)| value.as_os_str()),
        }
    }

    /// Every variable the worker is started with: the inherited ones cellvisor does not set,
    /// then cellvisor's own.
    pub fn render(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        let inherited = self
            .inherited
            .iter()
            .filter(|(name, _)| {
                name.to_str()
                    .is_none_or(|name| !self.own.contains_key(name))
            })
            .map(|(name, value)| (name.as_os_str(), value.as_os_str()));
        let own = self
            .own
            .iter()
            .filter_map(|(name, value)| value.as_deref().map(|value| (OsStr::new(name), value)));
        inherited.chain(own)
    }

    /// The startup-module levels the worker runs.
    pub fn set_startup(&mut self, levels: StartupLevels) {
        let on: Vec<&str> = [("user", levels.user), ("project", levels.project)]
            .into_iter()
            .filter_map(|(level, on)| on.then_some(level))
            .collect();
        self.set(names::STARTUP, on.join(","));
    }

    /// Whether cellvisor itself sets `name` (over anything inherited): a value of the
    /// operator's, never a caller's.
    pub fn sets(&self, name: &OsStr) -> bool {
        name.to_str()
            .is_some_and(|name| self.own.get(name).is_some_and(Option::is_some))
    }

    /// Whether the worker confines itself (a sandboxed session's).
    pub fn is_confined(&self) -> bool {
        self.get(names::SANDBOX).is_some()
    }

    /// The interpreter `python.interpreter` names, for discovery.
    pub fn configured_python(&self) -> Option<&OsStr> {
        self.get(names::PYTHON)
    }

    /// Where the worker's spilled outputs go.
    pub fn set_artifact_dir(&mut self, dir: &Path) {
        self.set(names::ARTIFACT_DIR, dir);
    }

    /// The session the worker runs for, and its directory for `store`/`load` (a prewarmed
    /// worker has neither until its first cell brings [`WorkerEnv::session_vars`]).
    pub fn set_session(&mut self, session: &str, store_dir: &Path) {
        self.set(names::SESSION, session);
        self.set(names::STORE_DIR, store_dir);
    }

    /// See [`WorkerEnv::set_session`].
    pub fn store_dir(&self) -> Option<PathBuf> {
        self.get_path(names::STORE_DIR)
    }

    /// The session's variables as a cell carries them to a worker started without them
    /// (a prewarmed worker learns its session's own temporary directory so).
    pub fn session_vars(&self) -> Vec<(String, String)> {
        [names::SESSION, names::STORE_DIR, TMPDIR, MPLCONFIGDIR]
            .into_iter()
            .filter_map(|name| {
                let value = self.get(name)?;
                Some((name.to_string(), value.to_string_lossy().into_owned()))
            })
            .collect()
    }

    /// What a worker must change so that its cells see the caller's environment `caller`
    /// (already filtered by [`caller_vars`]): against `before`, the caller's environment its
    /// cells saw last, or against what the worker inherited when it has seen none yet. A
    /// value to set, or `None` to remove, by name. Names cellvisor sets itself (the session,
    /// the sandbox's directories, `VIRTUAL_ENV`, which chose the interpreter) are never
    /// changed.
    pub fn caller_changes(
        &self,
        caller: &BTreeMap<String, String>,
        before: Option<&BTreeMap<String, String>>,
    ) -> Vec<(String, Option<String>)> {
        let inherited: BTreeMap<String, String>;
        let before = match before {
            Some(before) => before,
            None => {
                inherited = (self.inherited.iter())
                    .filter_map(|(name, value)| {
                        Some((name.to_str()?.to_string(), value.to_str()?.to_string()))
                    })
                    .collect();
                &inherited
            }
        };
        let ours = |name: &str| self.own.contains_key(name) || name == VIRTUAL_ENV;
        let set = (caller.iter())
            .filter(|(name, value)| before.get(*name) != Some(*value))
            .map(|(name, value)| (name.clone(), Some(value.clone())));
        let removed = (before.keys())
            .filter(|name| !caller.contains_key(*name))
            .map(|name| (name.clone(), None));
        let mut changes: Vec<(String, Option<String>)> =
            set.chain(removed).filter(|(name, _)| !ours(name)).collect();
        changes.sort();
        changes
    }

    /// The caller's virtual environment, over any the supervisor had.
    pub fn set_virtual_env(&mut self, venv: &Path) {
        self.set(VIRTUAL_ENV, venv);
    }

    /// Confines the worker: it applies `rules` before its first cell, and writes its
    /// temporary files (matplotlib's cache among them) to `tmp` and its spilled outputs to
    /// `artifacts`, its session's own directories.
    pub fn confine(
        &mut self,
        rules: &Rules,
        tmp: &Path,
        artifacts: &Path,
    ) -> Result<(), serde_json::Error> {
        self.set(names::SANDBOX, serde_json::to_string(rules)?);
        self.set(TMPDIR, tmp);
        self.set(MPLCONFIGDIR, tmp.join("matplotlib"));
        self.set_artifact_dir(artifacts);
        Ok(())
    }

    /// Points the worker's temporary files at its session's own directory `tmp`, removed
    /// when the session forgets (at every level; at the `uid` level the daemon's temporary
    /// directory is not the session's to write anyway).
    pub fn set_session_tmp(&mut self, tmp: &Path) {
        self.set(TMPDIR, tmp);
        self.set(MPLCONFIGDIR, tmp.join("matplotlib"));
    }

    /// Undoes [`WorkerEnv::confine`]: no rules, and the shared artifact directory
    /// `shared_artifacts`; the temporary files stay in the session's own `tmp`.
    pub fn unconfine(&mut self, shared_artifacts: &Path, tmp: &Path) {
        self.own.insert(names::SANDBOX, None);
        self.set_session_tmp(tmp);
        self.set_artifact_dir(shared_artifacts);
    }

    /// Whether the worker's temporary directories are its session's own (set by cellvisor,
    /// not inherited): then they are no part of what a zygote is started with.
    pub fn has_session_tmp(&self) -> bool {
        self.sets(std::ffi::OsStr::new(TMPDIR))
    }

    /// The file the worker records the cell it took in.
    pub fn set_taken_record(&mut self, path: &Path) {
        self.set(names::TAKEN_RECORD, path);
    }
}

/// Reading back what cellvisor set: the worker reads these values through
/// `cellvisor_ipc::env`, the tests through these.
#[cfg(test)]
impl WorkerEnv {
    fn get_number(&self, name: &str) -> Option<u64> {
        self.get(name)?.to_str()?.parse().ok()
    }

    /// See [`WorkerEnv::set_startup`].
    pub fn startup(&self) -> StartupLevels {
        let text = self
            .get(names::STARTUP)
            .unwrap_or_default()
            .to_string_lossy();
        let has = |level: &str| text.split(',').any(|on| on == level);
        StartupLevels {
            user: has("user"),
            project: has("project"),
        }
    }

    /// The engine's heap limit in bytes (JavaScript and Lua).
    pub fn memory_limit(&self) -> Option<u64> {
        self.get_number(names::MEMORY_LIMIT)
    }

    /// The JavaScript engine's stack limit in bytes.
    pub fn stack_size(&self) -> Option<u64> {
        self.get_number(names::STACK_SIZE)
    }

    /// See [`WorkerEnv::set_artifact_dir`].
    pub fn artifact_dir(&self) -> Option<PathBuf> {
        self.get_path(names::ARTIFACT_DIR)
    }

    /// See [`WorkerEnv::set_session`].
    pub fn session(&self) -> Option<String> {
        self.get(names::SESSION)
            .map(|session| session.to_string_lossy().into_owned())
    }

    /// The virtual environment the worker's Python discovery sees.
    pub fn virtual_env(&self) -> Option<PathBuf> {
        self.get_path(VIRTUAL_ENV)
    }

    /// The rules the worker applies (`None`: it runs unconfined).
    pub fn sandbox_rules(&self) -> Option<Rules> {
        serde_json::from_str(self.get(names::SANDBOX)?.to_str()?).ok()
    }

    /// See [`WorkerEnv::set_taken_record`].
    pub fn taken_record(&self) -> Option<PathBuf> {
        self.get_path(names::TAKEN_RECORD)
    }
}

#[cfg(test)]
mod tests;
