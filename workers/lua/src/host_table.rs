//! The table of Rust functions handed to `helpers.lua`: the shared cell helpers
//! ([`crate::helpers`], [`crate::text`]) converted to Lua values, plus what only Lua needs
//! from Rust (environment variables, host tools, status events, displays, JSON).
//!
//! Every function here answers `value` on success and `nil, message` on failure; the Lua
//! wrappers turn the message into `error(message, 2)`, so a failing helper raises a plain
//! string error pointing at the cell's line, as Lua's own functions do.

use super::{json, lock, CellSink};
use crate::helpers::{self, HelperError};
use mlua::{Function, Lua, LuaSerdeExt, MultiValue, SerializeOptions, Table, Value};
use serde_json::{Map, Value as Json};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The MIME type the supervisor files under a cell's `status_events`.
const STATUS_MIME: &str = "application/x-cellvisor-status";

/// How often a cell waiting for a host tool looks at its interrupt flag.
const TOOL_POLL: Duration = Duration::from_millis(20);

/// JSON from a tool becomes plain Lua values: `null` is `nil`, arrays carry no metatable.
const FROM_JSON: SerializeOptions = SerializeOptions::new()
    .set_array_metatable(false)
    .serialize_none_to_null(false)
    .serialize_unit_to_null(false);

/// The table of host functions handed to `helpers.lua`.
pub(super) fn host_table(lua: &Lua, sink: &CellSink) -> mlua::Result<Table> {
    let host = lua.create_table()?;
    host.set("read", lua.create_function(read)?)?;
    host.set("store", lua.create_function(store)?)?;
    host.set("tree", lua.create_function(tree)?)?;
    host.set("sort", lua.create_function(sort)?)?;
    host.set("uniq", lua.create_function(uniq)?)?;
    host.set("diff", lua.create_function(diff)?)?;
    host.set("env_all", lua.create_function(env_all)?)?;
    host.set("env_set", lua.create_function(env_set)?)?;
    host.set("artifacts", lua.create_function(artifacts)?)?;
    host.set("status", status_function(lua, sink)?)?;
    host.set("yield_control", yield_control_function(lua, sink)?)?;
    host.set("tool_names", tool_names_function(lua, sink)?)?;
    host.set("call_tool", call_tool_function(lua, sink)?)?;
    host.set("resolve_tool", resolve_tool_function(lua, sink)?)?;
    host.set("search_tools", search_tools_function(lua, sink)?)?;
    host.set("display_bundle", display_bundle_function(lua, sink)?)?;
    host.set("json_text", lua.create_function(json_text)?)?;
    host.set("store_save", lua.create_function(store_save)?)?;
    host.set("store_load", lua.create_function(store_load)?)?;
    Ok(host)
}

/// `nil, message`: how every host function fails.
fn failure(lua: &Lua, message: String) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([
        Value::Nil,
        Value::String(lua.create_string(message)?),
    ]))
}

fn success<const N: usize>(values: [Value; N]) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter(values))
}

fn bytes(lua: &Lua, data: impl AsRef<[u8]>) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(data)?))
}

fn count(n: usize) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A helper's failure as `nil, message`.
fn refused(lua: &Lua, error: HelperError) -> mlua::Result<MultiValue> {
    failure(lua, error.to_string())
}

fn as_path(path: &mlua::String) -> std::path::PathBuf {
    std::ffi::OsString::from_vec(path.as_bytes().to_vec()).into()
}

/// `read(path, offset, limit, numbered)`: see [`helpers::fs::read`].
fn read(
    lua: &Lua,
    (path, offset, limit, numbered): (mlua::String, usize, Option<usize>, bool),
) -> mlua::Result<MultiValue> {
    match helpers::fs::read(&as_path(&path), offset, limit, numbered) {
        Ok((out, lines)) => success([bytes(lua, out)?, count(lines)]),
        Err(error) => refused(lua, error),
    }
}

/// `store(path, content, append)`: `write`/`append`, see [`helpers::fs::write`].
fn store(
    lua: &Lua,
    (path, content, append): (mlua::String, mlua::String, bool),
) -> mlua::Result<MultiValue> {
    match helpers::fs::write(&as_path(&path), &content.as_bytes(), append) {
        Ok(written) => success([count(written)]),
        Err(error) => refused(lua, error),
    }
}

/// `tree(path, max_depth, show_hidden)`: see [`helpers::fs::tree`].
fn tree(
    lua: &Lua,
    (path, max_depth, show_hidden): (mlua::String, usize, bool),
) -> mlua::Result<MultiValue> {
    match helpers::fs::tree(&as_path(&path), max_depth, show_hidden) {
        Ok((out, entries)) => success([bytes(lua, out)?, count(entries)]),
        Err(error) => refused(lua, error),
    }
}

fn sort(
    lua: &Lua,
    (input, reverse, unique): (mlua::String, bool, bool),
) -> mlua::Result<MultiValue> {
    let (out, lines) = crate::text::sort(&input.as_bytes(), reverse, unique);
    success([bytes(lua, out)?, count(lines)])
}

fn uniq(lua: &Lua, (input, with_counts): (mlua::String, bool)) -> mlua::Result<MultiValue> {
    let (out, lines) = crate::text::uniq(&input.as_bytes(), with_counts);
    success([bytes(lua, out)?, count(lines)])
}

fn diff(lua: &Lua, (a, b): (mlua::String, mlua::String)) -> mlua::Result<MultiValue> {
    let (out, added, removed) = crate::text::unified_diff(&a.as_bytes(), &b.as_bytes());
    success([bytes(lua, out)?, count(added), count(removed)])
}

fn env_all(lua: &Lua, (): ()) -> mlua::Result<Table> {
    let all = lua.create_table()?;
    for (key, value) in std::env::vars_os() {
        all.raw_set(
            lua.create_string(key.as_bytes())?,
            lua.create_string(value.as_bytes())?,
        )?;
    }
    Ok(all)
}

fn env_set(lua: &Lua, (key, value): (mlua::String, mlua::String)) -> mlua::Result<MultiValue> {
    let (key, value) = (key.as_bytes().to_vec(), value.as_bytes().to_vec());
    if key.is_empty() || key.contains(&b'=') || key.contains(&0) {
        let shown = String::from_utf8_lossy(&key).into_owned();
        return failure(lua, format!("env: invalid variable name '{shown}'"));
    }
    if value.contains(&0) {
        return failure(lua, "env: value must not contain NUL bytes".into());
    }
    std::env::set_var(
        std::ffi::OsStr::from_bytes(&key),
        std::ffi::OsStr::from_bytes(&value),
    );
    success([Value::Boolean(true)])
}

/// `artifacts(ids)`: `output`, see [`helpers::output::read_outputs`]. The directory is
/// looked up at each call, so a cell may point `CELLVISOR_ARTIFACT_DIR` elsewhere.
fn artifacts(lua: &Lua, ids: Vec<mlua::String>) -> mlua::Result<MultiValue> {
    let ids: Vec<Vec<u8>> = ids.iter().map(|id| id.as_bytes().to_vec()).collect();
    match helpers::output::read_outputs(helpers::output::dir_from_env().as_deref(), &ids) {
        Ok((out, total)) => success([bytes(lua, out)?, count(total)]),
        Err(error) => refused(lua, error),
    }
}

/// `status(details)`: one status event for the running cell.
fn status_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |_, details: Table| {
        let Some(details) = json::plain_table_json(&details) else {
            return Err(mlua::Error::runtime("status details must be plain data"));
        };
        let mut bundle = Map::new();
        bundle.insert(STATUS_MIME.into(), details);
        if let Some(cell) = &*lock(&sink) {
            cell.outbox
                .display(cell.cell_id, Json::Object(bundle).to_string());
        }
        Ok(())
    })
}

/// `yield_control()`: the host gets the running cell's output so far now; the cell goes on.
fn yield_control_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |_, ()| {
        if let Some(cell) = &*lock(&sink) {
            cell.outbox.yield_control(cell.cell_id);
        }
        Ok(())
    })
}

/// `tool_names()`: the tools declared for the running cell, sorted.
fn tool_names_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |_, (): ()| {
        let mut names: Vec<String> = match &*lock(&sink) {
            Some(cell) => cell.tools.iter().map(|t| t.name.clone()).collect(),
            None => Vec::new(),
        };
        names.sort();
        Ok(names)
    })
}

/// `call_tool(name, args)`: asks the host and waits for its answer (the result as Lua
/// values), giving up when the cell is interrupted.
fn call_tool_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |lua, (name, args): (String, Value)| {
        let args_json = match &args {
            Value::Nil => Json::Object(Map::new()),
            Value::Table(table) => match json::plain_table_json(table) {
                Some(json) => json,
                None => {
                    let message = format!("tool.{name}: arguments must be plain data (JSON)");
                    return failure(lua, message);
                }
            },
            other => {
                let message = format!(
                    "tool.{name}: arguments must be a table, not {}",
                    other.type_name()
                );
                return failure(lua, message);
            }
        };
        // The lock is not held while waiting: `print` from a debug hook must not deadlock.
        let (pending, interrupt) = {
            let guard = lock(&sink);
            let Some(cell) = &*guard else {
                return failure(lua, format!("tool.{name}: no cell is running"));
            };
            if !cell.tools.iter().any(|t| t.name == name) {
                return failure(lua, format!("tool.{name}: no such tool"));
            }
            let pending = cell
                .outbox
                .call_tool(cell.cell_id, &name, args_json.to_string());
            (pending, cell.interrupt.clone())
        };
        let outcome = loop {
            if interrupt.load(Ordering::Relaxed) {
                return Err(mlua::Error::runtime("interrupted"));
            }
            match pending.answer.recv_timeout(TOOL_POLL) {
                Ok(outcome) => break outcome,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Err("the tool call was dropped without an answer".into())
                }
            }
        };
        match outcome {
            Ok(text) => {
                let result = serde_json::from_str::<Json>(&text).unwrap_or(Json::String(text));
                success([lua.to_value_with(&result, FROM_JSON)?])
            }
            Err(message) => failure(lua, format!("tool.{name}: {message}")),
        }
    })
}

/// The `ALL_TOOLS` table for a cell: `{name, description, input_schema}` each.
pub(super) fn all_tools(lua: &Lua, tools: &[cellvisor_ipc::ToolInfo]) -> mlua::Result<Table> {
    let list = lua.create_table()?;
    for tool in crate::tools::all_tools_json(tools)
        .as_array()
        .into_iter()
        .flatten()
    {
        list.push(lua.to_value_with(tool, FROM_JSON)?)?;
    }
    Ok(list)
}

/// `resolve_tool(name)`: the declared tool `name` reaches, by its own name or, failing that,
/// by its identifier (`list_dir` for `list-dir`); nil when none.
fn resolve_tool_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |_, name: String| {
        let guard = lock(&sink);
        let Some(cell) = &*guard else {
            return Ok(None);
        };
        let found = cell
            .tools
            .iter()
            .find(|tool| tool.name == name)
            .or_else(|| {
                cell.tools
                    .iter()
                    .find(|tool| crate::tools::identifier(&tool.name) == name)
            });
        Ok(found.map(|tool| tool.name.clone()))
    })
}

/// `search_tools(query, limit)`: `tools.tool_search`'s result as Lua values.
fn search_tools_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |lua, (query, limit): (String, Option<f64>)| {
        let found = match &*lock(&sink) {
            Some(cell) => crate::tools::search(&cell.tools, &query, limit),
            None => crate::tools::search(&[], &query, limit),
        };
        match found {
            Ok(found) => success([lua.to_value_with(&found, FROM_JSON)?]),
            Err(err) => failure(lua, err.to_string()),
        }
    })
}

/// `display_bundle(table)`: sends a MIME bundle (a table of plain data) for the running cell.
fn display_bundle_function(lua: &Lua, sink: &CellSink) -> mlua::Result<Function> {
    let sink = sink.clone();
    lua.create_function(move |_, bundle: Table| {
        let Some(bundle) = json::plain_table_json(&bundle) else {
            return Err(mlua::Error::runtime("a display bundle must be plain data"));
        };
        if let Some(cell) = &*lock(&sink) {
            cell.outbox.display(cell.cell_id, bundle.to_string());
        }
        Ok(())
    })
}

/// `json_text(value)`: the value as compact JSON, or nil when it is not JSON.
fn json_text(_: &Lua, value: Value) -> mlua::Result<Option<String>> {
    Ok(json::plain_value_json(&value).map(|json| json.to_string()))
}

/// `store_save(key, value)`: writes the value for `load` (see [`helpers::store`]); the bytes.
fn store_save(lua: &Lua, (key, value): (String, Value)) -> mlua::Result<MultiValue> {
    let Some(json) = json::plain_value_json(&value) else {
        return failure(
            lua,
            "store: the value is not plain data, which JSON needs".into(),
        );
    };
    match helpers::store::save(
        helpers::store::dir_from_env().as_deref(),
        &key,
        &json.to_string(),
    ) {
        Ok(bytes) => success([count(bytes)]),
        Err(error) => refused(lua, error),
    }
}

/// `store_load(key)`: `true, value` when stored, `false` when not, `nil, message` on failure.
fn store_load(lua: &Lua, key: String) -> mlua::Result<MultiValue> {
    let text = match helpers::store::load(helpers::store::dir_from_env().as_deref(), &key) {
        Ok(Some(text)) => text,
        Ok(None) => return success([Value::Boolean(false)]),
        Err(error) => return refused(lua, error),
    };
    match serde_json::from_str::<Json>(&text) {
        Ok(json) => success([Value::Boolean(true), json::to_lua(lua, &json)?]),
        Err(err) => failure(
            lua,
            format!("load: the stored value of \"{key}\" is not valid JSON ({err})"),
        ),
    }
}
