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
    /// What cellvisor measures; `None` for a metric a scorer emits (a judge's `metric`),
    /// recorded as missing when nothing emits it.
    pub measure: Option<Measure>,
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
    #[serde(default)]
    measure: Option<Measure>,
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
            (Some(Measure::OutputNumber), None) => {
                return Err(
                    "measure \"output_number\" needs a `pattern` whose first group \
                            (or whole match) is the number"
                        .into(),
                )
            }
            (Some(Measure::OutputNumber), Some(_)) | (_, None) => {}
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

/// Whether a larger raw value is better or worse: written `higher-is-better` /
/// `lower-is-better` (the anchor's names); a case file may say `higher` / `lower`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    #[serde(rename = "higher-is-better", alias = "higher")]
    Higher,
    #[serde(rename = "lower-is-better", alias = "lower")]
    Lower,
}

/// One metric of one case (the anchor's `EvalMetric`, with `declared`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricValue {
    pub id: String,
    /// The value the case yielded; `0` when it is [`missing`](MetricValue::missing).
    pub raw: f64,
    /// 0..1; `0` when missing.
    pub normalized: f64,
    /// The spec's range and direction.
    pub min: f64,
    pub max: f64,
    pub direction: Direction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub tags: Vec<String>,
    /// Declared but not yielded (no match of an `output_number` pattern, a judge that failed
    /// before it graded): recorded with `raw` and `normalized` 0.
    pub missing: bool,
    /// Declared by the suite or case (or an efficiency metric of a case that declares
    /// metrics): it enters the case's score and its tags' scores. An efficiency metric of a
    /// case that declares none is measured for the summary only.
    pub declared: bool,
}

/// The efficiency metrics measured on every case: id, measure, the range their normalized
/// value is taken over (lower is better), and a description. Declaring a metric with one of
/// these ids replaces it.
pub const EFFICIENCY: [(&str, Measure, f64, &str); 4] = [
    (
        "cell-time",
        Measure::DurationMs,
        10_000.0,
        "the cells' own run time, summed, in milliseconds",
    ),
    (
        "output-bytes",
        Measure::OutputBytes,
        1024.0 * 1024.0,
        "bytes of output the cells produced",
    ),
    (
        "restarts",
        Measure::Restarts,
        1.0,
        "cells that found their worker restarted or evicted",
    ),
    (
        "total-time",
        Measure::TotalMs,
        30_000.0,
        "wall-clock time of the whole case in milliseconds",
    ),
];

/// The tag every efficiency metric carries.
pub const EFFICIENCY_TAG: &str = "@efficiency";

/// A metric value that is not a finite number: an authoring error that fails the case,
/// never a low score.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "metric {id} yielded {value}: a metric's raw value must be a finite number \
     (an authoring error, not a low score)"
)]
pub struct NotFinite {
    pub id: String,
    pub value: f64,
}

/// What metrics are measured on: the cells under test, the scorers' verdicts, the case's
/// wall-clock time so far, and the values scorers emitted (a judge's `metric`), by id.
pub struct Measured<'a> {
    pub cells: &'a [CellResult],
    pub scores: &'a [ScoreOutcome],
    pub total_ms: f64,
    pub emitted: &'a BTreeMap<String, f64>,
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

/// The raw value of the metric on the cells under test (`None`: not yielded). A value that
/// is not finite (`inf`, `nan` printed for an `output_number`) is returned as it is, for
/// [`evaluate`] to refuse.
pub fn measure(id: &str, spec: &MetricSpec, seen: &Measured<'_>) -> Option<f64> {
    let (cells, scores) = (seen.cells, seen.scores);
    // `+ 0.0`: the sum of no values is -0.0.
    let sum = |f: fn(&CellResult) -> f64| Some(cells.iter().map(f).sum::<f64>() + 0.0);
    let Some(measure) = spec.measure else {
        return seen.emitted.get(id).copied();
    };
    match measure {
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
            text.trim().parse::<f64>().ok()
        }),
    }
}

/// The spec of an [`EFFICIENCY`] metric.
pub fn efficiency_spec(measure: Measure, max: f64, description: &str) -> MetricSpec {
    MetricSpec {
        measure: Some(measure),
        pattern: None,
        min: 0.0,
        max,
        direction: Direction::Lower,
        tags: vec![EFFICIENCY_TAG.to_string()],
        description: Some(description.to_string()),
    }
}

/// Every declared metric of a case and the [`EFFICIENCY`] metrics it does not declare,
/// measured and normalized, in id order. As in the anchor, a case that declares metrics has
/// the efficiency metrics merged into its set (they count in its score); a case that declares
/// none still has them measured, `declared: false`, for the summary. A value that is not a
/// finite number is an authoring error ([`NotFinite`]).
pub fn evaluate(
    specs: &BTreeMap<String, MetricSpec>,
    seen: &Measured<'_>,
) -> Result<Vec<MetricValue>, NotFinite> {
    let value = |id: &str, spec: &MetricSpec, raw: Option<f64>, declared: bool| {
        if let Some(value) = raw.filter(|v| !v.is_finite()) {
            return Err(NotFinite {
                id: id.to_string(),
                value,
            });
        }
        Ok(MetricValue {
            id: id.to_string(),
            raw: raw.unwrap_or(0.0),
            normalized: raw.map_or(0.0, |raw| normalize(raw, spec)),
            min: spec.min,
            max: spec.max,
            direction: spec.direction,
            description: spec.description.clone(),
            tags: spec.tags.clone(),
            missing: raw.is_none(),
            declared,
        })
    };
    let mut values = Vec::new();
    for (id, spec) in specs {
        values.push(value(id, spec, measure(id, spec, seen), true)?);
    }
    let declares = !specs.is_empty();
    for (id, measure_kind, max, description) in EFFICIENCY {
        if !specs.contains_key(id) {
            let spec = efficiency_spec(measure_kind, max, description);
            values.push(value(id, &spec, measure(id, &spec, seen), declares)?);
        }
    }
    values.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(values)
}

/// A case's score, as the anchor defines it: the mean normalized value of its metrics when it
/// declares metrics (the efficiency metrics merged in), otherwise the mean of its scorers'
/// scores.
pub fn case_score(scores: &[ScoreOutcome], metrics: &[MetricValue]) -> f64 {
    let declared: Vec<f64> = metrics
        .iter()
        .filter(|m| m.declared)
        .map(|m| m.normalized)
        .collect();
    if declared.is_empty() {
        mean(&scores.iter().map(|s| s.score).collect::<Vec<_>>())
    } else {
        mean(&declared)
    }
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
            values
                .entry(tag.clone())
                .or_default()
                .push(metric.normalized);
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

    fn seen<'a>(
        cells: &'a [CellResult],
        total_ms: f64,
        emitted: &'a BTreeMap<String, f64>,
    ) -> Measured<'a> {
        Measured {
            cells,
            scores: &[],
            total_ms,
            emitted,
        }
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
            spec(r#"{measure = "output_number", pattern = "rows=(\\d+)", min = 0, max = 24, direction = "higher", tags = ["@speed", "@data"], description = "rows read"}"#)
                .unwrap(),
        );
        specs.insert(
            "missing".to_string(),
            spec(r#"{measure = "output_number", pattern = "nope=(\\d+)", min = 0, max = 1, direction = "higher"}"#)
                .unwrap(),
        );
        let emitted = BTreeMap::new();
        let values = evaluate(&specs, &seen(&cells, 75.0, &emitted)).unwrap();
        let by_id: BTreeMap<&str, &MetricValue> =
            values.iter().map(|v| (v.id.as_str(), v)).collect();
        assert_eq!(by_id["time"].raw, 50.0);
        assert_eq!(by_id["time"].normalized, 0.5);
        assert_eq!(by_id["rows"].raw, 12.0);
        assert_eq!(by_id["rows"].description.as_deref(), Some("rows read"));
        assert_eq!(by_id["rows"].direction, Direction::Higher);
        assert_eq!((by_id["rows"].min, by_id["rows"].max), (0.0, 24.0));
        assert!(by_id["missing"].missing && !by_id["rows"].missing);
        assert_eq!(
            (by_id["missing"].raw, by_id["missing"].normalized),
            (0.0, 0.0)
        );
        let tags = tag_scores(&["lua".to_string()], 0.25, &values);
        assert_eq!(tags["@speed"], 0.5);
        assert_eq!(tags["@data"], 0.5);
        assert_eq!(tags["lua"], 0.25);
        let lines =
            spec(r#"{measure = "output_lines", min = 0, max = 9, direction = "lower"}"#).unwrap();
        assert_eq!(
            measure("lines", &lines, &seen(&cells, 75.0, &emitted)),
            Some(3.0)
        );
        let json = serde_json::to_value(by_id["rows"]).unwrap();
        assert_eq!(json["direction"], "higher-is-better");
    }

    #[test]
    fn a_value_that_is_not_finite_is_an_authoring_error() {
        let mut specs = BTreeMap::new();
        specs.insert(
            "v".to_string(),
            spec(r#"{measure = "output_number", pattern = "v=(\\S+)", min = 0, max = 1, direction = "higher"}"#)
                .unwrap(),
        );
        let emitted = BTreeMap::new();
        for printed in ["v=inf\n", "v=NaN\n", "v=1e400\n"] {
            let cells = [completed(printed, 1.0)];
            let err = evaluate(&specs, &seen(&cells, 1.0, &emitted)).unwrap_err();
            assert_eq!(err.id, "v", "{printed}");
            assert!(err.to_string().contains("must be a finite number"), "{err}");
        }
        // Emitted by a judge: the same rule.
        specs.insert(
            "graded".to_string(),
            spec(r#"{min = 0, max = 1, direction = "higher"}"#).unwrap(),
        );
        let cells = [completed("v=0.5\n", 1.0)];
        let emitted: BTreeMap<String, f64> = [("graded".to_string(), 0.8)].into();
        let values = evaluate(&specs, &seen(&cells, 1.0, &emitted)).unwrap();
        assert_eq!(
            values.iter().find(|v| v.id == "graded").map(|v| v.raw),
            Some(0.8)
        );
    }

    #[test]
    fn the_score_is_the_metrics_mean_alone_when_metrics_are_declared() {
        let mut spilled = completed("x\n", 30.0);
        spilled.report.truncation.total_bytes = 5000;
        let mut restarted = completed("yy\n", 20.0);
        restarted.report.notice = Some("the previous py worker is gone".into());
        let cells = [spilled, restarted];
        let emitted = BTreeMap::new();
        let seen = seen(&cells, 900.0, &emitted);
        let values = evaluate(&BTreeMap::new(), &seen).unwrap();
        let ids: Vec<&str> = values.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["cell-time", "output-bytes", "restarts", "total-time"]);
        let raw: Vec<f64> = values.iter().map(|v| v.raw).collect();
        assert_eq!(raw, [50.0, 5003.0, 1.0, 900.0]);
        assert!(values
            .iter()
            .all(|v| !v.declared && v.tags == [EFFICIENCY_TAG] && v.description.is_some()));
        assert!((values[0].normalized - 0.995).abs() < 1e-12);
        let outcome = |score: f64| ScoreOutcome {
            name: "s".into(),
            passed: score >= 1.0,
            score,
            details: String::new(),
        };
        let scores = [outcome(1.0), outcome(0.5)];
        // No metric declared: the scorers' mean.
        assert_eq!(case_score(&scores, &values), 0.75);
        assert!(tag_scores(&[], 0.75, &values).is_empty());

        // Declared: the metrics' mean alone, the efficiency metrics merged in.
        let mut specs = BTreeMap::new();
        specs.insert(
            "cell-time".to_string(),
            spec(r#"{measure = "duration_ms", min = 0, max = 100, direction = "lower", tags = ["@efficiency"]}"#)
                .unwrap(),
        );
        let values = evaluate(&specs, &seen).unwrap();
        assert_eq!(values.len(), 4);
        assert!(values.iter().all(|v| v.declared));
        assert_eq!(values[0].normalized, 0.5);
        let expected = mean(&values.iter().map(|v| v.normalized).collect::<Vec<_>>());
        assert_eq!(case_score(&scores, &values), expected);
        assert_eq!(
            case_score(&[outcome(0.0)], &values),
            expected,
            "scorers left out"
        );
        let total =
            spec(r#"{measure = "total_ms", min = 0, max = 1000, direction = "lower"}"#).unwrap();
        assert_eq!(measure("t", &total, &seen), Some(900.0));
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
