//! Unit tests of the scorers, on plain data.

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
        cwd: String::new(),
        files: vec![
            WorkspaceFile {
                path: "out/report.txt".into(),
                size: 11,
                binary: false,
                truncated: false,
                content: Some("total = 42\n".into()),
                symlink: false,
            },
            WorkspaceFile {
                path: "blob.bin".into(),
                size: 3,
                binary: true,
                truncated: false,
                content: None,
                symlink: false,
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
    assert_eq!(first.name, "status.completed[0]");
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
fn bad_patterns_and_paths_are_refused_by_validate() {
    let err = scorer(r#"{kind = "output_matches", pattern = "(" }"#)
        .validate()
        .unwrap_err();
    assert!(err.contains("invalid pattern \"(\""), "{err}");
    let err = scorer(r#"{kind = "file_contains", path = "a", pattern = "[z-a]" }"#)
        .validate()
        .unwrap_err();
    assert!(err.contains("invalid pattern"), "{err}");
    for line in [
        r#"{kind = "file_exists", path = "/etc/passwd"}"#,
        r#"{kind = "file_contains", path = "../x", text = "a"}"#,
        r#"{kind = "file_content_quality", path = "a/../../x", expected = "a"}"#,
        r#"{kind = "file_exists_one_of", paths = ["ok.txt", "/abs"]}"#,
    ] {
        let err = scorer(line).validate().unwrap_err();
        assert!(
            err.contains("must be relative and stay in"),
            "{line}: {err}"
        );
    }
    assert!(scorer(r#"{kind = "file_exists", path = "a/../b"}"#)
        .validate()
        .is_ok());
    let both = scorer(r#"{kind = "file_contains", path = "a", text = "x", pattern = "x"}"#);
    assert!(both.validate().unwrap_err().contains("exactly one"));
    let none = scorer(r#"{kind = "file_contains", path = "a"}"#);
    assert!(none.validate().unwrap_err().contains("exactly one"));
    let empty = scorer(r#"{kind = "file_exists_one_of", paths = []}"#);
    assert!(empty.validate().is_err());
}

#[test]
fn an_unexpected_error_or_cancel_fails_the_case_unless_declared() {
    let cells = [
        cell(CellStatus::Complete, "42\n"),
        cell(CellStatus::Error, "Traceback\nZeroDivisionError: x\n"),
        cell(CellStatus::Skipped, ""),
    ];
    let output_only = [scorer(r#"{kind = "output_contains", text = "42"}"#)];
    let failed = unexpected_status(&output_only, &cells).expect("not declared");
    assert_eq!(failed.name, "status.completed");
    assert!(!failed.passed);
    assert_eq!(failed.score, 0.0);
    assert!(
        failed.details.contains("cell 1 (py) ended error"),
        "{failed:?}"
    );
    assert!(failed.details.contains("ZeroDivisionError"), "{failed:?}");
    let declared = [scorer(r#"{kind = "status", expect = "error"}"#)];
    assert_eq!(unexpected_status(&declared, &cells), None);
    let on_the_cell = [scorer(r#"{kind = "status", expect = "error", cell = 1}"#)];
    assert_eq!(unexpected_status(&on_the_cell, &cells), None);
    let wrong_cell = [scorer(r#"{kind = "status", expect = "error", cell = 0}"#)];
    assert!(unexpected_status(&wrong_cell, &cells).is_some());
    let wrong_status = [scorer(r#"{kind = "status", expect = "cancelled"}"#)];
    assert!(unexpected_status(&wrong_status, &cells).is_some());
    let mut timed_out = cell(CellStatus::Cancelled, "timed out\n");
    timed_out.report.status = CellStatus::Cancelled;
    assert!(unexpected_status(&output_only, &[timed_out]).is_some());
    let fine = [cell(CellStatus::Complete, "42\n")];
    assert_eq!(unexpected_status(&output_only, &fine), None);
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
    assert!(
        run(
            r#"{kind = "file_exists", path = "./out/report.txt"}"#,
            &cells
        )
        .passed
    );
    assert!(!run(r#"{kind = "file_exists", path = "nope.txt"}"#, &cells).passed);
    let one_of = run(
        r#"{kind = "file_exists_one_of", paths = ["a.txt", "out/report.txt"]}"#,
        &cells,
    );
    assert!(one_of.passed, "{one_of:?}");
    assert_eq!(one_of.name, "file.existsOneOf:a.txt|out/report.txt");
    let regex = r#"{kind = "file_contains", path = "out/report.txt", pattern = "total = \\d+"}"#;
    assert!(run(regex, &cells).passed);
    let quality = run(
        r#"{kind = "file_content_quality", path = "out/report.txt", expected = "total = 42"}"#,
        &cells,
    );
    assert_eq!((quality.score, quality.passed), (1.0, true));
    assert_eq!(quality.name, "file.quality:out/report.txt");
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
