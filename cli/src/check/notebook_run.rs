//! Replaying a notebook: its code cells run in order in one session (state carried from cell
//! to cell, as in a kernel) in one fresh working directory seeded with the notebook's
//! directory; every cell runs whatever the cells before it did (an error does not skip the
//! rest, as a notebook's stored outputs were made cell by cell), and each becomes a case
//! result scored by [`super::cell_match`].

use super::case_run::CaseStatus;
use super::cell_match::{self, Actual};
use super::metrics::{self, Measured};
use super::run::{eval_timed, CaseResult, TimedEvent};
use super::scorer::ScoreOutcome;
use super::suite::{Case, Suite};
use super::trajectory;
use super::workspace::WorkspaceSnapshot;
use cellvisor::cell::{CellResult, CellStatus, EvalRequest};
use cellvisor::Cellvisor;
use std::path::Path;
use std::time::{Instant, SystemTime};

/// Bytes of the notebook's directory copied into its working directory; files past it are
/// left out (and said so in every cell's result that fails).
pub const SEED_BYTES: u64 = 256 * 1024 * 1024;

/// Runs every cell of the notebook `suite` in the session `session`; one result per cell.
pub async fn run(
    cellvisor: &Cellvisor,
    variant: &str,
    suite: &Suite,
    repeat: u32,
    session: String,
) -> Vec<CaseResult> {
    let dir = suite.notebook.as_ref().map(|n| n.dir.as_path());
    let workspace = tempfile::Builder::new()
        .prefix("cellvisor-notebook-")
        .tempdir()
        .map_err(|e| format!("cannot create a workspace: {e}"))
        .and_then(|w| match dir {
            Some(dir) => seed(dir, w.path()).map(|_| w),
            None => Ok(w),
        });
    let mut results = Vec::with_capacity(suite.cases.len());
    let workspace = match workspace {
        Ok(workspace) => workspace,
        Err(reason) => {
            for case in &suite.cases {
                let cell = CellResult::skipped(0, 0, &case.cells[0]);
                let result = result_of(variant, suite, case, repeat, Outcome::start());
                results.push(could_not_run(result, cell, &reason));
            }
            return results;
        }
    };
    for case in &suite.cases {
        let mut outcome = Outcome::start();
        let request = EvalRequest {
            session: session.clone(),
            cwd: Some(workspace.path().to_path_buf()),
            cells: case.cells.clone(),
            ..Default::default()
        };
        let ran = eval_timed(
            cellvisor,
            request,
            "cells",
            outcome.started,
            &mut outcome.events,
        )
        .await;
        let result = match ran {
            Ok(mut ran) if !ran.cells.is_empty() => {
                let cell = ran.cells.remove(0);
                let actual = Actual::observe(&cell, &outcome.events);
                outcome.cells.push(cell);
                let mut result = result_of(variant, suite, case, repeat, outcome);
                score(&mut result, case, &actual);
                result
            }
            Ok(_) => {
                let cell = CellResult::skipped(0, 0, &case.cells[0]);
                let result = result_of(variant, suite, case, repeat, outcome);
                could_not_run(result, cell, "the request returned no cell")
            }
            Err(err) => {
                let cell = CellResult::skipped(0, 0, &case.cells[0]);
                let result = result_of(variant, suite, case, repeat, outcome);
                could_not_run(result, cell, &format!("cell refused: {err}"))
            }
        };
        results.push(result);
    }
    let _ = cellvisor.close(&session, None).await;
    let store = cellvisor::SessionName::parse(&session)
        .map(|name| cellvisor::paths::session_store_dir(&name));
    if let Some(store) = store.ok().filter(|store| store.exists()) {
        let _ = std::fs::remove_dir_all(store);
    }
    results
}

/// What running one cell gathered.
struct Outcome {
    started: Instant,
    started_at: String,
    events: Vec<TimedEvent>,
    cells: Vec<CellResult>,
}

impl Outcome {
    fn start() -> Outcome {
        Outcome {
            started: Instant::now(),
            started_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            events: Vec::new(),
            cells: Vec::new(),
        }
    }
}

/// The cell's case result before it is scored.
fn result_of(
    variant: &str,
    suite: &Suite,
    case: &Case,
    repeat: u32,
    outcome: Outcome,
) -> CaseResult {
    let status = outcome
        .cells
        .first()
        .map_or(CellStatus::Error, |c| c.report.status)
        .into();
    let trajectory = trajectory::build(&outcome.events, &[], &outcome.cells);
    CaseResult {
        variant: variant.to_string(),
        suite: suite.name.clone(),
        id: case.id.clone(),
        repeat,
        tags: case.tags.clone(),
        passed: false,
        completed: true,
        score: 0.0,
        status,
        duration_ms: outcome.started.elapsed().as_secs_f64() * 1000.0,
        started_at: outcome.started_at,
        scores: Vec::new(),
        metrics: Vec::new(),
        tag_scores: Default::default(),
        error: None,
        artifact_dir: None,
        artifacts: None,
        trajectory_line: trajectory::line(&trajectory),
        trajectory,
        case: case.clone(),
        setup: Vec::new(),
        cells: outcome.cells,
        workspace: WorkspaceSnapshot::default(),
        events: outcome.events,
    }
}

/// Scores a cell that ran: one `notebook.outputs` scorer, 1 when every facet matches.
fn score(result: &mut CaseResult, case: &Case, actual: &Actual) {
    let Some(cell) = &case.notebook else { return };
    let verdict = cell_match::compare(&cell.expected, actual);
    let details = if verdict.matched() {
        "matches the stored outputs".to_string()
    } else {
        format!("{} differ\n{}", verdict.differs.join(", "), verdict.diff)
    };
    result.scores = vec![ScoreOutcome::binary(
        cell_match::SCORER.into(),
        verdict.matched(),
        details,
    )];
    finish(result);
}

/// A cell that could not be run as written (no workspace, a refused request): it fails the
/// run (exit status 1), as a case whose setup failed does.
fn could_not_run(mut result: CaseResult, cell: CellResult, reason: &str) -> CaseResult {
    result.error = Some(reason.to_string());
    result.completed = false;
    result.status = CaseStatus::Error;
    result.scores = vec![ScoreOutcome::binary(
        "setup".into(),
        false,
        reason.to_string(),
    )];
    if result.cells.is_empty() {
        result.cells.push(cell);
    }
    finish(&mut result);
    result
}

/// Metrics, score and tags from the scores set.
fn finish(result: &mut CaseResult) {
    let measured = Measured {
        cells: &result.cells,
        scores: &result.scores,
        total_ms: result.duration_ms,
        emitted: &Default::default(),
    };
    // A notebook declares no metrics: only the efficiency ones, always finite.
    result.metrics = metrics::evaluate(&result.case.metrics, &measured).unwrap_or_default();
    result.score = metrics::case_score(&result.scores, &result.metrics);
    result.passed = result.scores.iter().all(|s| s.passed);
    result.tag_scores = metrics::tag_scores(&result.case.tags, result.score, &result.metrics);
}

/// Copies the notebook's directory into `to`: files and directories, not symbolic links
/// (a cell could write through one out of its workspace) nor hidden entries (`.git`,
/// `.ipynb_checkpoints`), up to [`SEED_BYTES`] in all.
fn seed(from: &Path, to: &Path) -> Result<(), String> {
    let mut budget = SEED_BYTES;
    let walker = walkdir::WalkDir::new(from)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let entry = entry.map_err(|e| format!("cannot read the notebook's directory: {e}"))?;
        let kind = entry.file_type();
        if kind.is_symlink() {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(from) else {
            continue;
        };
        let target = to.join(relative);
        if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .map_err(|e| format!("cannot seed the workspace: {}: {e}", relative.display()))?;
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        if size > budget {
            continue;
        }
        budget -= size;
        std::fs::copy(entry.path(), &target)
            .map_err(|e| format!("cannot seed the workspace: {}: {e}", relative.display()))?;
    }
    Ok(())
}
