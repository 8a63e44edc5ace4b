//! The Lua worker's snapshots: which globals are the user's, and saving, restoring and
//! listing them.
//!
//! Cells run with the one globals table as `_ENV`, so the user's names are the globals that
//! were not there (or held another value) when the worker finished starting (`Baseline`),
//! less the ones the worker sets for each cell (`ALL_TOOLS`).
//!
//! The payload (written in Rust over mlua values, fast for big tables) is `MAGIC`, then one
//! record per global (`GLOBAL`, the name, its value) and `END`. A value is a tag and its data:
//! integers (zigzag LEB128) and floats (8 bytes) apart, strings by length (binary-safe), a table by its
//! size hints, its entries (key, value, ..., `NIL`) and its metatable (or `NIL`), a Lua
//! function by its `string.dump` bytecode and each upvalue (its value, or the (function id,
//! index) it shares), a table or function met again by `REF` and its id, and a value the
//! worker itself made (`print`, `string.format`, the globals table itself, so `_ENV`
//! upvalues point at the new worker's globals) by `BUILTIN` and its path. Userdata, threads
//! and C functions are not saved: a global holding one anywhere is skipped, with where.
//!
//! Beside it: `encode` (values into bytes) and `decode` (bytes into values, checked).

mod decode;
mod encode;

use crate::runtime::{Interrupt, LoadedState, SavedState, StateError};
use cellvisor_ipc::state::{NameInfo, SkippedName};
use decode::{DecodeError, Decoder};
use encode::{EncodeError, Encoder};
use mlua::{Function, LightUserData, Lua, Table, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

/// How a payload starts (and which version of the format it is).
const MAGIC: &[u8] = b"cellvisor lua state 1\n";

/// Tables and functions nested deeper than this are not saved (and not read): the encoder
/// and decoder recurse through mlua, a few KiB of stack a level in a debug build, and a
/// test thread has 2 MiB.
const MAX_DEPTH: usize = 250;

/// Globals the worker itself sets before each cell: never the user's.
const WORKER_GLOBALS: &[&str] = &["ALL_TOOLS"];

/// The tags of the payload.
mod tag {
    pub(super) const END: u8 = 0;
    pub(super) const GLOBAL: u8 = 1;
    pub(super) const NIL: u8 = 0;
    pub(super) const FALSE: u8 = 1;
    pub(super) const TRUE: u8 = 2;
    pub(super) const INTEGER: u8 = 3;
    pub(super) const FLOAT: u8 = 4;
    pub(super) const STRING: u8 = 5;
    pub(super) const TABLE: u8 = 6;
    pub(super) const FUNCTION: u8 = 7;
    pub(super) const REF: u8 = 8;
    pub(super) const BUILTIN: u8 = 9;
    pub(super) const UPVALUE_OWN: u8 = 0;
    pub(super) const UPVALUE_SHARED: u8 = 1;
}

/// A global: its name (bytes, as Lua allows) and value.
type NamedValue = (Vec<u8>, Value);

/// What the worker's namespace held once it had started: what is not the user's.
pub(super) struct Baseline {
    globals: HashMap<Vec<u8>, Value>,
    builtins: Builtins,
    debug: DebugFunctions,
}

/// The worker's own tables, functions and userdata, by path (`string.format`) both ways:
/// a snapshot names them instead of holding them.
struct Builtins {
    paths: HashMap<usize, String>,
    values: HashMap<String, Value>,
}

impl Builtins {
    fn path_of(&self, pointer: usize) -> Option<&str> {
        self.paths.get(&pointer).map(String::as_str)
    }

    fn value_at(&self, path: &str) -> Option<Value> {
        self.values.get(path).cloned()
    }

    fn add(&mut self, path: String, value: &Value) {
        let identity = matches!(
            value,
            Value::Table(_) | Value::Function(_) | Value::UserData(_) | Value::Thread(_)
        );
        if identity && !self.values.contains_key(&path) {
            self.paths
                .entry(value.to_pointer() as usize)
                .or_insert_with(|| path.clone());
            self.values.insert(path, value.clone());
        }
    }
}

/// The `debug` library's upvalue functions as the worker started with them (cells may
/// replace the globals).
struct DebugFunctions {
    get_upvalue: Function,
    set_upvalue: Function,
    upvalue_id: Function,
    upvalue_join: Function,
}

impl DebugFunctions {
    /// The names and values of `function`'s upvalues, in order.
    fn upvalues(&self, function: &Function) -> mlua::Result<Vec<(String, Value)>> {
        let mut upvalues = Vec::new();
        for index in 1.. {
            let (name, value): (Option<mlua::String>, Value) =
                self.get_upvalue.call((function, index))?;
            match name {
                Some(name) => upvalues.push((name.to_string_lossy(), value)),
                None => return Ok(upvalues),
            }
        }
        Ok(upvalues)
    }

    /// The identity of upvalue `index` of `function`, shared by the closures that share it.
    fn upvalue_id(&self, function: &Function, index: u64) -> mlua::Result<usize> {
        let id: LightUserData = self.upvalue_id.call((function, index))?;
        Ok(id.0 as usize)
    }

    /// Sets upvalue `index` of `function`; false if it has no such upvalue.
    fn set_upvalue(&self, function: &Function, index: u64, value: Value) -> mlua::Result<bool> {
        let name: Option<mlua::String> = self.set_upvalue.call((function, index, value))?;
        Ok(name.is_some())
    }

    /// Makes upvalue `index` of `function` the same variable as `owner_index` of `owner`.
    fn join_upvalue(
        &self,
        function: &Function,
        index: u64,
        owner: &Function,
        owner_index: u64,
    ) -> mlua::Result<()> {
        self.upvalue_join
            .call((function, index, owner, owner_index))
    }
}

impl Baseline {
    /// Records the namespace as it is now, after the prelude and helpers have loaded.
    pub(super) fn capture(lua: &Lua) -> mlua::Result<Self> {
        let globals = lua.globals();
        let mut names = HashMap::new();
        globals.for_each(|key: Value, value: Value| {
            if let Value::String(name) = key {
                names.insert(name.as_bytes().to_vec(), value);
            }
            Ok(())
        })?;
        let mut builtins = Builtins {
            paths: HashMap::new(),
            values: HashMap::new(),
        };
        builtins.add("_G".into(), &Value::Table(globals.clone()));
        let mut sorted: Vec<(&Vec<u8>, &Value)> = names.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        for (name, value) in &sorted {
            builtins.add(String::from_utf8_lossy(name).into_owned(), value);
        }
        for (name, value) in &sorted {
            let Value::Table(table) = value else { continue };
            let mut fields = Vec::new();
            table.for_each(|key: Value, field: Value| {
                if let Value::String(key) = key {
                    fields.push((key.to_string_lossy(), field));
                }
                Ok(())
            })?;
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            for (key, field) in fields {
                builtins.add(format!("{}.{key}", String::from_utf8_lossy(name)), &field);
            }
        }
        let debug: Table = globals.get("debug")?;
        Ok(Baseline {
            globals: names,
            builtins,
            debug: DebugFunctions {
                get_upvalue: debug.get("getupvalue")?,
                set_upvalue: debug.get("setupvalue")?,
                upvalue_id: debug.get("upvalueid")?,
                upvalue_join: debug.get("upvaluejoin")?,
            },
        })
    }

    /// The user's globals, sorted by name, and the ones under keys that are not strings.
    fn user_globals(&self, lua: &Lua) -> mlua::Result<(Vec<NamedValue>, Vec<Value>)> {
        let mut names = Vec::new();
        let mut other_keys = Vec::new();
        lua.globals().for_each(|key: Value, value: Value| {
            match key {
                Value::String(name) => {
                    let name = name.as_bytes().to_vec();
                    let worker_own = WORKER_GLOBALS.iter().any(|own| own.as_bytes() == name);
                    let unchanged = self.globals.get(&name) == Some(&value);
                    if !worker_own && !unchanged {
                        names.push((name, value));
                    }
                }
                other => other_keys.push(other),
            }
            Ok(())
        })?;
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((names, other_keys))
    }

    /// Removes the user's globals: new names become nil, changed worker names get their
    /// first value back.
    fn clear_user_globals(&self, lua: &Lua) -> mlua::Result<()> {
        let globals = lua.globals();
        let (names, _) = self.user_globals(lua)?;
        for (name, _) in names {
            globals.raw_set(lua.create_string(&name)?, Value::Nil)?;
        }
        for (name, value) in &self.globals {
            let key = lua.create_string(name)?;
            if globals.raw_get::<Value>(&key)? != *value {
                globals.raw_set(key, value.clone())?;
            }
        }
        Ok(())
    }

    /// Writes the user's globals into `payload`; see the module's doc for the format.
    pub(super) fn save(
        &self,
        lua: &Lua,
        payload: &Path,
        max_bytes: u64,
        interrupt: &Interrupt,
    ) -> Result<SavedState, StateError> {
        let (names, other_keys) = self.user_globals(lua).map_err(lua_failure)?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(payload)
            .map_err(|err| io_failure("open", payload, err))?;
        let mut out = std::io::BufWriter::new(file);
        let mut written = MAGIC.len() as u64;
        let write = |out: &mut std::io::BufWriter<_>, bytes: &[u8]| {
            out.write_all(bytes)
                .map_err(|err| io_failure("write", payload, err))
        };
        write(&mut out, MAGIC)?;
        let mut state = SavedState {
            saved: Vec::new(),
            skipped: other_keys.iter().map(non_string_key).collect(),
        };
        let mut encoder = Encoder::new(&self.builtins, &self.debug, interrupt);
        for (name, value) in names {
            let mark = encoder.mark();
            encoder.buf.clear();
            encoder.budget = max_bytes.saturating_sub(written);
            let shown = String::from_utf8_lossy(&name).into_owned();
            match encoder.global(&name, &value) {
                Ok(()) => {
                    write(&mut out, &encoder.buf)?;
                    written += encoder.buf.len() as u64;
                    state.saved.push(shown);
                }
                Err(EncodeError::Unsaveable { why, path }) => {
                    encoder.rollback(&mark);
                    state.skipped.push(SkippedName {
                        name: shown,
                        why: EncodeError::reason(&why, &path),
                    });
                }
                Err(EncodeError::TooBig) => {
                    return Err(StateError::TooBig {
                        bytes: written + encoder.buf.len() as u64,
                    })
                }
                Err(EncodeError::Interrupted) => return Err(interrupted()),
                Err(EncodeError::Lua(err)) => return Err(lua_failure(err)),
            }
        }
        write(&mut out, &[tag::END])?;
        out.flush()
            .map_err(|err| io_failure("write", payload, err))?;
        Ok(state)
    }

    /// Reads back the first `len` bytes of `payload`; with `replace`, the user's globals
    /// are removed first (only once the whole payload has been read).
    pub(super) fn load(
        &self,
        lua: &Lua,
        payload: &Path,
        len: u64,
        replace: bool,
        interrupt: &Interrupt,
    ) -> Result<LoadedState, StateError> {
        let mut bytes = Vec::new();
        std::fs::File::open(payload)
            .and_then(|file| file.take(len).read_to_end(&mut bytes))
            .map_err(|err| io_failure("read", payload, err))?;
        if bytes.len() as u64 != len {
            return Err(StateError::Failed(format!(
                "the Lua snapshot is shorter than its trailer says ({} of {len} bytes)",
                bytes.len()
            )));
        }
        let globals = Decoder::new(lua, &self.builtins, &self.debug, interrupt, &bytes)
            .globals()
            .map_err(|err| match err {
                DecodeError::Malformed(why) => {
                    StateError::Failed(format!("the Lua snapshot is malformed: {why}"))
                }
                DecodeError::Interrupted => interrupted(),
                DecodeError::Lua(err) => lua_failure(err),
            })?;
        if replace {
            self.clear_user_globals(lua).map_err(lua_failure)?;
        }
        let namespace = lua.globals();
        let mut state = LoadedState::default();
        for global in globals {
            let shown = String::from_utf8_lossy(&global.name).into_owned();
            match global.value {
                Ok(value) => {
                    let name = lua.create_string(&global.name).map_err(lua_failure)?;
                    namespace.raw_set(name, value).map_err(lua_failure)?;
                    state.restored.push(shown);
                }
                Err(why) => state.skipped.push(SkippedName { name: shown, why }),
            }
        }
        Ok(state)
    }

    /// How a snapshot keeps `value`, where that is worth saying.
    fn how_kept(&self, value: &Value) -> Option<String> {
        if let Some(path) = self.builtins.path_of(value.to_pointer() as usize) {
            return Some(format!("as a reference to the worker's own `{path}`"));
        }
        matches!(value, Value::Function(_)).then(|| "as bytecode, with its upvalues".to_string())
    }

    /// The user's globals, each with its type, its size in a snapshot and whether one keeps it.
    pub(super) fn names(
        &self,
        lua: &Lua,
        interrupt: &Interrupt,
    ) -> Result<Vec<NameInfo>, StateError> {
        let (names, _) = self.user_globals(lua).map_err(lua_failure)?;
        let mut infos = Vec::with_capacity(names.len());
        for (name, value) in names {
            let mut encoder = Encoder::new(&self.builtins, &self.debug, interrupt);
            let (size_bytes, saveable, note) = match encoder.global(&name, &value) {
                Ok(()) => (Some(encoder.buf.len() as u64), true, self.how_kept(&value)),
                Err(EncodeError::Unsaveable { why, path }) => {
                    (None, false, Some(EncodeError::reason(&why, &path)))
                }
                Err(EncodeError::TooBig) => (None, true, None),
                Err(EncodeError::Interrupted) => return Err(interrupted()),
                Err(EncodeError::Lua(err)) => return Err(lua_failure(err)),
            };
            infos.push(NameInfo {
                name: String::from_utf8_lossy(&name).into_owned(),
                kind: lua_type(&value).to_string(),
                size_bytes,
                saveable,
                note,
            });
        }
        Ok(infos)
    }
}

/// A value's type as Lua's `type()` says it.
fn lua_type(value: &Value) -> &'static str {
    match value {
        Value::Integer(_) | Value::Number(_) => "number",
        Value::LightUserData(_) | Value::UserData(_) => "userdata",
        other => other.type_name(),
    }
}

/// A global under a key that is not a string: not a name, so not saved.
fn non_string_key(key: &Value) -> SkippedName {
    let shown = match key {
        Value::Integer(integer) => integer.to_string(),
        Value::Number(float) => float.to_string(),
        Value::Boolean(flag) => flag.to_string(),
        other => format!("a {} key", lua_type(other)),
    };
    SkippedName {
        name: format!("_G[{shown}]"),
        why: "only globals named by strings are saved".into(),
    }
}

fn lua_failure(err: mlua::Error) -> StateError {
    StateError::Failed(format!("Lua failed: {err}"))
}

fn io_failure(what: &str, path: &Path, err: std::io::Error) -> StateError {
    StateError::Failed(format!("cannot {what} {}: {err}", path.display()))
}

fn interrupted() -> StateError {
    StateError::Failed("interrupted".into())
}
