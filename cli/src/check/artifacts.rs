//! Where a run's files go: `<out>/<variant>/<suite>/<id>/` per case (`result.json`,
//! `events.jsonl`, `workspace.json`, the whole output of a cell that spilled) and
//! `<out>/summary.json` for the run.

use super::run::CaseResult;
use super::summary::RunSummary;
use cellvisor::names::encode_component as file_safe;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of one case run: `<out>/<variant>/<suite>/<id>/`, with `repeat-<n>/`
/// below it when cases are repeated. A name's characters unsafe in a file name are escaped
/// (`%XX`, injectively), so two names never share a directory.
pub fn case_dir(out: &Path, result: &CaseResult, repeats: u32) -> PathBuf {
    let mut dir = out
        .join(file_safe(&result.variant))
        .join(file_safe(&result.suite))
        .join(file_safe(&result.id));
    if repeats > 1 {
        dir.push(format!("repeat-{}", result.repeat));
    }
    dir
}

/// Writes a case's files into `dir` (replacing an earlier run's).
pub fn write_case(dir: &Path, result: &CaseResult) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    write_json(&dir.join("result.json"), result)?;
    write_json(&dir.join("workspace.json"), &result.workspace)?;
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

/// Writes the run's `summary.json` into `out`.
pub fn write_summary(out: &Path, summary: &RunSummary) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    write_json(&out.join("summary.json"), summary)
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut file, value)?;
    file.write_all(b"\n")?;
    file.flush()
}
