//! Lua tables as JSON, for trailing values, `display` and the code-mode helpers.
//!
//! mlua's serde support is not used here because it decides "array" by `raw_len() > 0` and then
//! silently drops the other keys of a mixed table (`{1, 2, x = 3}` would show as `[1, 2]`), and it
//! cannot say "this is not plain data" without failing half-way. This converter only accepts what
//! JSON can carry faithfully and otherwise answers `None`, so the caller falls back to `tostring`.
//!
//! JSON object keys are strings, so a table with integer keys that is no sequence
//! (`{[1] = 1, [1000000] = 2}`, `table.pack(...)`) is written with keys like `"1"`; [`to_lua`],
//! which `load` uses, reads a key written the way an integer is written back as that integer.

use mlua::{Lua, Table, Value};
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
/// array; anything else, including the empty table, an object with sorted keys. A table with
/// both the key 1 and the key "1" is not plain data: JSON would write both as `"1"`.
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
        let mut object = Map::new();
        for (key, value) in entries {
            if object.insert(key.into_string(), value).is_some() {
                return None;
            }
        }
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

/// `json` as a Lua value, for `load`: `null` is `nil` (a hole in an array, a missing field),
/// arrays are sequences without a metatable, and an object key written as an integer is
/// written (`"1"`, `"-3"`, not `"01"` or `"+1"`) becomes that integer key, the way
/// [`plain_table_json`] wrote it; other keys stay strings.
pub(super) fn to_lua(lua: &Lua, json: &Json) -> mlua::Result<Value> {
    Ok(match json {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (index, item) in (1_i64..).zip(items) {
                table.raw_set(index, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        Json::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (key, value) in fields {
                let value = to_lua(lua, value)?;
                match integer_key(key) {
                    Some(i) => table.raw_set(i, value)?,
                    None => table.raw_set(key.as_str(), value)?,
                }
            }
            Value::Table(table)
        }
    })
}

/// The integer `key` is the decimal form of, if it is exactly that form.
fn integer_key(key: &str) -> Option<i64> {
    let integer: i64 = key.parse().ok()?;
    (integer.to_string() == key).then_some(integer)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` through the store's JSON text and back, as `store` then `load` do.
    fn through_json(lua: &Lua, value: &Table) -> (String, Table) {
        let text = plain_table_json(value).map(|json| json.to_string());
        let text = text.unwrap_or_else(|| panic!("not plain data"));
        let json: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        match to_lua(lua, &json) {
            Ok(Value::Table(table)) => (text, table),
            other => panic!("{text} loaded as {other:?}"),
        }
    }

    #[test]
    fn integer_keys_come_back_as_integers_and_other_keys_as_strings() -> mlua::Result<()> {
        let lua = Lua::new();
        let sparse: Table = lua
            .load("return {[1] = 1, [1000000] = 2, [-3] = 'm', [0] = 'z', x = {[7] = true}}")
            .eval()?;
        let (text, back) = through_json(&lua, &sparse);
        assert_eq!(
            text,
            r#"{"-3":"m","0":"z","1":1,"1000000":2,"x":{"7":true}}"#
        );
        assert_eq!(back.raw_get::<i64>(1)?, 1);
        assert_eq!(back.raw_get::<i64>(1_000_000)?, 2);
        assert_eq!(back.raw_get::<String>(-3)?, "m");
        assert_eq!(back.raw_get::<String>(0)?, "z");
        assert!(back.raw_get::<Value>("1")?.is_nil());
        let inner: Table = back.raw_get("x")?;
        assert!(inner.raw_get::<bool>(7)?);
        // A sequence stays an array; a JSON object's other keys stay strings.
        let json = serde_json::json!({"01": 1, "+2": 2, "-0": 3, "1.5": 4, "99999999999999999999": 5,
                                      "list": [10, null, 30]});
        let Value::Table(loaded) = to_lua(&lua, &json)? else {
            panic!("an object loads as a table");
        };
        for key in ["01", "+2", "-0", "1.5", "99999999999999999999"] {
            assert!(
                !loaded.raw_get::<Value>(key)?.is_nil(),
                "{key} stays a string"
            );
        }
        let list: Table = loaded.raw_get("list")?;
        assert_eq!(list.raw_get::<i64>(1)?, 10);
        assert!(list.raw_get::<Value>(2)?.is_nil());
        assert_eq!(list.raw_get::<i64>(3)?, 30);
        assert!(list.metatable().is_none());
        Ok(())
    }

    #[test]
    fn a_table_whose_keys_json_would_merge_is_not_plain_data() -> mlua::Result<()> {
        let lua = Lua::new();
        let both: Table = lua.load("return {[1] = 'a', ['1'] = 'b'}").eval()?;
        assert_eq!(plain_table_json(&both), None);
        let apart: Table = lua.load("return {[1] = 'a', ['01'] = 'b'}").eval()?;
        assert_eq!(
            plain_table_json(&apart).map(|json| json.to_string()),
            Some(r#"{"01":"b","1":"a"}"#.to_string())
        );
        Ok(())
    }
}
