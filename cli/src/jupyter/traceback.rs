//! A failed cell's error report as ipykernel sends it: the traceback in the `error`
//! message, not also on stderr. Workers write the report on stderr as the cell ends, so the
//! stderr text that starts one (Python's `Traceback (most recent call last):`, a JavaScript
//! `...Error:` line, Lua's `stack traceback:`) is held until the next output or the cell's
//! end: a failed cell's report becomes the `error`'s traceback, anything else goes out as the
//! stream it was. The rest goes through [`CellOutputs`], so a cell's value is its
//! `execute_result`. Plain data: events in, iopub messages (type and content) out.

use super::mapping::Failure;
use super::outputs::CellOutputs;
use cellvisor::cell::CellEvent;
use cellvisor::Language;
use serde_json::{json, Value};

/// One cell's output on its way to iopub.
#[derive(Debug)]
pub struct Outputs {
    language: Language,
    /// stderr text that starts an error report, not sent yet.
    held: String,
    /// The value and what follows it.
    values: CellOutputs,
}

/// An iopub message: its type and content.
pub type Message = (&'static str, Value);

impl Outputs {
    /// The output of a cell in `language`.
    pub fn new(language: Language) -> Outputs {
        Outputs {
            language,
            held: String::new(),
            values: CellOutputs::default(),
        }
    }

    /// The messages `event` sends now (held stderr first, when it ends the hold). A cell's
    /// start and end send nothing and end no hold: the end's status is not known yet.
    pub fn event(&mut self, event: &CellEvent) -> Vec<Message> {
        if let CellEvent::Output {
            stream: "stderr",
            text,
            ..
        } = event
        {
            if !self.held.is_empty() || starts_report(self.language, text) {
                self.held.push_str(text);
                return Vec::new();
            }
        }
        let Some(message) = self.values.take(event) else {
            return Vec::new();
        };
        let mut out = self.release();
        out.push(message);
        out
    }

    /// The messages at the cell's end: a failed cell's held report as its `error`'s
    /// traceback, else the held text as stderr and the `error` (if it failed) naming it; a
    /// cell that did not fail, its value as the `execute_result` of `execution_count`.
    pub fn finish(&mut self, failure: Option<&Failure>, execution_count: u64) -> Vec<Message> {
        let Some(failure) = failure else {
            let mut out = self.release();
            out.extend(
                self.values
                    .execute_result(execution_count)
                    .map(|result| ("execute_result", result)),
            );
            return out;
        };
        if self.held.is_empty() {
            return vec![("error", failure.error_content())];
        }
        let traceback: Vec<Value> = std::mem::take(&mut self.held)
            .lines()
            .map(|l| Value::String(l.to_string()))
            .collect();
        vec![(
            "error",
            json!({"ename": failure.ename, "evalue": failure.evalue, "traceback": traceback}),
        )]
    }

    fn release(&mut self) -> Vec<Message> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let text = std::mem::take(&mut self.held);
        vec![("stream", json!({"name": "stderr", "text": text}))]
    }
}

/// Whether stderr `text` starts the report a worker writes for a failed cell.
fn starts_report(language: Language, text: &str) -> bool {
    let first = text.lines().next().unwrap_or_default();
    match language {
        Language::Python => {
            first.starts_with("Traceback (most recent call last):")
                || first.starts_with("  File \"")
                || first.starts_with("KeyboardInterrupt")
        }
        Language::JavaScript => {
            let line = first.trim_start_matches("Uncaught ");
            let head = line.split_once(": ").map_or(line, |(head, _)| head);
            head.ends_with("Error") && head.chars().all(|c| c.is_ascii_alphanumeric())
        }
        Language::Lua => text.contains("stack traceback:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stderr(text: &str) -> CellEvent {
        CellEvent::Output {
            index: 0,
            stream: "stderr",
            text: text.into(),
        }
    }

    fn failure(ename: &str) -> Failure {
        Failure {
            ename: ename.into(),
            evalue: "v".into(),
        }
    }

    #[test]
    fn a_failed_cells_report_becomes_the_errors_traceback() {
        let mut out = Outputs::new(Language::Python);
        let report =
            "Traceback (most recent call last):\n  File \"<cell>\", line 1\nZeroDivisionError: v\n";
        assert!(out.event(&stderr(report)).is_empty());
        // The cell's end event (as the daemon streams it) keeps the report held.
        let done = CellEvent::CellDone {
            index: 0,
            status: cellvisor::cell::CellStatus::Error,
        };
        assert!(out.event(&done).is_empty());
        let end = out.finish(Some(&failure("ZeroDivisionError")), 1);
        assert_eq!(end.len(), 1);
        assert_eq!(end[0].0, "error");
        assert_eq!(end[0].1["traceback"].as_array().unwrap().len(), 3);
        assert_eq!(end[0].1["traceback"][2], "ZeroDivisionError: v");
        // Split in two chunks: still one report.
        let mut out = Outputs::new(Language::Lua);
        assert!(out
            .event(&stderr("cell:1: boom\nstack traceback:\n"))
            .is_empty());
        assert!(out.event(&stderr("\t[C]: in ?\n")).is_empty());
        assert_eq!(
            out.finish(Some(&failure("LuaError")), 1)[0].1["traceback"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn plain_stderr_streams_at_once_and_a_report_of_a_cell_that_went_on_streams_too() {
        let mut out = Outputs::new(Language::JavaScript);
        assert_eq!(out.event(&stderr("warning\n"))[0].0, "stream");
        // A caught error printed, then more output: the held text goes first, as a stream.
        assert!(out.event(&stderr("TypeError: x\n    at f\n")).is_empty());
        let later = out.event(&CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: "after\n".into(),
        });
        assert_eq!(later.len(), 2);
        assert_eq!(
            later[0].1,
            json!({"name": "stderr", "text": "TypeError: x\n    at f\n"})
        );
        assert_eq!(later[1].1["name"], "stdout");
        // A cell that succeeded with a report held at its end streams it.
        assert!(out.event(&stderr("RangeError: y\n")).is_empty());
        assert_eq!(out.finish(None, 1)[0].0, "stream");
        // A failure with nothing held is named in one line.
        let end = out.finish(Some(&failure("Error")), 1);
        assert_eq!(end[0].1["traceback"], json!(["Error: v"]));
    }

    #[test]
    fn what_starts_a_report_in_each_language() {
        assert!(starts_report(
            Language::Python,
            "Traceback (most recent call last):\n"
        ));
        assert!(starts_report(
            Language::Python,
            "  File \"<cell>\", line 1\n    x = )\n"
        ));
        assert!(!starts_report(Language::Python, "warning: old\n"));
        assert!(starts_report(
            Language::JavaScript,
            "ReferenceError: y is not defined\n"
        ));
        assert!(starts_report(
            Language::JavaScript,
            "Uncaught Error: boom\n"
        ));
        assert!(!starts_report(
            Language::JavaScript,
            "an Error: happened here\n"
        ));
        assert!(starts_report(
            Language::Lua,
            "cell:1: x\nstack traceback:\n\t[C]: in ?\n"
        ));
        assert!(!starts_report(Language::Lua, "e\n"));
    }
}
