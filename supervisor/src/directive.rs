//! The `// @exec: {...}` first line of a JavaScript cell (code mode): per-cell settings an
//! agent writes into the code itself.

use serde::Deserialize;

/// About how many bytes a model token stands for, to turn a token budget into bytes.
pub const BYTES_PER_TOKEN: u64 = 4;

const PREFIX: &str = "// @exec:";

/// What a cell's `@exec` line asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecDirective {
    /// How long the request watches the cell before it returns with the output so far and
    /// status `running` (the cell goes on in the background). Not a timeout.
    pub yield_time_ms: Option<u64>,
    /// Cap on the returned output, in tokens.
    pub max_output_tokens: Option<u64>,
}

impl ExecDirective {
    pub fn max_output_bytes(&self) -> Option<u64> {
        self.max_output_tokens
            .map(|tokens| tokens.saturating_mul(BYTES_PER_TOKEN))
    }
}

/// Reads the directive from the first line of `code`, if it has one.
pub fn parse(code: &str) -> Result<Option<ExecDirective>, String> {
    let first = code.lines().next().unwrap_or_default().trim_start();
    let Some(json) = first.strip_prefix(PREFIX) else {
        return Ok(None);
    };
    let directive: ExecDirective = serde_json::from_str(json.trim()).map_err(|e| {
        format!(
            "invalid @exec line: {e}; expected // @exec: {{\"yield_time_ms\": N, \"max_output_tokens\": M}}"
        )
    })?;
    if directive.max_output_tokens == Some(0) {
        return Err("invalid @exec line: max_output_tokens must be at least 1".into());
    }
    Ok(Some(directive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directive_is_read_from_the_first_line_only() {
        let d = parse("// @exec: {\"yield_time_ms\": 1500, \"max_output_tokens\": 10}\ntext(1)")
            .unwrap()
            .unwrap();
        assert_eq!(d.yield_time_ms, Some(1500));
        assert_eq!(d.max_output_bytes(), Some(40));
        assert_eq!(parse("text(1)\n// @exec: {}").unwrap(), None);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let err = parse("// @exec: {\"yield_time\": 1}").unwrap_err();
        assert!(err.contains("unknown field `yield_time`"), "{err}");
        assert!(parse("// @exec: {\"max_output_tokens\": -1}").is_err());
        assert!(parse("// @exec: not json").is_err());
    }
}
