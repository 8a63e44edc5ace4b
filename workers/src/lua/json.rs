//! Lua tables as JSON, for trailing values, `display` and the code-mode helpers.
//!
//! mlua's serde support is not used here because it decides "array" by `raw_len() > 0` and then
//! silently drops the other keys of a mixed table (`{1, 2, x = 3}` would show as `[1, 2]`), and it
//! cannot say "this is not plain data" without failing half-way. This converter only accepts what
//! JSON can carry faithfully and otherwise answers `None`, so the caller falls back to `tostring`.

use mlua::{Table, Value};
use serde_json::{Map, Number, Value as Json};
use std::collections::HashSet;
use std::ffi::c_void;

/// Deeper nesting than this is not shown as JSON (it is almost surely not meant as data).
const MAX_DEPTH: usize = 100;

/// More entries than this (over all nested tables) are not converted: the JSON would be too big
/// to be useful and converting it costs memory outside the Lua heap limit.
const MAX_ENTRIES: usize = 1_000_000;

/// The JSON form of `table` when it is plain data: keys that are all strings or integers,
/// values that are booleans, numbers (finite), strings or plain tables, no cycles and no
/// `__tostring` metamethod anywhere. A table whose keys are exactly `1..=n` (n > 0) becomes an
/// array; anything else, including the empty table, an object with sorted keys.
pub(super) fn plain_table_json(table: &Table) -> Option<Json> {
    let mut converter = Converter {
        on_path: HashSet::new(),
        entries: 0,
    };
    converter.table(table, 0)
}

/// The JSON form of any value that is plain data: `nil` (as `null`), booleans, finite numbers,
/// strings and plain tables (see [`plain_table_json`]).
pub(super) fn plain_value_json(value: &Value) -> Option<Json> {
    if value.is_nil() {
        return Some(Json::Null);
    }
    Converter {
        on_path: HashSet::new(),
        entries: 0,
    }
    .value(value.clone(), 0)
}

struct Converter {
    /// Tables between the root and the current one; meeting one again is a cycle.
    on_path: HashSet<*const c_void>,
    entries: usize,
}

impl Converter {
    fn table(&mut self, table: &Table, depth: usize) -> Option<Json> {
        if depth > MAX_DEPTH || has_custom_tostring(table) {
            return None;
        }
        let identity = table.to_pointer();
        if !self.on_path.insert(identity) {
            return None;
        }
        let json = self.entries_of(table, depth);
        self.on_path.remove(&identity);
        json
    }

    fn entries_of(&mut self, table: &Table, depth: usize) -> Option<Json> {
        let mut entries: Vec<(Key, Json)> = Vec::new();
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair.ok()?;
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return None;
            }
            let key = match key {
                Value::Integer(i) => Key::Integer(i),
                Value::String(s) => Key::String(s.to_string_lossy()),
                _ => return None,
            };
            entries.push((key, self.value(value, depth + 1)?));
        }
        if is_sequence(&mut entries) {
            return Some(Json::Array(entries.into_iter().map(|(_, v)| v).collect()));
        }
        let object: Map<String, Json> = entries
            .into_iter()
            .map(|(key, value)| (key.into_string(), value))
            .collect();
        Some(Json::Object(object))
    }

    fn value(&mut self, value: Value, depth: usize) -> Option<Json> {
        match value {
            Value::Boolean(b) => Some(Json::Bool(b)),
            Value::Integer(i) => Some(Json::from(i)),
            Value::Number(n) => Number::from_f64(n).map(Json::Number),
            Value::String(s) => Some(Json::String(s.to_string_lossy())),
            Value::Table(t) => self.table(&t, depth),
            _ => None,
        }
    }
}

enum Key {
    Integer(i64),
    String(String),
}

impl Key {
    fn into_string(self) -> String {
        match self {
            Key::Integer(i) => i.to_string(),
            Key::String(s) => s,
        }
    }
}

/// Whether the keys are exactly `1..=n` with n > 0; if so, sorts `entries` by key.
fn is_sequence(entries: &mut [(Key, Json)]) -> bool {
    if entries.is_empty() || entries.iter().any(|(k, _)| !matches!(k, Key::Integer(_))) {
        return false;
    }
    entries.sort_by_key(|(k, _)| match k {
        Key::Integer(i) => *i,
        Key::String(_) => i64::MAX,
    });
    entries
        .iter()
        .zip(1_i64..)
        .all(|((k, _), expected)| matches!(k, Key::Integer(i) if *i == expected))
}

fn has_custom_tostring(table: &Table) -> bool {
    table.metatable().is_some_and(|meta| {
        meta.raw_get::<Value>("__tostring")
            .map_or(true, |v| !v.is_nil())
    })
}

/// `json` written as a Lua table constructor, for `text/plain`: `{1, 2, {name = "x"}}`.
pub(super) fn lua_literal(json: &Json) -> String {
    let mut out = String::new();
    write_literal(json, &mut out);
    out
}

fn write_literal(json: &Json, out: &mut String) {
    match json {
        Json::Null => out.push_str("nil"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(&n.to_string()),
        Json::String(s) => out.push_str(&Json::String(s.clone()).to_string()),
        Json::Array(items) => {
            out.push('{');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_literal(item, out);
            }
            out.push('}');
        }
        Json::Object(fields) => {
            out.push('{');
            for (i, (key, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if is_identifier(key) {
                    out.push_str(key);
                } else {
                    out.push('[');
                    out.push_str(&Json::String(key.clone()).to_string());
                    out.push(']');
                }
                out.push_str(" = ");
                write_literal(value, out);
            }
            out.push('}');
        }
    }
}

const KEYWORDS: [&str; 22] = [
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
];

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&key)
}
