//! The config file: every section and key checked against the table, each mistake with the
//! line and column where it was written, in file order.

use super::hints::{key_hint, list, suggest};
use super::values::{check_range, parse_duration, parse_size};
use super::{KeyError, Origin, State};
use crate::keys::{self, KeySpec, Kind, Value, SECTIONS};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml_edit::{ImDocument, Item, TableLike};

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

pub(super) fn check_file(state: &mut State, path: &Path, text: &str) {
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
        (Kind::Bool | Kind::Switch(_), Some(toml_edit::Value::Boolean(b))) => {
            Value::Bool(*b.value())
        }
        (Kind::Switch(words), Some(toml_edit::Value::String(s)))
            if words.contains(&s.value().as_str()) =>
        {
            Value::Text(s.value().clone())
        }
        (Kind::Urls, Some(toml_edit::Value::Array(array))) => {
            let mut urls = Vec::new();
            for entry in array.iter() {
                match entry.as_str() {
                    Some(url) if keys::is_url(url) => urls.push(url.to_string()),
                    _ => {
                        return Err(format!(
                            "not a URL: {} (expected {})",
                            found_value(entry),
                            kind.describe()
                        ))
                    }
                }
            }
            Value::Names(urls)
        }
        (Kind::UidRange, Some(toml_edit::Value::String(s))) => {
            crate::schema::UidRange::parse(s.value())?;
            Value::Text(s.value().trim().to_string())
        }
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
        (Kind::Listeners, Some(toml_edit::Value::Array(array))) => {
            let mut addresses = Vec::new();
            for entry in array.iter() {
                match entry.as_str() {
                    Some(address) => {
                        keys::parse_listen(address)?;
                        addresses.push(address.to_string());
                    }
                    None => {
                        return Err(format!(
                            "not a listen address: {} (expected {})",
                            found_value(entry),
                            kind.describe()
                        ))
                    }
                }
            }
            Value::Names(addresses)
        }
        (Kind::Modules, Some(toml_edit::Value::Array(array))) => {
            let mut names = Vec::new();
            let mut bad = Vec::new();
            for entry in array.iter() {
                match entry.as_str() {
                    Some(name) if keys::is_module_name(name) => names.push(name.to_string()),
                    _ => bad.push(found_value(entry)),
                }
            }
            if !bad.is_empty() {
                return Err(format!(
                    "not a module name: {} (expected {})",
                    bad.join(", "),
                    kind.describe()
                ));
            }
            Value::Names(names)
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
