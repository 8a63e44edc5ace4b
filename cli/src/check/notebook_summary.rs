//! Notebooks in the run summary: one row per notebook run with its match rate (cells whose
//! outputs match the stored ones, out of its code cells) and each mismatching cell with its
//! short diff; and which runs fall below `--fail-under`.

use super::run::CaseResult;
use super::summary::RunSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One notebook run under one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotebookRow {
    pub variant: String,
    /// The suite name: the notebook's file stem (its path when two share one).
    pub suite: String,
    pub path: String,
    pub repeat: u32,
    /// Code cells run (blank ones are not counted).
    pub code_cells: usize,
    /// Cells whose outputs match the stored ones.
    pub matching: usize,
    /// matching / code_cells, 0..1 (1 for a notebook without code cells).
    pub match_rate: f64,
    /// Cells that could not be run as written (no workspace, a refused request).
    pub incomplete: usize,
    /// Summed wall-clock time of its cells.
    pub duration_ms: f64,
    pub mismatches: Vec<Mismatch>,
}

/// A cell whose outputs differ from the stored ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The case id (`cell-007`).
    pub id: String,
    /// 1-based among the notebook's code cells.
    pub number: usize,
    /// `In [N]` as the notebook stored it.
    pub execution_count: Option<i64>,
    /// What differs, and the short diff (or why the cell could not run).
    pub details: String,
}

/// The notebook rows of case results given in any order, sorted by variant, notebook and
/// repeat.
pub fn rows(results: &[CaseResult]) -> Vec<NotebookRow> {
    let mut runs: BTreeMap<(&str, &str, u32), Vec<&CaseResult>> = BTreeMap::new();
    for result in results {
        if result.case.notebook.is_some() {
            runs.entry((&result.variant, &result.suite, result.repeat))
                .or_default()
                .push(result);
        }
    }
    runs.into_iter()
        .map(|((variant, suite, repeat), mut cells)| {
            cells.sort_by(|a, b| a.id.cmp(&b.id));
            let code_cells = cells.len();
            let matching = cells.iter().filter(|c| c.passed).count();
            let path = cells
                .first()
                .and_then(|c| c.case.notebook.as_ref())
                .map(|n| n.notebook.display().to_string())
                .unwrap_or_default();
            NotebookRow {
                variant: variant.to_string(),
                suite: suite.to_string(),
                path,
                repeat,
                code_cells,
                matching,
                match_rate: if code_cells == 0 {
                    1.0
                } else {
                    matching as f64 / code_cells as f64
                },
                incomplete: cells.iter().filter(|c| !c.completed).count(),
                duration_ms: cells.iter().map(|c| c.duration_ms).sum(),
                mismatches: cells
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| Mismatch {
                        id: c.id.clone(),
                        number: c.case.notebook.as_ref().map_or(0, |n| n.number),
                        execution_count: c.case.notebook.as_ref().and_then(|n| n.execution_count),
                        details: c
                            .scores
                            .iter()
                            .filter(|s| !s.passed)
                            .map(|s| s.details.as_str())
                            .collect::<Vec<_>>()
                            .join("\n"),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The runs under `bar`, named for stderr: a case scored below it, or a notebook whose match
/// rate is below it (a notebook's cells are judged together, not one by one).
pub fn below_bar(summary: &RunSummary, bar: f64) -> Vec<String> {
    let notebooks: Vec<&str> = summary.notebooks.iter().map(|n| n.suite.as_str()).collect();
    let cases = summary
        .cases
        .iter()
        .filter(|c| !notebooks.contains(&c.suite.as_str()) && c.score < bar)
        .map(|c| format!("{}/{} ({:.2})", c.suite, c.id, c.score));
    let notebooks = summary
        .notebooks
        .iter()
        .filter(|n| n.match_rate < bar)
        .map(|n| format!("notebook {} ({:.2})", n.path, n.match_rate));
    cases.chain(notebooks).collect()
}
