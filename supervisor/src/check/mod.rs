//! `cellvisor check`: scored suites of cells. A suite's cases run in fresh workspaces on an
//! embedded supervisor per variant; scorers and metrics grade each case; the run is written
//! as per-case artifacts and a summary (`docs/check.md`).
//!
//! - [`suite`]: case files (TOML or JSON) and their errors with positions.
//! - [`scorer`]: the scorer kinds, graded on plain data.
//! - [`metrics`]: declared metrics, normalization, per-tag scores, statistics.
//! - [`workspace`]: a case's seeded temporary directory and its capture.
//! - [`run`]: running the cases (variants, repeat, concurrency, timed events).
//! - [`artifacts`]: the files a run leaves under `--out`.
//! - [`summary`]: the run summary (`summary.json`, `--json`).
//! - [`report`]: the summary as a terminal table.

pub mod artifacts;
pub mod metrics;
pub mod report;
pub mod run;
pub mod scorer;
pub mod suite;
pub mod summary;
pub mod workspace;

pub use run::{run, CaseResult, RunError, RunOptions, Variant};
pub use suite::{Case, Suite, SuiteError};
pub use summary::{summarize, RunSummary};
