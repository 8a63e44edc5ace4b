//! Running suites: each variant on its own embedded supervisor, each case in its own session
//! and fresh workspace, up to `concurrency` cases at a time; every streamed event kept with
//! its time.

use super::artifacts::{self, Artifacts};
use super::case_run::{run_case, CaseStatus, Job};
use super::metrics::MetricValue;
use super::notebook_run;
use super::scorer::ScoreOutcome;
use super::suite::{Case, Suite};
use super::trajectory::Trajectory;
use super::workspace::WorkspaceSnapshot;
use cellvisor::cell::{CellEvent, CellResult, EvalRequest, EvalResult};
use cellvisor::{Cellvisor, Options, RequestError, StartupError};
use cellvisor_config::Config;
use futures::StreamExt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc;

/// The name of the one variant a run without declared variants has.
pub const DEFAULT_VARIANT: &str = "default";

/// A configuration to run the suites under, on a supervisor of its own.
#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub config: Config,
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub variants: Vec<Variant>,
    /// Runs of each case (at least 1).
    pub repeat: u32,
    /// Cases run at once per variant; capped by the variant's `sessions.max-sessions`, so no
    /// case's session is evicted under it.
    pub concurrency: usize,
    /// Where artifacts go; none are written without it.
    pub out: Option<PathBuf>,
    /// As in [`Options`]: the executable workers run as, and the runtime directory.
    pub worker_exe: Option<PathBuf>,
    pub runtime_dir: Option<PathBuf>,
}

/// Why a run stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("variant {variant}: cannot start a supervisor: {source}")]
    Startup {
        variant: String,
        source: StartupError,
    },
    #[error("cannot write artifacts to {path}: {source}")]
    Artifacts {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One streamed event with when it arrived.
#[derive(Debug, Clone, Serialize)]
pub struct TimedEvent {
    /// Wall-clock time, RFC 3339 with milliseconds.
    pub at: String,
    /// Milliseconds since the case started.
    pub elapsed_ms: f64,
    /// `setup` or `cells`.
    pub phase: &'static str,
    #[serde(flatten)]
    pub event: CellEvent,
}

/// One run of one case under one variant.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub variant: String,
    pub suite: String,
    pub id: String,
    /// 1-based, up to `--repeat`.
    pub repeat: u32,
    pub tags: Vec<String>,
    /// Every scorer passed (with `status.completed` among them when a cell went wrong
    /// unexpectedly).
    pub passed: bool,
    /// The case ran as written: no `error`, and its cells ended as it expects (complete, or
    /// with the error or cancellation a `status` scorer declares). A case that did not fails
    /// the run (exit status 1); low scores alone do not.
    pub completed: bool,
    /// 0..1: the mean normalized value of the metrics when the case declares metrics,
    /// otherwise the mean of its scorers' scores (the anchor's rule).
    pub score: f64,
    /// How the cells under test ended (the first that did not complete), or `timeout`.
    pub status: CaseStatus,
    /// Wall-clock time of the whole case: workspace, setup, cells, capture.
    pub duration_ms: f64,
    pub started_at: String,
    pub scores: Vec<ScoreOutcome>,
    pub metrics: Vec<MetricValue>,
    pub tag_scores: BTreeMap<String, f64>,
    /// Set when the case could not be run as written (setup failed, request refused,
    /// workspace not prepared); the case then fails.
    pub error: Option<String>,
    pub artifact_dir: Option<PathBuf>,
    /// The files written for the case, when `--out` is given.
    pub artifacts: Option<Artifacts>,
    /// What the cells did, in order, with durations.
    pub trajectory: Trajectory,
    /// The trajectory in one line.
    pub trajectory_line: String,
    pub case: Case,
    pub setup: Vec<CellResult>,
    pub cells: Vec<CellResult>,
    #[serde(skip)]
    pub workspace: WorkspaceSnapshot,
    #[serde(skip)]
    pub events: Vec<TimedEvent>,
}

impl CaseResult {
    /// Names of the scorers that failed.
    pub fn failed_scorers(&self) -> impl Iterator<Item = &str> {
        self.scores
            .iter()
            .filter(|s| !s.passed)
            .map(|s| s.name.as_str())
    }
}

/// Runs every case of `suites` under every variant, `options.repeat` times, handing each
/// result to `on_case` as it is ready (its artifacts already written). A notebook runs as one
/// job (its cells in one session, in order) whose cells' results come together. Dropping the
/// future stops the run: the cells running are stopped and their workspaces removed.
pub async fn run(
    suites: &[Suite],
    options: &RunOptions,
    mut on_case: impl FnMut(CaseResult),
) -> Result<(), RunError> {
    let repeat = options.repeat.max(1);
    // The anchor's `<root>/<suite>/<id>`; with variants, each namespaces its cases.
    let namespaced =
        options.variants.len() > 1 || options.variants.iter().any(|v| v.name != DEFAULT_VARIANT);
    for variant in &options.variants {
        let cellvisor = Cellvisor::start(Options {
            config: variant.config.clone(),
            worker_exe: options.worker_exe.clone(),
            runtime_dir: options.runtime_dir.clone(),
        })
        .map_err(|source| RunError::Startup {
            variant: variant.name.clone(),
            source,
        })?;
        // A case, or (`None`) a whole notebook, with its repeat.
        let jobs = suites.iter().flat_map(|suite| {
            let cases: Vec<Option<&Case>> = match suite.notebook {
                Some(_) => vec![None],
                None => suite.cases.iter().map(Some).collect(),
            };
            cases
                .into_iter()
                .flat_map(move |case| (1..=repeat).map(move |n| (suite, case, n)))
        });
        let concurrency = effective_concurrency(options.concurrency, &variant.config);
        let cellvisor_ref = &cellvisor;
        let run_tag = run_id();
        let run_tag = run_tag.as_str();
        let mut running = futures::stream::iter(jobs.enumerate())
            .map(|(index, (suite, case, n))| async move {
                let Some(case) = case else {
                    let session = session_name(run_tag, index, &suite.name, "notebook");
                    return notebook_run::run(cellvisor_ref, &variant.name, suite, n, session)
                        .await;
                };
                let session = session_name(run_tag, index, &suite.name, &case.id);
                let job = Job {
                    variant: &variant.name,
                    suite,
                    case,
                    repeat: n,
                };
                vec![run_case(cellvisor_ref, job, session).await]
            })
            .buffer_unordered(concurrency);
        let mut failure = None;
        'jobs: while let Some(results) = running.next().await {
            for mut result in results {
                if let Some(out) = &options.out {
                    let dir = artifacts::case_dir(out, &result, repeat, namespaced);
                    result.artifact_dir = Some(dir.clone());
                    result.artifacts = Some(Artifacts::in_dir(&dir, &result));
                    if let Err(source) = artifacts::write_case(&dir, &result) {
                        failure = Some(RunError::Artifacts { path: dir, source });
                        break 'jobs;
                    }
                    let anchor = artifacts::anchor_dir(out, &result, repeat, namespaced);
                    if anchor != dir {
                        if let Err(source) = artifacts::write_case(&anchor, &result) {
                            failure = Some(RunError::Artifacts {
                                path: anchor,
                                source,
                            });
                            break 'jobs;
                        }
                    }
                }
                on_case(result);
            }
        }
        drop(running);
        cellvisor.shutdown().await;
        if let Some(failure) = failure {
            return Err(failure);
        }
    }
    Ok(())
}

/// The cases run at once: `requested`, at least 1, at most the variant's session cap (a case
/// holds one session per language it uses; more would evict one another's workers).
pub fn effective_concurrency(requested: usize, config: &Config) -> usize {
    requested.clamp(1, config.sessions.max_sessions.max(1))
}

/// A session name that no other run or case uses (a session's code-mode store outlives it,
/// keyed by its name) and that still says which case it is.
pub(super) fn session_name(run_tag: &str, index: usize, suite: &str, id: &str) -> String {
    let slug: String = format!("{suite}-{id}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("check-{run_tag}-{index}-{slug}");
    name.truncate(cellvisor::MAX_SESSION_NAME);
    name
}

/// A short id for this run: the process id and the clock, in hex.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    format!("{:x}{:x}", std::process::id(), nanos)
}

/// Runs a request, stamping each event as it arrives.
pub(super) async fn eval_timed(
    cellvisor: &Cellvisor,
    request: EvalRequest,
    phase: &'static str,
    started: Instant,
    timed: &mut Vec<TimedEvent>,
) -> Result<EvalResult, RequestError> {
    let (sender, mut receiver) = mpsc::channel(256);
    let mut stamp = |event: CellEvent| {
        // A value's bundle is Jupyter's alone: the check's events are those a host gets.
        if matches!(event, CellEvent::Value { .. }) {
            return;
        }
        timed.push(TimedEvent {
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            phase,
            event,
        })
    };
    let eval = cellvisor.eval(request, Some(sender));
    tokio::pin!(eval);
    let result = loop {
        tokio::select! {
            result = &mut eval => break result,
            Some(event) = receiver.recv() => stamp(event),
        }
    };
    while let Ok(event) = receiver.try_recv() {
        stamp(event);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_bounded_by_the_session_cap() {
        let mut config = Config::default();
        config.sessions.max_sessions = 3;
        assert_eq!(effective_concurrency(0, &config), 1);
        assert_eq!(effective_concurrency(2, &config), 2);
        assert_eq!(effective_concurrency(10, &config), 3);
    }

    #[test]
    fn session_names_are_valid_and_bounded() {
        let name = session_name("ab12", 7, "py plots", &"x/".repeat(100));
        assert!(name.starts_with("check-ab12-7-py_plots-x_x_"), "{name}");
        assert_ne!(run_id(), "");
        assert!(name.len() <= cellvisor::MAX_SESSION_NAME);
    }
}
