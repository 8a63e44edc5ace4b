//! Scoring a replayed notebook cell: what it printed and displayed here against what the
//! notebook stored, both normalised ([`super::normalise`]), with a short diff of what
//! differs. The facets compared: stdout (with the trailing value's text, which a replay prints
//! at the end of stdout), stderr (without the traceback), the trailing value, the displays'
//! MIME types (never their bytes) and the error's name.

use super::normalise::normalise;
use super::notebook::Expected;
use super::run::TimedEvent;
use cellvisor::cell::{CellEvent, CellResult, CellStatus};
use std::collections::BTreeSet;
use std::fmt::Write;

/// What a replayed cell did, in the terms it is compared in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actual {
    pub stdout: String,
    pub stderr: String,
    /// Each display bundle: its MIME types and its `text/plain`.
    pub displays: Vec<(BTreeSet<String>, String)>,
    /// The error's name when the cell raised (`ZeroDivisionError`), `cancelled` when it was
    /// stopped; with the traceback's last line.
    pub error: Option<(String, String)>,
}

/// The scorer name a notebook cell's verdict carries.
pub const SCORER: &str = "notebook.outputs";

/// Lines of a diff shown per side before the rest is counted.
const DIFF_LINES: usize = 4;
/// Characters of a diff line shown.
const LINE_CHARS: usize = 120;

impl Actual {
    /// What `cell` did, from the events its request streamed (for the stream each chunk went
    /// to) and its result (for displays and how it ended).
    pub fn observe(cell: &CellResult, events: &[TimedEvent]) -> Actual {
        let mut actual = Actual::default();
        let mut streamed = false;
        for timed in events {
            if let CellEvent::Output { stream, text, .. } = &timed.event {
                streamed = true;
                match *stream {
                    "stderr" => actual.stderr.push_str(text),
                    _ => actual.stdout.push_str(text),
                }
            }
        }
        if !streamed {
            // Refused before running (no worker): the output is the reason.
            if cell.report.status.failed() {
                actual.stderr = cell.report.output.clone();
            } else {
                actual.stdout = cell.report.output.clone();
            }
        }
        actual.displays = cell
            .report
            .displays
            .iter()
            .map(|bundle| {
                // cellvisor's own keys (a display's id) are no MIME type a notebook stores.
                let mimes = bundle
                    .as_object()
                    .map(|b| {
                        b.keys()
                            .filter(|mime| !mime.starts_with("application/x-cellvisor"))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let text = bundle
                    .get("text/plain")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_string();
                (mimes, text)
            })
            .collect();
        match cell.report.status {
            CellStatus::Error => {
                let (rest, traceback) = split_traceback(&actual.stderr);
                let last = last_line(&traceback)
                    .unwrap_or_else(|| last_line(&cell.report.output).unwrap_or_default());
                actual.stderr = rest;
                actual.error = Some((error_name(&last), last));
            }
            CellStatus::Cancelled => {
                let last = cell.report.notice.clone().unwrap_or_else(|| {
                    last_line(&cell.report.output).unwrap_or_else(|| "stopped".into())
                });
                actual.error = Some(("cancelled".into(), last));
            }
            _ => {}
        }
        actual
    }
}

/// How a cell compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The facets that differ: `stdout`, `stderr`, `result`, `displays`, `error`.
    pub differs: Vec<&'static str>,
    /// A short diff per differing facet, one facet a line group.
    pub diff: String,
}

impl Verdict {
    pub fn matched(&self) -> bool {
        self.differs.is_empty()
    }
}

/// Compares a replayed cell with what the notebook stored.
pub fn compare(expected: &Expected, actual: &Actual) -> Verdict {
    let mut differs = Vec::new();
    let mut diff = String::new();
    let mut displays = actual.displays.clone();
    let mut want_stdout = normalise(&expected.stdout);
    let got_stdout = normalise(&actual.stdout);
    let mut result_in_stdout = false;
    if let Some(result) = &expected.result {
        let want = normalise(&result.text);
        let rich = result.mimes.iter().any(|m| m != "text/plain");
        let same_mimes = |mimes: &BTreeSet<String>| {
            rich && without_json(mimes.clone(), &result.mimes) == result.mimes
        };
        // The display that is the value: the one with its text, else (a rich value whose
        // text differs) the last one with its MIME types.
        let shown = displays
            .iter()
            .rposition(|(mimes, text)| {
                if want.is_empty() {
                    same_mimes(mimes)
                } else {
                    normalise(text) == want
                }
            })
            .or_else(|| displays.iter().rposition(|(mimes, _)| same_mimes(mimes)));
        match shown.filter(|_| rich || !got_stdout.ends_with(&want)) {
            Some(at) => {
                let (mimes, text) = displays.remove(at);
                let mimes = without_json(mimes, &result.mimes);
                let text = normalise(&text);
                if mimes != result.mimes {
                    differs.push("result");
                    let _ = writeln!(
                        diff,
                        "result: MIME types\n- {}\n+ {}",
                        join(&result.mimes),
                        join(&mimes)
                    );
                } else if text != want {
                    differs.push("result");
                    let _ = writeln!(diff, "result:\n{}", short_diff(&want, &text));
                }
            }
            None => {
                // A plain value is printed at the end of stdout; so is a rich one this
                // replay could only print.
                result_in_stdout = true;
                want_stdout = joined(&want_stdout, &want);
                // A dict or list also goes out as a JSON bundle beside its text (the text
                // printed last, whether or not it is the stored one).
                if let Some(at) = displays.iter().rposition(|(mimes, text)| {
                    let text = normalise(text);
                    !text.is_empty()
                        && (text == want || got_stdout.ends_with(&text))
                        && mimes
                            .iter()
                            .all(|m| m == "text/plain" || m == "application/json")
                }) {
                    displays.remove(at);
                }
            }
        }
    }
    if want_stdout != got_stdout {
        let facet = if result_in_stdout && got_stdout.starts_with(&normalise(&expected.stdout)) {
            "result"
        } else {
            "stdout"
        };
        differs.push(facet);
        let _ = writeln!(diff, "{facet}:\n{}", short_diff(&want_stdout, &got_stdout));
    }
    let (want_err, got_err) = (normalise(&expected.stderr), normalise(&actual.stderr));
    if want_err != got_err {
        differs.push("stderr");
        let _ = writeln!(diff, "stderr:\n{}", short_diff(&want_err, &got_err));
    }
    let got_displays: Vec<BTreeSet<String>> = displays
        .into_iter()
        .enumerate()
        .map(|(i, (mimes, _))| match expected.displays.get(i) {
            Some(want) => without_json(mimes, want),
            None => mimes,
        })
        .collect();
    if got_displays != expected.displays {
        differs.push("displays");
        let list = |all: &[BTreeSet<String>]| -> String {
            all.iter()
                .map(|m| format!("[{}]", join(m)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            diff,
            "displays:\n- {}\n+ {}",
            list(&expected.displays),
            list(&got_displays)
        );
    }
    let got_error = actual.error.as_ref().map(|(name, _)| name.as_str());
    if expected.error.as_deref() != got_error {
        differs.push("error");
        let want = expected.error.as_deref().unwrap_or("no error");
        let got = match &actual.error {
            Some((_, line)) => clip(line),
            None => "no error".into(),
        };
        let _ = writeln!(diff, "error:\n- {want}\n+ {got}");
    }
    Verdict {
        differs,
        diff: diff.trim_end().to_string(),
    }
}

/// A display's MIME types without `application/json` when the stored one has none: a replay
/// adds it to dicts and lists so hosts get their structure.
fn without_json(mut mimes: BTreeSet<String>, stored: &BTreeSet<String>) -> BTreeSet<String> {
    if !stored.contains("application/json") {
        mimes.remove("application/json");
    }
    mimes
}

fn join(mimes: &BTreeSet<String>) -> String {
    mimes.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn joined(before: &str, after: &str) -> String {
    match (before.is_empty(), after.is_empty()) {
        (true, _) => after.to_string(),
        (_, true) => before.to_string(),
        _ => format!("{before}\n{after}"),
    }
}

/// `stderr` split before the traceback a failed cell ends with (from its first `Traceback
/// (most recent call last):` line, or a syntax error's `  File "<cell` line): what the cell
/// wrote itself, and the traceback.
fn split_traceback(stderr: &str) -> (String, String) {
    let starts = ["Traceback (most recent call last):", "  File \"<cell "];
    let mut offset = 0;
    for line in stderr.split_inclusive('\n') {
        if starts.iter().any(|s| line.starts_with(s)) {
            return (stderr[..offset].to_string(), stderr[offset..].to_string());
        }
        offset += line.len();
    }
    (stderr.to_string(), String::new())
}

fn last_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// The exception's class name from a traceback's last line (`pandas.errors.ParserError:
/// ...` gives `ParserError`, as Jupyter's `ename` has it); the line itself when it names none.
fn error_name(line: &str) -> String {
    let head = line.split(':').next().unwrap_or(line).trim();
    let is_name = !head.is_empty()
        && head
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if is_name {
        head.rsplit('.').next().unwrap_or(head).to_string()
    } else {
        line.to_string()
    }
}

fn clip(line: &str) -> String {
    let mut cut: String = line.chars().take(LINE_CHARS).collect();
    if cut.len() < line.len() {
        cut.push('…');
    }
    cut
}

/// The lines that differ between `want` and `got`, common lines at both ends left out: up
/// to [`DIFF_LINES`] `- ` (stored) and `+ ` (replayed) lines, then how many more differ.
pub fn short_diff(want: &str, got: &str) -> String {
    let a: Vec<&str> = if want.is_empty() {
        Vec::new()
    } else {
        want.split('\n').collect()
    };
    let b: Vec<&str> = if got.is_empty() {
        Vec::new()
    } else {
        got.split('\n').collect()
    };
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (gone, came) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out = String::new();
    if head > 0 {
        let _ = writeln!(
            out,
            "  (after {head} equal line{})",
            if head == 1 { "" } else { "s" }
        );
    }
    for (sign, lines) in [("-", gone), ("+", came)] {
        if lines.is_empty() {
            let _ = writeln!(out, "{sign} (nothing)");
        }
        for line in lines.iter().take(DIFF_LINES) {
            let _ = writeln!(out, "{sign} {}", clip(line));
        }
        if lines.len() > DIFF_LINES {
            let _ = writeln!(out, "{sign} … {} more line(s)", lines.len() - DIFF_LINES);
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
#[path = "cell_match_tests.rs"]
mod tests;
