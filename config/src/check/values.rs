//! Durations, sizes and ranges, read the same way from the file and from override variables.

use crate::keys::{self, Kind, Value};
use std::time::Duration;

pub(super) fn parse_duration(text: &str, kind: &Kind) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.parse::<f64>().is_ok() {
        return Err(format!(
            "a duration needs a unit: write \"{trimmed}s\" or \"{trimmed}ms\" ({})",
            kind.describe()
        ));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "cannot read {text:?} as a duration ({e}); expected {}, like \"5s\", \"250ms\" or \"2m\"",
            kind.describe()
        )
    })
}

pub(super) fn parse_size(text: &str, kind: &Kind) -> Result<u64, String> {
    let trimmed = text.trim();
    if trimmed.parse::<f64>().is_ok() {
        return Err(format!(
            "a size needs a unit: write \"{trimmed}MiB\", \"{trimmed}KiB\" or \"{trimmed}B\" ({})",
            kind.describe()
        ));
    }
    trimmed
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|_| {
            format!(
                "cannot read {text:?} as a size; expected {}, like \"512MiB\" or \"64KiB\"",
                kind.describe()
            )
        })
}

/// Whether `value` is allowed for `kind` (unset is always allowed: optionality is checked
/// where values are read).
pub(crate) fn in_range(kind: &Kind, value: &Value) -> bool {
    match (kind, value) {
        (Kind::Count { min, max }, Value::Count(n)) => (min..=max).contains(&n),
        (Kind::Duration { min, max }, Value::Duration(d)) => (min..=max).contains(&d),
        (Kind::Size { min, max }, Value::Size(n)) => (min..=max).contains(&n),
        _ => true,
    }
}

pub(super) fn check_range(kind: &Kind, value: &Value) -> Result<(), String> {
    if in_range(kind, value) {
        return Ok(());
    }
    let shown = match value {
        Value::Count(n) => n.to_string(),
        Value::Duration(d) => keys::format_duration(*d),
        Value::Size(n) => keys::format_size(*n),
        _ => String::new(),
    };
    Err(format!(
        "{shown} is out of range: expected {}",
        kind.describe()
    ))
}
