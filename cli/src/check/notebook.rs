//! Notebooks as suites: an `.ipynb` file (nbformat 4) becomes a suite whose cases are its
//! code cells in order, each carrying the outputs the notebook stored for it, so
//! `cellvisor check` can replay a notebook and say which cells still give the same output
//! (`docs/check.md`, "Notebooks"). Any JSON is read without panicking: what is not a
//! notebook, or not one in a language cellvisor runs, is refused saying why.

use super::suite::{Case, Suite};
use cellvisor::cell::CellSpec;
use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What a notebook suite knows beyond its cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotebookInfo {
    /// The language its code cells run in (from the kernel's metadata).
    pub language: Language,
    /// Code cells in the notebook that are not blank (each one a case).
    pub code_cells: usize,
    /// Markdown, raw and blank code cells: not run.
    pub skipped_cells: usize,
    /// Code cells the notebook holds no run of (no execution count, no outputs): they run,
    /// and are expected to print nothing.
    pub unexecuted: usize,
    /// The directory the notebook sits in: its files are copied into the notebook's fresh
    /// working directory, as Jupyter runs a notebook in its own directory.
    pub dir: PathBuf,
}

/// A case made from a code cell: where it stands and what the notebook stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotebookCell {
    /// The notebook file.
    pub notebook: PathBuf,
    /// 1-based among the notebook's code cells run (blank ones are not counted).
    pub number: usize,
    /// 0-based among all of the notebook's cells (markdown and raw included).
    pub position: usize,
    /// `In [N]` as stored, when the cell was run.
    pub execution_count: Option<i64>,
    pub expected: Expected,
}

/// A code cell's stored outputs, in the terms they are compared in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// `stream` outputs named `stdout`, concatenated.
    pub stdout: String,
    /// `stream` outputs named `stderr`, concatenated.
    pub stderr: String,
    /// The `execute_result`: the trailing value.
    pub result: Option<ResultOutput>,
    /// Each `display_data`'s MIME types, in order.
    pub displays: Vec<BTreeSet<String>>,
    /// The `error` output's `ename`.
    pub error: Option<String>,
}

/// A stored trailing value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultOutput {
    /// Its `text/plain` (empty when it has none).
    pub text: String,
    pub mimes: BTreeSet<String>,
}

/// Why a notebook cannot be a suite: bad input (exit status 2), said with the cell at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotebookError {
    #[error("not a notebook: {0}")]
    NotNotebook(String),
    #[error(
        "the notebook's kernel language is {0:?}; cellvisor runs notebooks in python, \
         javascript (as js) and lua"
    )]
    Language(String),
    #[error("cell {position} (counted from 0): {message}")]
    Cell { position: usize, message: String },
}

/// Reads a notebook's text into a suite named `name`: one case per non-blank code cell.
pub fn parse(text: &str, path: &Path, name: String) -> Result<Suite, NotebookError> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        NotebookError::NotNotebook(format!(
            "invalid JSON at line {} column {}: {}",
            e.line(),
            e.column(),
            e
        ))
    })?;
    let root = root.as_object().ok_or_else(|| {
        NotebookError::NotNotebook("the top level must be a JSON object with `cells`".into())
    })?;
    if root.contains_key("worksheets") {
        return Err(NotebookError::NotNotebook(
            "nbformat 3 (`worksheets`) is not read; save the notebook as nbformat 4".into(),
        ));
    }
    if let Some(major) = root.get("nbformat").and_then(Value::as_i64) {
        if major != 4 {
            return Err(NotebookError::NotNotebook(format!(
                "nbformat {major} is not read; nbformat 4 is"
            )));
        }
    }
    let language = language(root.get("metadata"))?;
    let cells = root
        .get("cells")
        .and_then(Value::as_array)
        .ok_or_else(|| NotebookError::NotNotebook("`cells` must be an array of cells".into()))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut cases = Vec::new();
    let mut skipped = 0;
    let mut unexecuted = 0;
    let code_count = cells
        .iter()
        .filter(|c| c.get("cell_type").and_then(Value::as_str) == Some("code"))
        .count();
    let width = code_count.to_string().len().max(3);
    for (position, cell) in cells.iter().enumerate() {
        let at = |message: String| NotebookError::Cell { position, message };
        let cell = cell
            .as_object()
            .ok_or_else(|| at("a cell must be a JSON object".into()))?;
        let kind = cell
            .get("cell_type")
            .and_then(Value::as_str)
            .ok_or_else(|| at("`cell_type` must be \"code\", \"markdown\" or \"raw\"".into()))?;
        if kind != "code" {
            skipped += 1;
            continue;
        }
        let source = multiline(cell.get("source"), "source").map_err(&at)?;
        if source.trim().is_empty() {
            skipped += 1;
            continue;
        }
        let outputs = match cell.get("outputs") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(outputs)) => outputs.as_slice(),
            Some(_) => return Err(at("`outputs` must be an array".into())),
        };
        let expected = expected(outputs).map_err(&at)?;
        let execution_count = cell.get("execution_count").and_then(Value::as_i64);
        if execution_count.is_none() && outputs.is_empty() {
            unexecuted += 1;
        }
        let number = cases.len() + 1;
        let spec = CellSpec {
            title: Some(match execution_count {
                Some(n) => format!("In [{n}]"),
                None => format!("cell {number}"),
            }),
            ..CellSpec::new(language, source)
        };
        cases.push(Case {
            id: format!("cell-{number:0width$}"),
            description: None,
            tags: Vec::new(),
            workspace: None,
            seed_target: None,
            retain: false,
            capture: Vec::new(),
            timeout_ms: None,
            setup: Vec::new(),
            cells: vec![spec],
            scorers: Vec::new(),
            metrics: BTreeMap::new(),
            notebook: Some(NotebookCell {
                notebook: path.to_path_buf(),
                number,
                position,
                execution_count,
                expected,
            }),
        });
    }
    Ok(Suite {
        name,
        path: path.to_path_buf(),
        variants: Vec::new(),
        notebook: Some(NotebookInfo {
            language,
            code_cells: cases.len(),
            skipped_cells: skipped,
            unexecuted,
            dir,
        }),
        cases,
    })
}

/// The language of the notebook's code cells: `language_info.name`, else
/// `kernelspec.language`, else Python (a notebook that does not say is a Python one).
fn language(metadata: Option<&Value>) -> Result<Language, NotebookError> {
    let named = metadata
        .and_then(|m| m.pointer("/language_info/name"))
        .and_then(Value::as_str)
        .or_else(|| {
            metadata
                .and_then(|m| m.pointer("/kernelspec/language"))
                .and_then(Value::as_str)
        });
    let Some(name) = named else {
        return Ok(Language::Python);
    };
    match name.trim().to_ascii_lowercase().as_str() {
        "python" | "python3" | "ipython" | "ipython3" => Ok(Language::Python),
        "javascript" | "js" => Ok(Language::JavaScript),
        "lua" => Ok(Language::Lua),
        _ => Err(NotebookError::Language(name.to_string())),
    }
}

/// A string field that nbformat allows as one string or a list of strings (joined).
fn multiline(value: Option<&Value>, field: &str) -> Result<String, String> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| part.as_str())
            .collect::<Option<String>>()
            .ok_or_else(|| format!("`{field}` must be a string or a list of strings")),
        Some(_) => Err(format!("`{field}` must be a string or a list of strings")),
    }
}

/// The stored outputs of one code cell.
fn expected(outputs: &[Value]) -> Result<Expected, String> {
    let mut expected = Expected::default();
    for (n, output) in outputs.iter().enumerate() {
        let at = |message: &str| format!("output {n}: {message}");
        let output = output
            .as_object()
            .ok_or_else(|| at("an output must be a JSON object"))?;
        let kind = output
            .get("output_type")
            .and_then(Value::as_str)
            .ok_or_else(|| at("`output_type` must be a string"))?;
        match kind {
            "stream" => {
                let text = multiline(output.get("text"), "text").map_err(|m| at(&m))?;
                match output.get("name").and_then(Value::as_str) {
                    Some("stdout") => expected.stdout.push_str(&text),
                    Some("stderr") => expected.stderr.push_str(&text),
                    _ => return Err(at("a stream's `name` must be \"stdout\" or \"stderr\"")),
                }
            }
            "execute_result" => {
                let data = data(output).map_err(|m| at(&m))?;
                let text = match data.get("text/plain") {
                    Some(text) => multiline(Some(text), "text/plain").map_err(|m| at(&m))?,
                    None => String::new(),
                };
                expected.result = Some(ResultOutput {
                    text,
                    mimes: data.keys().cloned().collect(),
                });
            }
            "display_data" => {
                let data = data(output).map_err(|m| at(&m))?;
                expected.displays.push(data.keys().cloned().collect());
            }
            // It changes a display shown before; what a replay shows is the last state.
            "update_display_data" => {}
            "error" => {
                let name = output
                    .get("ename")
                    .and_then(Value::as_str)
                    .ok_or_else(|| at("an error's `ename` must be a string"))?;
                expected.error = Some(name.to_string());
            }
            other => {
                return Err(at(&format!(
                    "unknown output_type {other:?} (stream, execute_result, display_data, \
                     update_display_data, error)"
                )))
            }
        }
    }
    Ok(expected)
}

/// An output's `data` bundle (MIME type to content).
fn data(output: &Map<String, Value>) -> Result<&Map<String, Value>, String> {
    output
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| "`data` must be an object of MIME type to content".into())
}

#[cfg(test)]
#[path = "notebook_tests.rs"]
mod tests;
