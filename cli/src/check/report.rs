//! The run summary as a terminal table: one row per case run, then metrics, tags, variants
//! side by side, the failures with their reasons, and a closing line.

use super::notebook_summary::NotebookRow;
use super::summary::{CaseRow, ComparisonCell, RunSummary, Totals};
use std::fmt::Write;

/// Formats the summary for a terminal.
pub fn format_table(summary: &RunSummary) -> String {
    let many_variants = summary.variants.len() > 1;
    let mut out = String::new();
    // A notebook's cells are shown as one line per notebook (below), not a row each.
    let in_notebook = |case: &CaseRow| {
        summary
            .notebooks
            .iter()
            .any(|n| n.variant == case.variant && n.suite == case.suite)
    };
    let cases: Vec<&CaseRow> = summary.cases.iter().filter(|c| !in_notebook(c)).collect();
    let mut rows = vec![{
        let mut header = vec!["result"];
        if many_variants {
            header.push("variant");
        }
        header.extend(["case", "score", "time", "failed scorers"]);
        header.into_iter().map(String::from).collect::<Vec<_>>()
    }];
    for case in &cases {
        let mut row = vec![if case.passed { "pass" } else { "FAIL" }.to_string()];
        if many_variants {
            row.push(case.variant.clone());
        }
        let mut name = format!("{}/{}", case.suite, case.id);
        if summary.cases.iter().any(|c| c.repeat > 1) {
            let _ = write!(name, " #{}", case.repeat);
        }
        row.extend([
            name,
            format!("{:.2}", case.score),
            duration(case.duration_ms),
            case.failed_scorers.join(", "),
        ]);
        rows.push(row);
    }
    if !cases.is_empty() {
        table(&mut out, &rows);
    }
    if !summary.notebooks.is_empty() {
        if !cases.is_empty() {
            out.push('\n');
        }
        notebook_table(&mut out, &summary.notebooks, many_variants);
    }

    if !summary.totals.metrics.is_empty() {
        out.push('\n');
        let mut rows = vec![["metric", "n", "min", "mean", "p50", "p90", "max", "score"]
            .map(String::from)
            .to_vec()];
        for metric in &summary.totals.metrics {
            let stats = metric.raw.as_ref();
            let stat = |f: fn(&super::metrics::MetricStats) -> f64| {
                stats.map_or("-".to_string(), |s| number(f(s)))
            };
            let mut n = metric.count.to_string();
            if metric.missing > 0 {
                let _ = write!(n, " ({} missing)", metric.missing);
            }
            rows.push(vec![
                metric.id.clone(),
                n,
                stat(|s| s.min),
                stat(|s| s.mean),
                stat(|s| s.p50),
                stat(|s| s.p90),
                stat(|s| s.max),
                format!("{:.2}", metric.score),
            ]);
        }
        table(&mut out, &rows);
    }

    if !summary.totals.tag_scores.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["tag".to_string(), "score".to_string()]];
        rows.extend(
            summary
                .totals
                .tag_scores
                .iter()
                .map(|(tag, score)| vec![tag.clone(), format!("{score:.2}")]),
        );
        table(&mut out, &rows);
    }

    if many_variants {
        out.push('\n');
        let mut rows = vec![["variant", "cases", "passed", "pass rate", "score", "time"]
            .map(String::from)
            .to_vec()];
        for variant in &summary.variants {
            let t = &variant.totals;
            rows.push(vec![
                variant.variant.clone(),
                t.count.to_string(),
                t.passed.to_string(),
                percent(t.pass_rate),
                format!("{:.2}", t.score),
                duration(t.duration_ms),
            ]);
        }
        table(&mut out, &rows);
    }

    if let Some(comparison) = &summary.comparison {
        out.push('\n');
        let mut header = vec!["case".to_string()];
        header.extend(comparison.variants.iter().cloned());
        header.push(format!(
            "diff ({} - {})",
            comparison.variants.last().map_or("", String::as_str),
            comparison.variants.first().map_or("", String::as_str)
        ));
        let mut rows = vec![header];
        for row in &comparison.rows {
            let mut line = vec![format!("{}/{}", row.suite, row.id)];
            line.extend(row.cells.iter().map(|cell| match cell {
                Some(cell) => comparison_cell(cell),
                None => "-".to_string(),
            }));
            line.push(
                row.difference
                    .map_or("-".to_string(), |d| format!("{d:+.2}")),
            );
            rows.push(line);
        }
        table(&mut out, &rows);
    }

    let failures: Vec<&CaseRow> = cases.iter().copied().filter(|c| !c.passed).collect();
    if !failures.is_empty() {
        out.push_str("\nfailures:\n");
        for result in failures {
            let variant = if many_variants {
                format!(" [{}]", result.variant)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {}/{}{variant} #{}",
                result.suite, result.id, result.repeat
            );
            for score in &result.failures {
                let _ = writeln!(out, "    {}: {}", score.name, score.details);
            }
            if !result.trajectory_line.is_empty() {
                let _ = writeln!(out, "    trajectory: {}", result.trajectory_line);
            }
            if let Some(dir) = &result.artifact_dir {
                let _ = writeln!(out, "    artifacts: {dir}");
            }
        }
    }

    notebook_mismatches(&mut out, &summary.notebooks, many_variants);

    out.push('\n');
    if !summary.notebooks.is_empty() {
        let cells: usize = summary.notebooks.iter().map(|n| n.code_cells).sum();
        let matching: usize = summary.notebooks.iter().map(|n| n.matching).sum();
        let rate = if cells == 0 {
            1.0
        } else {
            matching as f64 / cells as f64
        };
        let _ = writeln!(
            out,
            "{} notebook run{}: {matching} of {cells} cells match ({})",
            summary.notebooks.len(),
            if summary.notebooks.len() == 1 {
                ""
            } else {
                "s"
            },
            percent(rate)
        );
    }
    out.push_str(&closing_line(&summary.totals));
    out.push('\n');
    out
}

/// One line per notebook run: its cells, how many match, the match rate, the time.
fn notebook_table(out: &mut String, notebooks: &[NotebookRow], many_variants: bool) {
    let mut header = vec!["notebook"];
    if many_variants {
        header.push("variant");
    }
    header.extend(["cells", "matching", "match rate", "time"]);
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    let repeated = notebooks.iter().any(|n| n.repeat > 1);
    for notebook in notebooks {
        let mut name = notebook.path.clone();
        if repeated {
            let _ = write!(name, " #{}", notebook.repeat);
        }
        let mut row = vec![name];
        if many_variants {
            row.push(notebook.variant.clone());
        }
        let mut matching = notebook.matching.to_string();
        if notebook.incomplete > 0 {
            let _ = write!(matching, " ({} could not run)", notebook.incomplete);
        }
        row.extend([
            notebook.code_cells.to_string(),
            matching,
            percent(notebook.match_rate),
            duration(notebook.duration_ms),
        ]);
        rows.push(row);
    }
    table(out, &rows);
}

/// Every mismatching notebook cell with what differs and its short diff, indented.
fn notebook_mismatches(out: &mut String, notebooks: &[NotebookRow], many_variants: bool) {
    let with_mismatches: Vec<&NotebookRow> = notebooks
        .iter()
        .filter(|n| !n.mismatches.is_empty())
        .collect();
    if with_mismatches.is_empty() {
        return;
    }
    out.push_str("\nmismatching cells:\n");
    for notebook in with_mismatches {
        let variant = if many_variants {
            format!(" [{}]", notebook.variant)
        } else {
            String::new()
        };
        let _ = writeln!(out, "  {}{variant} #{}", notebook.path, notebook.repeat);
        for cell in &notebook.mismatches {
            let count = cell
                .execution_count
                .map_or(String::new(), |n| format!(" (In [{n}])"));
            let mut lines = cell.details.lines();
            let _ = writeln!(
                out,
                "    cell {}{count}: {}",
                cell.number,
                lines.next().unwrap_or("")
            );
            for line in lines {
                let _ = writeln!(out, "      {line}");
            }
        }
    }
}

/// `N cases: P passed, F failed (R%), mean score S, T`, with `, I did not complete` after the
/// rate when some case did not run as written.
pub fn closing_line(totals: &Totals) -> String {
    let incomplete = if totals.incomplete > 0 {
        format!(", {} did not complete", totals.incomplete)
    } else {
        String::new()
    };
    format!(
        "{} case{}: {} passed, {} failed ({}){incomplete}, mean score {:.2}, {}",
        totals.count,
        if totals.count == 1 { "" } else { "s" },
        totals.passed,
        totals.failed,
        percent(totals.pass_rate),
        totals.score,
        duration(totals.duration_ms)
    )
}

fn comparison_cell(cell: &ComparisonCell) -> String {
    let verdict = if cell.passed == cell.runs {
        "pass"
    } else {
        "FAIL"
    };
    if cell.runs > 1 {
        format!("{verdict} {}/{} {:.2}", cell.passed, cell.runs, cell.score)
    } else {
        format!("{verdict} {:.2}", cell.score)
    }
}

fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

fn duration(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// A raw metric value: integers as integers, others with up to 2 decimals.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// Left-aligned columns two spaces apart; the last column is not padded.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::summary::summarize;
    use crate::check::summary::tests::result;

    #[test]
    fn a_failed_case_names_its_scorer_and_the_totals_close_the_table() {
        let results = [
            result("default", "ok", 1, &[true]),
            result("default", "broken", 1, &[true, false]),
        ];
        let text = format_table(&summarize(&results));
        let broken = text
            .lines()
            .find(|l| l.contains("s/broken"))
            .expect("row for the broken case");
        assert!(broken.starts_with("FAIL"), "{text}");
        assert!(broken.ends_with("scorer1"), "{text}");
        assert!(
            text.contains("\nfailures:\n  s/broken #1\n    scorer1: \n"),
            "{text}"
        );
        assert!(
            text.ends_with("2 cases: 1 passed, 1 failed (50.0%), mean score 0.75, 200 ms\n"),
            "{text}"
        );
        assert!(
            !text.contains("variant"),
            "one variant, no variant column: {text}"
        );
        let mut broken = result("default", "broken", 1, &[true]);
        broken.completed = false;
        let text = format_table(&summarize(&[broken]));
        assert!(
            text.contains("1 case: 1 passed, 0 failed (100.0%), 1 did not complete, mean"),
            "{text}"
        );
    }

    #[test]
    fn variants_appear_side_by_side_with_the_difference() {
        let results = [
            result("small", "a", 1, &[false]),
            result("large", "a", 1, &[true]),
        ];
        let text = format_table(&summarize(&results));
        let header = text
            .lines()
            .find(|l| l.starts_with("case "))
            .expect("comparison header");
        assert!(
            header.contains("small") && header.contains("large"),
            "{text}"
        );
        assert!(header.ends_with("diff (large - small)"), "{text}");
        let row = text
            .lines()
            .find(|l| l.starts_with("s/a "))
            .expect("comparison row");
        assert!(row.contains("FAIL 0.00"), "{row}");
        assert!(row.contains("pass 1.00"), "{row}");
        assert!(row.ends_with("+1.00"), "{row}");
    }
}
