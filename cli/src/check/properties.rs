//! Property tests of what `cellvisor check` reads: case files (TOML and JSON) and notebooks.
//! Whatever the text, the loaders return a suite or an error, never panic; a case file whose
//! only mistake is in one case is refused naming that case; anything a notebook parses into
//! can be scored.
//!
//! Seeds are fixed ([`config`]) so a run is the same everywhere; cases per property: 64, or
//! `PROPTEST_CASES` for a longer manual run (`PROPTEST_CASES=20000 cargo test -p
//! cellvisor-cli check::properties`), and `PROPTEST_RNG_SEED` picks another seed.

use super::cell_match::{compare, Actual};
use super::normalise::normalise;
use super::notebook;
use super::suite::{parse_str, SuiteError};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{json, Map, Value};
use std::path::Path;

/// Fixed seed and a modest case count, both overridable from the environment.
fn config() -> Config {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    Config {
        cases: env("PROPTEST_CASES").map_or(64, |n| n as u32),
        rng_seed: RngSeed::Fixed(env("PROPTEST_RNG_SEED").unwrap_or(0x00c0_ffee_2027)),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A case that loads: `id`, one Python cell, one scorer.
fn valid_case(id: &str) -> Value {
    json!({"id": id, "cells": [{"language": "py", "code": "print(1)"}],
           "scorers": [{"kind": "output_contains", "text": "1"}]})
}

/// One mistake a case can hold (each one makes it refused).
fn defects() -> impl Strategy<Value = usize> {
    0usize..16
}

fn break_case(case: &mut Value, defect: usize, noise: &str) {
    let Some(fields) = case.as_object_mut() else {
        return;
    };
    let cell = json!({"language": "py", "code": noise});
    match defect {
        0 => {
            fields.remove("cells");
        }
        1 => {
            fields.insert("cells".into(), json!([]));
        }
        2 => {
            fields.insert("scorers".into(), json!([]));
        }
        3 => {
            fields.insert("cells".into(), json!([{"language": "ruby", "code": noise}]));
        }
        4 => {
            fields.insert(
                "cells".into(),
                json!([{"language": "py", "code": noise, "colour": 1}]),
            );
        }
        5 => {
            fields.insert("scorers".into(), json!([{"kind": format!("no-{noise}")}]));
        }
        6 => {
            fields.insert("scorers".into(), json!([{"kind": "output_contains"}]));
        }
        7 => {
            fields.insert(
                "scorers".into(),
                json!([{"kind": "output_equals", "text": noise, "cell": 99}]),
            );
        }
        8 => {
            fields.insert(
                "scorers".into(),
                json!([{"kind": "output_matches", "pattern": format!("({noise}")}]),
            );
        }
        9 => {
            fields.insert("capture".into(), json!([format!("../{noise}")]));
        }
        10 => {
            fields.insert(format!("unknown_{noise}"), json!(true));
        }
        11 => {
            fields.insert("workspace".into(), json!(format!("no/such/{noise}")));
        }
        12 => {
            fields.insert(
                "metrics".into(),
                json!({"m": {"measure": "output_number", "pattern": "(", "min": 0, "max": 1}}),
            );
        }
        13 => {
            fields.insert("tags".into(), json!(5));
        }
        14 => {
            fields.insert(
                "cells".into(),
                json!([cell, {"language": "js", "timeout": noise}]),
            );
        }
        _ => {
            fields.insert(
                "scorers".into(),
                json!([{"kind": "file_contains", "path": "/etc/passwd", "text": noise}]),
            );
        }
    }
}

/// A suite as TOML (`[[case]]`) or JSON (`cases`), with the file name it is read under.
fn render(cases: Vec<Value>, toml: bool) -> Option<(String, &'static str)> {
    if toml {
        let suite = json!({"suite": "props", "case": cases});
        toml::to_string(&suite)
            .ok()
            .map(|text| (text, "props.toml"))
    } else {
        let suite = json!({"suite": "props", "cases": cases});
        Some((suite.to_string(), "props.json"))
    }
}

/// Any JSON, with object keys mostly from what notebooks and case files use.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "cells",
        "cell_type",
        "code",
        "markdown",
        "raw",
        "source",
        "outputs",
        "output_type",
        "stream",
        "name",
        "stdout",
        "stderr",
        "text",
        "data",
        "text/plain",
        "image/png",
        "execute_result",
        "display_data",
        "error",
        "ename",
        "metadata",
        "kernelspec",
        "language",
        "language_info",
        "nbformat",
        "execution_count",
        "worksheets",
        "x",
    ])
    .prop_map(String::from);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        prop::sample::select(vec![
            "code",
            "markdown",
            "stream",
            "stdout",
            "stderr",
            "execute_result",
            "display_data",
            "error",
            "python",
            "javascript",
            "lua",
            "R",
            "print(1)\n",
            "",
        ])
        .prop_map(|s| json!(s)),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    /// Any text under either extension gives a suite or an error that says something.
    #[test]
    fn any_case_file_text_loads_or_is_refused(
        text in prop_oneof![".{0,200}", "[\\[\\]{}=\"',:a-z0-9 \n]{0,200}"],
        toml in any::<bool>(),
    ) {
        let name = if toml { "any.toml" } else { "any.json" };
        if let Err(err) = parse_str(&text, Path::new(name)) {
            prop_assert!(!err.to_string().trim().is_empty());
        }
    }

    /// A valid case file cut or spliced anywhere loads or is refused, never panics.
    #[test]
    fn a_mangled_case_file_loads_or_is_refused(
        cut in any::<prop::sample::Index>(),
        splice in ".{0,8}",
        toml in any::<bool>(),
    ) {
        let Some((text, name)) = render(vec![valid_case("a"), valid_case("b")], toml) else {
            return Ok(());
        };
        let mut at = cut.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let mangled = format!("{}{splice}{}", &text[..at], &text[at..]);
        let _ = parse_str(&mangled, Path::new(name));
        let _ = parse_str(&text[..at], Path::new(name));
    }

    /// One case with one mistake among valid ones: the file is refused naming that case.
    #[test]
    fn a_mistake_in_one_case_is_refused_naming_the_case(
        count in 1usize..4,
        broken in any::<prop::sample::Index>(),
        defect in defects(),
        noise in "[a-z]{1,6}",
        toml in any::<bool>(),
    ) {
        let which = broken.index(count);
        let mut cases: Vec<Value> = (0..count).map(|n| valid_case(&format!("case{n}"))).collect();
        break_case(&mut cases[which], defect, &noise);
        let Some((text, name)) = render(cases, toml) else { return Ok(()) };
        let named = format!("case \"case{which}\"");
        match parse_str(&text, Path::new(name)) {
            Ok(suite) => prop_assert!(false, "defect {defect} loaded: {suite:?}\n{text}"),
            Err(err @ (SuiteError::At { .. } | SuiteError::Invalid { .. })) => {
                prop_assert!(err.to_string().contains(&named), "defect {defect}: {err}\n{text}");
            }
            Err(err) => prop_assert!(false, "defect {defect}: unexpected {err}"),
        }
    }

    /// Any JSON read as a notebook gives a suite or an error; a suite's cells can be scored
    /// against a cell that printed nothing.
    #[test]
    fn any_json_reads_as_a_notebook_or_is_refused(
        value in any_json(),
        wrap in any::<bool>(),
    ) {
        let value = if wrap { json!({"nbformat": 4, "cells": [value]}) } else { value };
        match notebook::parse(&value.to_string(), Path::new("p.ipynb"), "p".into()) {
            Ok(suite) => {
                let info = suite.notebook.as_ref().map(|n| n.code_cells);
                prop_assert_eq!(info, Some(suite.cases.len()));
                for case in &suite.cases {
                    if let Some(cell) = &case.notebook {
                        let _ = compare(&cell.expected, &Actual::default());
                    }
                }
            }
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
    }

    /// Any text read as a notebook, and any text normalised, never panics.
    #[test]
    fn any_text_reads_as_a_notebook_or_is_refused(text in ".{0,300}") {
        let _ = notebook::parse(&text, Path::new("t.ipynb"), "t".into());
        let normalised = normalise(&text);
        prop_assert!(normalised.lines().all(|l| l.trim_end() == l));
    }
}
