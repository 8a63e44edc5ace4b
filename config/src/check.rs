//! Validation: file text and override variables become a [`Config`], or every mistake in
//! them at once, each with the key, where it was written and what is allowed. Operators fix
//! a file in one pass instead of one error per restart.

use crate::keys::{self, KeySpec, Kind, Value, ENV_PREFIX, KEYS, SECTIONS};
use crate::schema::Config;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml_edit::{ImDocument, Item, TableLike};

/// Where a value came from, or where a mistake is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A config file; `line` and `column` are 1-based, 0 when unknown.
    File {
        /// The file.
        path: PathBuf,
        /// The line, 1-based; 0 when unknown.
        line: usize,
        /// The column, 1-based; 0 when unknown.
        column: usize,
    },
    /// An override variable.
    Env {
        /// The variable's name (`CELLVISOR_...`).
        var: String,
    },
}

impl Origin {
    /// The trailing comment `config show` writes after a value.
    pub fn comment(&self) -> String {
        match self {
            Origin::Default => "default".to_string(),
            Origin::File { path, line, .. } if *line > 0 => {
                format!("file {}:{line}", path.display())
            }
            Origin::File { path, .. } => format!("file {}", path.display()),
            Origin::Env { var } => format!("env {var}"),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("(defaults)"),
            Origin::File { path, line, column } if *line > 0 => {
                write!(f, "{}:{line}:{column}", path.display())
            }
            Origin::File { path, .. } => write!(f, "{}", path.display()),
            Origin::Env { var } => f.write_str(var),
        }
    }
}

/// One mistake in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// Where the mistake is: file, line and column, or the override variable.
    pub origin: Origin,
    /// The key, like `sessions.max-sessions`; `None` for TOML syntax errors.
    pub key: Option<String>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.origin, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

impl std::error::Error for KeyError {}

/// A validated configuration and where each of its values came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The configuration in force.
    pub config: Config,
    /// The file read, if any.
    pub path: Option<PathBuf>,
    /// The origin of each key, indexed like [`KEYS`].
    pub origins: Vec<Origin>,
}

impl Effective {
    /// Where `section.key` came from.
    pub fn origin(&self, section: &str, key: &str) -> Option<&Origin> {
        keys::find(section, key).and_then(|(index, _)| self.origins.get(index))
    }
}

/// Validates `file` (path and text) and then the override variables in `env`; returns the
/// configuration or every error, file errors in file order first.
pub fn resolve(
    file: Option<(&Path, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Effective, Vec<KeyError>> {
    let mut state = State {
        config: Config::default(),
        origins: vec![Origin::Default; KEYS.len()],
        failed: vec![false; KEYS.len()],
        errors: Vec::new(),
    };
    if let Some((path, text)) = file {
        check_file(&mut state, path, text);
    }
    check_env(&mut state, env);
    check_rules(&mut state);
    if state.errors.is_empty() {
        Ok(Effective {
            config: state.config,
            path: file.map(|(path, _)| path.to_path_buf()),
            origins: state.origins,
        })
    } else {
        Err(state.errors)
    }
}

struct State {
    config: Config,
    origins: Vec<Origin>,
    /// Keys with a bad value: rules involving them are skipped, their error says enough.
    failed: Vec<bool>,
    errors: Vec<KeyError>,
}

impl State {
    fn accept(&mut self, index: usize, value: Value, origin: Origin) {
        (KEYS[index].set)(&mut self.config, value);
        self.origins[index] = origin;
    }
}

/// Byte offsets to 1-based line and column (in characters) of one file.
struct FileErrors<'a> {
    path: &'a Path,
    text: &'a str,
    /// Errors with the byte offset they sort by.
    errors: Vec<(usize, KeyError)>,
}

impl FileErrors<'_> {
    fn origin(&self, span: Option<&Range<usize>>) -> Origin {
        let (line, column) =
            span.and_then(|span| self.text.get(..span.start))
                .map_or((0, 0), |before| {
                    let line = before.matches('\n').count() + 1;
                    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                    (line, before[line_start..].chars().count() + 1)
                });
        Origin::File {
            path: self.path.to_path_buf(),
            line,
            column,
        }
    }

    fn push(&mut self, span: Option<&Range<usize>>, key: Option<String>, message: String) {
        let origin = self.origin(span);
        let offset = span.map_or(usize::MAX, |s| s.start);
        self.errors.push((
            offset,
            KeyError {
                origin,
                key,
                message,
            },
        ));
    }
}

fn check_file(state: &mut State, path: &Path, text: &str) {
    let mut file = FileErrors {
        path,
        text,
        errors: Vec::new(),
    };
    let doc = match ImDocument::parse(text) {
        Ok(doc) => doc,
        Err(err) => {
            let message = format!("TOML syntax error: {}", err.message().trim());
            file.push(err.span().as_ref(), None, message);
            state.errors.extend(file.errors.into_iter().map(|(_, e)| e));
            return;
        }
    };
    let root = doc.as_table();
    for (section, item) in root.iter() {
        let key_span = root.key(section).and_then(|k| k.span());
        let span = key_span.or_else(|| item.span());
        if !SECTIONS.contains(&section) {
            let hint = match suggest(section, SECTIONS.iter().copied()) {
                Some(s) => format!("; did you mean `[{s}]`?"),
                None => format!("; sections are {}", list(SECTIONS.iter().copied())),
            };
            file.push(
                span.as_ref(),
                Some(section.to_string()),
                format!("unknown section{hint}"),
            );
            continue;
        }
        let Some(table) = item.as_table_like() else {
            file.push(
                span.as_ref(),
                Some(section.to_string()),
                format!("expected a table `[{section}]`, found {}", found_item(item)),
            );
            continue;
        };
        check_section(state, &mut file, section, table);
    }
    file.errors.sort_by_key(|(offset, _)| *offset);
    state
        .errors
        .extend(file.errors.into_iter().map(|(_, error)| error));
}

fn check_section(state: &mut State, file: &mut FileErrors, section: &str, table: &dyn TableLike) {
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        let Some((index, spec)) = keys::find(section, key) else {
            file.push(
                key_span.as_ref(),
                Some(format!("{section}.{key}")),
                format!("unknown key{}", key_hint(section, key)),
            );
            continue;
        };
        let value_span = item.span().or_else(|| key_span.clone());
        let parsed = if spec.kind == Kind::Map {
            map_from_toml(file, spec, item, value_span.as_ref())
        } else {
            from_toml(spec.kind, item).map_err(|message| {
                file.push(value_span.as_ref(), Some(spec.name()), message);
            })
        };
        match parsed {
            Ok(value) => {
                let origin = file.origin(key_span.as_ref().or(value_span.as_ref()));
                state.accept(index, value, origin);
            }
            Err(()) => state.failed[index] = true,
        }
    }
}

/// "; did you mean ..." for an unknown key, or the keys the section has.
fn key_hint(section: &str, key: &str) -> String {
    let here = keys::section_keys(section).map(|spec| spec.key);
    if let Some(s) = suggest(key, here) {
        return format!("; did you mean `{s}`?");
    }
    let normalized = normalize(key);
    if let Some(spec) = KEYS.iter().find(|spec| spec.key == normalized) {
        return format!("; did you mean `{}` in [{}]?", spec.key, spec.section);
    }
    format!(
        "; keys of [{section}] are {}",
        list(keys::section_keys(section).map(|spec| spec.key))
    )
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// The candidate closest to `input`, if close enough to be a typo of it.
pub(crate) fn suggest<'a>(
    input: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let input = normalize(input);
    let limit = (input.chars().count() / 4).max(1);
    candidates
        .map(|c| (strsim::damerau_levenshtein(&input, &normalize(c)), c))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// A short description of a TOML value for "found ..." in messages.
fn found_item(item: &Item) -> String {
    match item {
        Item::None => "nothing".to_string(),
        Item::Table(_) => "a table".to_string(),
        Item::ArrayOfTables(_) => "an array of tables".to_string(),
        Item::Value(value) => found_value(value),
    }
}

fn found_value(value: &toml_edit::Value) -> String {
    use toml_edit::Value as V;
    match value {
        V::String(s) => toml_edit::Value::from(s.value().as_str())
            .to_string()
            .trim()
            .to_string(),
        V::Integer(i) => format!("the integer {}", i.value()),
        V::Float(x) => format!("the number {}", x.value()),
        V::Boolean(b) => format!("`{}`", b.value()),
        V::Datetime(d) => format!("the date {}", d.value()),
        V::Array(_) => "an array".to_string(),
        V::InlineTable(_) => "a table".to_string(),
    }
}

/// A file value of a scalar or list kind; the message says what is allowed.
fn from_toml(kind: Kind, item: &Item) -> Result<Value, String> {
    let expected = || format!("expected {}, found {}", kind.describe(), found_item(item));
    let value = match (kind, item.as_value()) {
        (Kind::Count { .. }, Some(toml_edit::Value::Integer(i))) => {
            let n = *i.value();
            u64::try_from(n)
                .map(Value::Count)
                .map_err(|_| format!("expected {}, found {n}", kind.describe()))?
        }
        (Kind::Count { .. }, Some(toml_edit::Value::String(s))) => {
            let s = s.value();
            return Err(match s.trim().parse::<u64>() {
                Ok(n) => format!("write the number without quotes: {n}"),
                Err(_) => format!("expected {}, found {s:?}", kind.describe()),
            });
        }
        (Kind::Duration { .. }, Some(toml_edit::Value::String(s))) => {
            Value::Duration(parse_duration(s.value(), &kind)?)
        }
        (Kind::Duration { .. }, Some(toml_edit::Value::Integer(i))) if *i.value() == 0 => {
            Value::Duration(Duration::ZERO)
        }
        (Kind::Duration { .. }, Some(toml_edit::Value::Integer(i))) => {
            let n = i.value();
            return Err(format!(
                "a duration needs a unit: write \"{n}s\" or \"{n}ms\" ({})",
                kind.describe()
            ));
        }
        (Kind::Size { .. }, Some(toml_edit::Value::String(s))) => {
            Value::Size(parse_size(s.value(), &kind)?)
        }
        (Kind::Size { .. }, Some(toml_edit::Value::Integer(i))) => {
            let n = i.value();
            return Err(format!(
                "a size needs a unit: write \"{n}MiB\", \"{n}KiB\" or \"{n}B\" ({})",
                kind.describe()
            ));
        }
        (Kind::Path, Some(toml_edit::Value::String(s))) if !s.value().is_empty() => {
            Value::Path(PathBuf::from(s.value()))
        }
        (Kind::Text, Some(toml_edit::Value::String(s))) if !s.value().trim().is_empty() => {
            Value::Text(s.value().clone())
        }
        (Kind::Bool, Some(toml_edit::Value::Boolean(b))) => Value::Bool(*b.value()),
        (Kind::Choice(words), Some(toml_edit::Value::String(s)))
            if words.contains(&s.value().as_str()) =>
        {
            Value::Text(s.value().clone())
        }
        (Kind::Paths, Some(toml_edit::Value::Array(array))) => {
            let mut paths = Vec::new();
            let mut bad = Vec::new();
            for entry in array.iter() {
                match entry.as_str() {
                    Some(path) if keys::is_sandbox_path(path) => paths.push(path.to_string()),
                    _ => bad.push(found_value(entry)),
                }
            }
            if !bad.is_empty() {
                return Err(format!(
                    "not an allowed path: {} (expected {})",
                    bad.join(", "),
                    kind.describe()
                ));
            }
            Value::Names(paths)
        }
        (Kind::Names, Some(toml_edit::Value::Array(array))) => {
            let mut names = Vec::new();
            let mut bad = Vec::new();
            for entry in array.iter() {
                match entry.as_str() {
                    Some(name) if keys::is_env_name(name, true) => names.push(name.to_string()),
                    _ => bad.push(found_value(entry)),
                }
            }
            if !bad.is_empty() {
                return Err(format!(
                    "not a variable name: {} (expected {})",
                    bad.join(", "),
                    kind.describe()
                ));
            }
            Value::Names(names)
        }
        _ => return Err(expected()),
    };
    check_range(&kind, &value)?;
    Ok(value)
}

/// `env.set`: a table of valid names to strings; every bad entry is its own error.
fn map_from_toml(
    file: &mut FileErrors,
    spec: &KeySpec,
    item: &Item,
    span: Option<&Range<usize>>,
) -> Result<Value, ()> {
    let Some(table) = item.as_table_like() else {
        let message = format!(
            "expected {}, found {}",
            spec.kind.describe(),
            found_item(item)
        );
        file.push(span, Some(spec.name()), message);
        return Err(());
    };
    let mut map = BTreeMap::new();
    let mut ok = true;
    for (name, entry) in table.iter() {
        let key_span = table.key(name).and_then(|k| k.span());
        let entry_name = format!("{}.{name}", spec.name());
        if !keys::is_env_name(name, false) {
            let message =
                "not a valid variable name (letters, digits and `_`, not starting with a digit)";
            file.push(key_span.as_ref(), Some(entry_name), message.to_string());
            ok = false;
            continue;
        }
        match entry.as_str() {
            Some(value) => {
                map.insert(name.to_string(), value.to_string());
            }
            None => {
                let span = entry.span().or(key_span);
                let message = format!("expected a string, found {}", found_item(entry));
                file.push(span.as_ref(), Some(entry_name), message);
                ok = false;
            }
        }
    }
    if ok {
        Ok(Value::Map(map))
    } else {
        Err(())
    }
}

fn parse_duration(text: &str, kind: &Kind) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.parse::<f64>().is_ok() {
        return Err(format!(
            "a duration needs a unit: write \"{trimmed}s\" or \"{trimmed}ms\" ({})",
            kind.describe()
        ));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "cannot read {text:?} as a duration ({e}); expected {}, like \"5s\", \"250ms\" or \"2m\"",
            kind.describe()
        )
    })
}

fn parse_size(text: &str, kind: &Kind) -> Result<u64, String> {
    let trimmed = text.trim();
    if trimmed.parse::<f64>().is_ok() {
        return Err(format!(
            "a size needs a unit: write \"{trimmed}MiB\", \"{trimmed}KiB\" or \"{trimmed}B\" ({})",
            kind.describe()
        ));
    }
    trimmed
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|_| {
            format!(
                "cannot read {text:?} as a size; expected {}, like \"512MiB\" or \"64KiB\"",
                kind.describe()
            )
        })
}

/// Whether `value` is allowed for `kind` (unset is always allowed: optionality is checked
/// where values are read).
pub(crate) fn in_range(kind: &Kind, value: &Value) -> bool {
    match (kind, value) {
        (Kind::Count { min, max }, Value::Count(n)) => (min..=max).contains(&n),
        (Kind::Duration { min, max }, Value::Duration(d)) => (min..=max).contains(&d),
        (Kind::Size { min, max }, Value::Size(n)) => (min..=max).contains(&n),
        _ => true,
    }
}

fn check_range(kind: &Kind, value: &Value) -> Result<(), String> {
    if in_range(kind, value) {
        return Ok(());
    }
    let shown = match value {
        Value::Count(n) => n.to_string(),
        Value::Duration(d) => keys::format_duration(*d),
        Value::Size(n) => keys::format_size(*n),
        _ => String::new(),
    };
    Err(format!(
        "{shown} is out of range: expected {}",
        kind.describe()
    ))
}

/// Only `CELLVISOR_<SECTION>__<KEY>` names are overrides; `CELLVISOR_CONFIG` and friends
/// are not.
pub(crate) fn is_override(name: &str) -> bool {
    name.strip_prefix(ENV_PREFIX)
        .is_some_and(|rest| rest.contains("__"))
}

fn check_env(state: &mut State, env: impl IntoIterator<Item = (String, String)>) {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| is_override(name))
        .collect();
    vars.sort();
    for (var, text) in vars {
        let origin = Origin::Env { var: var.clone() };
        let rest = &var[ENV_PREFIX.len()..];
        let found = rest
            .split_once("__")
            .and_then(|(section, key)| keys::find(&section.to_ascii_lowercase(), &normalize(key)));
        let Some((index, spec)) = found else {
            let names: Vec<String> = KEYS
                .iter()
                .filter(|spec| spec.kind != Kind::Map)
                .map(KeySpec::env_var)
                .collect();
            let hint = match suggest(&var, names.iter().map(String::as_str)) {
                Some(s) => format!("; did you mean `{s}`?"),
                None => "; overrides are named CELLVISOR_<SECTION>__<KEY>, like CELLVISOR_SESSIONS__MAX_SESSIONS".to_string(),
            };
            state.errors.push(KeyError {
                origin,
                key: None,
                message: format!("unknown override variable{hint}"),
            });
            continue;
        };
        match from_env(spec, &text) {
            Ok(value) => state.accept(index, value, origin),
            Err(message) => {
                state.failed[index] = true;
                state.errors.push(KeyError {
                    origin,
                    key: Some(spec.name()),
                    message,
                });
            }
        }
    }
}

/// An override's value: the text of the TOML value without quotes; lists are
/// comma-separated; empty unsets an optional key.
fn from_env(spec: &KeySpec, text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() && spec.optional {
        return Ok(Value::Unset);
    }
    let value = match spec.kind {
        Kind::Count { .. } => Value::Count(
            trimmed
                .parse::<u64>()
                .map_err(|_| format!("expected {}, found {text:?}", spec.kind.describe()))?,
        ),
        Kind::Duration { .. } => Value::Duration(parse_duration(text, &spec.kind)?),
        Kind::Size { .. } => Value::Size(parse_size(text, &spec.kind)?),
        Kind::Path if !text.is_empty() => Value::Path(PathBuf::from(text)),
        Kind::Text if !trimmed.is_empty() => Value::Text(text.to_string()),
        Kind::Bool => match trimmed {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(format!("expected {}, found {text:?}", spec.kind.describe())),
        },
        Kind::Choice(words) if words.contains(&trimmed) => Value::Text(trimmed.to_string()),
        Kind::Choice(_) => {
            return Err(format!("expected {}, found {text:?}", spec.kind.describe()))
        }
        Kind::Names => {
            let names: Vec<String> = trimmed
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect();
            let bad: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|n| !keys::is_env_name(n, true))
                .collect();
            if !bad.is_empty() {
                return Err(format!(
                    "not a variable name: {} (expected comma-separated names; a trailing `*` matches a prefix)",
                    bad.join(", ")
                ));
            }
            Value::Names(names)
        }
        Kind::Paths => {
            let paths: Vec<String> = text
                .split(':')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            let bad: Vec<&str> = paths
                .iter()
                .map(String::as_str)
                .filter(|p| !keys::is_sandbox_path(p))
                .collect();
            if !bad.is_empty() {
                return Err(format!(
                    "not an allowed path: {} (expected colon-separated absolute paths, \"~/...\" or \"cwd\")",
                    bad.join(", ")
                ));
            }
            Value::Names(paths)
        }
        Kind::Map => {
            return Err("cannot be set from the environment; set it in the config file".into())
        }
        Kind::Path | Kind::Text => {
            return Err(format!("expected {}, found nothing", spec.kind.describe()))
        }
    };
    check_range(&spec.kind, &value)?;
    Ok(value)
}

/// Rules between keys, checked on the merged values; the error goes to the key of the pair
/// that was set (the first if both were), since that is the line to fix.
fn check_rules(state: &mut State) {
    let s = &state.config.sessions;
    let c = &state.config.cells;
    let d = |d: Duration| keys::format_duration(d);
    let mut broken = Vec::new();
    if s.heartbeat_timeout <= s.heartbeat_interval {
        broken.push((
            ("sessions", ["heartbeat-timeout", "heartbeat-interval"]),
            format!(
                "sessions.heartbeat-timeout ({}) must be longer than sessions.heartbeat-interval \
                 ({}), or workers are declared dead between two pings",
                d(s.heartbeat_timeout),
                d(s.heartbeat_interval)
            ),
        ));
    }
    if c.min_timeout > c.default_timeout {
        broken.push((
            ("cells", ["default-timeout", "min-timeout"]),
            format!(
                "cells.default-timeout ({}) must be at least cells.min-timeout ({})",
                d(c.default_timeout),
                d(c.min_timeout)
            ),
        ));
    }
    if c.default_timeout > c.max_timeout {
        broken.push((
            ("cells", ["default-timeout", "max-timeout"]),
            format!(
                "cells.default-timeout ({}) must be at most cells.max-timeout ({})",
                d(c.default_timeout),
                d(c.max_timeout)
            ),
        ));
    }
    for ((section, pair), message) in broken {
        let indices: Vec<usize> = pair
            .iter()
            .filter_map(|key| keys::find(section, key).map(|(i, _)| i))
            .collect();
        if indices.iter().any(|&i| state.failed[i]) {
            continue;
        }
        let Some(&index) = indices
            .iter()
            .find(|&&i| state.origins[i] != Origin::Default)
            .or(indices.first())
        else {
            continue;
        };
        state.errors.push(KeyError {
            origin: state.origins[index].clone(),
            key: Some(KEYS[index].name()),
            message,
        });
    }
}
