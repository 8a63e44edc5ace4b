//! What the session's worker runs with, as the requests choose it: the Python (and its
//! venv) and the sandbox the next worker starts with (a live worker on another one is
//! replaced first), the session's own variables (sent with a worker's first cell: a prewarmed
//! one started without them) and the caller's environment it has applied.

use super::Session;
use crate::environment::WorkerEnv;
use crate::python_choice::PythonChoice;
use crate::sandbox::Plan;
use actix::Context;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A caller's environment, as the operator's `[env]` rules pass it.
type CallerEnv = Arc<BTreeMap<String, String>>;

/// The environment tracking (see the module).
#[derive(Default)]
pub(super) struct EnvTracking {
    /// The Python the current (or next) worker runs, once a request has said.
    python: Option<PathBuf>,
    /// The request's whole choice behind `python` (its venv, its directory).
    pub python_choice: Option<Arc<PythonChoice>>,
    /// The sandbox the current (or next) worker runs under.
    pub sandbox: Option<Arc<Plan>>,
    /// The worker generation that has been sent the session's variables.
    session_env_sent: u64,
    /// The caller's environment the worker of this generation has, once a cell brought one.
    caller_env_applied: Option<(u64, CallerEnv)>,
}

/// What following a request's Python means for the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Followed {
    /// The worker runs it already.
    Already,
    /// The first Python a request named: the next worker starts with it.
    First,
    /// Another than this one, which a live worker runs: it must be replaced.
    Replaces(PathBuf),
}

impl EnvTracking {
    /// Follows the Python `choice` names: the next worker runs it.
    pub fn follow_python(&mut self, choice: &Arc<PythonChoice>) -> Followed {
        if self.python.as_ref() == Some(&choice.program) {
            return Followed::Already;
        }
        self.python_choice = Some(Arc::clone(choice));
        match self.python.replace(choice.program.clone()) {
            None => Followed::First,
            Some(previous) => Followed::Replaces(previous),
        }
    }

    /// Whether a request that asks for the sandbox `wanted` (`keeps`: it keeps the level's
    /// confinement) runs in the worker as it is.
    pub fn sandbox_stays(&self, wanted: Option<&Arc<Plan>>, keeps: bool) -> bool {
        wanted == self.sandbox.as_ref()
            || keeps_as_it_is(keeps, wanted.map(|p| &**p), self.sandbox.as_deref())
    }

    /// Whether the worker of `generation` is yet to get the session's variables (true once
    /// per generation: the caller then sends them).
    pub fn session_vars_due(&mut self, generation: u64) -> bool {
        if self.session_env_sent == generation {
            return false;
        }
        self.session_env_sent = generation;
        true
    }

    /// What the worker of `generation` (which inherited `env`) must change for its next
    /// cell to see the caller's environment `caller`, and the notice naming what changed
    /// since its last cell: a worker's first caller environment is the one it is taken to
    /// start with; a later change to a live worker is named, the values never.
    pub fn caller_changes(
        &mut self,
        env: &WorkerEnv,
        caller: &CallerEnv,
        generation: u64,
    ) -> (Vec<(String, Option<String>)>, Option<String>) {
        let before = match &self.caller_env_applied {
            Some((applied_to, applied)) if *applied_to == generation => Some(Arc::clone(applied)),
            _ => None,
        };
        let changes = env.caller_changes(caller, before.as_deref());
        self.caller_env_applied = Some((generation, Arc::clone(caller)));
        let notice = (before.is_some() && !changes.is_empty()).then(|| {
            let names: Vec<&str> = changes.iter().map(|(name, _)| name.as_str()).collect();
            format!(
                "the caller's environment changed: {} (applied before this cell)",
                names.join(", ")
            )
        });
        (changes, notice)
    }
}

/// The notice of a worker replaced for another sandbox.
fn sandbox_notice(was_sandboxed: bool, is_sandboxed: bool) -> String {
    let what = match (was_sandboxed, is_sandboxed) {
        (true, false) => "this request runs without the sandbox",
        (false, true) => "this request runs sandboxed",
        _ => "this request's sandbox (policy or directory) differs",
    };
    format!("{what}: a new worker was started for it and earlier state is lost")
}

impl Session {
    /// Follows the Python the next cell's request asks for: the next worker starts with it,
    /// and a live worker on another one is replaced first (true: wait for that).
    pub(super) fn switch_python(&mut self, ctx: &mut Context<Self>) -> bool {
        let Some(choice) = self.turns.queue.front().and_then(|job| job.python.clone()) else {
            return false;
        };
        let previous = match self.env.follow_python(&choice) {
            Followed::Already => return false,
            Followed::First => None,
            Followed::Replaces(previous) => Some(previous),
        };
        crate::python_choice::apply(&mut self.setup.spec, &choice);
        match previous {
            Some(previous) if !self.slot.is_empty() => {
                let notice = crate::python_choice::change_notice(&previous, &choice.program);
                self.begin_reset(ctx, notice);
                true
            }
            _ => false,
        }
    }

    /// Follows the sandbox the next cell's request runs under (its policy and its cwd): the
    /// next worker starts under it, and a live worker under another one is replaced first
    /// (true: wait for that). A worker that cannot be set up fails the cell with why.
    pub(super) fn switch_sandbox(&mut self, ctx: &mut Context<Self>) -> bool {
        let front = self.turns.queue.front();
        let wanted = front.and_then(|job| job.sandbox.clone());
        let keeps = front.is_some_and(|job| job.keeps_level_confinement);
        if self.env.sandbox_stays(wanted.as_ref(), keeps) {
            return false;
        }
        let dirs = self.sandbox_dirs();
        let applied = crate::sandbox::apply_to_env(
            &mut self.setup.spec.env,
            wanted.as_deref(),
            &dirs,
            self.setup.artifacts.dir(),
        );
        if let Err(err) = applied {
            self.turns.refuse_next(format!(
                "sandbox: cannot prepare the session's directories ({}): {err}",
                dirs.tmp.display()
            ));
            return true;
        }
        if let Some(warning) = wanted.as_ref().and_then(|plan| plan.warning()) {
            tracing::warn!(session = %self.setup.key, "{warning}");
        }
        let previous = std::mem::replace(&mut self.env.sandbox, wanted);
        if self.slot.is_empty() {
            return false;
        }
        let notice = sandbox_notice(previous.is_some(), self.env.sandbox.is_some());
        self.begin_reset(ctx, notice);
        true
    }

    /// The session's own directories a sandboxed worker may write.
    fn sandbox_dirs(&self) -> crate::sandbox::SessionDirs {
        let name = self.setup.key.session.dir_name();
        crate::sandbox::SessionDirs {
            tmp: self.setup.tmp_dir(),
            artifacts: self.setup.artifacts.dir().join(&name),
            store: self.setup.spec.env.store_dir(),
            snapshots: self
                .saves
                .snapshots
                .as_ref()
                .map(|store| store.dir(&self.setup.key)),
        }
    }
}

/// Whether a request that wants no sandbox (`wanted`) runs in the worker as it is: when it
/// keeps the level's confinement (a local request at `auto`'s `landlock` for network
/// sessions) and the worker is confined by the level (`current`), rather than losing the
/// session's state to an unconfined worker.
fn keeps_as_it_is(
    keeps: bool,
    wanted: Option<&crate::sandbox::Plan>,
    current: Option<&crate::sandbox::Plan>,
) -> bool {
    keeps && wanted.is_none() && current.is_some_and(|plan| plan.by_level)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{isolation_policy, plan, KernelSupport, Plan};

    fn confined(by_level: bool) -> Plan {
        let kernel = KernelSupport {
            landlock_abi: 7,
            user_namespaces: true,
        };
        let policy = isolation_policy(&cellvisor_config::SandboxConfig::default());
        let mut plan = plan(policy, kernel, "/w".into()).expect("plan");
        plan.by_level = by_level;
        plan
    }

    #[test]
    fn a_local_request_runs_in_a_worker_the_level_confined_and_nowhere_else() {
        let level = confined(true);
        let operator = confined(false);
        // A local request at `auto` keeps a worker a network client's request confined.
        assert!(keeps_as_it_is(true, None, Some(&level)));
        // Not an unconfined worker (nothing to keep), not the operator's or a request's
        // sandbox (leaving it is asked for), not for a request that names its own.
        assert!(!keeps_as_it_is(true, None, None));
        assert!(!keeps_as_it_is(true, None, Some(&operator)));
        assert!(!keeps_as_it_is(true, Some(&operator), Some(&level)));
        // A request of no such level (`none`, `uid`) leaves the sandbox as it always did.
        assert!(!keeps_as_it_is(false, None, Some(&level)));
    }

    fn choice(program: &str) -> Arc<PythonChoice> {
        Arc::new(PythonChoice {
            program: program.into(),
            virtual_env: None,
            cwd: None,
        })
    }

    #[test]
    fn a_python_is_followed_and_another_one_replaces_it() {
        let mut env = EnvTracking::default();
        assert_eq!(env.follow_python(&choice("/a/python3")), Followed::First);
        assert_eq!(env.follow_python(&choice("/a/python3")), Followed::Already);
        assert_eq!(
            env.follow_python(&choice("/b/python3")),
            Followed::Replaces("/a/python3".into())
        );
        assert_eq!(
            env.python_choice.as_ref().map(|c| c.program.clone()),
            Some("/b/python3".into())
        );
    }

    #[test]
    fn the_session_variables_go_once_to_each_worker() {
        let mut env = EnvTracking::default();
        assert!(env.session_vars_due(1));
        assert!(!env.session_vars_due(1));
        assert!(env.session_vars_due(2), "a new worker gets them again");
    }

    #[test]
    fn a_change_of_the_callers_environment_to_a_live_worker_is_named() {
        let inherited = WorkerEnv::default();
        let caller = |value: &str| Arc::new(BTreeMap::from([("A".into(), value.into())]));
        let mut env = EnvTracking::default();
        let (changes, notice) = env.caller_changes(&inherited, &caller("1"), 1);
        assert_eq!(changes, vec![("A".into(), Some("1".into()))]);
        assert_eq!(notice, None, "the first is what the worker starts with");
        let (_, unchanged) = env.caller_changes(&inherited, &caller("1"), 1);
        assert_eq!(unchanged, None);
        let (changes, notice) = env.caller_changes(&inherited, &caller("2"), 1);
        assert_eq!(changes, vec![("A".into(), Some("2".into()))]);
        assert_eq!(
            notice.as_deref(),
            Some("the caller's environment changed: A (applied before this cell)")
        );
        // A new worker takes it as its start again.
        let (_, notice) = env.caller_changes(&inherited, &caller("3"), 2);
        assert_eq!(notice, None);
    }

    #[test]
    fn a_sandbox_change_says_which_way() {
        assert!(sandbox_notice(true, false).starts_with("this request runs without the sandbox:"));
        assert!(sandbox_notice(false, true).starts_with("this request runs sandboxed:"));
        assert!(sandbox_notice(true, true).contains("(policy or directory) differs"));
    }
}
