//! Scorers: what must hold after a case's cells ran. Each one looks at the cell results and
//! the captured workspace (plain data) and yields a score in 0..1 and passed/failed.

use super::file_scorers;
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
    /// At least one of `paths` is in the workspace.
    FileExistsOneOf {
        paths: Vec<String>,
        #[serde(default)]
        name: Option<String>,
    },
    /// The file holds `text`, or matches `pattern` (exactly one of the two).
    FileContains {
        path: String,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        pattern: Option<Pattern>,
        #[serde(default)]
        name: Option<String>,
    },
    /// How closely the file matches `expected`: 1 equal once trimmed, 0.75 when the trimmed
    /// content holds it, 0.5 when the raw content does, else 0; passes at 0.75.
    FileContentQuality {
        path: String,
        expected: String,
        #[serde(default)]
        name: Option<String>,
    },
    /// An external command (argv, no shell) that reads the case as JSON on stdin and prints
    /// `{"score": 0..1, "reason": "..."}`; run in the case's workspace (`judge.rs`).
    Judge {
        command: Vec<String>,
        #[serde(default)]
        rubric: Option<String>,
        /// Seconds; default [`super::judge::DEFAULT_TIMEOUT_SECS`].
        #[serde(default)]
        timeout: Option<f64>,
        /// The score it passes at; default [`super::judge::DEFAULT_THRESHOLD`].
        #[serde(default)]
        threshold: Option<f64>,
        /// A declared metric (one without a `measure`) that receives the judge's 0..1 score.
        #[serde(default)]
        metric: Option<String>,
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

/// A regular expression as a case file gives it. It is compiled when read; a bad one is
/// kept with its error so the case that holds it can refuse it naming itself and the
/// scorer or metric ([`Pattern::error`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct Pattern {
    source: String,
    compiled: Result<regex::Regex, String>,
}

impl From<String> for Pattern {
    fn from(source: String) -> Pattern {
        let compiled = regex::Regex::new(&source).map_err(|e| e.to_string());
        Pattern { source, compiled }
    }
}

impl From<Pattern> for String {
    fn from(pattern: Pattern) -> String {
        pattern.source
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    /// The compiled expression; `None` for a bad one (refused when its case is read).
    pub fn regex(&self) -> Option<&regex::Regex> {
        self.compiled.as_ref().ok()
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Why the expression does not compile, if it does not.
    pub fn error(&self) -> Option<String> {
        self.compiled
            .as_ref()
            .err()
            .map(|e| format!("invalid pattern {:?}: {e}", self.source))
    }

    pub fn is_match(&self, text: &str) -> bool {
        self.regex().is_some_and(|r| r.is_match(text))
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
    pub fn binary(name: String, passed: bool, details: String) -> ScoreOutcome {
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

pub fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(EXCERPT_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

impl Scorer {
    /// Every kind a case file may name.
    pub const KINDS: [&'static str; 13] = [
        "status",
        "output_contains",
        "output_matches",
        "output_equals",
        "display_has",
        "file_exists",
        "file_exists_one_of",
        "file_contains",
        "file_content_quality",
        "judge",
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
            Scorer::FileExists { .. }
            | Scorer::FileExistsOneOf { .. }
            | Scorer::FileContains { .. }
            | Scorer::FileContentQuality { .. }
            | Scorer::Judge { .. } => None,
        }
    }

    /// The name shown in reports: the case file's `name`, else the kind and its argument
    /// (`output.contains:42`, `file.exists:out.txt`), with `[N]` for a scorer narrowed to cell N.
    pub fn name(&self) -> String {
        let (given, default) = match self {
            Scorer::Status { expect, name, .. } => (name, status_name(*expect)),
            Scorer::OutputContains { text, name, .. } => (name, format!("output.contains:{text}")),
            Scorer::OutputMatches { pattern, name, .. } => {
                (name, format!("output.matches:{}", pattern.as_str()))
            }
            Scorer::OutputEquals { name, .. } => (name, "output.equals".to_string()),
            Scorer::DisplayHas { mime, name, .. } => (name, format!("display.has:{mime}")),
            Scorer::FileExists { path, name } => (name, format!("file.exists:{path}")),
            Scorer::FileExistsOneOf { paths, name } => {
                (name, format!("file.existsOneOf:{}", paths.join("|")))
            }
            Scorer::FileContains { path, name, .. } => (name, format!("file.contains:{path}")),
            Scorer::FileContentQuality { path, name, .. } => (name, format!("file.quality:{path}")),
            Scorer::Judge { name, .. } => (name, super::judge::DEFAULT_NAME.to_string()),
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
                let passed = pattern.is_match(&output);
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
            Scorer::FileExists { path, .. } => file_scorers::exists(name, seen.workspace, path),
            Scorer::FileExistsOneOf { paths, .. } => {
                file_scorers::exists_one_of(name, seen.workspace, paths)
            }
            Scorer::FileContains {
                path,
                text,
                pattern,
                ..
            } => file_scorers::contains(name, seen.workspace, path, text, pattern),
            Scorer::FileContentQuality { path, expected, .. } => {
                file_scorers::quality(name, seen.workspace, path, expected)
            }
            // A judge runs a process: `judge::score`, awaited by the runner.
            Scorer::Judge { .. } => ScoreOutcome::binary(
                name,
                false,
                "a judge is run by the case runner, not scored inline".into(),
            ),
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

/// A `status` scorer's default name: the anchor's `status.completed` for `complete`,
/// `status.<expect>` for the others.
fn status_name(expect: CellStatus) -> String {
    match expect {
        CellStatus::Complete => STATUS_COMPLETED.to_string(),
        other => format!("status.{other}"),
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

/// The name of the scorer a case fails on when its cells raised, timed out or were
/// cancelled without the case declaring that status.
pub const STATUS_COMPLETED: &str = "status.completed";

/// A failing `status.completed` outcome when a cell under test went wrong (error or
/// cancelled) and no `status` scorer of the case expects that status (on the request, or on
/// that cell); `None` when the cells ended as the case expects.
pub fn unexpected_status(scorers: &[Scorer], cells: &[CellResult]) -> Option<ScoreOutcome> {
    let (position, failing) = cells
        .iter()
        .enumerate()
        .find(|(_, c)| c.report.status.failed())?;
    let status = failing.report.status;
    let declared = scorers.iter().any(|s| match s {
        Scorer::Status { expect, cell, .. } => {
            *expect == status && cell.is_none_or(|index| index == position)
        }
        _ => false,
    });
    if declared {
        return None;
    }
    let first_line = failing
        .report
        .output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty());
    Some(ScoreOutcome::binary(
        STATUS_COMPLETED.into(),
        false,
        format!(
            "cell {position} ({}) ended {status}{}; a case that expects it declares \
             {{ kind = \"status\", expect = \"{status}\" }}",
            failing.language,
            first_line.map_or(String::new(), |l| format!(": {}", excerpt(l.trim())))
        ),
    ))
}

impl Scorer {
    /// What the case file got wrong in this scorer, checked when the suite is read: a bad
    /// regular expression, a file path outside the workspace, a judge without a command or
    /// with a timeout or threshold out of range.
    pub fn validate(&self) -> Result<(), String> {
        let path_ok = |path: &str| {
            if file_scorers::stays_inside(path) {
                Ok(())
            } else {
                Err(format!(
                    "path {path:?} must be relative and stay in the case's workspace \
                     (no leading /, no .. above it)"
                ))
            }
        };
        match self {
            Scorer::OutputMatches { pattern, .. } => pattern.error().map_or(Ok(()), Err),
            Scorer::FileExists { path, .. } | Scorer::FileContentQuality { path, .. } => {
                path_ok(path)
            }
            Scorer::FileExistsOneOf { paths, .. } => {
                if paths.is_empty() {
                    return Err("`paths` must name at least one file".into());
                }
                paths.iter().try_for_each(|p| path_ok(p))
            }
            Scorer::FileContains {
                path,
                text,
                pattern,
                ..
            } => {
                path_ok(path)?;
                match (text, pattern) {
                    (Some(_), None) => Ok(()),
                    (None, Some(pattern)) => pattern.error().map_or(Ok(()), Err),
                    _ => Err("give exactly one of `text` (a substring) and `pattern` \
                              (a regular expression)"
                        .into()),
                }
            }
            Scorer::Judge {
                command,
                timeout,
                threshold,
                ..
            } => super::judge::validate(command, *timeout, *threshold),
            Scorer::Status { .. }
            | Scorer::OutputContains { .. }
            | Scorer::OutputEquals { .. }
            | Scorer::DisplayHas { .. }
            | Scorer::DurationBelowMs { .. }
            | Scorer::NoRestart { .. }
            | Scorer::StatusEvent { .. } => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "scorer_tests.rs"]
mod tests;
