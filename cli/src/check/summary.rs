//! The run summary: counts, pass rate, scores, durations, per-metric statistics, per-tag
//! scores, and per-variant rollups with a side-by-side comparison.

use super::metrics::{mean, Direction, MetricStats, MetricValue};
use super::notebook_summary::{self, NotebookRow};
use super::run::CaseResult;
use super::scorer::ScoreOutcome;
use super::trajectory::Trajectory;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What `summary.json` holds and `--json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    #[serde(flatten)]
    pub totals: Totals,
    /// One row per case run, sorted by variant, suite, id and repeat.
    pub cases: Vec<CaseRow>,
    /// The totals of each variant, in the order they ran.
    pub variants: Vec<VariantSummary>,
    /// Each case's score per variant, side by side, with the difference to the first variant.
    pub comparison: Option<Comparison>,
    /// One row per notebook run, with its match rate and mismatching cells.
    #[serde(default)]
    pub notebooks: Vec<NotebookRow>,
}

/// Aggregates over a set of case runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub count: usize,
    pub passed: usize,
    pub failed: usize,
    /// Case runs that did not run as written (an `error`, or cells that raised, timed out or
    /// were cancelled without the case declaring it): these fail the run.
    pub incomplete: usize,
    /// passed / count, 0..1.
    pub pass_rate: f64,
    /// Mean case score.
    pub score: f64,
    /// Summed wall-clock time of the cases.
    pub duration_ms: f64,
    pub metrics: Vec<MetricAggregate>,
    /// Mean normalized score per tag.
    pub tag_scores: BTreeMap<String, f64>,
}

/// One metric across case runs (the anchor's `EvalRunMetricAggregate`, with counts):
/// statistics of the raw values and of the normalized scores over the runs that yielded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricAggregate {
    pub id: String,
    pub direction: Direction,
    /// The metric's tags (from its spec).
    pub tags: Vec<String>,
    /// Case runs that yielded a value.
    pub count: usize,
    /// Case runs that declared the metric but yielded no value (they score 0).
    pub missing: usize,
    /// `None` when no run yielded it.
    pub raw: Option<MetricStats>,
    pub normalized: Option<MetricStats>,
    /// Mean normalized value over every run that has the metric, missing ones as 0.
    pub score: f64,
}

/// One case run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseRow {
    pub variant: String,
    pub suite: String,
    pub id: String,
    pub repeat: u32,
    pub passed: bool,
    /// The case ran as written ([`CaseResult::completed`]).
    pub completed: bool,
    pub score: f64,
    pub status: String,
    pub duration_ms: f64,
    pub failed_scorers: Vec<String>,
    /// The scorers that failed, with why.
    pub failures: Vec<ScoreOutcome>,
    /// Every scorer's result, passed or not.
    pub scores: Vec<ScoreOutcome>,
    /// The case's metrics, normalized.
    pub metrics: Vec<MetricValue>,
    pub error: Option<String>,
    pub tag_scores: BTreeMap<String, f64>,
    /// What the cells did, in order.
    pub trajectory: Trajectory,
    /// The trajectory in one line.
    pub trajectory_line: String,
    pub artifact_dir: Option<String>,
}

/// The totals of one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    pub variant: String,
    #[serde(flatten)]
    pub totals: Totals,
}

/// Cases side by side across variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Column order; the first is the baseline differences are taken against.
    pub variants: Vec<String>,
    pub rows: Vec<ComparisonRow>,
}

/// One case (all its repeats) across variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub suite: String,
    pub id: String,
    /// One per variant, in [`Comparison::variants`] order; `None` when the variant did not
    /// run the case.
    pub cells: Vec<Option<ComparisonCell>>,
    /// Last variant's mean score minus the first's.
    pub difference: Option<f64>,
}

/// A case's repeats under one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonCell {
    pub runs: usize,
    pub passed: usize,
    pub score: f64,
    pub duration_ms: f64,
}

/// Builds the summary of case results given in any order.
pub fn summarize(results: &[CaseResult]) -> RunSummary {
    let mut sorted: Vec<&CaseResult> = results.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.variant, &a.suite, &a.id, a.repeat).cmp(&(&b.variant, &b.suite, &b.id, b.repeat))
    });
    let variant_names = variants_in_order(results);
    let variants = variant_names
        .iter()
        .map(|name| VariantSummary {
            variant: name.clone(),
            totals: totals(sorted.iter().copied().filter(|r| &r.variant == name)),
        })
        .collect();
    let comparison = (variant_names.len() > 1).then(|| compare(&sorted, variant_names));
    RunSummary {
        totals: totals(sorted.iter().copied()),
        cases: sorted.iter().map(|r| row(r)).collect(),
        variants,
        comparison,
        notebooks: notebook_summary::rows(results),
    }
}

/// Variant names in the order they ran.
fn variants_in_order(results: &[CaseResult]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for result in results {
        if !names.contains(&result.variant) {
            names.push(result.variant.clone());
        }
    }
    names
}

fn totals<'a>(results: impl Iterator<Item = &'a CaseResult>) -> Totals {
    let results: Vec<&CaseResult> = results.collect();
    let count = results.len();
    let passed = results.iter().filter(|r| r.passed).count();
    let mut raw: BTreeMap<&str, MetricRuns> = BTreeMap::new();
    let mut tags: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for result in &results {
        for metric in &result.metrics {
            let entry = raw.entry(&metric.id).or_insert_with(|| MetricRuns {
                direction: metric.direction,
                tags: metric.tags.clone(),
                ..MetricRuns::default()
            });
            if metric.missing {
                entry.missing += 1;
            } else {
                entry.raw.push(metric.raw);
                entry.normalized.push(metric.normalized);
            }
            entry.scores.push(metric.normalized);
        }
        for (tag, score) in &result.tag_scores {
            tags.entry(tag).or_default().push(*score);
        }
    }
    Totals {
        count,
        passed,
        failed: count - passed,
        incomplete: results.iter().filter(|r| !r.completed).count(),
        pass_rate: if count == 0 {
            0.0
        } else {
            passed as f64 / count as f64
        },
        score: mean(&results.iter().map(|r| r.score).collect::<Vec<_>>()),
        duration_ms: results.iter().map(|r| r.duration_ms).sum(),
        metrics: raw
            .into_iter()
            .map(|(id, runs)| MetricAggregate {
                id: id.to_string(),
                direction: runs.direction,
                tags: runs.tags,
                count: runs.raw.len(),
                missing: runs.missing,
                raw: MetricStats::of(&runs.raw),
                normalized: MetricStats::of(&runs.normalized),
                score: mean(&runs.scores),
            })
            .collect(),
        tag_scores: tags
            .into_iter()
            .map(|(tag, scores)| (tag.to_string(), mean(&scores)))
            .collect(),
    }
}

/// One metric's values across the runs that have it.
struct MetricRuns {
    direction: Direction,
    tags: Vec<String>,
    raw: Vec<f64>,
    normalized: Vec<f64>,
    /// Every run's normalized value, missing ones as 0.
    scores: Vec<f64>,
    missing: usize,
}

impl Default for MetricRuns {
    fn default() -> MetricRuns {
        MetricRuns {
            direction: Direction::Lower,
            tags: Vec::new(),
            raw: Vec::new(),
            normalized: Vec::new(),
            scores: Vec::new(),
            missing: 0,
        }
    }
}

fn row(result: &CaseResult) -> CaseRow {
    CaseRow {
        variant: result.variant.clone(),
        suite: result.suite.clone(),
        id: result.id.clone(),
        repeat: result.repeat,
        passed: result.passed,
        completed: result.completed,
        score: result.score,
        status: result.status.to_string(),
        duration_ms: result.duration_ms,
        failed_scorers: result.failed_scorers().map(str::to_string).collect(),
        failures: result
            .scores
            .iter()
            .filter(|s| !s.passed)
            .cloned()
            .collect(),
        scores: result.scores.clone(),
        metrics: result.metrics.clone(),
        error: result.error.clone(),
        tag_scores: result.tag_scores.clone(),
        trajectory: result.trajectory.clone(),
        trajectory_line: result.trajectory_line.clone(),
        artifact_dir: result
            .artifact_dir
            .as_ref()
            .map(|d| d.display().to_string()),
    }
}

fn compare(sorted: &[&CaseResult], variants: Vec<String>) -> Comparison {
    let mut cases: Vec<(&str, &str)> = sorted
        .iter()
        .map(|r| (r.suite.as_str(), r.id.as_str()))
        .collect();
    cases.sort_unstable();
    cases.dedup();
    let rows = cases
        .into_iter()
        .map(|(suite, id)| {
            let cells: Vec<Option<ComparisonCell>> = variants
                .iter()
                .map(|variant| {
                    let runs: Vec<&&CaseResult> = sorted
                        .iter()
                        .filter(|r| &r.variant == variant && r.suite == suite && r.id == id)
                        .collect();
                    (!runs.is_empty()).then(|| ComparisonCell {
                        runs: runs.len(),
                        passed: runs.iter().filter(|r| r.passed).count(),
                        score: mean(&runs.iter().map(|r| r.score).collect::<Vec<_>>()),
                        duration_ms: mean(&runs.iter().map(|r| r.duration_ms).collect::<Vec<_>>()),
                    })
                })
                .collect();
            let difference = match (cells.first(), cells.last()) {
                (Some(Some(first)), Some(Some(last))) => Some(last.score - first.score),
                _ => None,
            };
            ComparisonRow {
                suite: suite.to_string(),
                id: id.to_string(),
                cells,
                difference,
            }
        })
        .collect();
    Comparison { variants, rows }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::check::suite::Case;
    use crate::check::workspace::WorkspaceSnapshot;
    use cellvisor::cell::CellStatus;

    /// A case result as the runner would make it, for summary and report tests.
    pub(crate) fn result(variant: &str, id: &str, repeat: u32, scores: &[bool]) -> CaseResult {
        let outcomes: Vec<ScoreOutcome> = scores
            .iter()
            .enumerate()
            .map(|(i, &passed)| ScoreOutcome {
                name: format!("scorer{i}"),
                passed,
                score: if passed { 1.0 } else { 0.0 },
                details: String::new(),
            })
            .collect();
        let score = mean(&outcomes.iter().map(|s| s.score).collect::<Vec<_>>());
        let cell = crate::check::fixtures::cell_spec("py", "1");
        CaseResult {
            variant: variant.into(),
            suite: "s".into(),
            id: id.into(),
            repeat,
            tags: vec!["py".into()],
            passed: scores.iter().all(|p| *p),
            completed: true,
            score,
            status: CellStatus::Complete.into(),
            duration_ms: 100.0,
            started_at: String::new(),
            metrics: vec![MetricValue {
                id: "time".into(),
                raw: 10.0 * f64::from(repeat),
                normalized: score,
                min: 0.0,
                max: 100.0,
                direction: Direction::Lower,
                description: None,
                tags: vec!["@speed".into()],
                missing: false,
                declared: true,
            }],
            tag_scores: [("py".to_string(), score)].into_iter().collect(),
            scores: outcomes,
            error: None,
            artifact_dir: None,
            artifacts: None,
            trajectory: Default::default(),
            trajectory_line: String::new(),
            case: Case {
                id: id.into(),
                description: None,
                tags: vec!["py".into()],
                workspace: None,
                seed_target: None,
                retain: false,
                capture: Vec::new(),
                timeout_ms: None,
                setup: Vec::new(),
                cells: vec![cell],
                scorers: Vec::new(),
                metrics: BTreeMap::new(),
                notebook: None,
            },
            setup: Vec::new(),
            cells: Vec::new(),
            workspace: WorkspaceSnapshot::default(),
            events: Vec::new(),
        }
    }

    #[test]
    fn totals_count_scores_and_metric_statistics() {
        let summary = summarize(&[
            result("default", "b", 1, &[true, false]),
            result("default", "a", 1, &[true]),
            result("default", "a", 2, &[true]),
        ]);
        let t = &summary.totals;
        assert_eq!((t.count, t.passed, t.failed, t.incomplete), (3, 2, 1, 0));
        assert!((t.pass_rate - 2.0 / 3.0).abs() < 1e-9);
        assert!((t.score - 2.5 / 3.0).abs() < 1e-9);
        assert_eq!(t.duration_ms, 300.0);
        let time = &t.metrics[0];
        assert_eq!(time.count, 3);
        let raw = time.raw.as_ref().unwrap();
        assert_eq!((raw.min, raw.p50, raw.max), (10.0, 10.0, 20.0));
        // Normalized statistics, direction and tags, as the anchor's aggregate has them.
        let normalized = time.normalized.as_ref().unwrap();
        assert_eq!((normalized.min, normalized.max), (0.5, 1.0));
        assert_eq!(time.direction, Direction::Lower);
        assert_eq!(time.tags, ["@speed"]);
        // Every row has its scorers, metrics and trajectory, passing or not.
        assert_eq!(summary.cases[0].scores.len(), 1);
        assert!(summary.cases[0].scores[0].passed);
        assert_eq!(summary.cases[0].metrics[0].id, "time");
        assert!((t.tag_scores["py"] - 2.5 / 3.0).abs() < 1e-9);
        let order: Vec<(&str, u32)> = summary
            .cases
            .iter()
            .map(|c| (c.id.as_str(), c.repeat))
            .collect();
        assert_eq!(order, [("a", 1), ("a", 2), ("b", 1)]);
        assert_eq!(summary.cases[2].failed_scorers, ["scorer1"]);
        assert_eq!(summary.variants.len(), 1);
        assert_eq!(summary.variants[0].totals, summary.totals);
        assert!(summary.comparison.is_none());
    }

    #[test]
    fn variants_get_rollups_and_a_side_by_side_difference() {
        let summary = summarize(&[
            result("wide", "a", 1, &[true]),
            result("wide", "b", 1, &[true, true]),
            result("narrow", "a", 1, &[true]),
            result("narrow", "b", 1, &[false, true]),
        ]);
        let variants = summary.variants;
        assert_eq!(variants[0].variant, "wide");
        assert_eq!(variants[0].totals.passed, 2);
        assert_eq!(variants[1].totals.passed, 1);
        let comparison = summary.comparison.unwrap();
        assert_eq!(comparison.variants, ["wide", "narrow"]);
        let b = &comparison.rows[1];
        assert_eq!(b.id, "b");
        assert_eq!(b.cells[0].as_ref().map(|c| c.score), Some(1.0));
        assert_eq!(b.cells[1].as_ref().map(|c| c.passed), Some(0));
        assert_eq!(b.difference, Some(-0.5));
        assert_eq!(comparison.rows[0].difference, Some(0.0));
    }
}
