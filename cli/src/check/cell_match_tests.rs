use super::*;
use crate::check::fixtures::completed;
use crate::check::notebook::ResultOutput;
use serde_json::json;

fn mimes(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|m| m.to_string()).collect()
}

fn stdout(text: &str) -> Actual {
    Actual {
        stdout: text.into(),
        ..Actual::default()
    }
}

fn plain_result(text: &str) -> Option<ResultOutput> {
    Some(ResultOutput {
        text: text.into(),
        mimes: mimes(&["text/plain"]),
    })
}

#[test]
fn a_printed_trailing_value_matches_the_stored_execute_result() {
    let expected = Expected {
        stdout: "hi\n".into(),
        result: plain_result("{'a': 1}"),
        ..Expected::default()
    };
    let mut actual = stdout("hi\n{'a': 1}\n");
    // A dict also goes out as a JSON bundle; it is the value, not a display.
    actual.displays = vec![(
        mimes(&["application/json", "text/plain"]),
        "{'a': 1}".into(),
    )];
    let verdict = compare(&expected, &actual);
    assert!(verdict.matched(), "{verdict:?}");

    actual.stdout = "hi\n{'a': 2}\n".into();
    actual.displays = vec![(
        mimes(&["application/json", "text/plain"]),
        "{'a': 2}".into(),
    )];
    let verdict = compare(&expected, &actual);
    assert_eq!(
        verdict.differs,
        ["result"],
        "the other dict's JSON bundle is its value too"
    );
    assert!(
        verdict.diff.contains("- {'a': 1}\n+ {'a': 2}"),
        "{}",
        verdict.diff
    );
    let verdict = compare(&expected, &stdout("ho\n{'a': 1}\n"));
    assert_eq!(verdict.differs, ["stdout"]);
}

#[test]
fn a_rich_trailing_value_matches_a_display_with_its_text() {
    let expected = Expected {
        result: Some(ResultOutput {
            text: "   a\n0  1".into(),
            mimes: mimes(&["text/html", "text/plain"]),
        }),
        ..Expected::default()
    };
    let mut actual = Actual {
        displays: vec![(mimes(&["text/html", "text/plain"]), "   a\n0  1".into())],
        ..Actual::default()
    };
    assert!(compare(&expected, &actual).matched());
    actual.displays = vec![(mimes(&["text/plain"]), "   a\n0  1".into())];
    let verdict = compare(&expected, &actual);
    assert_eq!(verdict.differs, ["result"]);
    assert!(
        verdict
            .diff
            .contains("- text/html, text/plain\n+ text/plain"),
        "{}",
        verdict.diff
    );
    // A rich value whose text changed is still the value, with its text diffed.
    actual.displays = vec![(mimes(&["text/html", "text/plain"]), "   a\n0  2".into())];
    let verdict = compare(&expected, &actual);
    assert_eq!(verdict.differs, ["result"]);
    assert!(verdict.diff.ends_with("- 0  1\n+ 0  2"), "{}", verdict.diff);
    // An image-only value has no text to find it by: its MIME types do.
    let expected = Expected {
        result: Some(ResultOutput {
            text: String::new(),
            mimes: mimes(&["image/png"]),
        }),
        ..Expected::default()
    };
    actual.displays = vec![(mimes(&["image/png"]), String::new())];
    assert!(compare(&expected, &actual).matched());
}

#[test]
fn displays_compare_mime_types_in_order_and_errors_by_name() {
    let expected = Expected {
        displays: vec![mimes(&["image/png", "text/plain"]), mimes(&["text/plain"])],
        error: Some("KeyError".into()),
        ..Expected::default()
    };
    let mut actual = Actual {
        displays: vec![
            (mimes(&["image/png", "text/plain"]), "<Figure>".into()),
            (mimes(&["application/json", "text/plain"]), "{}".into()),
        ],
        error: Some(("KeyError".into(), "KeyError: 'plums'".into())),
        ..Actual::default()
    };
    assert!(compare(&expected, &actual).matched());
    actual.displays.pop();
    actual.error = Some((
        "NameError".into(),
        "NameError: name 'x' is not defined".into(),
    ));
    let verdict = compare(&expected, &actual);
    assert_eq!(verdict.differs, ["displays", "error"]);
    assert!(
        verdict
            .diff
            .contains("- [image/png, text/plain] [text/plain]\n+ [image/png, text/plain]"),
        "{}",
        verdict.diff
    );
    assert!(
        verdict
            .diff
            .contains("- KeyError\n+ NameError: name 'x' is not defined"),
        "{}",
        verdict.diff
    );
}

#[test]
fn normalised_differences_do_not_count() {
    let expected = Expected {
        stdout: "CPU times: user 1 ms\nWall time: 2 ms\n<Node object at 0x7f3c1a2b9d50>  \n".into(),
        stderr: "/tmp/ipykernel_1/22.py:2: UserWarning: w\n".into(),
        ..Expected::default()
    };
    let actual = Actual {
        stdout: "CPU times: user 9 µs\nWall time: 11.8 µs\n<Node object at 0x7effe507e500>\n"
            .into(),
        stderr: "<cell 17>:2: UserWarning: w\n".into(),
        ..Actual::default()
    };
    assert!(compare(&expected, &actual).matched());
}

#[test]
fn a_failed_cell_is_read_from_its_events_and_traceback() {
    let mut cell = completed("", 1.0);
    cell.report.status = CellStatus::Error;
    let event = |stream: &'static str, text: &str| TimedEvent {
        at: String::new(),
        elapsed_ms: 0.0,
        phase: "cells",
        event: CellEvent::Output {
            index: 0,
            stream,
            text: text.into(),
        },
    };
    let events = [
        event("stdout", "before\n"),
        event("stderr", "a warning\nTraceback (most recent call last):\n"),
        event(
            "stderr",
            "  File \"<cell 3>\", line 1\npandas.errors.ParserError: bad\n",
        ),
    ];
    cell.report.displays = vec![json!({"image/png": "iVBO", "text/plain": "<Figure>",
        "application/x-cellvisor-display": {"display_id": "d", "update": false}})];
    let actual = Actual::observe(&cell, &events);
    assert_eq!(actual.stdout, "before\n");
    assert_eq!(actual.stderr, "a warning\n");
    assert_eq!(
        actual.error,
        Some((
            "ParserError".into(),
            "pandas.errors.ParserError: bad".into()
        ))
    );
    assert_eq!(actual.displays[0].0, mimes(&["image/png", "text/plain"]));
    let syntax = [event(
        "stderr",
        "  File \"<cell 4>\", line 1\n    def f(:\nSyntaxError: invalid syntax\n",
    )];
    let actual = Actual::observe(&cell, &syntax);
    assert_eq!(actual.stderr, "");
    assert_eq!(actual.error.map(|e| e.0).as_deref(), Some("SyntaxError"));
    cell.report.status = CellStatus::Cancelled;
    cell.report.output = "cell timed out after 30 s\n".into();
    let actual = Actual::observe(&cell, &[]);
    assert_eq!(actual.error.map(|e| e.0).as_deref(), Some("cancelled"));
}

#[test]
fn the_short_diff_shows_the_differing_lines_only() {
    assert_eq!(
        short_diff("a\nb\nc", "a\nx\nc"),
        "  (after 1 equal line)\n- b\n+ x"
    );
    assert_eq!(short_diff("", "x"), "- (nothing)\n+ x");
    let long: String = (0..10).map(|n| format!("{n}\n")).collect();
    let diff = short_diff(long.trim_end(), "");
    assert!(diff.ends_with("- … 6 more line(s)\n+ (nothing)"), "{diff}");
    let wide = "y".repeat(300);
    assert!(short_diff("x", &wide).ends_with("y…"));
}
