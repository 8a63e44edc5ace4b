//! One run of one case: its fresh workspace, its setup and cells under the case's wall-clock
//! limit, its scorers (judges last), its metrics, and how it ended.
//!
//! A case is scored on complete runs only, as the anchor's runner resolves a run that did not
//! complete with `passed = false`: a case whose cells ran past its `timeout_ms` ends with
//! status `timeout`, and one whose cell went to the background (its `yield_time_ms` passed,
//! or it called `yield_control()`) ends `running`; neither is scored on its partial output.

use super::judge::{self, JudgeInput};
use super::metrics::{self, Measured};
use super::run::{eval_timed, CaseResult, TimedEvent};
use super::scorer::{
    request_status, unexpected_status, Observation, ScoreOutcome, Scorer, STATUS_COMPLETED,
};
use super::suite::{Case, Suite};
use super::trajectory;
use super::workspace::{self, WorkspaceSnapshot};
use cellvisor::cell::{CellResult, CellSpec, CellStatus, EvalRequest};
use cellvisor::Cellvisor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// How a case run ended: its cells' status, or `timeout` when the case ran past its
/// `timeout_ms` (the anchor's status for a run aborted on its wall-clock cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseStatus {
    Complete,
    Error,
    Cancelled,
    Skipped,
    /// A cell went to the background before it ended.
    Running,
    /// The case ran past its `timeout_ms`; its cells were stopped.
    Timeout,
}

impl From<CellStatus> for CaseStatus {
    fn from(status: CellStatus) -> CaseStatus {
        match status {
            CellStatus::Complete => CaseStatus::Complete,
            CellStatus::Error => CaseStatus::Error,
            CellStatus::Cancelled => CaseStatus::Cancelled,
            CellStatus::Skipped => CaseStatus::Skipped,
            CellStatus::Running => CaseStatus::Running,
        }
    }
}

impl std::fmt::Display for CaseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CaseStatus::Complete => "complete",
            CaseStatus::Error => "error",
            CaseStatus::Cancelled => "cancelled",
            CaseStatus::Skipped => "skipped",
            CaseStatus::Running => "running",
            CaseStatus::Timeout => "timeout",
        })
    }
}

/// One run of one case: which, under which variant.
#[derive(Clone, Copy)]
pub(super) struct Job<'a> {
    pub variant: &'a str,
    pub suite: &'a Suite,
    pub case: &'a Case,
    pub repeat: u32,
}

/// Why a case could not be scored as written: the scorer it fails on, why, and its status.
struct Failure {
    scorer: &'static str,
    reason: String,
    status: CaseStatus,
}

impl Failure {
    fn setup(reason: String) -> Failure {
        Failure {
            scorer: "setup",
            reason,
            status: CaseStatus::Error,
        }
    }
}

/// What the case's requests left: every timed event, the cells' results, and a failure.
#[derive(Default)]
struct Phases {
    events: Vec<TimedEvent>,
    setup: Vec<CellResult>,
    cells: Vec<CellResult>,
    failure: Option<Failure>,
}

pub(super) async fn run_case(cellvisor: &Cellvisor, job: Job<'_>, session: String) -> CaseResult {
    let case = job.case;
    let started = Instant::now();
    let started_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let mut phases = Phases::default();
    let mut snapshot = WorkspaceSnapshot::default();
    let mut scores = Vec::new();
    let mut emitted = BTreeMap::new();
    match workspace::prepare(case.workspace.as_deref(), case.seed_target.as_deref()) {
        Err(err) => phases.failure = Some(Failure::setup(err.to_string())),
        Ok(dir) => {
            let limit = case
                .timeout_ms
                .map(|ms| Duration::from_secs_f64(ms / 1000.0));
            let requests =
                run_requests(cellvisor, case, &session, dir.path(), started, &mut phases);
            let timed_out = match limit {
                // Dropping the requests stops their cells; the close below ends the session.
                Some(limit) => tokio::time::timeout(limit, requests).await.is_err(),
                None => {
                    requests.await;
                    false
                }
            };
            if let (true, Some(ms)) = (timed_out, case.timeout_ms) {
                phases.failure = Some(Failure {
                    scorer: STATUS_COMPLETED,
                    reason: format!(
                        "the case ran past its timeout_ms of {ms} ms: its cells were stopped \
                         and it is not scored on their partial output"
                    ),
                    status: CaseStatus::Timeout,
                });
            }
            if phases.failure.is_none() {
                phases.failure = went_to_background(&phases.cells);
            }
            let _ = cellvisor.close(&session, None).await;
            // The store of a session outlives it; a case's is the case's alone.
            let store = cellvisor::SessionName::parse(&session)
                .map(|name| cellvisor::paths::session_store_dir(&name));
            if let Some(store) = store.ok().filter(|store| store.exists()) {
                let _ = std::fs::remove_dir_all(store);
            }
            snapshot = workspace::capture(dir.path(), &case.capture);
            if phases.failure.is_none() {
                // Judges run in the workspace, so it lives until they are done.
                (scores, emitted) =
                    score_case(job, &phases.setup, &phases.cells, &snapshot, dir.path()).await;
            }
            if case.retain {
                // Kept on disk (its path is `workspace.cwd`), as the case asked.
                let _ = dir.keep();
            }
        }
    }
    let Phases {
        events,
        setup,
        cells,
        failure,
    } = phases;
    if let Some(failure) = &failure {
        scores = vec![ScoreOutcome::binary(
            failure.scorer.into(),
            false,
            failure.reason.clone(),
        )];
    }
    let unexpected = failure
        .is_none()
        .then(|| unexpected_status(&case.scorers, &cells));
    let mut completed = matches!(unexpected, Some(None));
    scores.extend(unexpected.flatten());
    let measured = Measured {
        cells: &cells,
        scores: &scores,
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
        emitted: &emitted,
    };
    let mut error = failure.as_ref().map(|f| f.reason.clone());
    let metric_values = match metrics::evaluate(&case.metrics, &measured) {
        Ok(values) => values,
        Err(not_finite) => {
            // An authoring error, as the anchor's EvalMetricError: the case fails, named.
            let reason = not_finite.to_string();
            scores.push(ScoreOutcome::binary(
                "metrics".into(),
                false,
                reason.clone(),
            ));
            error.get_or_insert(reason);
            completed = false;
            Vec::new()
        }
    };
    let score = metrics::case_score(&scores, &metric_values);
    let trajectory = trajectory::build(&events, &setup, &cells);
    let status = match &failure {
        Some(failure) => failure.status,
        None => request_status(&cells).into(),
    };
    CaseResult {
        variant: job.variant.to_string(),
        suite: job.suite.name.clone(),
        id: case.id.clone(),
        repeat: job.repeat,
        tags: case.tags.clone(),
        passed: scores.iter().all(|s| s.passed),
        completed,
        score,
        status,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        started_at,
        tag_scores: metrics::tag_scores(&case.tags, score, &metric_values),
        scores,
        metrics: metric_values,
        error,
        artifact_dir: None,
        artifacts: None,
        trajectory_line: trajectory::line(&trajectory),
        trajectory,
        case: case.clone(),
        setup,
        cells,
        workspace: snapshot,
        events,
    }
}

/// Runs the setup, then (if it passed) the cells, each as one request in the case's session.
async fn run_requests(
    cellvisor: &Cellvisor,
    case: &Case,
    session: &str,
    dir: &Path,
    started: Instant,
    phases: &mut Phases,
) {
    let request = |cells: &[CellSpec]| EvalRequest {
        session: session.to_string(),
        cwd: Some(dir.to_path_buf()),
        cells: cells.to_vec(),
        tools: Vec::new(),
        ..Default::default()
    };
    if !case.setup.is_empty() {
        match eval_timed(
            cellvisor,
            request(&case.setup),
            "setup",
            started,
            &mut phases.events,
        )
        .await
        {
            Ok(result) => {
                if result.is_error {
                    phases.failure = Some(Failure::setup(setup_failure(&result.cells)));
                }
                phases.setup = result.cells;
            }
            Err(err) => phases.failure = Some(Failure::setup(format!("setup refused: {err}"))),
        }
    }
    if phases.failure.is_none() {
        match eval_timed(
            cellvisor,
            request(&case.cells),
            "cells",
            started,
            &mut phases.events,
        )
        .await
        {
            Ok(result) => phases.cells = result.cells,
            Err(err) => phases.failure = Some(Failure::setup(format!("cells refused: {err}"))),
        }
    }
}

/// A cell under test that went to the background: the run did not complete, so the case is
/// not scored on the output it had so far.
fn went_to_background(cells: &[CellResult]) -> Option<Failure> {
    let cell = cells
        .iter()
        .find(|c| c.report.status == CellStatus::Running)?;
    Some(Failure {
        scorer: STATUS_COMPLETED,
        reason: format!(
            "cell {} ({}) went to the background before it ended (its yield_time_ms passed or \
             it called yield_control()): the run did not complete, and a case is not scored \
             on partial output; a check case runs its cells to their end without either",
            cell.index, cell.language
        ),
        status: CaseStatus::Running,
    })
}

/// Every scorer of a case, in order: the plain ones on what was observed, then each judge
/// with the case (and those verdicts) on its stdin, in the workspace. With them, the metric
/// values the judges emitted (a judge's `metric`), by id.
async fn score_case(
    job: Job<'_>,
    setup: &[CellResult],
    cells: &[CellResult],
    snapshot: &WorkspaceSnapshot,
    dir: &Path,
) -> (Vec<ScoreOutcome>, BTreeMap<String, f64>) {
    let seen = Observation {
        cells,
        workspace: snapshot,
    };
    let mut scores: Vec<Option<ScoreOutcome>> = job
        .case
        .scorers
        .iter()
        .map(|s| (!matches!(s, Scorer::Judge { .. })).then(|| s.score(&seen)))
        .collect();
    let plain: Vec<ScoreOutcome> = scores.iter().flatten().cloned().collect();
    let mut emitted = BTreeMap::new();
    for (slot, scorer) in scores.iter_mut().zip(&job.case.scorers) {
        let Scorer::Judge {
            command,
            rubric,
            timeout,
            threshold,
            metric,
            ..
        } = scorer
        else {
            continue;
        };
        let input = JudgeInput {
            variant: job.variant,
            suite: &job.suite.name,
            id: &job.case.id,
            description: job.case.description.as_deref(),
            tags: &job.case.tags,
            rubric: rubric.as_deref(),
            status: request_status(cells),
            case_cells: &job.case.cells,
            setup,
            cells,
            workspace: snapshot,
            scores: &plain,
        };
        let (outcome, graded) = match serde_json::to_vec(&input) {
            Ok(input) => {
                judge::score(scorer.name(), command, &input, dir, *timeout, *threshold).await
            }
            Err(err) => (
                ScoreOutcome::binary(
                    scorer.name(),
                    false,
                    format!("judge failed: cannot write its input: {err}"),
                ),
                None,
            ),
        };
        // A judge that gave no grade emits nothing: its metric is recorded as missing.
        if let (Some(metric), Some(graded)) = (metric, graded) {
            emitted.insert(metric.clone(), graded);
        }
        *slot = Some(outcome);
    }
    (scores.into_iter().flatten().collect(), emitted)
}

/// What a failed setup says: the failing cell's index and output.
fn setup_failure(cells: &[CellResult]) -> String {
    match cells.iter().find(|c| c.report.status.failed()) {
        Some(cell) => format!(
            "setup cell {} ended {}: {}",
            cell.index,
            cell.report.status,
            cell.report.output.trim_end()
        ),
        None => "setup failed".into(),
    }
}
