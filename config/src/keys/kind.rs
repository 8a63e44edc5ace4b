//! What a key holds and which values are allowed, in words for messages and the docs; the
//! typed value a key holds; and how sizes and durations are written so they parse back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Bytes in a kibibyte.
pub(crate) const KIB: u64 = 1024;
/// Bytes in a mebibyte.
pub(crate) const MIB: u64 = 1024 * KIB;
/// Bytes in a gibibyte.
pub(crate) const GIB: u64 = 1024 * MIB;

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
    /// Python module names (`numpy`, `matplotlib.pyplot`).
    Modules,
    /// A list of absolute paths (or `~/...`), and the word `cwd` where [`is_sandbox_path`]
    /// allows it.
    Paths,
    /// `true` or `false`.
    Bool,
    /// A list of network listen addresses, each `tcp://<ip>:<port>` (see [`parse_listen`]).
    Listeners,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// `true`, `false`, or one of the listed words.
    Switch(&'static [&'static str]),
    /// A list of `http://` or `https://` URLs.
    Urls,
    /// A range of uids, `"FIRST-LAST"` (see `UidRange::parse`).
    UidRange,
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
            Kind::Modules => {
                "a list of Python module names, like [\"numpy\", \"matplotlib.pyplot\"]".to_string()
            }
            Kind::Paths => {
                "a list of absolute paths (or \"~/...\"), and \"cwd\" for the session's directory"
                    .to_string()
            }
            Kind::Bool => "true or false".to_string(),
            Kind::Listeners => {
                "a list of addresses like \"tcp://127.0.0.1:7420\" or \"tcp://[::]:7420\"".to_string()
            }
            Kind::UidRange => format!(
                "a uid range \"FIRST-LAST\" within {}-{}, like \"61000-61999\"",
                crate::schema::UidRange::MIN,
                crate::schema::UidRange::MAX
            ),
            Kind::Switch(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
                format!("true, false, or one of {}", quoted.join(", "))
            }
            Kind::Urls => {
                "a list of URLs like \"http://127.0.0.1:2379\" or \"https://etcd-0:2379\"".to_string()
            }
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
/// Whether `name` is a dotted Python module name (identifiers of letters, digits and `_`,
/// not starting with a digit).
pub fn is_module_name(name: &str) -> bool {
    name.split('.').all(|part| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Whether `name` is an environment variable name (with `pattern`, optionally with a `*` at
/// its start or end).
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

/// Whether `entry` is an `http://` or `https://` URL with a host.
pub fn is_url(entry: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .filter_map(|scheme| entry.strip_prefix(scheme))
        .any(|rest| {
            !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace)
        })
}

/// Whether `entry` can stand in a `sandbox.read`/`sandbox.write` list: `cwd`, an absolute
/// path or one under the home directory (`~/...`).
pub fn is_sandbox_path(entry: &str) -> bool {
    entry == "cwd" || entry.starts_with('/') || entry.starts_with("~/")
}

/// The socket address of a `daemon.listen` entry: `tcp://<ip>:<port>`, the IP literal (v4,
/// or v6 in brackets) or `localhost`. A name other than `localhost` is refused, so what a
/// listener binds never depends on a resolver.
pub fn parse_listen(entry: &str) -> Result<std::net::SocketAddr, String> {
    let expected =
        "expected \"tcp://<ip>:<port>\", like \"tcp://127.0.0.1:7420\" or \"tcp://[::]:7420\"";
    let Some(rest) = entry.strip_prefix("tcp://") else {
        return Err(format!("not a listen address: {entry:?} ({expected})"));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let rest = match rest.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => rest.to_string(),
    };
    rest.parse()
        .map_err(|_| format!("not a listen address: {entry:?} ({expected})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("tcp://127.0.0.1:7420").map(|a| a.port()),
            Ok(7420)
        );
        assert!(parse_listen("tcp://[::1]:0").is_ok_and(|a| a.ip().is_loopback()));
        assert!(parse_listen("tcp://localhost:80").is_ok_and(|a| a.ip().is_loopback()));
        for bad in [
            "127.0.0.1:7420",
            "tcp://example.com:1",
            "tcp://1.2.3.4",
            "udp://1.2.3.4:5",
            "tcp://1.2.3.4:99999",
        ] {
            let err = parse_listen(bad).expect_err(bad);
            assert!(err.contains("tcp://<ip>:<port>"), "{err}");
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
