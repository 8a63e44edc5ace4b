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
    Count { min: u64, max: u64 },
    /// A duration with a unit (`"5s"`), in `min..=max`; a minimum of zero means 0 = never.
    Duration { min: Duration, max: Duration },
    /// A size with a unit (`"512MiB"`), in bytes `min..=max`.
    Size { min: u64, max: u64 },
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
    Count(u64),
    Duration(Duration),
    /// Bytes.
    Size(u64),
    Text(String),
    Path(PathBuf),
    Names(Vec<String>),
    Map(BTreeMap<String, String>),
    Bool(bool),
}

/// One key of the configuration file.
pub struct KeySpec {
    pub section: &'static str,
    pub key: &'static str,
    pub kind: Kind,
    /// Whether the key may be left unset (and is by default).
    pub optional: bool,
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

fn count(v: Value) -> Option<u64> {
    match v {
        Value::Count(n) => Some(n),
        _ => None,
    }
}

fn duration(v: Value) -> Option<Duration> {
    match v {
        Value::Duration(d) => Some(d),
        _ => None,
    }
}

fn size(v: Value) -> Option<ByteSize> {
    match v {
        Value::Size(n) => Some(ByteSize::b(n)),
        _ => None,
    }
}

fn path(v: Value) -> Option<PathBuf> {
    match v {
        Value::Path(p) => Some(p),
        _ => None,
    }
}

fn names(v: Value) -> Option<Vec<String>> {
    match v {
        Value::Names(n) => Some(n),
        _ => None,
    }
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::Text(t) => Some(t),
        _ => None,
    }
}

fn boolean(v: Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(b),
        _ => None,
    }
}

fn opt_size(v: Option<ByteSize>) -> Value {
    v.map_or(Value::Unset, |s| Value::Size(s.as_u64()))
}

fn opt_path(v: &Option<PathBuf>) -> Value {
    v.clone().map_or(Value::Unset, Value::Path)
}

fn opt_count(v: Option<u64>) -> Value {
    v.map_or(Value::Unset, Value::Count)
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
    KeySpec {
        section: "sessions",
        key: "max-sessions",
        kind: count_in(1, 256),
        optional: false,
        doc: "Live workers per language; a new session over the cap evicts the least recently used idle one.",
        get: |c| Value::Count(c.sessions.max_sessions as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.sessions.max_sessions = n as usize;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "idle-timeout",
        kind: millis(0, Duration::from_secs(30 * DAY)),
        optional: false,
        doc: "A session idle this long is shut down; 0 keeps sessions forever.",
        get: |c| Value::Duration(c.sessions.idle_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.idle_timeout = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "sweep-interval",
        kind: GRACE,
        optional: false,
        doc: "How often idle sessions are looked for.",
        get: |c| Value::Duration(c.sessions.sweep_interval),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.sweep_interval = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "heartbeat-interval",
        kind: GRACE,
        optional: false,
        doc: "How often each worker is pinged.",
        get: |c| Value::Duration(c.sessions.heartbeat_interval),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.heartbeat_interval = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "heartbeat-timeout",
        kind: GRACE,
        optional: false,
        doc: "No pong for this long and the worker is declared dead; must be longer than heartbeat-interval.",
        get: |c| Value::Duration(c.sessions.heartbeat_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.heartbeat_timeout = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "restart-budget",
        kind: count_in(0, 100),
        optional: false,
        doc: "Unplanned worker replacements under a cell allowed before the session is failed; a successful cell refills it. A worker that dies while no cell runs on it costs nothing.",
        get: |c| Value::Count(u64::from(c.sessions.restart_budget)),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.sessions.restart_budget = u32::try_from(n).unwrap_or(u32::MAX);
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "interrupt-grace",
        kind: GRACE,
        optional: false,
        doc: "How long an interrupted cell may take to stop before its worker is killed.",
        get: |c| Value::Duration(c.sessions.interrupt_grace),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.interrupt_grace = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "shutdown-grace",
        kind: GRACE,
        optional: false,
        doc: "How long a worker may take to exit after Shutdown before it is signalled.",
        get: |c| Value::Duration(c.sessions.shutdown_grace),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.shutdown_grace = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "start-timeout",
        kind: millis(100, Duration::from_secs(600)),
        optional: false,
        doc: "How long a new worker may take to connect and say hello.",
        get: |c| Value::Duration(c.sessions.start_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.sessions.start_timeout = d;
            }
        },
    },
    KeySpec {
        section: "sessions",
        key: "mode",
        kind: Kind::Choice(&["session", "per-call"]),
        optional: false,
        doc: "`session`: workers and their state live on between requests; `per-call`: every request runs on new workers (prewarmed where available), discarded after.",
        get: |c| Value::Text(c.sessions.mode.as_str().to_string()),
        set: |c, v| {
            if let Value::Text(word) = v {
                c.sessions.mode = if word == "per-call" {
                    SessionMode::PerCall
                } else {
                    SessionMode::Session
                };
            }
        },
    },
    // [cells]
    KeySpec {
        section: "cells",
        key: "default-timeout",
        kind: millis(100, Duration::from_secs(DAY)),
        optional: false,
        doc: "Timeout of a cell that asks for none; must lie between min-timeout and max-timeout.",
        get: |c| Value::Duration(c.cells.default_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.cells.default_timeout = d;
            }
        },
    },
    KeySpec {
        section: "cells",
        key: "min-timeout",
        kind: millis(100, Duration::from_secs(DAY)),
        optional: false,
        doc: "Shorter requested timeouts are raised to this.",
        get: |c| Value::Duration(c.cells.min_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.cells.min_timeout = d;
            }
        },
    },
    KeySpec {
        section: "cells",
        key: "max-timeout",
        kind: millis(100, Duration::from_secs(DAY)),
        optional: false,
        doc: "Longer requested timeouts are cut to this.",
        get: |c| Value::Duration(c.cells.max_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.cells.max_timeout = d;
            }
        },
    },
    KeySpec {
        section: "cells",
        key: "max-cells-per-request",
        kind: count_in(1, 1_000_000),
        optional: false,
        doc: "Cells one request may hold; a longer request is refused before anything runs.",
        get: |c| Value::Count(c.cells.max_cells_per_request as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.cells.max_cells_per_request = usize::try_from(n).unwrap_or(usize::MAX);
            }
        },
    },
    // [output]
    KeySpec {
        section: "output",
        key: "max-bytes",
        kind: size_in(KIB, GIB),
        optional: false,
        doc: "Output of a cell kept in memory; the rest spills to an artifact file.",
        get: |c| Value::Size(c.output.max_bytes.as_u64()),
        set: |c, v| {
            if let Some(s) = size(v) {
                c.output.max_bytes = s;
            }
        },
    },
    KeySpec {
        section: "output",
        key: "max-lines",
        kind: count_in(10, 10_000_000),
        optional: false,
        doc: "Output lines of a cell kept in memory; the rest spills to an artifact file.",
        get: |c| Value::Count(c.output.max_lines as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.output.max_lines = n as usize;
            }
        },
    },
    KeySpec {
        section: "output",
        key: "artifact-dir",
        kind: Kind::Path,
        optional: true,
        doc: "Where spilled outputs go; unset: `artifacts/` in the runtime directory.",
        get: |c| opt_path(&c.output.artifact_dir),
        set: |c, v| c.output.artifact_dir = path(v),
    },
    KeySpec {
        section: "output",
        key: "artifact-max-age",
        kind: millis(0, Duration::from_secs(365 * DAY)),
        optional: false,
        doc: "Spilled outputs older than this are deleted (the runtime directory is often in memory); 0 keeps them.",
        get: |c| Value::Duration(c.output.artifact_max_age),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.output.artifact_max_age = d;
            }
        },
    },
    KeySpec {
        section: "output",
        key: "max-line-length",
        kind: count_in(80, 10_000_000),
        optional: false,
        doc: "Text lines longer than this (in characters) are cut in the returned output with a marker; the artifact keeps them whole.",
        get: |c| Value::Count(c.output.max_line_length as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.output.max_line_length = n as usize;
            }
        },
    },
    KeySpec {
        section: "output",
        key: "artifact-max-total",
        kind: size_in(MIB, u64::MAX),
        optional: false,
        doc: "Total size of the artifact directory; the oldest artifacts are deleted to stay under it, and a cell whose output cannot be kept whole says so.",
        get: |c| Value::Size(c.output.artifact_max_total.as_u64()),
        set: |c, v| {
            if let Some(s) = size(v) {
                c.output.artifact_max_total = s;
            }
        },
    },
    // [limits]
    KeySpec {
        section: "limits",
        key: "address-space",
        kind: size_in(64 * MIB, u64::MAX),
        optional: true,
        doc: "RLIMIT_AS of every worker; unset: no limit.",
        get: |c| opt_size(c.limits.address_space),
        set: |c, v| c.limits.address_space = size(v),
    },
    KeySpec {
        section: "limits",
        key: "cpu-time",
        kind: millis(1000, Duration::MAX),
        optional: true,
        doc: "RLIMIT_CPU of every worker (CPU time over its whole life); unset: no limit.",
        get: |c| c.limits.cpu_time.map_or(Value::Unset, Value::Duration),
        set: |c, v| c.limits.cpu_time = duration(v),
    },
    KeySpec {
        section: "limits",
        key: "open-files",
        kind: count_in(16, 1_048_576),
        optional: true,
        doc: "RLIMIT_NOFILE of every worker; unset: inherited.",
        get: |c| opt_count(c.limits.open_files),
        set: |c, v| c.limits.open_files = count(v),
    },
    KeySpec {
        section: "limits",
        key: "processes",
        kind: count_in(1, 1_048_576),
        optional: true,
        doc: "RLIMIT_NPROC of every worker; it counts every process and thread of the user, not a worker's own, so one session's children can starve the others (run the daemon as a dedicated user, or in a cgroup with pids.max, to bound a session alone); unset: inherited.",
        get: |c| opt_count(c.limits.processes),
        set: |c, v| c.limits.processes = count(v),
    },
    KeySpec {
        section: "limits",
        key: "file-size",
        kind: size_in(KIB, u64::MAX),
        optional: true,
        doc: "RLIMIT_FSIZE of every worker: the largest file it may write; unset: no limit.",
        get: |c| opt_size(c.limits.file_size),
        set: |c, v| c.limits.file_size = size(v),
    },
    KeySpec {
        section: "limits",
        key: "max-rss",
        kind: size_in(16 * MIB, u64::MAX),
        optional: true,
        doc: "A worker whose resident memory (with its children) passes this is killed; checked every 50ms while a cell runs, every heartbeat-interval otherwise; unset: no cap.",
        get: |c| opt_size(c.limits.max_rss),
        set: |c, v| c.limits.max_rss = size(v),
    },
    // [env]
    KeySpec {
        section: "env",
        key: "allow",
        kind: Kind::Names,
        optional: false,
        doc: "Variables (or `PREFIX_*` patterns) passed to workers besides the built-in allowlist.",
        get: |c| Value::Names(c.env.allow.clone()),
        set: |c, v| {
            if let Some(n) = names(v) {
                c.env.allow = n;
            }
        },
    },
    KeySpec {
        section: "env",
        key: "deny",
        kind: Kind::Names,
        optional: false,
        doc: "Variables (or patterns like `*_TOKEN`) always removed, besides the built-in denylist (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*_KEY`, `*_KEY_ID`, `*CREDENTIAL*`, `*AUTH*`, `*_DSN`, `DATABASE_URL`); the denylist wins over every allow rule, only `set` passes a value past it.",
        get: |c| Value::Names(c.env.deny.clone()),
        set: |c, v| {
            if let Some(n) = names(v) {
                c.env.deny = n;
            }
        },
    },
    KeySpec {
        section: "env",
        key: "set",
        kind: Kind::Map,
        optional: false,
        doc: "Fixed values set in every worker (not overridable from the environment).",
        get: |c| Value::Map(c.env.set.clone()),
        set: |c, v| {
            if let Value::Map(m) = v {
                c.env.set = m;
            }
        },
    },
    // [python]
    KeySpec {
        section: "python",
        key: "enabled",
        kind: Kind::Bool,
        optional: false,
        doc: "false: Python cells fail at once with a message naming this key.",
        get: |c| Value::Bool(c.python.enabled),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.python.enabled = b;
            }
        },
    },
    KeySpec {
        section: "python",
        key: "interpreter",
        kind: Kind::Text,
        optional: true,
        doc: "Interpreter path or name, tried after VIRTUAL_ENV, ./.venv and ./venv; unset: python3 on PATH.",
        get: |c| c.python.interpreter.clone().map_or(Value::Unset, Value::Text),
        set: |c, v| {
            c.python.interpreter = match v {
                Value::Text(t) => Some(t),
                _ => None,
            }
        },
    },
    KeySpec {
        section: "python",
        key: "prewarm",
        kind: count_in(0, 16),
        optional: false,
        doc: "Idle Python workers kept started ahead of demand.",
        get: |c| Value::Count(c.python.prewarm as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.python.prewarm = n as usize;
            }
        },
    },
    // [js]
    KeySpec {
        section: "js",
        key: "enabled",
        kind: Kind::Bool,
        optional: false,
        doc: "false: JavaScript cells fail at once with a message naming this key.",
        get: |c| Value::Bool(c.js.enabled),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.js.enabled = b;
            }
        },
    },
    KeySpec {
        section: "js",
        key: "memory-limit",
        kind: size_in(MIB, u64::MAX),
        optional: true,
        doc: "QuickJS heap limit; unset: no limit. It counts the engine's own allocations: a worker's RSS is typically 2-3 times larger (allocator overhead, the engine, the worker itself), so cap processes with limits.max-rss or address-space.",
        get: |c| opt_size(c.js.memory_limit),
        set: |c, v| c.js.memory_limit = size(v),
    },
    KeySpec {
        section: "js",
        key: "stack-size",
        kind: size_in(64 * KIB, u64::MAX),
        optional: true,
        doc: "QuickJS stack limit; unset: the engine's default.",
        get: |c| opt_size(c.js.stack_size),
        set: |c, v| c.js.stack_size = size(v),
    },
    // [lua]
    KeySpec {
        section: "lua",
        key: "enabled",
        kind: Kind::Bool,
        optional: false,
        doc: "false: Lua cells fail at once with a message naming this key.",
        get: |c| Value::Bool(c.lua.enabled),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.lua.enabled = b;
            }
        },
    },
    KeySpec {
        section: "lua",
        key: "memory-limit",
        kind: size_in(MIB, u64::MAX),
        optional: true,
        doc: "Lua heap limit; unset: half of what limits.address-space leaves free (or the machine's memory), so running out is a Lua error, never an abort.",
        get: |c| opt_size(c.lua.memory_limit),
        set: |c, v| c.lua.memory_limit = size(v),
    },
    KeySpec {
        section: "lua",
        key: "stack-size",
        kind: size_in(64 * KIB, u64::MAX),
        optional: true,
        doc: "Lua stack limit; unset: the engine's default.",
        get: |c| opt_size(c.lua.stack_size),
        set: |c, v| c.lua.stack_size = size(v),
    },
    // [daemon]
    KeySpec {
        section: "daemon",
        key: "socket",
        kind: Kind::Path,
        optional: true,
        doc: "The daemon's socket; `--socket` and $CELLVISOR_SOCKET win; unset: daemon.sock in the runtime directory.",
        get: |c| opt_path(&c.daemon.socket),
        set: |c, v| c.daemon.socket = path(v),
    },
    KeySpec {
        section: "daemon",
        key: "idle-exit",
        kind: millis(0, Duration::MAX),
        optional: false,
        doc: "An auto-started daemon exits after this long with no sessions; 0 = never.",
        get: |c| Value::Duration(c.daemon.idle_exit),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.daemon.idle_exit = d;
            }
        },
    },
    KeySpec {
        section: "daemon",
        key: "log",
        kind: Kind::Path,
        optional: true,
        doc: "The auto-started daemon's log file; unset: next to its socket, with the extension `.log`.",
        get: |c| opt_path(&c.daemon.log),
        set: |c, v| c.daemon.log = path(v),
    },
    KeySpec {
        section: "daemon",
        key: "max-pending-requests",
        kind: count_in(1, 1_000_000),
        optional: false,
        doc: "Requests one connection may have unanswered; past it the daemon stops reading that connection until answers go out.",
        get: |c| Value::Count(c.daemon.max_pending_requests as u64),
        set: |c, v| {
            if let Some(n) = count(v) {
                c.daemon.max_pending_requests = usize::try_from(n).unwrap_or(usize::MAX);
            }
        },
    },
    KeySpec {
        section: "daemon",
        key: "stalled-client-timeout",
        kind: millis(100, HOUR),
        optional: false,
        doc: "A connection whose client reads none of its answers for this long, while the daemon waits to send them, is dropped (and logged).",
        get: |c| Value::Duration(c.daemon.stalled_client_timeout),
        set: |c, v| {
            if let Some(d) = duration(v) {
                c.daemon.stalled_client_timeout = d;
            }
        },
    },
    // [startup]
    KeySpec {
        section: "startup",
        key: "user",
        kind: Kind::Bool,
        optional: false,
        doc: "Run `$XDG_CONFIG_HOME/cellvisor/startup/*.{py,js,lua}` (default `~/.config`) in every new worker, after the prelude.",
        get: |c| Value::Bool(c.startup.user),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.startup.user = b;
            }
        },
    },
    KeySpec {
        section: "startup",
        key: "project",
        kind: Kind::Bool,
        optional: false,
        doc: "Run `<cwd>/.cellvisor/startup/*.{py,js,lua}` in every new worker, after the user's; a file here replaces the user's file of the same name.",
        get: |c| Value::Bool(c.startup.project),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.startup.project = b;
            }
        },
    },
    // [sandbox]
    KeySpec {
        section: "sandbox",
        key: "enabled",
        kind: Kind::Bool,
        optional: false,
        doc: "Confine every worker with Landlock after its start-up (see docs/sandbox.md); a request may turn it on, never off.",
        get: |c| Value::Bool(c.sandbox.enabled),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.sandbox.enabled = b;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "required",
        kind: Kind::Bool,
        optional: false,
        doc: "true: a kernel that cannot enforce the whole policy refuses the request, naming the missing feature and Landlock ABI; false: workers start with what it can enforce, and a warning in the log and `status`.",
        get: |c| Value::Bool(c.sandbox.required),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.sandbox.required = b;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "read",
        kind: Kind::Paths,
        optional: false,
        doc: "Read-only trees, besides the Python interpreter's prefix and venv; `/etc` is read without its secrets (shadow, sudoers, ssh, ssl/private). Anything else (`~/.ssh`, other sessions' files, the daemon's directory) is out of reach.",
        get: |c| Value::Names(c.sandbox.read.clone()),
        set: |c, v| {
            if let Some(n) = names(v) {
                c.sandbox.read = n;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "write",
        kind: Kind::Paths,
        optional: false,
        doc: "Read-write trees: \"cwd\" (the session's directory) and any paths; the session's own temp directory ($TMPDIR), artifacts and store are always writable.",
        get: |c| Value::Names(c.sandbox.write.clone()),
        set: |c, v| {
            if let Some(n) = names(v) {
                c.sandbox.write = n;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "network",
        kind: Kind::Choice(&["none", "loopback", "all"]),
        optional: false,
        doc: "none: TCP connect and bind fail in cells (Landlock ABI 4); loopback: each worker gets a network namespace of its own with only its loopback (needs user namespaces); all: no network rule.",
        get: |c| Value::Text(c.sandbox.network.as_str().to_string()),
        set: |c, v| {
            if let Some(network) = text(v).as_deref().and_then(SandboxNetwork::parse) {
                c.sandbox.network = network;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "network-namespace",
        kind: Kind::Bool,
        optional: false,
        doc: "Also give each worker a network namespace of its own (needs user namespaces): UDP and every other protocol reach nothing outside the worker.",
        get: |c| Value::Bool(c.sandbox.network_namespace),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.sandbox.network_namespace = b;
            }
        },
    },
    KeySpec {
        section: "sandbox",
        key: "confine-unix-connect",
        kind: Kind::Bool,
        optional: false,
        doc: "Also confine `connect` on named Unix sockets to the write paths (Landlock ABI 9). The daemon refuses its own workers' descendants on every kernel.",
        get: |c| Value::Bool(c.sandbox.confine_unix_connect),
        set: |c, v| {
            if let Some(b) = boolean(v) {
                c.sandbox.confine_unix_connect = b;
            }
        },
    },
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
