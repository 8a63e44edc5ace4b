//! The Rust side of the Lua prelude helpers (`helpers.lua`): what Lua's standard library
//! cannot do (list directories, create them, set environment variables, wait for a host
//! tool) or does not do exactly (byte-order sorting, unified diffs), and status events.
//!
//! Every function here answers `value` on success and `nil, message` on failure; the Lua
//! wrappers turn the message into `error(message, 2)`, so a failing helper raises a plain
//! string error pointing at the cell's line, as Lua's own functions do.

use super::{json, lock, CellSink};
use mlua::{Function, Lua, LuaSerdeExt, MultiValue, SerializeOptions, Table, Value};
use serde_json::{Map, Value as Json};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
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

/// "No such file or directory" without Rust's " (os error 2)".
fn os_message(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

/// `helper: No such file or directory: 'path'`, like the Python prelude says it.
fn path_error(helper: &str, error: &std::io::Error, path: &[u8]) -> String {
    format!(
        "{helper}: {}: '{}'",
        os_message(error),
        String::from_utf8_lossy(path)
    )
}

fn as_path(path: &mlua::String) -> std::path::PathBuf {
    std::ffi::OsString::from_vec(path.as_bytes().to_vec()).into()
}

/// `read(path, offset, limit, numbered)`: the file's text (or the selected lines, or their
/// numbered view), and how many lines.
fn read(
    lua: &Lua,
    (path, offset, limit, numbered): (mlua::String, usize, Option<usize>, bool),
) -> mlua::Result<MultiValue> {
    match crate::text::read_lines(&as_path(&path), offset, limit, numbered) {
        Ok((out, lines)) => success([bytes(lua, out)?, count(lines)]),
        Err(error) => failure(lua, path_error("read", &error, &path.as_bytes())),
    }
}

/// `store(path, content, append)`: writes (or appends) `content`, creating parent
/// directories; answers the number of bytes.
fn store(
    lua: &Lua,
    (path, content, append): (mlua::String, mlua::String, bool),
) -> mlua::Result<MultiValue> {
    let helper = if append { "append" } else { "write" };
    let raw_path = path.as_bytes().to_vec();
    let target = as_path(&path);
    let written = (|| {
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .append(append)
            .truncate(!append)
            .open(&target)?;
        file.write_all(&content.as_bytes())
    })();
    match written {
        Ok(()) => success([count(content.as_bytes().len())]),
        Err(error) => failure(lua, path_error(helper, &error, &raw_path)),
    }
}

/// `tree(path, max_depth, show_hidden)`: the listing and how many entries it has.
fn tree(
    lua: &Lua,
    (path, max_depth, show_hidden): (mlua::String, usize, bool),
) -> mlua::Result<MultiValue> {
    let raw_path = path.as_bytes().to_vec();
    let root = as_path(&path);
    match fs::metadata(&root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            let error = std::io::Error::from_raw_os_error(libc::ENOTDIR);
            return failure(lua, path_error("tree", &error, &raw_path));
        }
        Err(error) => return failure(lua, path_error("tree", &error, &raw_path)),
    }
    let mut listing = Listing {
        out: raw_path,
        entries: 0,
        max_depth,
        show_hidden,
    };
    listing.walk(&root, &mut Vec::new(), 1);
    success([bytes(lua, listing.out)?, count(listing.entries)])
}

struct Listing {
    out: Vec<u8>,
    entries: usize,
    max_depth: usize,
    show_hidden: bool,
}

impl Listing {
    fn walk(&mut self, dir: &Path, prefix: &mut Vec<u8>, depth: usize) {
        // An unreadable directory is listed but not entered, as `tree` does.
        let Ok(read) = fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<(Vec<u8>, bool)> = read
            .filter_map(Result::ok)
            .map(|entry| {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                (entry.file_name().as_bytes().to_vec(), is_dir)
            })
            .filter(|(name, _)| self.show_hidden || !name.starts_with(b"."))
            .collect();
        entries.sort();
        let total = entries.len();
        for (index, (name, is_dir)) in entries.into_iter().enumerate() {
            let last = index + 1 == total;
            self.out.push(b'\n');
            self.out.extend_from_slice(prefix);
            self.out
                .extend_from_slice(if last { "└── " } else { "├── " }.as_bytes());
            self.out.extend_from_slice(&name);
            self.entries += 1;
            if is_dir {
                self.out.push(b'/');
                if depth < self.max_depth {
                    let kept = prefix.len();
                    prefix.extend_from_slice(if last { "    " } else { "│   " }.as_bytes());
                    self.walk(
                        &dir.join(std::ffi::OsStr::from_bytes(&name)),
                        prefix,
                        depth + 1,
                    );
                    prefix.truncate(kept);
                }
            }
        }
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

/// `artifacts(ids)`: the spilled outputs joined with newlines, and their total size.
fn artifacts(lua: &Lua, ids: Vec<mlua::String>) -> mlua::Result<MultiValue> {
    let directory = cellvisor_ipc::env::directory(cellvisor_ipc::env::ARTIFACT_DIR);
    let mut out = Vec::new();
    let mut total = 0;
    for (index, id) in ids.iter().enumerate() {
        let id = id.as_bytes();
        let shown = String::from_utf8_lossy(&id).into_owned();
        if id.is_empty()
            || id.contains(&b'/')
            || id.contains(&b'\\')
            || id.windows(2).any(|w| w == b"..")
        {
            return failure(lua, format!("output: invalid output id '{shown}'"));
        }
        let unknown = || format!("output: unknown output id '{shown}'");
        let Some(directory) = &directory else {
            return failure(lua, unknown());
        };
        let mut name = id.to_vec();
        name.extend_from_slice(b".txt");
        match crate::runtime::read_artifact(
            &Path::new(directory).join(std::ffi::OsStr::from_bytes(&name)),
        ) {
            Ok(data) => {
                if index > 0 {
                    out.push(b'\n');
                }
                total += data.len();
                out.extend_from_slice(&data);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return failure(lua, unknown())
            }
            Err(error) => return failure(lua, path_error("output", &error, &id)),
        }
    }
    success([bytes(lua, out)?, count(total)])
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

/// `store_save(key, value)`: writes the value for `load` (see [`crate::store`]); the bytes.
fn store_save(lua: &Lua, (key, value): (String, Value)) -> mlua::Result<MultiValue> {
    let Some(json) = json::plain_value_json(&value) else {
        return failure(
            lua,
            "store: the value is not plain data, which JSON needs".into(),
        );
    };
    match crate::store::save(
        cellvisor_ipc::env::directory(cellvisor_ipc::env::STORE_DIR).as_deref(),
        &key,
        &json.to_string(),
    ) {
        Ok(bytes) => success([count(bytes)]),
        Err(message) => failure(lua, message),
    }
}

/// `store_load(key)`: `true, value` when stored, `false` when not, `nil, message` on failure.
fn store_load(lua: &Lua, key: String) -> mlua::Result<MultiValue> {
    let text = match crate::store::load(
        cellvisor_ipc::env::directory(cellvisor_ipc::env::STORE_DIR).as_deref(),
        &key,
    ) {
        Ok(Some(text)) => text,
        Ok(None) => return success([Value::Boolean(false)]),
        Err(message) => return failure(lua, message),
    };
    match serde_json::from_str::<Json>(&text) {
        Ok(json) => success([Value::Boolean(true), lua.to_value_with(&json, FROM_JSON)?]),
        Err(err) => failure(
            lua,
            format!("load: the stored value of \"{key}\" is not valid JSON ({err})"),
        ),
    }
}
