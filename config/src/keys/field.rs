//! How a typed configuration field becomes a [`Value`] and back: what lets one `key!` line
//! of the table stand for the getter and setter of a key.

use super::Value;
use crate::schema::{
    Config, EveryCellAnswer, IsolationLevel, LeaseStore, PythonShell, SandboxNetwork, SessionKeyBy,
    SessionMode, SnapshotWhen, UidRange,
};
use bytesize::ByteSize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A type of configuration field and its [`Value`]: what lets one `key!` line stand for the
/// getter and setter of a key.
pub(super) trait Field: Sized {
    /// Whether the key may be unset (`Option` fields).
    const OPTIONAL: bool = false;
    fn to_value(&self) -> Value;
    /// The field's value, or `None` for a value of another variant (validation never
    /// produces one; the setter then leaves the field alone).
    fn from_value(value: Value) -> Option<Self>;
}

/// Fields held as they are by one [`Value`] variant.
macro_rules! plain_field {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl Field for $t {
            fn to_value(&self) -> Value {
                Value::$variant(Clone::clone(self))
            }
            fn from_value(value: Value) -> Option<Self> {
                match value {
                    Value::$variant(inner) => Some(inner),
                    _ => None,
                }
            }
        }
    )*};
}
plain_field!(
    Duration => Duration,
    bool => Bool,
    String => Text,
    PathBuf => Path,
    Vec<String> => Names,
    BTreeMap<String, String> => Map,
);

impl Field for ByteSize {
    fn to_value(&self) -> Value {
        Value::Size(self.as_u64())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Size(n) => Some(ByteSize::b(n)),
            _ => None,
        }
    }
}

/// Counts: `usize`, `u32` and `u64` fields (the range check keeps values in bounds).
macro_rules! count_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn to_value(&self) -> Value {
                Value::Count(u64::try_from(*self).unwrap_or(u64::MAX))
            }
            fn from_value(value: Value) -> Option<Self> {
                match value {
                    Value::Count(n) => Some(<$t>::try_from(n).unwrap_or(<$t>::MAX)),
                    _ => None,
                }
            }
        }
    )*};
}
count_field!(usize, u32, u64);

impl Field for PythonShell {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) if word == "ipython" => Some(PythonShell::Ipython),
            Value::Text(word) if word == "builtin" => Some(PythonShell::Builtin),
            Value::Text(_) => Some(PythonShell::Auto),
            _ => None,
        }
    }
}

impl Field for SessionMode {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) if word == "per-call" => Some(SessionMode::PerCall),
            Value::Text(_) => Some(SessionMode::Session),
            _ => None,
        }
    }
}

impl Field for SessionKeyBy {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) if word == "session+cwd" => Some(SessionKeyBy::SessionCwd),
            Value::Text(_) => Some(SessionKeyBy::Session),
            _ => None,
        }
    }
}

impl Field for SandboxNetwork {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) => SandboxNetwork::parse(&word),
            _ => None,
        }
    }
}

impl Field for SnapshotWhen {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) => SnapshotWhen::parse(&word),
            _ => None,
        }
    }
}

impl Field for EveryCellAnswer {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) => EveryCellAnswer::parse(&word),
            _ => None,
        }
    }
}

impl Field for IsolationLevel {
    fn to_value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(word) => IsolationLevel::parse(&word),
            _ => None,
        }
    }
}

impl Field for LeaseStore {
    fn to_value(&self) -> Value {
        match self {
            LeaseStore::Off => Value::Bool(false),
            LeaseStore::File => Value::Text("file".into()),
            LeaseStore::Etcd => Value::Text("etcd".into()),
        }
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Bool(false) => Some(LeaseStore::Off),
            Value::Bool(true) => Some(LeaseStore::File),
            Value::Text(word) if word == "etcd" => Some(LeaseStore::Etcd),
            Value::Text(word) if word == "file" => Some(LeaseStore::File),
            _ => None,
        }
    }
}

impl Field for UidRange {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(text) => UidRange::parse(&text).ok(),
            _ => None,
        }
    }
}

/// An optional key: unset is `None`, and any other variant than `T`'s unsets it too.
impl<T: Field> Field for Option<T> {
    const OPTIONAL: bool = true;
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Unset, T::to_value)
    }
    fn from_value(value: Value) -> Option<Self> {
        Some(T::from_value(value))
    }
}

/// Whether the field `_field` reads is optional (its type's [`Field::OPTIONAL`]).
pub(super) const fn optional<T: Field>(_field: for<'c> fn(&'c Config) -> &'c T) -> bool {
    T::OPTIONAL
}
