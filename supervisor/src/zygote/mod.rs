//! Python workers forked from a warm interpreter (`[python] zygote`, `[python] preload`).
//!
//! A zygote is a Python runner that loaded the prelude and the preloaded modules once, froze
//! its heap for the collector and then forks: for each new Python worker it clones itself as
//! a child of the supervisor, forks the runner under that clone and execs the worker program
//! in it (see `zygote.py`). The tree is the one a spawned worker has (supervisor → worker →
//! python), so containment, limits and accounting do not change; only the runner skips its
//! interpreter's start and imports.
//!
//! One zygote per [`ZygoteKey`]: the interpreter and virtualenv a session's worker would run,
//! the variables Python and preloaded modules read when they load, and the preload list.
//! A sandboxed session's runner is forked too, from the same (unconfined) zygote: it waits
//! for its worker's Landlock ruleset and confines itself before running anything of the
//! session. Sandboxes with a network namespace, interpreters only a version-manager shim can
//! name and environments that cannot be written as text start their own interpreter, as
//! with `zygote = false`.
//! A request whose zygote is not ready (starting, restarting after a death, replaced after
//! its interpreter changed on disk) starts its worker the plain way meanwhile.
//!
//! - `process`: one running zygote, and the request it answers.
//! - `forked_child`: a forked worker, awaited through a pidfd.
//! - `key`: which zygote a worker spec belongs to, and what the request to it says.

mod forked_child;
mod key;
mod process;

pub use cellvisor_client::status::ZygoteStatus;
pub use forked_child::ForkedChild;
pub use key::ZygoteKey;

use crate::locking::lock;
use crate::spawn::WorkerSpec;
use process::{ForkError, Zygote, ZygoteStart};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Zygotes kept at once; starting another ends the least recently used.
const MAX_ZYGOTES: usize = 4;
/// How long a zygote may take to start with its preloads.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long after a zygote died or failed to start another is tried.
const RETRY_AFTER: Duration = Duration::from_secs(2);

enum Slot {
    Starting,
    Ready {
        zygote: Arc<Zygote>,
        fingerprint: key::Fingerprint,
        used: Instant,
        /// What it was started with, to start its successor alike.
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    },
    Failed {
        at: Instant,
        error: String,
        /// Starting again would fail alike: no retry for this key.
        lasting: bool,
    },
}

/// Every zygote of a supervisor; shared by the worker launcher.
pub struct Zygotes {
    run_dir: PathBuf,
    slots: Mutex<HashMap<ZygoteKey, Slot>>,
    me: Weak<Zygotes>,
}

impl Zygotes {
    /// `None` where forked workers cannot be awaited (a kernel without pidfds).
    pub fn new(run_dir: PathBuf) -> Option<Arc<Zygotes>> {
        if !forked_child::pidfds_supported() {
            tracing::info!("no pidfds on this kernel: Python workers start without a zygote");
            return None;
        }
        Some(Arc::new_cyclic(|me| Zygotes {
            run_dir,
            slots: Mutex::new(HashMap::new()),
            me: me.clone(),
        }))
    }

    /// Starts the zygote workers like `spec`'s would use, unless it runs or starts already.
    pub fn warm(&self, spec: &WorkerSpec) {
        if let Some(key) = ZygoteKey::of(spec) {
            let _ = self.ready_zygote(&key, spec);
        }
    }

    /// Whether a worker like `spec`'s would be forked now (its zygote is up): the prewarm
    /// pool then refills at once, since a fork costs a few milliseconds of CPU, not an
    /// interpreter's start.
    pub fn forks_now(&self, spec: &WorkerSpec) -> bool {
        let Some(key) = ZygoteKey::of(spec) else {
            return false;
        };
        let slots = lock(&self.slots);
        matches!(slots.get(&key), Some(Slot::Ready { zygote, .. }) if zygote.is_alive())
    }

    /// Whether the zygote a worker like `spec`'s would be forked from is starting: a worker
    /// started meanwhile would lack what it preloads.
    pub fn starting(&self, spec: &WorkerSpec) -> bool {
        let Some(key) = ZygoteKey::of(spec) else {
            return false;
        };
        let slots = lock(&self.slots);
        matches!(slots.get(&key), Some(Slot::Starting))
    }

    /// A worker for `spec` forked by its zygote, or `None` when there is no ready zygote for
    /// it (one is then started for the next request) or the zygote failed: the caller starts
    /// the worker the plain way.
    pub async fn fork(
        &self,
        spec: &WorkerSpec,
        argv: &[std::ffi::OsString],
        worker_env: &[(std::ffi::OsString, std::ffi::OsString)],
        stderr: &OwnedFd,
    ) -> Option<ForkedChild> {
        let key = ZygoteKey::of(spec)?;
        let zygote = self.ready_zygote(&key, spec)?;
        let request = match key::request(&key, spec, argv, worker_env) {
            Ok(request) => request,
            Err(why) => {
                tracing::debug!("starting a Python worker without the zygote: {why}");
                return None;
            }
        };
        match zygote.fork(&request, stderr).await {
            Ok(child) => Some(child),
            Err(error) => {
                tracing::warn!(
                    "zygote {}: {error}; starting the worker without it",
                    zygote.pid
                );
                if after_fork_failure(&error) == AfterForkFailure::Replace {
                    self.replace_unresponsive(&key, zygote.pid, &error);
                }
                None
            }
        }
    }

    /// The one place an unresponsive zygote is handled: when `key`'s slot still holds the
    /// zygote `pid`, it is dropped (its watcher kills it, stopped or not) and a successor
    /// starts at once; requests meanwhile start their workers plainly.
    fn replace_unresponsive(&self, key: &ZygoteKey, pid: u32, why: &ForkError) {
        let env = {
            let mut slots = lock(&self.slots);
            match slots.get(key) {
                Some(Slot::Ready { zygote, env, .. }) if zygote.pid == pid => {
                    let env = env.clone();
                    slots.insert(key.clone(), Slot::Starting);
                    env
                }
                _ => return, // replaced already
            }
        };
        tracing::warn!(pid, interpreter = %key.program.display(), "replacing the Python zygote: {why}");
        self.start(key.clone(), env);
    }

    /// What `status` shows of each zygote.
    pub fn status(&self) -> Vec<ZygoteStatus> {
        let slots = lock(&self.slots);
        let mut rows: Vec<ZygoteStatus> = slots
            .iter()
            .map(|(key, slot)| {
                let mut row = ZygoteStatus {
                    interpreter: key.program.clone(),
                    virtual_env: key.venv.clone(),
                    state: "starting",
                    pid: None,
                    version: None,
                    forks: 0,
                    preloaded: Vec::new(),
                    failed: Vec::new(),
                    error: None,
                };
                match slot {
                    Slot::Starting => {}
                    Slot::Ready { zygote, .. } => {
                        row.state = shown_state(zygote.is_alive(), process_state(zygote.pid));
                        row.pid = Some(zygote.pid);
                        row.version = Some(zygote.version.clone());
                        row.forks = zygote.forks.load(std::sync::atomic::Ordering::Relaxed);
                        row.preloaded.clone_from(&zygote.preloaded);
                        row.failed.clone_from(&zygote.failed);
                    }
                    Slot::Failed { error, .. } => {
                        row.state = "failed";
                        row.error = Some(error.clone());
                    }
                }
                row
            })
            .collect();
        rows.sort_by(|a, b| a.interpreter.cmp(&b.interpreter));
        rows
    }

    /// The ready zygote for `key`; otherwise starts one (unless one is starting, or the
    /// last attempt failed a moment ago) and says `None`.
    fn ready_zygote(&self, key: &ZygoteKey, spec: &WorkerSpec) -> Option<Arc<Zygote>> {
        let mut slots = lock(&self.slots);
        match slots.get_mut(key) {
            Some(Slot::Ready {
                zygote,
                fingerprint,
                used,
                ..
            }) => {
                if zygote.is_alive() && *fingerprint == key::Fingerprint::of(key) {
                    *used = Instant::now();
                    return Some(Arc::clone(zygote));
                }
                tracing::info!(
                    interpreter = %key.program.display(),
                    "replacing the Python zygote: {}",
                    if zygote.is_alive() { "its interpreter or virtualenv changed on disk" } else { "it exited" }
                );
            }
            Some(Slot::Starting) => return None,
            Some(Slot::Failed { lasting: true, .. }) => return None,
            Some(Slot::Failed { at, .. }) if at.elapsed() < RETRY_AFTER => return None,
            Some(Slot::Failed { .. }) | None => {}
        }
        if !slots.contains_key(key) && slots.len() >= MAX_ZYGOTES {
            evict_least_recent(&mut slots);
        }
        slots.insert(key.clone(), Slot::Starting);
        drop(slots);
        self.start(key.clone(), key::zygote_env(key, spec));
        None
    }

    fn start(&self, key: ZygoteKey, env: Vec<(std::ffi::OsString, std::ffi::OsString)>) {
        let runner = match cellvisor_worker_py::install_runner(&self.run_dir) {
            Ok(runner) => {
                // A preloaded module may ask for IPython at import (`get_ipython()`).
                cellvisor_worker_py::install_ipython_module(&runner);
                runner
            }
            Err(error) => {
                self.settle(&key, Err(error.into()), env);
                return;
            }
        };
        let start = ZygoteStart {
            program: key.program.clone(),
            runner,
            env: env.clone(),
            cwd: self.run_dir.clone(),
            preload: key.preload.clone(),
            timeout: START_TIMEOUT,
        };
        let me = self.me.clone();
        let on_exit = {
            let me = self.me.clone();
            let key = key.clone();
            move |how: String| {
                tracing::warn!(interpreter = %key.program.display(), "the Python zygote ended ({how}); starting another");
                if let Some(zygotes) = me.upgrade() {
                    zygotes.restart_after_exit(key);
                }
            }
        };
        tokio::spawn(async move {
            let started = Zygote::start(start, on_exit).await;
            if let Some(zygotes) = me.upgrade() {
                zygotes.settle(&key, started, env);
            }
        });
    }

    fn settle(
        &self,
        key: &ZygoteKey,
        started: Result<Zygote, process::StartFailure>,
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    ) {
        let mut slots = lock(&self.slots);
        if !matches!(slots.get(key), Some(Slot::Starting)) {
            return; // evicted meanwhile: the new zygote is dropped, which ends it
        }
        let slot = match started {
            Ok(zygote) => {
                for failed in &zygote.failed {
                    tracing::warn!(
                        "[python] preload: {} could not be imported: {}",
                        failed.module,
                        failed.error
                    );
                }
                tracing::info!(pid = zygote.pid, interpreter = %key.program.display(), "Python zygote ready");
                Slot::Ready {
                    zygote: Arc::new(zygote),
                    fingerprint: key::Fingerprint::of(key),
                    used: Instant::now(),
                    env,
                }
            }
            Err(failure) => {
                tracing::warn!(interpreter = %key.program.display(), "no Python zygote: {}", failure.error);
                Slot::Failed {
                    at: Instant::now(),
                    error: failure.error,
                    lasting: failure.lasting,
                }
            }
        };
        slots.insert(key.clone(), slot);
    }

    /// A zygote died: another starts after a pause (a zygote that keeps dying costs one
    /// start per pause, and requests meanwhile start their workers plainly).
    fn restart_after_exit(&self, key: ZygoteKey) {
        let me = self.me.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETRY_AFTER / 4).await;
            let Some(zygotes) = me.upgrade() else { return };
            let env = {
                let mut slots = lock(&zygotes.slots);
                match slots.get(&key) {
                    Some(Slot::Ready { zygote, env, .. }) if !zygote.is_alive() => {
                        let env = env.clone();
                        slots.insert(key.clone(), Slot::Starting);
                        Some(env)
                    }
                    _ => None,
                }
            };
            if let Some(env) = env {
                zygotes.start(key, env);
            }
        });
    }
}

/// What becomes of a zygote after a fork request failed: plain data, unit-tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterForkFailure {
    /// It answered: keep it.
    Keep,
    /// It did not answer in time, or broke its protocol: replace it.
    Replace,
}

fn after_fork_failure(error: &ForkError) -> AfterForkFailure {
    match error {
        ForkError::Unresponsive(_) => AfterForkFailure::Replace,
        ForkError::Refused(_) => AfterForkFailure::Keep,
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` for stopped, ...), from `/proc`.
fn process_state(pid: u32) -> Option<char> {
    cellvisor_os::proc::stat(pid).map(|stat| stat.state)
}

/// What `status` says of a started zygote: `ready` only when it can answer; `stopped` when
/// something stopped it (it is replaced at the next fork request), `starting` once it died
/// (its successor is on the way).
fn shown_state(alive: bool, process_state: Option<char>) -> &'static str {
    match (alive, process_state) {
        (false, _) | (_, None | Some('Z' | 'X')) => "starting",
        (true, Some('T' | 't')) => "stopped",
        (true, Some(_)) => "ready",
    }
}

fn evict_least_recent(slots: &mut HashMap<ZygoteKey, Slot>) {
    let oldest = slots
        .iter()
        .filter_map(|(key, slot)| match slot {
            Slot::Ready { used, .. } => Some((key.clone(), *used)),
            Slot::Failed { at, .. } => Some((key.clone(), *at)),
            Slot::Starting => None,
        })
        .min_by_key(|(_, at)| *at)
        .map(|(key, _)| key);
    if let Some(key) = oldest {
        slots.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zygote_that_does_not_answer_is_replaced_and_one_that_refuses_is_kept() {
        let late = ForkError::Unresponsive("did not answer".into());
        assert_eq!(after_fork_failure(&late), AfterForkFailure::Replace);
        let refused = ForkError::Refused("could not fork: EAGAIN".into());
        assert_eq!(after_fork_failure(&refused), AfterForkFailure::Keep);
    }

    #[test]
    fn status_says_stopped_for_a_stopped_zygote_and_ready_only_for_a_running_one() {
        assert_eq!(shown_state(true, Some('S')), "ready");
        assert_eq!(shown_state(true, Some('R')), "ready");
        assert_eq!(shown_state(true, Some('T')), "stopped");
        assert_eq!(shown_state(true, Some('t')), "stopped");
        assert_eq!(shown_state(true, Some('Z')), "starting");
        assert_eq!(shown_state(true, None), "starting");
        assert_eq!(shown_state(false, Some('S')), "starting");
        assert!(process_state(std::process::id()).is_some_and(|s| s.is_ascii_uppercase()));
    }
}
