//! Case files: what a suite declares (cases, scorers, metrics, variants), read from TOML or
//! JSON. Every mistake is reported with the file and, where the format knows it, the line
//! and column (`docs/check.md` documents the schema).

use super::case_fields::{check_timeout_ms, is_inside, judge_metric_error, WorkspaceSpecOrSeed};
use super::metrics::MetricSpec;
use super::notebook::{self, NotebookCell, NotebookInfo};
use super::scorer::Scorer;
use cellvisor::cell::CellSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A suite: the cases of one case file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suite {
    /// `suite = "..."` in the file, else the file's stem.
    pub name: String,
    pub path: PathBuf,
    /// Variants the suite declares, in file order: name and config file (resolved next to
    /// the case file). The first is the baseline the comparison is taken against.
    pub variants: Vec<(String, PathBuf)>,
    pub cases: Vec<Case>,
    /// Set for a notebook (`.ipynb`): its cases are its code cells, run in one session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notebook: Option<NotebookInfo>,
}

/// One case: a fresh workspace, setup cells, the cells under test and what must hold after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawCase")]
pub struct Case {
    pub id: String,
    pub description: Option<String>,
    pub tags: Vec<String>,
    /// A directory copied into the case's fresh working directory (resolved next to the
    /// case file when the suite is loaded).
    pub workspace: Option<PathBuf>,
    /// Where in the workspace the seed is copied (relative; the anchor's `seedTarget`);
    /// its root when `None`.
    #[serde(default)]
    pub seed_target: Option<String>,
    /// Keep the workspace on disk after the case (the anchor's `retain`); its path is the
    /// snapshot's `cwd`.
    #[serde(default)]
    pub retain: bool,
    /// Files and directories (relative) captured after the run; all of the workspace when
    /// empty. File scorers see only what is captured.
    pub capture: Vec<String>,
    /// Wall-clock limit of the case's setup and cells, in milliseconds (the anchor's
    /// `timeoutMs`): past it the cells are stopped and the case ends `timeout`.
    #[serde(default)]
    pub timeout_ms: Option<f64>,
    /// Cells run first, in the same session; a failure fails the case before it is scored.
    pub setup: Vec<CellSpec>,
    pub cells: Vec<CellSpec>,
    pub scorers: Vec<Scorer>,
    /// The suite's metrics with this case's own added (same id: the case's wins).
    pub metrics: BTreeMap<String, MetricSpec>,
    /// Set for a notebook's code cell: where it stands and the outputs it is scored against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notebook: Option<NotebookCell>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    id: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    workspace: Option<WorkspaceSpecOrSeed>,
    #[serde(default)]
    capture: Vec<String>,
    #[serde(default, alias = "timeoutMs")]
    timeout_ms: Option<f64>,
    #[serde(default)]
    setup: Vec<CellSpec>,
    cells: Vec<CellSpec>,
    #[serde(default)]
    scorers: Vec<Scorer>,
    #[serde(default)]
    metrics: BTreeMap<String, MetricSpec>,
}

impl TryFrom<RawCase> for Case {
    type Error = String;

    fn try_from(raw: RawCase) -> Result<Case, String> {
        let id = raw.id.trim().to_string();
        if id.is_empty() {
            return Err("a case id must not be empty".into());
        }
        if raw.cells.is_empty() {
            return Err(format!(
                "case {id:?} has no cells: give at least one {{language, code}}"
            ));
        }
        if raw.scorers.is_empty() {
            return Err(format!(
                "case {id:?} has no scorers: give at least one (kinds: {})",
                Scorer::KINDS.join(", ")
            ));
        }
        for (metric, spec) in &raw.metrics {
            if let Some(why) = spec.pattern.as_ref().and_then(|p| p.error()) {
                return Err(format!("case {id:?}: metric {metric}: {why}"));
            }
        }
        let workspace = raw.workspace.map(|w| w.0).unwrap_or_default();
        if !raw.capture.is_empty() && workspace.capture.is_some() {
            return Err(format!(
                "case {id:?}: give `capture` once, in the case or in its `workspace` table"
            ));
        }
        let capture = workspace.capture.unwrap_or(raw.capture);
        if workspace.seed_target.is_some() && workspace.seed_dir.is_none() {
            return Err(format!(
                "case {id:?}: workspace `seedTarget` says where the seed goes; give the seed \
                 as `seedDir` too"
            ));
        }
        if let Some(target) = workspace.seed_target.as_deref().filter(|t| !is_inside(t)) {
            return Err(format!(
                "case {id:?}: workspace seedTarget {target:?} must be relative and stay in the \
                 workspace"
            ));
        }
        if let Some(ms) = raw.timeout_ms {
            check_timeout_ms(ms).map_err(|why| format!("case {id:?}: {why}"))?;
        }
        if let Some(outside) = capture.iter().find(|p| !is_inside(p)) {
            return Err(format!(
                "case {id:?}: capture path {outside:?} must be relative and stay in the workspace"
            ));
        }
        for scorer in &raw.scorers {
            if let Err(why) = scorer.validate() {
                return Err(format!("case {id:?}: scorer {}: {why}", scorer.name()));
            }
            if let Some(cell) = scorer.cell().filter(|&cell| cell >= raw.cells.len()) {
                return Err(format!(
                    "case {id:?}: scorer {} names cell {cell}, but the case has {} cell(s) \
                     (counted from 0)",
                    scorer.name(),
                    raw.cells.len()
                ));
            }
        }
        Ok(Case {
            id,
            description: raw.description,
            tags: raw.tags,
            workspace: workspace.seed_dir,
            seed_target: workspace.seed_target,
            retain: workspace.retain,
            capture,
            timeout_ms: raw.timeout_ms,
            setup: raw.setup,
            cells: raw.cells,
            scorers: raw.scorers,
            metrics: raw.metrics,
            notebook: None,
        })
    }
}

/// The top level of a case file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    #[serde(default)]
    suite: Option<String>,
    #[serde(default)]
    variants: InOrder<PathBuf>,
    #[serde(default)]
    metrics: BTreeMap<String, MetricSpec>,
    /// The `timeout_ms` of every case that gives none.
    #[serde(default, alias = "timeoutMs")]
    timeout_ms: Option<f64>,
    #[serde(default, rename = "case", alias = "cases")]
    cases: Vec<Case>,
}

/// A table's entries in the order the file gives them.
struct InOrder<T>(Vec<(String, T)>);

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for InOrder<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Entries<T> {
            type Value = InOrder<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table of name = value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<InOrder<T>, A::Error> {
                let mut entries: Vec<(String, T)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, T>()? {
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("{key:?} is given twice")));
                    }
                    entries.push((key, value));
                }
                Ok(InOrder(entries))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// Why a suite could not be loaded: bad input, exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A syntax or schema error at a known position.
    #[error("{path}:{line}:{column}: {message}")]
    At {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("no case files (*.toml, *.json, *.ipynb) in {0}")]
    Empty(PathBuf),
}

fn invalid(path: &Path, message: impl Into<String>) -> SuiteError {
    SuiteError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The suites at `paths`, each a case file or a directory of them (see [`load`]); two suites
/// whose names would share an artifact directory are an error.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Suite>, SuiteError> {
    let mut suites: Vec<Suite> = Vec::new();
    for path in paths {
        for mut suite in load(path)? {
            if suite.notebook.is_some()
                && suites
                    .iter()
                    .any(|s| s.name == suite.name && s.path != suite.path)
            {
                // Notebooks cannot be renamed: one named like another goes by its path.
                suite.name = suite.path.display().to_string();
            }
            if let Some(other) = suites.iter().find(|s| s.name == suite.name) {
                return Err(invalid(
                    &suite.path,
                    format!(
                        "suite {:?} is also the suite of {}; give one of them another `suite` \
                         name (or give the file once)",
                        suite.name,
                        other.path.display()
                    ),
                ));
            }
            suites.push(suite);
        }
    }
    Ok(suites)
}

/// The suites at `path`: the case file or notebook itself, or every `*.toml` / `*.json` /
/// `*.ipynb` file directly in the directory (seeds and variant configs go in
/// subdirectories), in name order.
pub fn load(path: &Path) -> Result<Vec<Suite>, SuiteError> {
    let files = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| SuiteError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && format_of(p).is_some())
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(SuiteError::Empty(path.to_path_buf()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    files.iter().map(|file| load_file(file)).collect()
}

#[derive(Clone, Copy)]
enum Format {
    Toml,
    Json,
    Notebook,
}

fn format_of(path: &Path) -> Option<Format> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => Some(Format::Toml),
        Some("json") => Some(Format::Json),
        Some("ipynb") => Some(Format::Notebook),
        _ => None,
    }
}

/// Reads and checks one case file.
pub fn load_file(path: &Path) -> Result<Suite, SuiteError> {
    let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&text, path)
}

/// Reads a case file's text (or a notebook's), in the format its name's extension says;
/// `path` is where it is said to be (seeds and judges are taken next to it).
pub fn parse_str(text: &str, path: &Path) -> Result<Suite, SuiteError> {
    let format = format_of(path).ok_or_else(|| {
        invalid(
            path,
            "a case file is TOML (.toml) or JSON (.json), or a notebook (.ipynb); this name \
             has none of these extensions",
        )
    })?;
    parse(text, path, format)
}

fn parse(text: &str, path: &Path, format: Format) -> Result<Suite, SuiteError> {
    let stem = || {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "suite".into())
    };
    let raw: RawSuite = match format {
        Format::Notebook => {
            return notebook::parse(text, path, stem()).map_err(|e| invalid(path, e.to_string()))
        }
        Format::Toml => toml::from_str(text).map_err(|err| {
            let (line, column) = err
                .span()
                .map(|span| line_column(text, span.start))
                .unwrap_or((1, 1));
            SuiteError::At {
                path: path.to_path_buf(),
                line,
                column,
                message: case_named(
                    err.message().trim(),
                    toml::from_str::<toml::Value>(text)
                        .ok()
                        .and_then(|v| serde_json::to_value(v).ok()),
                ),
            }
        })?,
        Format::Json => serde_json::from_str(text).map_err(|err| SuiteError::At {
            path: path.to_path_buf(),
            line: err.line(),
            column: err.column(),
            message: case_named(&json_message(&err), serde_json::from_str(text).ok()),
        })?,
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let name = match raw.suite {
        Some(name) if !name.trim().is_empty() => name.trim().to_string(),
        Some(_) => return Err(invalid(path, "`suite` must not be empty")),
        None => stem(),
    };
    if raw.cases.is_empty() {
        return Err(invalid(
            path,
            "the file declares no cases: add [[case]] tables (TOML) or a \"cases\" array (JSON)",
        ));
    }
    for (metric, spec) in &raw.metrics {
        if let Some(why) = spec.pattern.as_ref().and_then(|p| p.error()) {
            return Err(invalid(path, format!("metric {metric}: {why}")));
        }
    }
    if let Some(ms) = raw.timeout_ms {
        check_timeout_ms(ms).map_err(|why| invalid(path, why))?;
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cases = Vec::with_capacity(raw.cases.len());
    for mut case in raw.cases {
        if !seen.insert(case.id.clone()) {
            return Err(invalid_at(
                path,
                position_of(text, "id", &case.id, 1),
                format!(
                    "case id {:?} is used twice; ids are unique in a suite",
                    case.id
                ),
            ));
        }
        if let Some(given) = &case.workspace {
            let seed = base.join(given);
            if !seed.is_dir() {
                return Err(invalid_at(
                    path,
                    position_of(text, "workspace", &given.to_string_lossy(), 0),
                    format!(
                        "case {:?}: workspace seed {} is not a directory",
                        case.id,
                        seed.display()
                    ),
                ));
            }
            case.workspace = Some(seed);
        }
        for scorer in &mut case.scorers {
            resolve_judge(scorer, base);
        }
        let mut metrics = raw.metrics.clone();
        metrics.append(&mut case.metrics);
        case.metrics = metrics;
        case.timeout_ms = case.timeout_ms.or(raw.timeout_ms);
        if let Some(why) = judge_metric_error(&case) {
            return Err(invalid_at(path, position_of(text, "id", &case.id, 0), why));
        }
        cases.push(case);
    }
    for (name, _) in &raw.variants.0 {
        if !is_variant_name(name) {
            return Err(invalid(path, variant_name_error(name)));
        }
    }
    let variants = raw
        .variants
        .0
        .into_iter()
        .map(|(name, config)| (name, base.join(config)))
        .collect();
    Ok(Suite {
        name,
        path: path.to_path_buf(),
        variants,
        cases,
        notebook: None,
    })
}

/// A judge's program given as a relative path with a `/` (`judges/grade.py`) is taken
/// next to the case file, as workspace seeds are (the judge runs in the case's workspace);
/// a bare name (`python3`) is looked up on `PATH`.
fn resolve_judge(scorer: &mut Scorer, base: &Path) {
    if let Scorer::Judge { command, .. } = scorer {
        if let Some(program) = command.first_mut() {
            let path = Path::new(program.as_str());
            if path.is_relative() && program.contains('/') {
                let beside = base.join(path);
                // Absolute: the judge runs in the workspace, not where `check` was started.
                let beside = std::path::absolute(&beside).unwrap_or(beside);
                *program = beside.to_string_lossy().into_owned();
            }
        }
    }
}

/// A mistake found after parsing, at its place in the file when that is known.
fn invalid_at(path: &Path, at: Option<(usize, usize)>, message: String) -> SuiteError {
    match at {
        Some((line, column)) => SuiteError::At {
            path: path.to_path_buf(),
            line,
            column,
            message,
        },
        None => invalid(path, message),
    }
}

/// Line and column of the `nth` (from 0) place where `key` is given the string `value`:
/// `key = "value"` in TOML, `"key": "value"` in JSON.
fn position_of(text: &str, key: &str, value: &str, nth: usize) -> Option<(usize, usize)> {
    let pattern = format!(
        r#"(?m)^[ \t{{,]*"?{}"?[ \t]*[=:][ \t]*["']{}["']"#,
        regex::escape(key),
        regex::escape(value)
    );
    let found = regex::Regex::new(&pattern).ok()?.find_iter(text).nth(nth)?;
    let start = found.start() + found.as_str().len()
        - found
            .as_str()
            .trim_start_matches([' ', '\t', '{', ','])
            .len();
    Some(line_column(text, start))
}

/// A variant name is one path segment of the artifact layout: letters, digits, `.`, `_`, `-`.
pub fn is_variant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The message for a name [`is_variant_name`] refuses.
pub fn variant_name_error(name: &str) -> String {
    format!(
        "invalid variant name {name:?}: use 1 to 64 characters from A-Z a-z 0-9 . _ -, \
         not starting with ."
    )
}

/// A schema error's message naming the case it is in, when the file parses as a document
/// (`document`, the file as JSON) and one of its cases, read alone, fails: `case "id": ...`,
/// or `case N (counted from 0, no id): ...`. Syntax errors, and errors outside the cases,
/// keep their message.
fn case_named(message: &str, document: Option<serde_json::Value>) -> String {
    let cases = document
        .as_ref()
        .and_then(|d| d.get("case").or_else(|| d.get("cases")));
    let Some(cases) = cases.and_then(|c| c.as_array()) else {
        return message.to_string();
    };
    for (n, case) in cases.iter().enumerate() {
        if serde_json::from_value::<Case>(case.clone()).is_ok() {
            continue;
        }
        let named = match case.get("id").and_then(|id| id.as_str()) {
            Some(id) => format!("case {:?}", id.trim()),
            None => format!("case {n} (counted from 0, no id)"),
        };
        if message.contains(&named) {
            return message.to_string();
        }
        return format!("{named}: {message}");
    }
    message.to_string()
}

/// serde_json appends " at line L column C" to its messages; the position is reported apart.
fn json_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
#[path = "suite_tests.rs"]
mod tests;
