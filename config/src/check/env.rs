//! Override variables: `CELLVISOR_<SECTION>__<KEY>` set single keys over the file, written
//! as in the file without quotes, lists comma- (paths colon-) separated.

use super::hints::{normalize, suggest};
use super::values::{check_range, parse_duration, parse_size};
use super::{KeyError, Origin, State};
use crate::keys::{self, KeySpec, Kind, Value, ENV_PREFIX, KEYS};
use std::path::PathBuf;

/// Only `CELLVISOR_<SECTION>__<KEY>` names are overrides; `CELLVISOR_CONFIG` and friends
/// are not.
pub(crate) fn is_override(name: &str) -> bool {
    name.strip_prefix(ENV_PREFIX)
        .is_some_and(|rest| rest.contains("__"))
}

pub(super) fn check_env(state: &mut State, env: impl IntoIterator<Item = (String, String)>) {
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
        Kind::Switch(_) if trimmed == "true" || trimmed == "false" => {
            Value::Bool(trimmed == "true")
        }
        Kind::Switch(words) if words.contains(&trimmed) => Value::Text(trimmed.to_string()),
        Kind::Switch(_) => {
            return Err(format!("expected {}, found {text:?}", spec.kind.describe()))
        }
        Kind::Urls => Value::Names(listed(trimmed, ',', keys::is_url, |bad| {
            format!("not a URL: {bad} (expected comma-separated http:// or https:// URLs)")
        })?),
        Kind::UidRange => {
            crate::schema::UidRange::parse(trimmed)?;
            Value::Text(trimmed.to_string())
        }
        Kind::Choice(_) => {
            return Err(format!("expected {}, found {text:?}", spec.kind.describe()))
        }
        Kind::Names => Value::Names(listed(
            trimmed,
            ',',
            |n| keys::is_env_name(n, true),
            |bad| {
                format!("not a variable name: {bad} (expected comma-separated names; a trailing `*` matches a prefix)")
            },
        )?),
        Kind::Modules => Value::Names(listed(trimmed, ',', keys::is_module_name, |bad| {
            format!("not a module name: {bad} (expected comma-separated Python module names)")
        })?),
        Kind::Paths => Value::Names(listed(text, ':', keys::is_sandbox_path, |bad| {
            format!("not an allowed path: {bad} (expected colon-separated absolute paths, \"~/...\" or \"cwd\")")
        })?),
        Kind::Listeners => {
            let addresses: Vec<String> = trimmed
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect();
            for address in &addresses {
                keys::parse_listen(address)?;
            }
            Value::Names(addresses)
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

/// The non-empty entries of a `separator`-separated list, or the refusal naming those that
/// `valid` rejects.
fn listed(
    text: &str,
    separator: char,
    valid: impl Fn(&str) -> bool,
    refusal: impl Fn(&str) -> String,
) -> Result<Vec<String>, String> {
    let entries: Vec<String> = text
        .split(separator)
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_string)
        .collect();
    let bad: Vec<&str> = entries
        .iter()
        .map(String::as_str)
        .filter(|entry| !valid(entry))
        .collect();
    if bad.is_empty() {
        Ok(entries)
    } else {
        Err(refusal(&bad.join(", ")))
    }
}
