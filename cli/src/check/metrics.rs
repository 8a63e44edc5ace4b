//! Metrics: a raw value measured on each case, normalized to 0..1 by a declared range and
//! direction, and averaged per tag.

use super::scorer::{Pattern, ScoreOutcome};
use cellvisor::cell::CellResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A declared metric: what to measure and how to turn it into a 0..1 score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawMetricSpec")]
pub struct MetricSpec {
    pub measure: Measure,
    /// For [`Measure::OutputNumber`] (and only for it): where the number is in the output.
    pub pattern: Option<Pattern>,
    /// Raw values below are clamped.
    pub min: f64,
    /// Raw values above are clamped.
    pub max: f64,
    pub direction: Direction,
    pub tags: Vec<String>,
    pub description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetricSpec {
    measure: Measure,
    #[serde(default)]
    pattern: Option<Pattern>,
    min: f64,
    max: f64,
    direction: Direction,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    description: Option<String>,
}

impl TryFrom<RawMetricSpec> for MetricSpec {
    type Error = String;

    fn try_from(raw: RawMetricSpec) -> Result<MetricSpec, String> {
        if !(raw.min.is_finite() && raw.max.is_finite() && raw.min <= raw.max) {
            return Err(format!(
                "metric range must be finite with min <= max, got min = {} and max = {}",
                raw.min, raw.max
            ));
        }
        match (raw.measure, &raw.pattern) {
            (Measure::OutputNumber, None) => {
                return Err(
                    "measure \"output_number\" needs a `pattern` whose first group \
                            (or whole match) is the number"
                        .into(),
                )
            }
            (Measure::OutputNumber, Some(_)) | (_, None) => {}
            (_, Some(_)) => {
                return Err("`pattern` belongs to measure \"output_number\" only".into())
            }
        }
        Ok(MetricSpec {
            measure: raw.measure,
            pattern: raw.pattern,
            min: raw.min,
            max: raw.max,
            direction: raw.direction,
            tags: raw.tags,
            description: raw.description,
        })
    }
}

/// What a metric measures on the cells under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The cells' `duration_ms`, summed.
    DurationMs,
    /// Wall-clock time of the whole case so far (workspace, setup, cells, capture, scorers).
    TotalMs,
    /// Bytes of output the cells produced (`truncation.total_bytes`, so spilled output counts).
    OutputBytes,
    OutputLines,
    /// Display bundles sent.
    Displays,
    /// Status events the helpers reported.
    StatusEvents,
    /// Cells that carried a notice (a restart or eviction before them).
    Restarts,
    /// Fraction of the case's scorers that passed, 0..1.
    ScorersPassed,
    /// A number printed by the cells: the first match of the spec's pattern in their output.
    OutputNumber,
}

/// Whether a larger raw value is better or worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    #[serde(rename = "higher", alias = "higher-is-better")]
    Higher,
    #[serde(rename = "lower", alias = "lower-is-better")]
    Lower,
}

/// One metric of one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    pub id: String,
    /// `None` when the case did not yield the value (no match of an `output_number` pattern).
    pub raw: Option<f64>,
    /// 0..1; a missing value scores 0.
    pub score: f64,
    pub tags: Vec<String>,
    /// Declared by the suite or case: it enters the case's score and its tags' scores. An
    /// efficiency metric measured without being declared ([`EFFICIENCY`]) does neither.
    pub declared: bool,
}

/// The efficiency metrics measured on every case, declared or not: id, measure, and the
/// range their normalized value is taken over (lower is better). Declaring a metric with one
/// of these ids replaces it (and makes it count in the score).
pub const EFFICIENCY: [(&str, Measure, f64); 4] = [
    ("cell-time", Measure::DurationMs, 10_000.0),
    ("output-bytes", Measure::OutputBytes, 1024.0 * 1024.0),
    ("restarts", Measure::Restarts, 1.0),
    ("total-time", Measure::TotalMs, 30_000.0),
];

/// What metrics are measured on: the cells under test, the scorers' verdicts, and the
/// case's wall-clock time so far.
pub struct Measured<'a> {
    pub cells: &'a [CellResult],
    pub scores: &'a [ScoreOutcome],
    pub total_ms: f64,
}

/// `raw` mapped to 0..1: clamped to the range, flipped when lower is better; 1 when the range
/// is a single point.
pub fn normalize(raw: f64, spec: &MetricSpec) -> f64 {
    if spec.max == spec.min {
        return 1.0;
    }
    let fraction = ((raw - spec.min) / (spec.max - spec.min)).clamp(0.0, 1.0);
    match spec.direction {
        Direction::Higher => fraction,
        Direction::Lower => 1.0 - fraction,
    }
}

/// The raw value of the metric on the cells under test.
pub fn measure(spec: &MetricSpec, seen: &Measured<'_>) -> Option<f64> {
    let (cells, scores) = (seen.cells, seen.scores);
    // `+ 0.0`: the sum of no values is -0.0.
    let sum = |f: fn(&CellResult) -> f64| Some(cells.iter().map(f).sum::<f64>() + 0.0);
    match spec.measure {
        Measure::DurationMs => sum(|c| c.report.duration_ms),
        Measure::TotalMs => Some(seen.total_ms),
        Measure::OutputBytes => sum(|c| {
            c.report
                .truncation
                .total_bytes
                .max(c.report.output.len() as u64) as f64
        }),
        Measure::OutputLines => sum(|c| {
            c.report
                .truncation
                .total_lines
                .max(c.report.output.lines().count() as u64) as f64
        }),
        Measure::Displays => sum(|c| c.report.displays.len() as f64),
        Measure::StatusEvents => sum(|c| c.report.status_events.len() as f64),
        Measure::Restarts => sum(|c| f64::from(u8::from(c.report.notice.is_some()))),
        Measure::ScorersPassed => {
            let passed = scores.iter().filter(|s| s.passed).count();
            Some(passed as f64 / scores.len().max(1) as f64)
        }
        Measure::OutputNumber => cells.iter().find_map(|c| {
            let captures = spec.pattern.as_ref()?.regex()?.captures(&c.report.output)?;
            let text = captures.get(1).or_else(|| captures.get(0))?.as_str();
            text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
        }),
    }
}

/// Every declared metric of a case and the [`EFFICIENCY`] metrics it does not declare,
/// measured and normalized, in id order.
pub fn evaluate(specs: &BTreeMap<String, MetricSpec>, seen: &Measured<'_>) -> Vec<MetricValue> {
    let value = |id: &str, spec: &MetricSpec, declared: bool| {
        let raw = measure(spec, seen);
        MetricValue {
            id: id.to_string(),
            raw,
            score: raw.map_or(0.0, |raw| normalize(raw, spec)),
            tags: spec.tags.clone(),
            declared,
        }
    };
    let mut values: Vec<MetricValue> = specs
        .iter()
        .map(|(id, spec)| value(id, spec, true))
        .collect();
    for (id, measure, max) in EFFICIENCY {
        if !specs.contains_key(id) {
            let spec = MetricSpec {
                measure,
                pattern: None,
                min: 0.0,
                max,
                direction: Direction::Lower,
                tags: Vec::new(),
                description: None,
            };
            values.push(value(id, &spec, false));
        }
    }
    values.sort_by(|a, b| a.id.cmp(&b.id));
    values
}

/// A case's score: the mean of its scorers' scores and its declared metrics' normalized
/// values (efficiency metrics it does not declare are left out).
pub fn case_score(scores: &[ScoreOutcome], metrics: &[MetricValue]) -> f64 {
    let values: Vec<f64> = scores
        .iter()
        .map(|s| s.score)
        .chain(metrics.iter().filter(|m| m.declared).map(|m| m.score))
        .collect();
    mean(&values)
}

/// Mean normalized score per tag: a tag on a declared metric scores that metric; a tag on the
/// case scores the case (its score).
pub fn tag_scores(
    case_tags: &[String],
    case_score: f64,
    metrics: &[MetricValue],
) -> BTreeMap<String, f64> {
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for metric in metrics.iter().filter(|m| m.declared) {
        for tag in &metric.tags {
            values.entry(tag.clone()).or_default().push(metric.score);
        }
    }
    for tag in case_tags {
        values.entry(tag.clone()).or_default().push(case_score);
    }
    values.into_iter().map(|(tag, v)| (tag, mean(&v))).collect()
}

/// The arithmetic mean; 0 for no values.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Descriptive statistics of one metric across cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricStats {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
    pub zero_count: usize,
    /// Every value, in case order.
    pub values: Vec<f64>,
}

impl MetricStats {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<MetricStats> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(MetricStats {
            min: sorted[0],
            mean: mean(&sorted),
            p50: percentile(&sorted, 0.5),
            p90: percentile(&sorted, 0.9),
            max: sorted[sorted.len() - 1],
            zero_count: sorted.iter().filter(|v| **v == 0.0).count(),
            values: values.to_vec(),
        })
    }
}

/// The `q` quantile of sorted values, interpolated linearly between neighbours.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let (low, high) = (position.floor() as usize, position.ceil() as usize);
    let weight = position - low as f64;
    sorted[low] + (sorted[high] - sorted[low]) * weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::completed;

    fn spec(toml_text: &str) -> Result<MetricSpec, String> {
        #[derive(Deserialize)]
        struct One {
            m: MetricSpec,
        }
        toml::from_str::<One>(&format!("m = {toml_text}"))
            .map(|one| one.m)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn normalization_clamps_and_flips() {
        let lower =
            spec(r#"{measure = "duration_ms", min = 0, max = 200, direction = "lower"}"#).unwrap();
        assert_eq!(normalize(50.0, &lower), 0.75);
        assert_eq!(normalize(500.0, &lower), 0.0);
        assert_eq!(normalize(-5.0, &lower), 1.0);
        let higher =
            spec(r#"{measure = "displays", min = 1, max = 3, direction = "higher-is-better"}"#)
                .unwrap();
        assert_eq!(normalize(2.0, &higher), 0.5);
        let point =
            spec(r#"{measure = "displays", min = 2, max = 2, direction = "higher"}"#).unwrap();
        assert_eq!(normalize(0.0, &point), 1.0);
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let err =
            spec(r#"{measure = "displays", min = 3, max = 1, direction = "higher"}"#).unwrap_err();
        assert!(err.contains("min <= max"), "{err}");
        let err = spec(r#"{measure = "output_number", min = 0, max = 1, direction = "higher"}"#)
            .unwrap_err();
        assert!(err.contains("needs a `pattern`"), "{err}");
        assert!(spec(r#"{measure = "speed", min = 0, max = 1, direction = "higher"}"#).is_err());
        assert!(spec(r#"{measure = "displays", min = 0, max = 1, direction = "up"}"#).is_err());
    }

    #[test]
    fn measures_read_the_cells_and_a_missing_number_scores_zero() {
        let cells = [completed("rows=12\n", 30.0), completed("x\ny\n", 20.0)];
        let mut specs = BTreeMap::new();
        specs.insert(
            "time".to_string(),
            spec(r#"{measure = "duration_ms", min = 0, max = 100, direction = "lower", tags = ["@speed"]}"#)
                .unwrap(),
        );
        specs.insert(
            "rows".to_string(),
            spec(r#"{measure = "output_number", pattern = "rows=(\\d+)", min = 0, max = 24, direction = "higher", tags = ["@speed", "@data"]}"#)
                .unwrap(),
        );
        specs.insert(
            "missing".to_string(),
            spec(r#"{measure = "output_number", pattern = "nope=(\\d+)", min = 0, max = 1, direction = "higher"}"#)
                .unwrap(),
        );
        let seen = Measured {
            cells: &cells,
            scores: &[],
            total_ms: 75.0,
        };
        let values = evaluate(&specs, &seen);
        let by_id: BTreeMap<&str, &MetricValue> =
            values.iter().map(|v| (v.id.as_str(), v)).collect();
        assert_eq!(by_id["time"].raw, Some(50.0));
        assert_eq!(by_id["time"].score, 0.5);
        assert_eq!(by_id["rows"].raw, Some(12.0));
        assert_eq!(by_id["missing"].raw, None);
        assert_eq!(by_id["missing"].score, 0.0);
        let tags = tag_scores(&["lua".to_string()], 0.25, &values);
        assert_eq!(tags["@speed"], 0.5);
        assert_eq!(tags["@data"], 0.5);
        assert_eq!(tags["lua"], 0.25);
        let lines =
            spec(r#"{measure = "output_lines", min = 0, max = 9, direction = "lower"}"#).unwrap();
        assert_eq!(measure(&lines, &seen), Some(3.0));
    }

    #[test]
    fn efficiency_metrics_are_measured_undeclared_and_left_out_of_the_score() {
        let mut spilled = completed("x\n", 30.0);
        spilled.report.truncation.total_bytes = 5000;
        let mut restarted = completed("yy\n", 20.0);
        restarted.report.notice = Some("the previous py worker is gone".into());
        let cells = [spilled, restarted];
        let seen = Measured {
            cells: &cells,
            scores: &[],
            total_ms: 900.0,
        };
        let values = evaluate(&BTreeMap::new(), &seen);
        let ids: Vec<&str> = values.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["cell-time", "output-bytes", "restarts", "total-time"]);
        let raw: Vec<Option<f64>> = values.iter().map(|v| v.raw).collect();
        assert_eq!(raw, [Some(50.0), Some(5003.0), Some(1.0), Some(900.0)]);
        assert!(values.iter().all(|v| !v.declared && v.tags.is_empty()));
        assert!((values[0].score - 0.995).abs() < 1e-12);
        let none = evaluate(
            &BTreeMap::new(),
            &Measured {
                cells: &[],
                scores: &[],
                total_ms: 1.0,
            },
        );
        assert!(
            none[0].raw.is_some_and(|v| v.is_sign_positive()),
            "{none:?}"
        );
        let outcome = |score: f64| ScoreOutcome {
            name: "s".into(),
            passed: score >= 1.0,
            score,
            details: String::new(),
        };
        let scores = [outcome(1.0), outcome(0.5)];
        assert_eq!(case_score(&scores, &values), 0.75, "undeclared: not scored");
        assert!(tag_scores(&[], 0.75, &values).is_empty());

        // Declared under the same id, it replaces the default and counts.
        let mut specs = BTreeMap::new();
        specs.insert(
            "cell-time".to_string(),
            spec(r#"{measure = "duration_ms", min = 0, max = 100, direction = "lower", tags = ["@efficiency"]}"#)
                .unwrap(),
        );
        let values = evaluate(&specs, &seen);
        assert_eq!(values.len(), 4);
        assert!(values[0].declared);
        assert_eq!(values[0].score, 0.5);
        assert_eq!(case_score(&scores, &values), 2.0 / 3.0);
        assert_eq!(tag_scores(&[], 0.0, &values)["@efficiency"], 0.5);
        let total =
            spec(r#"{measure = "total_ms", min = 0, max = 1000, direction = "lower"}"#).unwrap();
        assert_eq!(measure(&total, &seen), Some(900.0));
    }

    #[test]
    fn stats_give_percentiles() {
        let stats = MetricStats::of(&[4.0, 1.0, 3.0, 2.0, 0.0]).unwrap();
        assert_eq!(
            stats,
            MetricStats {
                min: 0.0,
                mean: 2.0,
                p50: 2.0,
                p90: 3.6,
                max: 4.0,
                zero_count: 1,
                values: vec![4.0, 1.0, 3.0, 2.0, 0.0],
            }
        );
        assert_eq!(MetricStats::of(&[]), None);
        assert_eq!(MetricStats::of(&[7.0]).map(|s| s.p90), Some(7.0));
    }
}
