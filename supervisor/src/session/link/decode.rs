//! The text the reader takes from the worker: streamed output decoded whole-character, the
//! worker's stderr without its fatal message repeated, and which read errors are just the
//! worker going away.

/// What the worker wrote to stderr, without the lines that only repeat its fatal message
/// (the worker logs it as it exits).
pub(super) fn stderr_beyond(said: &str, fatal: Option<&str>) -> String {
    match fatal {
        Some(fatal) if !fatal.is_empty() => said
            .lines()
            .filter(|line| !line.ends_with(fatal))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => said.to_string(),
    }
}

pub(super) fn is_disconnect(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        err.kind(),
        BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof
    )
}

/// Decodes streamed bytes as UTF-8, holding back a character cut at the chunk's end so it is
/// not turned into replacement characters.
pub(super) fn decode_streamed(carry: &mut Vec<u8>, data: &[u8]) -> String {
    carry.extend_from_slice(data);
    let keep_from = match std::str::from_utf8(carry) {
        Ok(_) => carry.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => carry.len(),
    };
    let rest = carry.split_off(keep_from);
    let text = String::from_utf8_lossy(carry).into_owned();
    *carry = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::{decode_streamed, stderr_beyond};

    #[test]
    fn stderr_lines_repeating_the_fatal_message_are_dropped() {
        let said = "cellvisor py worker: python exited with code 3\nsegfault in libfoo";
        assert_eq!(
            stderr_beyond(said, Some("python exited with code 3")),
            "segfault in libfoo"
        );
        assert_eq!(stderr_beyond(said, None), said);
    }

    #[test]
    fn a_character_split_across_chunks_is_kept_whole() {
        let mut carry = Vec::new();
        let bytes = "é".as_bytes();
        assert_eq!(decode_streamed(&mut carry, &[b'a', bytes[0]]), "a");
        assert_eq!(decode_streamed(&mut carry, &[bytes[1], b'b']), "éb");
        assert_eq!(decode_streamed(&mut carry, b"\xff!"), "\u{fffd}!");
    }
}
