//! Every configuration key in one table: its kind, its allowed range and a line of
//! documentation. Validation, environment overrides, `config show` and `docs/config.md` all
//! read this table, so a range is stated exactly once.

use crate::schema::{Config, SandboxNetwork, SessionMode};
use bytesize::ByteSize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const DAY: u64 = 24 * 60 * 60;

/// The sections of the file, in the order `config show` prints them.
pub const SECTIONS: &[&str] = &[
    "sessions", "cells", "output", "limits", "env", "python", "js", "lua", "daemon", "startup",
    "sandbox",
];

/// Prefix of the environment variables that override single keys.
pub const ENV_PREFIX: &str = "CELLVISOR_";

/// What a key holds and which values are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number in `min..=max`.
    Count {
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A duration with a unit (`"5s"`), in `min..=max`; a minimum of zero means 0 = never.
    Duration {
        /// The shortest duration allowed.
        min: Duration,
        /// The longest duration allowed.
        max: Duration,
    },
    /// A size with a unit (`"512MiB"`), in bytes `min..=max`.
    Size {
        /// The fewest bytes allowed.
        min: u64,
        /// The most bytes allowed.
        max: u64,
    },
    /// A filesystem path.
    Path,
    /// A non-empty string.
    Text,
    /// Environment variable names, each optionally ending in `*` to match a prefix.
    Names,
    /// A table of environment variable names to values.
    Map,
    /// A list of absolute paths (or `~/...`), and the word `cwd` where [`is_sandbox_path`]
    /// allows it.
    Paths,
    /// `true` or `false`.
    Bool,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// The allowed values in words, for error messages and the docs.
    pub fn describe(&self) -> String {
        match *self {
            Kind::Count { min, max } if max == u64::MAX => format!("an integer >= {min}"),
            Kind::Count { min, max } => format!("an integer from {min} to {max}"),
            Kind::Duration { min, max } => {
                let (lo, hi) = (format_duration(min), format_duration(max));
                match (min.is_zero(), max == Duration::MAX) {
                    (true, true) => "a duration like \"15m\" (0 = never)".to_string(),
                    (true, false) => format!("a duration up to {hi} (0 = never)"),
                    (false, true) => format!("a duration of at least {lo}"),
                    (false, false) => format!("a duration from {lo} to {hi}"),
                }
            }
            Kind::Size { min, max } if max == u64::MAX => {
                format!("a size of at least {}", format_size(min))
            }
            Kind::Size { min, max } => {
                format!("a size from {} to {}", format_size(min), format_size(max))
            }
            Kind::Path => "a path".to_string(),
            Kind::Text => "a non-empty string".to_string(),
            Kind::Names => {
                "a list of variable names; a `*` at the start or end matches any text there, like \"AWS_*\" or \"*_TOKEN\""
                    .to_string()
            }
            Kind::Map => "a table of NAME = \"value\"".to_string(),
            Kind::Paths => {
                "a list of absolute paths (or \"~/...\"), and \"cwd\" for the session's directory"
                    .to_string()
            }
            Kind::Bool => "true or false".to_string(),
            Kind::Choice(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
        }
    }
}

/// A typed value of one key, as validation produces it and `config show` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An optional key with no value.
    Unset,
    /// A whole number.
    Count(u64),
    /// A duration.
    Duration(Duration),
    /// Bytes.
    Size(u64),
    /// A string.
    Text(String),
    /// A filesystem path.
    Path(PathBuf),
    /// A list of names (environment variables, modules).
    Names(Vec<String>),
    /// Names mapped to values (variables to set).
    Map(BTreeMap<String, String>),
    /// A switch.
    Bool(bool),
}

/// One key of the configuration file.
pub struct KeySpec {
    /// The table the key sits in (`cells` for `[cells]`).
    pub section: &'static str,
    /// The key's name in the file (kebab-case, as users write it).
    pub key: &'static str,
    /// What the key holds and which values are allowed; validation reads it.
    pub kind: Kind,
    /// Whether the key may be left unset (and is by default).
    pub optional: bool,
    /// One line for `config show` and the docs: what the key does and why one would change it.
    pub doc: &'static str,
    /// Reads the key's value out of a configuration.
    pub get: fn(&Config) -> Value,
    /// Stores a validated value; a value of the wrong variant is ignored (validation never
    /// produces one).
    pub set: fn(&mut Config, Value),
}

impl KeySpec {
    /// `section.key`, the name errors and docs use.
    pub fn name(&self) -> String {
        format!("{}.{}", self.section, self.key)
    }

    /// The environment variable overriding this key.
    pub fn env_var(&self) -> String {
        format!(
            "{ENV_PREFIX}{}__{}",
            self.section.to_ascii_uppercase(),
            self.key.to_ascii_uppercase().replace('-', "_")
        )
    }
}

/// The spec of `section.key`, with its index in [`KEYS`].
pub fn find(section: &str, key: &str) -> Option<(usize, &'static KeySpec)> {
    KEYS.iter()
        .enumerate()
        .find(|(_, spec)| spec.section == section && spec.key == key)
}

/// The keys of one section.
pub fn section_keys(section: &str) -> impl Iterator<Item = &'static KeySpec> + '_ {
    KEYS.iter().filter(move |spec| spec.section == section)
}

/// `d` the way humantime writes it (`"1h 30m"`), which also parses back.
pub fn format_duration(d: Duration) -> String {
    if d == Duration::MAX {
        return "forever".to_string();
    }
    humantime::format_duration(d).to_string()
}

/// `bytes` in the largest binary unit that divides it exactly, so it parses back unchanged.
pub fn format_size(bytes: u64) -> String {
    for (unit, factor) in [("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes != 0 && bytes.checked_rem(factor) == Some(0) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    format!("{bytes}B")
}

/// Whether `name` is a valid environment variable name; with `pattern`, a `*` may also
/// stand at its start and its end (`AWS_*`, `*_TOKEN`, `*SECRET*`).
pub fn is_env_name(name: &str, pattern: bool) -> bool {
    let word = |text: &str| text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if pattern {
        if let Some(rest) = name.strip_prefix('*') {
            let core = rest.strip_suffix('*').unwrap_or(rest);
            return !core.is_empty() && word(core);
        }
    }
    let name = match name.strip_suffix('*') {
        Some(prefix) if pattern => prefix,
        _ => name,
    };
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && word(name)
}

/// Whether `entry` can stand in a `sandbox.read`/`sandbox.write` list: `cwd`, an absolute
/// path or one under the home directory (`~/...`).
pub fn is_sandbox_path(entry: &str) -> bool {
    entry == "cwd" || entry.starts_with('/') || entry.starts_with("~/")
}

/// A type of configuration field and its [`Value`]: what lets one `key!` line stand for the
/// getter and setter of a key.
trait Field: Sized {
    /// Whether the key may be unset (`Option` fields).
    const OPTIONAL: bool = false;
    fn to_value(&self) -> Value;
    /// The field's value, or `None` for a value of another variant (validation never
    /// produces one; the setter then leaves the field alone).
    fn from_value(value: Value) -> Option<Self>;
}

impl Field for Duration {
    fn to_value(&self) -> Value {
        Value::Duration(*self)
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Duration(d) => Some(d),
            _ => None,
        }
    }
}

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

impl Field for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl Field for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }
}

impl Field for PathBuf {
    fn to_value(&self) -> Value {
        Value::Path(self.clone())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Path(path) => Some(path),
            _ => None,
        }
    }
}

impl Field for Vec<String> {
    fn to_value(&self) -> Value {
        Value::Names(self.clone())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Names(names) => Some(names),
            _ => None,
        }
    }
}

impl Field for BTreeMap<String, String> {
    fn to_value(&self) -> Value {
        Value::Map(self.clone())
    }
    fn from_value(value: Value) -> Option<Self> {
        match value {
            Value::Map(map) => Some(map),
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

/// An optional key: unset is `None`, and any other variant than `T`'s unsets it too.
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
const fn optional<T: Field>(_field: for<'c> fn(&'c Config) -> &'c T) -> bool {
    T::OPTIONAL
}

/// One [`KeySpec`] from its one-line declaration: `key!(section.field as "key-name", kind,
/// "doc")`. The section is the `Config` field of the same name, whether the key is optional
/// follows from the field's type, and the getter and setter from [`Field`].
macro_rules! key {
    ($section:ident . $field:ident as $key:literal, $kind:expr, $doc:literal $(,)?) => {
        KeySpec {
            section: stringify!($section),
            key: $key,
            kind: $kind,
            optional: optional(|c| &c.$section.$field),
            doc: $doc,
            get: |c| Field::to_value(&c.$section.$field),
            set: |c, v| {
                if let Some(value) = Field::from_value(v) {
                    c.$section.$field = value;
                }
            },
        }
    };
}

const fn count_in(min: u64, max: u64) -> Kind {
    Kind::Count { min, max }
}

const fn millis(min: u64, max: Duration) -> Kind {
    Kind::Duration {
        min: Duration::from_millis(min),
        max,
    }
}

const fn size_in(min: u64, max: u64) -> Kind {
    Kind::Size { min, max }
}

const HOUR: Duration = Duration::from_secs(3600);
const GRACE: Kind = millis(10, HOUR);

/// Every key, in the order `config show` and the docs list them.
pub static KEYS: &[KeySpec] = &[
    // [sessions]
    key!(sessions.max_sessions as "max-sessions", count_in(1, 256),
        "Live workers per language; a new session over the cap evicts the least recently used idle one."),
    key!(sessions.idle_timeout as "idle-timeout", millis(0, Duration::from_secs(30 * DAY)),
        "A session idle this long is shut down; 0 keeps sessions forever."),
    key!(sessions.sweep_interval as "sweep-interval", GRACE,
        "How often idle sessions are looked for."),
    key!(sessions.heartbeat_interval as "heartbeat-interval", GRACE,
        "How often each worker is pinged."),
    key!(sessions.heartbeat_timeout as "heartbeat-timeout", GRACE,
        "No pong for this long and the worker is declared dead; must be longer than heartbeat-interval."),
    key!(sessions.restart_budget as "restart-budget", count_in(0, 100),
        "Unplanned worker replacements under a cell allowed before the session is failed; a successful cell refills it. A worker that dies while no cell runs on it costs nothing."),
    key!(sessions.interrupt_grace as "interrupt-grace", GRACE,
        "How long an interrupted cell may take to stop before its worker is killed."),
    key!(sessions.shutdown_grace as "shutdown-grace", GRACE,
        "How long a worker may take to exit after Shutdown before it is signalled."),
    key!(sessions.start_timeout as "start-timeout", millis(100, Duration::from_secs(600)),
        "How long a new worker may take to connect and say hello."),
    key!(sessions.mode as "mode", Kind::Choice(&["session", "per-call"]),
        "`session`: workers and their state live on between requests; `per-call`: every request runs on new workers (prewarmed where available), discarded after."),
    // [cells]
    key!(cells.default_timeout as "default-timeout", millis(100, Duration::from_secs(DAY)),
        "Timeout of a cell that asks for none; must lie between min-timeout and max-timeout."),
    key!(cells.min_timeout as "min-timeout", millis(100, Duration::from_secs(DAY)),
        "Shorter requested timeouts are raised to this."),
    key!(cells.max_timeout as "max-timeout", millis(100, Duration::from_secs(DAY)),
        "Longer requested timeouts are cut to this."),
    key!(cells.max_cells_per_request as "max-cells-per-request", count_in(1, 1_000_000),
        "Cells one request may hold; a longer request is refused before anything runs."),
    // [output]
    key!(output.max_bytes as "max-bytes", size_in(KIB, GIB),
        "Output of a cell kept in memory; the rest spills to an artifact file."),
    key!(output.max_lines as "max-lines", count_in(10, 10_000_000),
        "Output lines of a cell kept in memory; the rest spills to an artifact file."),
    key!(output.artifact_dir as "artifact-dir", Kind::Path,
        "Where spilled outputs go; unset: `artifacts/` in the runtime directory."),
    key!(output.artifact_max_age as "artifact-max-age", millis(0, Duration::from_secs(365 * DAY)),
        "Spilled outputs older than this are deleted (the runtime directory is often in memory); 0 keeps them."),
    key!(output.max_line_length as "max-line-length", count_in(80, 10_000_000),
        "Text lines longer than this (in characters) are cut in the returned output with a marker; the artifact keeps them whole."),
    key!(output.artifact_max_total as "artifact-max-total", size_in(MIB, u64::MAX),
        "Total size of the artifact directory; the oldest artifacts are deleted to stay under it, and a cell whose output cannot be kept whole says so."),
    // [limits]
    key!(limits.address_space as "address-space", size_in(64 * MIB, u64::MAX),
        "RLIMIT_AS of every worker; unset: no limit."),
    key!(limits.cpu_time as "cpu-time", millis(1000, Duration::MAX),
        "RLIMIT_CPU of every worker (CPU time over its whole life); unset: no limit."),
    key!(limits.open_files as "open-files", count_in(16, 1_048_576),
        "RLIMIT_NOFILE of every worker; unset: inherited."),
    key!(limits.processes as "processes", count_in(1, 1_048_576),
        "RLIMIT_NPROC of every worker; it counts every process and thread of the user, not a worker's own, so one session's children can starve the others (run the daemon as a dedicated user, or in a cgroup with pids.max, to bound a session alone); unset: inherited."),
    key!(limits.file_size as "file-size", size_in(KIB, u64::MAX),
        "RLIMIT_FSIZE of every worker: the largest file it may write; unset: no limit."),
    key!(limits.max_rss as "max-rss", size_in(16 * MIB, u64::MAX),
        "A worker whose resident memory (with its children) passes this is killed; checked every 50ms while a cell runs, every heartbeat-interval otherwise; unset: no cap."),
    // [env]
    key!(env.allow as "allow", Kind::Names,
        "Variables (or `PREFIX_*` patterns) passed to workers besides the built-in allowlist."),
    key!(env.deny as "deny", Kind::Names,
        "Variables (or patterns like `*_TOKEN`) always removed, besides the built-in denylist (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*_KEY`, `*_KEY_ID`, `*CREDENTIAL*`, `*AUTH*`, `*_DSN`, `DATABASE_URL`); the denylist wins over every allow rule, only `set` passes a value past it."),
    key!(env.set as "set", Kind::Map,
        "Fixed values set in every worker (not overridable from the environment)."),
    // [python]
    key!(python.enabled as "enabled", Kind::Bool,
        "false: Python cells fail at once with a message naming this key."),
    key!(python.interpreter as "interpreter", Kind::Text,
        "Interpreter path or name, tried after VIRTUAL_ENV, ./.venv and ./venv; unset: python3 on PATH."),
    key!(python.prewarm as "prewarm", count_in(0, 16),
        "Idle Python workers kept started ahead of demand."),
    // [js]
    key!(js.enabled as "enabled", Kind::Bool,
        "false: JavaScript cells fail at once with a message naming this key."),
    key!(js.memory_limit as "memory-limit", size_in(MIB, u64::MAX),
        "QuickJS heap limit; unset: no limit. It counts the engine's own allocations: a worker's RSS is typically 2-3 times larger (allocator overhead, the engine, the worker itself), so cap processes with limits.max-rss or address-space."),
    key!(js.stack_size as "stack-size", size_in(64 * KIB, u64::MAX),
        "QuickJS stack limit; unset: the engine's default."),
    // [lua]
    key!(lua.enabled as "enabled", Kind::Bool,
        "false: Lua cells fail at once with a message naming this key."),
    key!(lua.memory_limit as "memory-limit", size_in(MIB, u64::MAX),
        "Lua heap limit; unset: a third of what limits.address-space leaves free (or the machine's memory), so running out is a Lua error, never an abort."),
    key!(lua.stack_size as "stack-size", size_in(64 * KIB, u64::MAX),
        "Lua stack limit; unset: the engine's default."),
    // [daemon]
    key!(daemon.socket as "socket", Kind::Path,
        "The daemon's socket; `--socket` and $CELLVISOR_SOCKET win; unset: daemon.sock in the runtime directory."),
    key!(daemon.idle_exit as "idle-exit", millis(0, Duration::MAX),
        "An auto-started daemon exits after this long with no sessions; 0 = never."),
    key!(daemon.log as "log", Kind::Path,
        "The auto-started daemon's log file; unset: next to its socket, with the extension `.log`."),
    key!(daemon.max_pending_requests as "max-pending-requests", count_in(1, 1_000_000),
        "Requests one connection may have unanswered; past it the daemon stops reading that connection until answers go out."),
    key!(daemon.stalled_client_timeout as "stalled-client-timeout", millis(100, HOUR),
        "A connection whose client reads none of its answers for this long, while the daemon waits to send them, is dropped (and logged)."),
    // [startup]
    key!(startup.user as "user", Kind::Bool,
        "Run `$XDG_CONFIG_HOME/cellvisor/startup/*.{py,js,lua}` (default `~/.config`) in every new worker, after the prelude."),
    key!(startup.project as "project", Kind::Bool,
        "Run `<cwd>/.cellvisor/startup/*.{py,js,lua}` in every new worker, after the user's; a file here replaces the user's file of the same name."),
    // [sandbox]
    key!(sandbox.enabled as "enabled", Kind::Bool,
        "Confine every worker with Landlock after its start-up (see docs/sandbox.md); a request may turn it on, never off."),
    key!(sandbox.required as "required", Kind::Bool,
        "true: a kernel that cannot enforce the whole policy refuses the request, naming the missing feature and Landlock ABI; false: workers start with what it can enforce, and a warning in the log and `status`."),
    key!(sandbox.read as "read", Kind::Paths,
        "Read-only trees, besides the Python interpreter's prefix and venv; `/etc` is read without its secrets (shadow, sudoers, ssh, ssl/private). Anything else (`~/.ssh`, other sessions' files, the daemon's directory) is out of reach."),
    key!(sandbox.write as "write", Kind::Paths,
        "Read-write trees: \"cwd\" (the session's directory) and any paths; the session's own temp directory ($TMPDIR), artifacts and store are always writable."),
    key!(sandbox.network as "network", Kind::Choice(&["none", "loopback", "all"]),
        "none: TCP connect and bind fail in cells (Landlock ABI 4); loopback: each worker gets a network namespace of its own with only its loopback (needs user namespaces); all: no network rule."),
    key!(sandbox.network_namespace as "network-namespace", Kind::Bool,
        "Also give each worker a network namespace of its own (needs user namespaces): UDP and every other protocol reach nothing outside the worker."),
    key!(sandbox.confine_unix_connect as "confine-unix-connect", Kind::Bool,
        "Also confine `connect` on named Unix sockets to the write paths (Landlock ABI 9). The daemon refuses its own workers' descendants on every kernel."),
];

/// The key table of `docs/config.md`, generated so the docs cannot drift from the ranges.
pub fn markdown_table() -> String {
    let defaults = Config::default();
    let mut out = String::new();
    for section in SECTIONS {
        out.push_str(&format!("\n### `[{section}]`\n\n"));
        out.push_str("| key | default | allowed | override variable | what it does |\n");
        out.push_str("| --- | --- | --- | --- | --- |\n");
        for spec in section_keys(section) {
            let default = match (spec.get)(&defaults) {
                Value::Unset => "unset".to_string(),
                value => format!("`{}`", crate::show::toml_value(&value).unwrap_or_default()),
            };
            let env = if spec.kind == Kind::Map {
                "—".to_string()
            } else {
                format!("`{}`", spec.env_var())
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                spec.key,
                default,
                spec.kind.describe().replace('|', "\\|"),
                env,
                spec.doc
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_keys_and_every_key_a_known_section() {
        for section in SECTIONS {
            assert!(section_keys(section).next().is_some(), "{section}");
        }
        for spec in KEYS {
            assert!(SECTIONS.contains(&spec.section), "{}", spec.name());
        }
    }

    #[test]
    fn getters_and_setters_agree() {
        let defaults = Config::default();
        let mut copy = Config::default();
        copy.sessions.max_sessions = 99;
        copy.limits.max_rss = Some(ByteSize::mib(1));
        for spec in KEYS {
            (spec.set)(&mut copy, (spec.get)(&defaults));
        }
        assert_eq!(copy, defaults);
    }

    #[test]
    fn defaults_are_within_their_ranges() {
        let defaults = Config::default();
        for spec in KEYS {
            let value = (spec.get)(&defaults);
            assert!(
                crate::check::in_range(&spec.kind, &value),
                "{} default {value:?} outside {}",
                spec.name(),
                spec.kind.describe()
            );
        }
    }

    #[test]
    fn sizes_are_printed_exactly() {
        assert_eq!(format_size(50 * KIB), "50KiB");
        assert_eq!(format_size(GIB), "1GiB");
        assert_eq!(format_size(1536 * MIB), "1536MiB");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(format_size(0), "0B");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("AWS_SECRET", false));
        assert!(is_env_name("_X1", false));
        assert!(is_env_name("AWS_*", true));
        assert!(!is_env_name("AWS_*", false));
        assert!(!is_env_name("*", true));
        assert!(!is_env_name("**", true));
        assert!(is_env_name("*_TOKEN", true));
        assert!(is_env_name("*SECRET*", true));
        assert!(!is_env_name("*_TOKEN", false));
        assert!(!is_env_name("*A-B*", true));
        assert!(!is_env_name("1ABC", true));
        assert!(!is_env_name("A-B", true));
        assert!(!is_env_name("", true));
    }
}
