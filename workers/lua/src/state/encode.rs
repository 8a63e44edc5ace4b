//! Writing Lua values into a snapshot payload (the format is described in `super`).
//!
//! Tables and Lua functions get an id the first time they are written (before their
//! contents, so cycles end in a reference); later meetings write the id only. An upvalue is
//! written with the first function that has it; the other functions sharing it name that
//! (function, index) instead. Values the worker itself created (the standard library, the
//! prelude's helpers, the globals table) are written by their path (`string.format`).

use super::{tag, Builtins, DebugFunctions, MAX_DEPTH};
use crate::runtime::Interrupt;
use mlua::{Function, Table, Value};
use std::collections::HashMap;

/// How often (in values written) the encoder looks at the interrupt flag.
const INTERRUPT_CHECK_EVERY: u32 = 4096;

/// Why a value was not written.
#[derive(Debug)]
pub(super) enum EncodeError {
    /// The value (or something it holds, at `path`) cannot be saved; `why` says what.
    Unsaveable {
        /// What cannot be saved, for the user (`C functions cannot be saved`).
        why: String,
        /// Where inside the name's value, innermost segment last.
        path: Vec<String>,
    },
    /// The payload would pass its cap.
    TooBig,
    /// The state task was interrupted.
    Interrupted,
    /// Lua itself failed (out of memory, say).
    Lua(mlua::Error),
}

impl From<mlua::Error> for EncodeError {
    fn from(err: mlua::Error) -> Self {
        EncodeError::Lua(err)
    }
}

impl EncodeError {
    fn unsaveable(why: &str) -> Self {
        EncodeError::Unsaveable {
            why: why.to_string(),
            path: Vec::new(),
        }
    }

    /// The same error, found one step further inside (`segment` is that step).
    fn inside(self, segment: impl FnOnce() -> String) -> Self {
        match self {
            EncodeError::Unsaveable { why, mut path } => {
                path.push(segment());
                EncodeError::Unsaveable { why, path }
            }
            other => other,
        }
    }

    /// The reason a user reads for a skipped name: what cannot be saved, and where.
    pub(super) fn reason(why: &str, path: &[String]) -> String {
        if path.is_empty() {
            return why.to_string();
        }
        let inner: String = path.iter().rev().map(String::as_str).collect();
        format!("{why} (found at {inner})")
    }
}

/// Where the encoder was before a name, to take the name back out if it cannot be saved.
pub(super) struct Mark {
    objects: usize,
    upvalues: usize,
}

/// Writes values into `buf`, remembering the tables, functions and upvalues already written.
pub(super) struct Encoder<'a> {
    builtins: &'a Builtins,
    debug: &'a DebugFunctions,
    interrupt: &'a Interrupt,
    /// Object pointer to id; ids count up from 0 in the order of `object_order`.
    ids: HashMap<usize, u64>,
    object_order: Vec<usize>,
    /// Upvalue id (`debug.upvalueid`) to the (function id, index) that first wrote it.
    upvalues: HashMap<usize, (u64, u64)>,
    upvalue_order: Vec<usize>,
    /// The bytes of the name being written.
    pub(super) buf: Vec<u8>,
    /// How many bytes `buf` may grow to.
    pub(super) budget: u64,
    steps: u32,
}

impl<'a> Encoder<'a> {
    /// An encoder that knows no objects yet.
    pub(super) fn new(
        builtins: &'a Builtins,
        debug: &'a DebugFunctions,
        interrupt: &'a Interrupt,
    ) -> Self {
        Encoder {
            builtins,
            debug,
            interrupt,
            ids: HashMap::new(),
            object_order: Vec::new(),
            upvalues: HashMap::new(),
            upvalue_order: Vec::new(),
            buf: Vec::new(),
            budget: u64::MAX,
            steps: 0,
        }
    }

    /// Where the encoder is now (before a name).
    pub(super) fn mark(&self) -> Mark {
        Mark {
            objects: self.object_order.len(),
            upvalues: self.upvalue_order.len(),
        }
    }

    /// Forgets everything written since `mark` (a name that could not be saved).
    pub(super) fn rollback(&mut self, mark: &Mark) {
        for pointer in self.object_order.drain(mark.objects..) {
            self.ids.remove(&pointer);
        }
        for id in self.upvalue_order.drain(mark.upvalues..) {
            self.upvalues.remove(&id);
        }
        self.buf.clear();
    }

    /// Writes one global: its name, then its value.
    pub(super) fn global(&mut self, name: &[u8], value: &Value) -> Result<(), EncodeError> {
        self.buf.push(tag::GLOBAL);
        self.bytes(name);
        self.value(value, 0)
    }

    fn value(&mut self, value: &Value, depth: usize) -> Result<(), EncodeError> {
        self.steps = self.steps.wrapping_add(1);
        if self.steps.is_multiple_of(INTERRUPT_CHECK_EVERY) && self.interrupt.is_raised() {
            return Err(EncodeError::Interrupted);
        }
        match value {
            Value::Nil => self.buf.push(tag::NIL),
            Value::Boolean(false) => self.buf.push(tag::FALSE),
            Value::Boolean(true) => self.buf.push(tag::TRUE),
            Value::Integer(integer) => {
                self.buf.push(tag::INTEGER);
                // Zigzag, so small negative integers are short too.
                varint(&mut self.buf, ((integer << 1) ^ (integer >> 63)) as u64);
            }
            Value::Number(float) => {
                self.buf.push(tag::FLOAT);
                self.buf.extend_from_slice(&float.to_bits().to_le_bytes());
            }
            Value::String(text) => {
                self.buf.push(tag::STRING);
                self.bytes(&text.as_bytes());
            }
            Value::Table(_) | Value::Function(_) | Value::UserData(_) | Value::Thread(_) => {
                self.object(value, depth)?;
            }
            Value::LightUserData(_) => {
                return Err(EncodeError::unsaveable("light userdata cannot be saved"))
            }
            Value::Error(_) => return Err(EncodeError::unsaveable("error values cannot be saved")),
            _ => {
                return Err(EncodeError::unsaveable(
                    "values of this type cannot be saved",
                ))
            }
        }
        if self.buf.len() as u64 > self.budget {
            return Err(EncodeError::TooBig);
        }
        Ok(())
    }

    /// A value that has an identity: a reference if already written, the worker's own by its
    /// path, else its definition.
    fn object(&mut self, value: &Value, depth: usize) -> Result<(), EncodeError> {
        let pointer = value.to_pointer() as usize;
        if let Some(id) = self.ids.get(&pointer) {
            self.buf.push(tag::REF);
            varint(&mut self.buf, *id);
            return Ok(());
        }
        if let Some(path) = self.builtins.path_of(pointer) {
            self.buf.push(tag::BUILTIN);
            self.bytes(path.as_bytes());
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            return Err(EncodeError::unsaveable(
                "tables and functions nested this deeply cannot be saved",
            ));
        }
        match value {
            Value::Table(table) => self.table(table, pointer, depth),
            Value::Function(function) => self.function(function, pointer, depth),
            Value::Thread(_) => Err(EncodeError::unsaveable(
                "threads (coroutines) cannot be saved",
            )),
            _ => Err(EncodeError::unsaveable("userdata cannot be saved")),
        }
    }

    fn new_id(&mut self, pointer: usize) -> u64 {
        let id = self.object_order.len() as u64;
        self.ids.insert(pointer, id);
        self.object_order.push(pointer);
        id
    }

    fn table(&mut self, table: &Table, pointer: usize, depth: usize) -> Result<(), EncodeError> {
        self.new_id(pointer);
        self.buf.push(tag::TABLE);
        let array_len = table.raw_len() as u64;
        varint(&mut self.buf, array_len);
        let count_at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        let mut entries: u64 = 0;
        let mut failure = None;
        let walked = table.for_each(|key: Value, value: Value| {
            entries += 1;
            let written = self
                .value(&key, depth + 1)
                .map_err(|err| err.inside(|| "[a key]".to_string()))
                .and_then(|()| {
                    self.value(&value, depth + 1)
                        .map_err(|err| err.inside(|| key_segment(&key)))
                });
            written.map_err(|err| {
                failure = Some(err);
                mlua::Error::runtime("stopped")
            })
        });
        if let Some(err) = failure {
            return Err(err);
        }
        walked?;
        self.buf.push(tag::NIL);
        let hash_hint = u32::try_from(entries.saturating_sub(array_len)).unwrap_or(u32::MAX);
        self.buf[count_at..count_at + 4].copy_from_slice(&hash_hint.to_le_bytes());
        match table.metatable() {
            Some(metatable) => self
                .value(&Value::Table(metatable), depth + 1)
                .map_err(|err| err.inside(|| " (its metatable)".to_string())),
            None => {
                self.buf.push(tag::NIL);
                Ok(())
            }
        }
    }

    fn function(
        &mut self,
        function: &Function,
        pointer: usize,
        depth: usize,
    ) -> Result<(), EncodeError> {
        if function.info().what == "C" {
            return Err(EncodeError::unsaveable("C functions cannot be saved"));
        }
        let id = self.new_id(pointer);
        self.buf.push(tag::FUNCTION);
        self.bytes(&function.dump(false));
        let upvalues = self.debug.upvalues(function)?;
        varint(&mut self.buf, upvalues.len() as u64);
        for (index, (name, value)) in (1..).zip(upvalues) {
            let upvalue_id = self.debug.upvalue_id(function, index)?;
            if let Some((owner, owner_index)) = self.upvalues.get(&upvalue_id) {
                self.buf.push(tag::UPVALUE_SHARED);
                varint(&mut self.buf, *owner);
                varint(&mut self.buf, *owner_index);
                continue;
            }
            self.upvalues.insert(upvalue_id, (id, index));
            self.upvalue_order.push(upvalue_id);
            self.buf.push(tag::UPVALUE_OWN);
            self.value(&value, depth + 1)
                .map_err(|err| err.inside(|| format!(" (upvalue `{name}`)")))?;
        }
        Ok(())
    }

    fn bytes(&mut self, bytes: &[u8]) {
        varint(&mut self.buf, bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }
}

/// A table key as a path segment: `.name` for identifiers, `[key]` otherwise.
fn key_segment(key: &Value) -> String {
    match key {
        Value::String(text) => {
            let text = text.to_string_lossy();
            let identifier = text
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if identifier {
                format!(".{text}")
            } else {
                format!("[{text:?}]")
            }
        }
        Value::Integer(integer) => format!("[{integer}]"),
        Value::Number(float) => format!("[{float}]"),
        Value::Boolean(flag) => format!("[{flag}]"),
        other => format!("[a {} key]", other.type_name()),
    }
}

/// Appends `value` as LEB128 (seven bits a byte, low first).
pub(super) fn varint(buf: &mut Vec<u8>, mut value: u64) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            buf.push(low);
            return;
        }
        buf.push(low | 0x80);
    }
}
