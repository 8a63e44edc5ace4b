//! Reading a snapshot payload back into Lua values (the format is described in `super`).
//!
//! Nothing is put into the namespace here: the values are built aside, so a payload that
//! turns out malformed halfway leaves the namespace as it was. Every length, id and index
//! read is checked against what the payload (or the values built so far) can hold.

use super::{tag, Builtins, DebugFunctions, MAGIC, MAX_DEPTH};
use crate::runtime::Interrupt;
use mlua::{ChunkMode, Function, Lua, Value};

/// How often (in values read) the decoder looks at the interrupt flag.
const INTERRUPT_CHECK_EVERY: u32 = 4096;

/// Why a payload could not be read back.
#[derive(Debug)]
pub(super) enum DecodeError {
    /// The bytes are not a payload this engine writes; the text says where it went wrong.
    Malformed(String),
    /// The state task was interrupted.
    Interrupted,
    /// Lua itself failed (out of memory, say).
    Lua(mlua::Error),
}

impl From<mlua::Error> for DecodeError {
    fn from(err: mlua::Error) -> Self {
        DecodeError::Lua(err)
    }
}

fn malformed(what: &str) -> DecodeError {
    DecodeError::Malformed(what.to_string())
}

/// One global read back: its name, and its value or why it cannot come back.
pub(super) struct DecodedGlobal {
    pub(super) name: Vec<u8>,
    pub(super) value: Result<Value, String>,
}

/// Reads values out of a payload, keeping the tables and functions built so far by id.
pub(super) struct Decoder<'a> {
    lua: &'a Lua,
    builtins: &'a Builtins,
    debug: &'a DebugFunctions,
    interrupt: &'a Interrupt,
    bytes: &'a [u8],
    position: usize,
    objects: Vec<Value>,
    /// A worker value the current global refers to that this worker does not have.
    missing_builtin: Option<String>,
    steps: u32,
}

impl<'a> Decoder<'a> {
    /// A decoder of `bytes` (the whole payload).
    pub(super) fn new(
        lua: &'a Lua,
        builtins: &'a Builtins,
        debug: &'a DebugFunctions,
        interrupt: &'a Interrupt,
        bytes: &'a [u8],
    ) -> Self {
        Decoder {
            lua,
            builtins,
            debug,
            interrupt,
            bytes,
            position: 0,
            objects: Vec::new(),
            missing_builtin: None,
            steps: 0,
        }
    }

    /// Every global of the payload, in the order written.
    pub(super) fn globals(&mut self) -> Result<Vec<DecodedGlobal>, DecodeError> {
        if self.take(MAGIC.len())? != MAGIC {
            return Err(malformed("it does not start as a Lua snapshot does"));
        }
        let mut globals = Vec::new();
        loop {
            match self.byte()? {
                tag::GLOBAL => {}
                tag::END if self.position == self.bytes.len() => return Ok(globals),
                tag::END => return Err(malformed("bytes follow its end")),
                _ => return Err(malformed("a record of an unknown kind")),
            }
            let name = self.counted_bytes()?.to_vec();
            self.missing_builtin = None;
            let value = self.value(0)?;
            let value = match self.missing_builtin.take() {
                Some(path) => Err(format!(
                    "it refers to `{path}`, which this worker does not have"
                )),
                None => Ok(value),
            };
            globals.push(DecodedGlobal { name, value });
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        self.steps = self.steps.wrapping_add(1);
        if self.steps.is_multiple_of(INTERRUPT_CHECK_EVERY) && self.interrupt.is_raised() {
            return Err(DecodeError::Interrupted);
        }
        if depth > MAX_DEPTH {
            return Err(malformed("values nested deeper than a snapshot holds"));
        }
        Ok(match self.byte()? {
            tag::NIL => Value::Nil,
            tag::FALSE => Value::Boolean(false),
            tag::TRUE => Value::Boolean(true),
            tag::INTEGER => {
                let zigzag = self.varint()?;
                Value::Integer((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))
            }
            tag::FLOAT => Value::Number(f64::from_bits(u64::from_le_bytes(self.array()?))),
            tag::STRING => {
                let bytes = self.counted_bytes()?;
                Value::String(self.lua.create_string(bytes)?)
            }
            tag::TABLE => self.table(depth)?,
            tag::FUNCTION => self.function(depth)?,
            tag::REF => {
                let id = self.varint()?;
                usize::try_from(id)
                    .ok()
                    .and_then(|id| self.objects.get(id))
                    .cloned()
                    .ok_or_else(|| malformed("a reference to a value it never defined"))?
            }
            tag::BUILTIN => {
                let path = String::from_utf8_lossy(self.counted_bytes()?).into_owned();
                match self.builtins.value_at(&path) {
                    Some(value) => value,
                    None => {
                        self.missing_builtin.get_or_insert(path);
                        Value::Nil
                    }
                }
            }
            _ => return Err(malformed("a value of an unknown kind")),
        })
    }

    fn table(&mut self, depth: usize) -> Result<Value, DecodeError> {
        // The sizes are hints; a payload cannot hold more entries than it has bytes.
        let left = self.bytes.len() - self.position;
        let array_hint = usize::try_from(self.varint()?)
            .unwrap_or(usize::MAX)
            .min(left);
        let hash_hint = usize::try_from(u32::from_le_bytes(self.array()?))
            .unwrap_or(usize::MAX)
            .min(left);
        let table = self.lua.create_table_with_capacity(array_hint, hash_hint)?;
        self.objects.push(Value::Table(table.clone()));
        loop {
            let key = self.value(depth + 1)?;
            if key == Value::Nil {
                break;
            }
            let value = self.value(depth + 1)?;
            table.raw_set(key, value)?;
        }
        match self.value(depth + 1)? {
            Value::Nil => {}
            Value::Table(metatable) => table.set_metatable(Some(metatable)),
            _ => return Err(malformed("a metatable that is not a table")),
        }
        Ok(Value::Table(table))
    }

    fn function(&mut self, depth: usize) -> Result<Value, DecodeError> {
        let bytecode = self.counted_bytes()?;
        let function = self
            .lua
            .load(bytecode)
            .set_mode(ChunkMode::Binary)
            .into_function()
            .map_err(|err| DecodeError::Malformed(format!("a function does not load: {err}")))?;
        let id = self.objects.len();
        self.objects.push(Value::Function(function.clone()));
        let count = self.varint()?;
        for index in 1..=count {
            match self.byte()? {
                tag::UPVALUE_OWN => {
                    let value = self.value(depth + 1)?;
                    if !self.debug.set_upvalue(&function, index, value)? {
                        return Err(malformed("an upvalue the function does not have"));
                    }
                }
                tag::UPVALUE_SHARED => {
                    let owner = self.varint()?;
                    let owner_index = self.varint()?;
                    let owner = self.earlier_function(owner, id)?;
                    self.debug
                        .join_upvalue(&function, index, &owner, owner_index)
                        .map_err(|_| malformed("an upvalue shared with one that is not there"))?;
                }
                _ => return Err(malformed("an upvalue of an unknown kind")),
            }
        }
        Ok(Value::Function(function))
    }

    /// The function with id `owner`, already read (and not the one with id `current`).
    fn earlier_function(&self, owner: u64, current: usize) -> Result<Function, DecodeError> {
        let owner = usize::try_from(owner)
            .ok()
            .filter(|owner| *owner != current);
        match owner.and_then(|owner| self.objects.get(owner)) {
            Some(Value::Function(function)) => Ok(function.clone()),
            _ => Err(malformed(
                "an upvalue shared with something not a function read before",
            )),
        }
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .position
            .checked_add(count)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| malformed("it ends too early"))?;
        let bytes = &self.bytes[self.position..end];
        self.position = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn counted_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(self.varint()?).map_err(|_| malformed("a length too large"))?;
        self.take(len)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed("a number too long"))
    }
}
