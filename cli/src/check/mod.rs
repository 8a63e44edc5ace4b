//! `cellvisor check`: scored suites of cells. A suite's cases run in fresh workspaces on an
//! embedded supervisor per variant; scorers and metrics grade each case; the run is written
//! as per-case artifacts and a summary (`docs/check.md`).
//!
//! - [`suite`]: case files (TOML or JSON) and their errors with positions, [`case_fields`]
//!   for a case's workspace options, timeout and judge metrics; [`notebook`] reads an
//!   `.ipynb` file as a suite of its code cells.
//! - [`scorer`]: the scorer kinds, graded on plain data; [`file_scorers`] for those that
//!   read the workspace, [`judge`] for an external command that grades a case.
//! - [`metrics`]: declared and efficiency metrics, normalization, case and tag scores,
//!   statistics.
//! - [`trajectory`]: what a case's cells did, in order, with durations.
//! - [`workspace`]: a case's seeded temporary directory and its capture.
//! - [`run`]: running the cases (variants, repeat, concurrency, timed events);
//!   [`case_run`] one case under its wall-clock limit, scored only when it completed;
//!   [`notebook_run`] replays a notebook's cells in one session.
//! - [`cell_match`]: a replayed notebook cell against its stored outputs, [`normalise`]d.
//! - [`artifacts`]: the files a run leaves under `--out`.
//! - [`summary`]: the run summary (`summary.json`, `--json`).
//! - [`report`]: the summary as a terminal table, [`report_color`] its colours.

pub mod artifacts;
pub mod case_fields;
pub mod case_run;
pub mod cell_match;
pub mod file_scorers;
pub mod judge;
pub mod metrics;
pub mod normalise;
pub mod notebook;
pub mod notebook_run;
pub mod notebook_summary;
#[cfg(test)]
mod properties;
pub mod report;
pub mod report_color;
pub mod run;
pub mod scorer;
pub mod suite;
pub mod summary;
pub mod trajectory;
pub mod workspace;

pub use run::{run, RunOptions, Variant};
pub use suite::Suite;
pub use summary::summarize;

/// Cells and results for the unit tests of the check modules.
#[cfg(test)]
pub(crate) mod fixtures {
    use cellvisor::cell::{CellResult, CellSpec, CellStatus};

    /// A cell as a case file gives it (read from JSON, so every optional field has its
    /// default).
    pub fn cell_spec(language: &str, code: &str) -> CellSpec {
        serde_json::from_value(serde_json::json!({"language": language, "code": code}))
            .expect("a valid cell")
    }

    /// The result of a completed cell that printed `output` in `duration_ms`.
    pub fn completed(output: &str, duration_ms: f64) -> CellResult {
        let mut cell = CellResult::skipped(0, 0, &cell_spec("py", ""));
        cell.report.status = CellStatus::Complete;
        cell.report.output = output.into();
        cell.report.duration_ms = duration_ms;
        cell
    }
}
