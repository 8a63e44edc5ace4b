//! Unit tests of case files: parsing, positions, and what is refused.

use super::*;

fn toml(text: &str) -> Result<Suite, SuiteError> {
    parse(text, Path::new("/x/s.toml"), Format::Toml)
}

const GOOD: &str = r#"
suite = "basics"
[metrics.time]
min = 0
max = 1000
direction = "lower"
measure = "duration_ms"

[[case]]
id = "answer"
tags = ["py"]
cells = [{ language = "py", code = "print(6*7)" }]
scorers = [{ kind = "output_equals", text = "42" }, { kind = "status", expect = "complete" }]
"#;

#[test]
fn a_toml_suite_parses_with_suite_metrics_on_each_case() {
    let suite = toml(GOOD).unwrap();
    assert_eq!(suite.name, "basics");
    assert_eq!(suite.cases.len(), 1);
    assert_eq!(suite.cases[0].scorers.len(), 2);
    assert!(suite.cases[0].metrics.contains_key("time"));
    let with_variants = toml(&GOOD.replace(
        "suite = \"basics\"",
        "suite = \"basics\"\n[variants]\nwide = \"w.toml\"\nnarrow = \"n.toml\"",
    ))
    .unwrap();
    let names: Vec<&str> = with_variants
        .variants
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["wide", "narrow"], "file order is kept");
    assert_eq!(with_variants.variants[0].1, Path::new("/x/w.toml"));
}

#[test]
fn a_json_suite_parses_and_takes_its_name_from_the_file() {
    let text = r#"{"cases": [{"id": "a", "cells": [{"language": "lua", "code": "print(1)"}],
                   "scorers": [{"kind": "no_restart"}]}]}"#;
    let suite = parse(text, Path::new("/x/lua.json"), Format::Json).unwrap();
    assert_eq!(suite.name, "lua");
}

#[test]
fn toml_mistakes_carry_line_and_column() {
    let text = GOOD.replace("kind = \"status\"", "kind = \"stattus\"");
    let err = toml(&text).unwrap_err().to_string();
    assert!(err.starts_with("/x/s.toml:13:"), "{err}");
    assert!(err.contains("stattus"), "{err}");
    let err = toml("[[case]]\nid = \"a\"\ncells = [")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/x/s.toml:3:"), "{err}");
}

#[test]
fn json_mistakes_carry_line_and_column() {
    let text = "{\"cases\": [\n  {\"id\": \"a\", \"cells\": [], \"scorers\": []}\n]}";
    let err = parse(text, Path::new("/x/j.json"), Format::Json)
        .unwrap_err()
        .to_string();
    // A check of the whole case is reported where the parser noticed it: the case's end.
    assert!(err.starts_with("/x/j.json:3:1: "), "{err}");
    assert!(err.contains("has no cells"), "{err}");
    let twice = "{\"cases\": [\n  {\"id\": \"a\", \"cells\": [{\"language\": \"py\", \"code\": \"1\"}], \"scorers\": [{\"kind\": \"no_restart\"}]},\n  {\"id\": \"a\", \"cells\": [{\"language\": \"py\", \"code\": \"1\"}], \"scorers\": [{\"kind\": \"no_restart\"}]}\n]}";
    let err = parse(twice, Path::new("/x/j.json"), Format::Json)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/x/j.json:3:4: case id \"a\" is used twice"),
        "{err}"
    );
    let text = "{\"cases\": [\n  {\"id\": \"a\", \"celss\": []}\n]}";
    let err = parse(text, Path::new("/x/j.json"), Format::Json)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/x/j.json:2:"), "{err}");
    assert!(err.contains("unknown field `celss`"), "{err}");
}

#[test]
fn semantic_mistakes_are_named() {
    let dup = format!("{GOOD}\n[[case]]\nid = \"answer\"\ncells = [{{ language = \"py\", code = \"1\" }}]\nscorers = [{{ kind = \"no_restart\" }}]\n");
    let err = toml(&dup).unwrap_err().to_string();
    assert!(
        err.starts_with("/x/s.toml:16:1: case id \"answer\" is used twice"),
        "{err}"
    );
    let out_of_range = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"status\", expect = \"complete\", cell = 3 }",
    );
    let err = toml(&out_of_range).unwrap_err().to_string();
    assert!(err.contains("names cell 3"), "{err}");
    let seed = GOOD.replace("tags = [\"py\"]", "workspace = \"no-such-seed\"");
    let err = toml(&seed).unwrap_err().to_string();
    assert!(err.starts_with("/x/s.toml:11:1: "), "{err}");
    assert!(
        err.contains("workspace seed /x/no-such-seed is not"),
        "{err}"
    );
    assert!(toml("suite = \"x\"")
        .unwrap_err()
        .to_string()
        .contains("no cases"));
}

#[test]
fn bad_scorers_are_refused_naming_the_case_and_the_scorer() {
    let regex = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"file_contains\", path = \"out.txt\", pattern = \"total = (\" }",
    );
    let err = toml(&regex).unwrap_err().to_string();
    assert!(
        err.contains(
            "case \"answer\": scorer file.contains:out.txt: invalid pattern \"total = (\""
        ),
        "{err}"
    );
    let outside = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"file_exists\", path = \"../../etc/passwd\" }",
    );
    let err = toml(&outside).unwrap_err().to_string();
    assert!(
        err.contains("case \"answer\": scorer file.exists:../../etc/passwd: path \"../../etc/passwd\" must be relative"),
        "{err}"
    );
    let judge = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"judge\", command = [\"j\"], timeout = -1 }",
    );
    let err = toml(&judge).unwrap_err().to_string();
    assert!(err.contains("scorer llm.judge: judge timeout"), "{err}");
    // A judge's metric must be declared, without a measure of its own.
    let undeclared = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"judge\", command = [\"j\"], metric = \"quality\" }",
    );
    let err = toml(&undeclared).unwrap_err().to_string();
    assert!(
        err.contains("scorer llm.judge: metric \"quality\" is not declared")
            && err.contains("(declared: [time])"),
        "{err}"
    );
    let measured = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"judge\", command = [\"j\"], metric = \"time\" }",
    );
    let err = toml(&measured).unwrap_err().to_string();
    assert!(err.contains("metric \"time\" has a `measure`"), "{err}");
    let metric = GOOD.replace(
        "measure = \"duration_ms\"",
        "measure = \"output_number\"\npattern = \"(\"",
    );
    let err = toml(&metric).unwrap_err().to_string();
    assert!(err.contains("metric time: invalid pattern"), "{err}");
}

#[test]
fn a_judge_program_with_a_path_is_taken_next_to_the_case_file() {
    let text = GOOD.replace(
        "{ kind = \"status\", expect = \"complete\" }",
        "{ kind = \"judge\", command = [\"judges/grade.py\", \"x/y\"] }, \
         { kind = \"judge\", command = [\"python3\", \"judges/grade.py\"] }",
    );
    let suite = toml(&text).unwrap();
    let commands: Vec<Vec<String>> = suite.cases[0]
        .scorers
        .iter()
        .filter_map(|s| match s {
            Scorer::Judge { command, .. } => Some(command.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(commands[0], ["/x/judges/grade.py", "x/y"]);
    assert_eq!(commands[1], ["python3", "judges/grade.py"]);
}

#[test]
fn line_column_counts_characters() {
    assert_eq!(line_column("ab\ncdé\nx", 7), (2, 4));
    assert_eq!(line_column("ab\ncdé\nx", 8), (3, 1));
    assert_eq!(line_column("abc", 0), (1, 1));
}

#[test]
fn workspace_options_and_timeouts_are_checked_when_read() {
    let with = |case_lines: &str| {
        toml(&GOOD.replace("tags = [\"py\"]", &format!("tags = [\"py\"]\n{case_lines}")))
            .map_err(|e| e.to_string())
    };
    let err = with("workspace = { seedTarget = \"data\" }").unwrap_err();
    assert!(err.contains("give the seed as `seedDir` too"), "{err}");
    let err = with("workspace = { seed_dir = \"s\", seed_target = \"../up\" }").unwrap_err();
    assert!(
        err.contains("seedTarget \"../up\" must be relative"),
        "{err}"
    );
    let err = with("workspace = { seedDir = \"s\", keep = true }").unwrap_err();
    assert!(err.contains("unknown field `keep`"), "{err}");
    let err = with("workspace = { capture = [\"a\"] }\ncapture = [\"b\"]").unwrap_err();
    assert!(err.contains("give `capture` once"), "{err}");
    let err = with("timeout_ms = 0").unwrap_err();
    assert!(err.contains("timeout_ms must be above 0"), "{err}");
    let case = with("workspace = { retain = true, capture = [\"out\"] }\ntimeoutMs = 1500")
        .unwrap()
        .cases
        .remove(0);
    assert!(case.retain);
    assert_eq!(case.capture, ["out"]);
    assert_eq!(case.timeout_ms, Some(1500.0));
    // A suite's timeout_ms is the default of its cases.
    let suite = toml(&format!("timeout_ms = 2000\n{GOOD}")).unwrap();
    assert_eq!(suite.cases[0].timeout_ms, Some(2000.0));
}
