//! The cell corpus of `workers/tests/js_corpus`: tricky cells run through the real engine,
//! each judged by what its last cell prints, so the rewriter is held to semantics, not text.
use super::tests::{engine, run};
use cellvisor_ipc::CellOutcome;
use std::path::Path;

/// What a case's last cell must do.
#[derive(Debug)]
enum Expect {
    /// Complete, printing exactly this (trailing newlines ignored).
    Prints(String),
    /// Fail, with this text in its stderr.
    Fails(String),
}

#[derive(Debug)]
struct Case {
    file: String,
    name: String,
    cells: Vec<String>,
    expect: Expect,
}

/// Reads one `.cells` file (format in the corpus README).
fn parse_cells(file: &str, text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for block in text.split("\n=== ").map(|b| b.trim_start_matches("=== ")) {
        if block.trim().is_empty() {
            continue;
        }
        let (name, body) = block.split_once('\n').unwrap_or((block, ""));
        let (cells_text, expect) = if let Some((cells, out)) = body.split_once("\n>>>") {
            let out = out.strip_prefix('\n').unwrap_or(out);
            (
                cells,
                Expect::Prints(out.trim_end_matches('\n').to_string()),
            )
        } else if let Some((cells, err)) = body.split_once("\n!!! ") {
            (cells, Expect::Fails(err.trim().to_string()))
        } else {
            panic!("{file}: case {name:?} has no `>>>` or `!!!` line");
        };
        let mut cells: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in cells_text.lines().chain(std::iter::once("--- end")) {
            match line {
                "---" | "--- again" | "--- end" => {
                    cells.push(std::mem::take(&mut current));
                    if line == "--- again" {
                        let previous = cells.last().cloned().unwrap_or_default();
                        cells.push(previous);
                        // The separator after `--- again` starts a fresh cell; an empty
                        // one is dropped below.
                    }
                }
                _ => {
                    if !current.is_empty() {
                        current.push('\n');
                    }
                    current.push_str(line);
                }
            }
        }
        cells.retain(|cell| !cell.trim().is_empty());
        cases.push(Case {
            file: file.to_string(),
            name: name.trim().to_string(),
            cells,
            expect,
        });
    }
    cases
}

fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js_corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus directory")
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cells"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("a corpus file");
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            parse_cells(&name, &text)
        })
        .collect()
}

/// Runs one case in a fresh engine; `Err` says how it went wrong.
fn check(case: &Case) -> Result<(), String> {
    let mut js = engine();
    let Some((last, before)) = case.cells.split_last() else {
        return Err("no cells".into());
    };
    for cell in before {
        let ran = run(&mut js, cell);
        if ran.outcome != CellOutcome::Completed {
            return Err(format!(
                "cell {cell:?} ended {:?}: {}",
                ran.outcome, ran.stderr
            ));
        }
    }
    let ran = run(&mut js, last);
    match &case.expect {
        Expect::Prints(expected) => {
            if ran.outcome != CellOutcome::Completed {
                return Err(format!("last cell ended {:?}: {}", ran.outcome, ran.stderr));
            }
            let printed = ran.stdout.trim_end_matches('\n');
            if printed != expected {
                return Err(format!("printed {printed:?}, expected {expected:?}"));
            }
        }
        Expect::Fails(text) => {
            if !matches!(ran.outcome, CellOutcome::Failed { .. }) || !ran.stderr.contains(text) {
                return Err(format!(
                    "expected a failure with {text:?}, got {:?}: {}",
                    ran.outcome, ran.stderr
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn js_corpus_cells_behave_as_written() {
    let cases = corpus();
    assert!(cases.len() >= 200, "the corpus shrank to {}", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            check(case)
                .err()
                .map(|why| format!("{} / {}: {why}", case.file, case.name))
        })
        .collect();
    eprintln!(
        "js corpus: {} right, {} wrong of {}",
        cases.len() - failures.len(),
        failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
