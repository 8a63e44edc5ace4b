//! Where a run's files go. Per case, the anchor's `<out>/<suite>/<id>/` (with
//! `<out>/<variant>/` first when the run has variants, and `repeat-<n>/` below when cases are
//! repeated): `result.json`, `events.jsonl`, `transcript.json`, `workspace.json`, and the whole
//! output of a cell that spilled. Per run, `<out>/summary.json` and the anchor's
//! `<out>/run-summary.json` (the same summary).

use super::run::CaseResult;
use super::summary::RunSummary;
use cellvisor::names::encode_component as file_safe;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The run summary's file names: cellvisor's and the anchor's reporter's.
pub const SUMMARY_FILES: [&str; 2] = ["summary.json", "run-summary.json"];

/// Paths of the files written for one case (the anchor's `EvalArtifacts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifacts {
    /// The directory that holds them.
    pub dir: PathBuf,
    pub events: PathBuf,
    pub result: PathBuf,
    pub transcript: PathBuf,
    /// Written when the case has a workspace snapshot (every case but a notebook cell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
}

impl Artifacts {
    /// The files [`write_case`] writes into `dir` for `result`.
    pub fn in_dir(dir: &Path, result: &CaseResult) -> Artifacts {
        Artifacts {
            dir: dir.to_path_buf(),
            events: dir.join("events.jsonl"),
            result: dir.join("result.json"),
            transcript: dir.join("transcript.json"),
            workspace: result
                .case
                .notebook
                .is_none()
                .then(|| dir.join("workspace.json")),
        }
    }
}

/// The directory of one case run: the anchor's `<out>/<suite>/<id>/`, under
/// `<out>/<variant>/` when `namespaced` (the run has variants), with `repeat-<n>/` below it
/// when cases are repeated. A name's characters unsafe in a path segment are escaped (`%XX`,
/// injectively, as session directories are), so two names never share a directory.
pub fn case_dir(out: &Path, result: &CaseResult, repeats: u32, namespaced: bool) -> PathBuf {
    let mut dir = out.to_path_buf();
    if namespaced {
        dir.push(file_safe(&result.variant));
    }
    dir.push(file_safe(&result.suite));
    dir.push(file_safe(&result.id));
    if repeats > 1 {
        dir.push(format!("repeat-{}", result.repeat));
    }
    dir
}

/// The anchor's directory for the same case run: its names with unsafe characters replaced
/// by `_`. It differs from [`case_dir`] only for a name that had to change; the run
/// writes the case there too (a later case whose name changes the same way replaces it, as
/// in the anchor; the escaped directory keeps each).
pub fn anchor_dir(out: &Path, result: &CaseResult, repeats: u32, namespaced: bool) -> PathBuf {
    let segment = |name: &str| -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut dir = out.to_path_buf();
    if namespaced {
        dir.push(segment(&result.variant));
    }
    dir.push(segment(&result.suite));
    dir.push(segment(&result.id));
    if repeats > 1 {
        dir.push(format!("repeat-{}", result.repeat));
    }
    dir
}

/// One entry of `transcript.json`: a cell as it was sent (its `code`) and as it ended (its
/// result, as `cellvisor eval --json` gives it), in run order.
#[derive(Serialize)]
struct Turn<'a> {
    /// `setup` or `cells`.
    phase: &'static str,
    code: &'a str,
    #[serde(flatten)]
    result: &'a cellvisor::cell::CellResult,
}

/// The turns of one phase.
fn turns<'a>(
    phase: &'static str,
    specs: &'a [cellvisor::cell::CellSpec],
    results: &'a [cellvisor::cell::CellResult],
) -> impl Iterator<Item = Turn<'a>> {
    results.iter().map(move |cell| Turn {
        phase,
        code: specs.get(cell.index).map_or("", |s| s.code.as_str()),
        result: cell,
    })
}

/// The case's transcript: every setup cell and cell under test, sent and answered, in order.
fn transcript(result: &CaseResult) -> Vec<Turn<'_>> {
    turns("setup", &result.case.setup, &result.setup)
        .chain(turns("cells", &result.case.cells, &result.cells))
        .collect()
}

/// Writes a case's files into `dir` (replacing an earlier run's).
pub fn write_case(dir: &Path, result: &CaseResult) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    write_json(&dir.join("result.json"), result)?;
    write_json(&dir.join("transcript.json"), &transcript(result))?;
    if result.case.notebook.is_none() {
        write_json(&dir.join("workspace.json"), &result.workspace)?;
    }
    let mut events = std::io::BufWriter::new(std::fs::File::create(dir.join("events.jsonl"))?);
    for event in &result.events {
        serde_json::to_writer(&mut events, event)?;
        events.write_all(b"\n")?;
    }
    events.flush()?;
    for cell in &result.cells {
        if let Some(spilled) = &cell.report.truncation.artifact_path {
            // The whole output of a cell that did not fit, kept with the case (spill files
            // are not kept forever); one already gone is not an error of this run.
            let copied =
                std::fs::copy(spilled, dir.join(format!("cell-{}-output.txt", cell.index)));
            match copied {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Writes the run's summary into `out`, as `summary.json` and as the anchor's
/// `run-summary.json`.
pub fn write_summary(out: &Path, summary: &RunSummary) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    for name in SUMMARY_FILES {
        write_json(&out.join(name), summary)?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut file, value)?;
    file.write_all(b"\n")?;
    file.flush()
}
