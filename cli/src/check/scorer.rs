//! Scorers: what must hold after a case's cells ran. Each one looks at the cell results and
//! the captured workspace (plain data) and yields a score in 0..1 and passed/failed.

use super::workspace::WorkspaceSnapshot;
use cellvisor::cell::{CellResult, CellStatus};
use serde::{Deserialize, Serialize};

/// One scorer as a case file declares it (`kind = "..."`). `cell` (counted from 0 among
/// the cells under test) narrows a scorer to one cell; without it, it looks at them all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Scorer {
    /// The request ended as expected: the first cell that did not complete (or the named
    /// cell) has status `expect`; `complete` means every cell completed.
    Status {
        expect: CellStatus,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    OutputContains {
        text: String,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    OutputMatches {
        pattern: Pattern,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    /// Equal after trailing whitespace is removed from both sides.
    OutputEquals {
        text: String,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    DisplayHas {
        mime: String,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    FileExists {
        path: String,
        #[serde(default)]
        name: Option<String>,
    },
    FileContains {
        path: String,
        text: String,
        #[serde(default)]
        name: Option<String>,
    },
    /// The cells' own durations (`duration_ms`), summed, stay below `ms`; over it the score
    /// is `ms / duration`.
    DurationBelowMs {
        ms: f64,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    /// No cell carries a notice (the session was not restarted or evicted under it).
    NoRestart {
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
    /// A helper reported `op` (and, when given, `path`) as a status event.
    StatusEvent {
        op: String,
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        cell: Option<usize>,
        #[serde(default)]
        name: Option<String>,
    },
}

/// A regular expression checked when the case file is read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pattern(regex::Regex);

impl TryFrom<String> for Pattern {
    type Error = String;
    fn try_from(source: String) -> Result<Pattern, String> {
        regex::Regex::new(&source)
            .map(Pattern)
            .map_err(|e| format!("invalid pattern {source:?}: {e}"))
    }
}

impl From<Pattern> for String {
    fn from(pattern: Pattern) -> String {
        pattern.0.as_str().to_string()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Pattern {
    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }
}

/// One scorer's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreOutcome {
    pub name: String,
    pub passed: bool,
    /// 0..1.
    pub score: f64,
    /// Why, in a line: what was expected and what was seen.
    pub details: String,
}

impl ScoreOutcome {
    fn binary(name: String, passed: bool, details: String) -> ScoreOutcome {
        ScoreOutcome {
            name,
            passed,
            score: if passed { 1.0 } else { 0.0 },
            details,
        }
    }
}

/// What scorers look at: the results of the cells under test and the workspace after them.
pub struct Observation<'a> {
    pub cells: &'a [CellResult],
    pub workspace: &'a WorkspaceSnapshot,
}

impl Observation<'_> {
    fn selected(&self, cell: Option<usize>) -> &[CellResult] {
        match cell {
            Some(index) => self.cells.get(index..=index).unwrap_or(&[]),
            None => self.cells,
        }
    }

    fn output(&self, cell: Option<usize>) -> String {
        self.selected(cell)
            .iter()
            .map(|c| c.report.output.as_str())
            .collect()
    }
}

/// Longest excerpt of output quoted in a scorer's details.
const EXCERPT_CHARS: usize = 160;

fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(EXCERPT_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

impl Scorer {
    /// Every kind a case file may name.
    pub const KINDS: [&'static str; 10] = [
        "status",
        "output_contains",
        "output_matches",
        "output_equals",
        "display_has",
        "file_exists",
        "file_contains",
        "duration_below_ms",
        "no_restart",
        "status_event",
    ];

    /// The cell this scorer is narrowed to, if any.
    pub fn cell(&self) -> Option<usize> {
        match self {
            Scorer::Status { cell, .. }
            | Scorer::OutputContains { cell, .. }
            | Scorer::OutputMatches { cell, .. }
            | Scorer::OutputEquals { cell, .. }
            | Scorer::DisplayHas { cell, .. }
            | Scorer::DurationBelowMs { cell, .. }
            | Scorer::NoRestart { cell, .. }
            | Scorer::StatusEvent { cell, .. } => *cell,
            Scorer::FileExists { .. } | Scorer::FileContains { .. } => None,
        }
    }

    /// The name shown in reports: the case file's `name`, else the kind and its argument
    /// (`output.contains:42`, `file.exists:out.txt`), with `[N]` for a scorer narrowed to cell N.
    pub fn name(&self) -> String {
        let (given, default) = match self {
            Scorer::Status { expect, name, .. } => (name, format!("status:{expect}")),
            Scorer::OutputContains { text, name, .. } => (name, format!("output.contains:{text}")),
            Scorer::OutputMatches { pattern, name, .. } => {
                (name, format!("output.matches:{}", pattern.0.as_str()))
            }
            Scorer::OutputEquals { name, .. } => (name, "output.equals".to_string()),
            Scorer::DisplayHas { mime, name, .. } => (name, format!("display.has:{mime}")),
            Scorer::FileExists { path, name } => (name, format!("file.exists:{path}")),
            Scorer::FileContains { path, name, .. } => (name, format!("file.contains:{path}")),
            Scorer::DurationBelowMs { ms, name, .. } => (name, format!("duration.below:{ms}ms")),
            Scorer::NoRestart { name, .. } => (name, "no_restart".to_string()),
            Scorer::StatusEvent { op, name, .. } => (name, format!("status_event:{op}")),
        };
        match (given, self.cell()) {
            (Some(given), _) => given.clone(),
            (None, Some(cell)) => format!("{default}[{cell}]"),
            (None, None) => default,
        }
    }

    /// Scores what was observed.
    pub fn score(&self, seen: &Observation<'_>) -> ScoreOutcome {
        let name = self.name();
        match self {
            Scorer::Status { expect, cell, .. } => {
                let actual = match cell {
                    Some(index) => seen.cells.get(*index).map(|c| c.report.status),
                    None => Some(request_status(seen.cells)),
                };
                let passed = actual == Some(*expect);
                let details = match actual {
                    Some(actual) => format!("expected {expect}, got {actual}"),
                    None => "the cell did not run".to_string(),
                };
                ScoreOutcome::binary(name, passed, details)
            }
            Scorer::OutputContains { text, cell, .. } => {
                let output = seen.output(*cell);
                let passed = output.contains(text.as_str());
                ScoreOutcome::binary(name, passed, format!("output was {}", excerpt(&output)))
            }
            Scorer::OutputMatches { pattern, cell, .. } => {
                let output = seen.output(*cell);
                let passed = pattern.0.is_match(&output);
                ScoreOutcome::binary(name, passed, format!("output was {}", excerpt(&output)))
            }
            Scorer::OutputEquals { text, cell, .. } => {
                let output = seen.output(*cell);
                let passed = output.trim_end() == text.trim_end();
                ScoreOutcome::binary(
                    name,
                    passed,
                    format!("expected {}, got {}", excerpt(text), excerpt(&output)),
                )
            }
            Scorer::DisplayHas { mime, cell, .. } => {
                let mut seen_types: Vec<&str> = seen
                    .selected(*cell)
                    .iter()
                    .flat_map(|c| c.report.displays.iter())
                    .filter_map(|bundle| bundle.as_object())
                    .flat_map(|bundle| bundle.keys().map(String::as_str))
                    .collect();
                seen_types.sort_unstable();
                seen_types.dedup();
                let passed = seen_types.contains(&mime.as_str());
                ScoreOutcome::binary(
                    name,
                    passed,
                    format!("display types seen: [{}]", seen_types.join(", ")),
                )
            }
            Scorer::FileExists { path, .. } => {
                let passed = seen.workspace.file(path).is_some();
                let details = if passed {
                    format!("{path} is in the workspace")
                } else {
                    format!("{path} is not in the workspace")
                };
                ScoreOutcome::binary(name, passed, details)
            }
            Scorer::FileContains { path, text, .. } => {
                let (passed, details) = match seen.workspace.file(path) {
                    None => (false, format!("{path} is not in the workspace")),
                    Some(file) => match &file.content {
                        None => (false, format!("{path} is binary")),
                        Some(content) => (
                            content.contains(text.as_str()),
                            format!("{path} holds {}", excerpt(content)),
                        ),
                    },
                };
                ScoreOutcome::binary(name, passed, details)
            }
            Scorer::DurationBelowMs { ms, cell, .. } => {
                let took: f64 = seen
                    .selected(*cell)
                    .iter()
                    .map(|c| c.report.duration_ms)
                    .sum();
                let passed = took < *ms;
                let score = if passed || took <= 0.0 {
                    1.0
                } else {
                    (ms / took).clamp(0.0, 1.0)
                };
                ScoreOutcome {
                    name,
                    passed,
                    score,
                    details: format!("took {took:.1} ms, limit {ms} ms"),
                }
            }
            Scorer::NoRestart { cell, .. } => {
                let notices: Vec<&str> = seen
                    .selected(*cell)
                    .iter()
                    .filter_map(|c| c.report.notice.as_deref())
                    .collect();
                let details = match notices.first() {
                    None => "no notice".to_string(),
                    Some(first) => format!("notice: {first}"),
                };
                ScoreOutcome::binary(name, notices.is_empty(), details)
            }
            Scorer::StatusEvent { op, path, cell, .. } => {
                let mut ops: Vec<&str> = Vec::new();
                let passed = seen
                    .selected(*cell)
                    .iter()
                    .flat_map(|c| c.report.status_events.iter())
                    .any(|event| {
                        let event_op = event.get("op").and_then(|v| v.as_str());
                        ops.extend(event_op);
                        event_op == Some(op.as_str())
                            && path.as_deref().is_none_or(|want| {
                                event.get("path").and_then(|v| v.as_str()) == Some(want)
                            })
                    });
                ScoreOutcome::binary(name, passed, format!("ops seen: [{}]", ops.join(", ")))
            }
        }
    }
}

/// How a request of cells ended: the status of its first cell that did not complete, or
/// `complete`.
pub fn request_status(cells: &[CellResult]) -> CellStatus {
    cells
        .iter()
        .map(|c| c.report.status)
        .find(|s| !matches!(s, CellStatus::Complete | CellStatus::Skipped))
        .unwrap_or(CellStatus::Complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::completed;
    use crate::check::workspace::WorkspaceFile;
    use serde_json::json;

    fn cell(status: CellStatus, output: &str) -> CellResult {
        let mut cell = completed(output, 10.0);
        cell.report.status = status;
        cell
    }

    fn scorer(toml_line: &str) -> Scorer {
        #[derive(Deserialize)]
        struct One {
            s: Scorer,
        }
        toml::from_str::<One>(&format!("s = {toml_line}"))
            .unwrap_or_else(|e| panic!("{toml_line}: {e}"))
            .s
    }

    fn workspace() -> WorkspaceSnapshot {
        WorkspaceSnapshot {
            files: vec![
                WorkspaceFile {
                    path: "out/report.txt".into(),
                    size: 11,
                    binary: false,
                    truncated: false,
                    content: Some("total = 42\n".into()),
                },
                WorkspaceFile {
                    path: "blob.bin".into(),
                    size: 3,
                    binary: true,
                    truncated: false,
                    content: None,
                },
            ],
        }
    }

    fn run(line: &str, cells: &[CellResult]) -> ScoreOutcome {
        let ws = workspace();
        scorer(line).score(&Observation {
            cells,
            workspace: &ws,
        })
    }

    #[test]
    fn status_looks_at_how_the_request_ended_or_at_one_cell() {
        let cells = [
            cell(CellStatus::Complete, "a\n"),
            cell(CellStatus::Error, "Traceback\n"),
            cell(CellStatus::Skipped, ""),
        ];
        assert!(run(r#"{kind = "status", expect = "error"}"#, &cells).passed);
        let wrong = run(r#"{kind = "status", expect = "complete"}"#, &cells);
        assert!(!wrong.passed);
        assert_eq!(wrong.score, 0.0);
        assert_eq!(wrong.details, "expected complete, got error");
        let first = run(
            r#"{kind = "status", expect = "complete", cell = 0}"#,
            &cells,
        );
        assert!(first.passed);
        assert_eq!(first.name, "status:complete[0]");
    }

    #[test]
    fn output_scorers_read_all_cells_or_one() {
        let cells = [
            cell(CellStatus::Complete, "hello\n"),
            cell(CellStatus::Complete, "42\n"),
        ];
        assert!(run(r#"{kind = "output_contains", text = "lo\n4"}"#, &cells).passed);
        assert!(
            !run(
                r#"{kind = "output_contains", text = "hello", cell = 1}"#,
                &cells
            )
            .passed
        );
        assert!(
            run(
                r#"{kind = "output_matches", pattern = "^4\\d\\n$", cell = 1}"#,
                &cells
            )
            .passed
        );
        assert!(run(r#"{kind = "output_matches", pattern = "(?m)^42$"}"#, &cells).passed);
        assert!(run(r#"{kind = "output_equals", text = "42", cell = 1}"#, &cells).passed);
        assert!(!run(r#"{kind = "output_equals", text = "42"}"#, &cells).passed);
    }

    #[test]
    fn a_bad_pattern_is_refused_when_read() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct One {
            s: Scorer,
        }
        let err = toml::from_str::<One>(r#"s = {kind = "output_matches", pattern = "(" }"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid pattern"), "{err}");
    }

    #[test]
    fn display_has_looks_for_a_mime_type() {
        let mut with_png = cell(CellStatus::Complete, "");
        with_png.report.displays = vec![json!({"image/png": "AA==", "text/plain": "<Figure>"})];
        let cells = [cell(CellStatus::Complete, ""), with_png];
        assert!(run(r#"{kind = "display_has", mime = "image/png"}"#, &cells).passed);
        let missing = run(
            r#"{kind = "display_has", mime = "image/png", cell = 0}"#,
            &cells,
        );
        assert!(!missing.passed);
        assert_eq!(missing.details, "display types seen: []");
    }

    #[test]
    fn file_scorers_read_the_workspace_snapshot() {
        let cells = [cell(CellStatus::Complete, "")];
        assert!(run(r#"{kind = "file_exists", path = "out/report.txt"}"#, &cells).passed);
        assert!(
            run(
                r#"{kind = "file_exists", path = "./out/report.txt"}"#,
                &cells
            )
            .passed
        );
        assert!(!run(r#"{kind = "file_exists", path = "nope.txt"}"#, &cells).passed);
        assert!(
            run(
                r#"{kind = "file_contains", path = "out/report.txt", text = "= 42"}"#,
                &cells
            )
            .passed
        );
        let binary = run(
            r#"{kind = "file_contains", path = "blob.bin", text = "x"}"#,
            &cells,
        );
        assert!(!binary.passed);
        assert!(binary.details.contains("binary"));
    }

    #[test]
    fn duration_below_is_graded_past_its_limit() {
        let cells = [
            cell(CellStatus::Complete, ""),
            cell(CellStatus::Complete, ""),
        ];
        assert!(run(r#"{kind = "duration_below_ms", ms = 25}"#, &cells).passed);
        let slow = run(r#"{kind = "duration_below_ms", ms = 10}"#, &cells);
        assert!(!slow.passed);
        assert!((slow.score - 0.5).abs() < 1e-9, "{slow:?}");
    }

    #[test]
    fn no_restart_fails_on_a_notice() {
        let mut restarted = cell(CellStatus::Complete, "");
        restarted.report.notice = Some("the previous py worker is gone".into());
        let cells = [cell(CellStatus::Complete, ""), restarted];
        assert!(run(r#"{kind = "no_restart", cell = 0}"#, &cells).passed);
        let failed = run(r#"{kind = "no_restart"}"#, &cells);
        assert!(!failed.passed);
        assert!(failed.details.contains("worker is gone"));
    }

    #[test]
    fn status_event_matches_op_and_path() {
        let mut wrote = cell(CellStatus::Complete, "");
        wrote.report.status_events = vec![json!({"op": "write", "path": "a.txt", "bytes": 3})];
        let cells = [wrote];
        assert!(run(r#"{kind = "status_event", op = "write"}"#, &cells).passed);
        assert!(
            run(
                r#"{kind = "status_event", op = "write", path = "a.txt"}"#,
                &cells
            )
            .passed
        );
        assert!(
            !run(
                r#"{kind = "status_event", op = "write", path = "b.txt"}"#,
                &cells
            )
            .passed
        );
        let read = run(r#"{kind = "status_event", op = "read"}"#, &cells);
        assert_eq!(read.details, "ops seen: [write]");
    }

    #[test]
    fn unknown_kinds_and_fields_are_refused() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct One {
            s: Scorer,
        }
        assert!(toml::from_str::<One>(r#"s = {kind = "vibes"}"#).is_err());
        assert!(toml::from_str::<One>(r#"s = {kind = "no_restart", extra = 1}"#).is_err());
        let named = scorer(r#"{kind = "no_restart", name = "stays up"}"#);
        assert_eq!(named.name(), "stays up");
    }
}
