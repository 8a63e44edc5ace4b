//! Newline-delimited messages read with a bound on their length, for the daemon's socket and
//! for `cellvisor mcp`'s stdin: a line over the limit is never buffered whole.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What one read gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line, without its newline.
    Complete(Vec<u8>),
    /// A line over the limit, `bytes` long (without its newline; with [`Overlong::Stop`], the
    /// bytes read when the limit was passed), of which `head` holds the first
    /// [`HEAD_BYTES`] at most, enough to read the id of a request that puts it first.
    TooLong { bytes: u64, head: Vec<u8> },
}

/// What a reader does with a line over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlong {
    /// Report it as soon as the limit is passed and read no further (its connection is closed
    /// next).
    Stop,
    /// Read on to its newline, discarding what is past the head, then report it with its
    /// whole length: the next line is read as usual.
    Skip,
}

/// The first bytes of an over-long line that are kept.
pub(crate) const HEAD_BYTES: usize = 64 * 1024;

/// Reads lines of at most `limit` bytes (without the newline); a last line without a newline
/// is a line too.
///
/// Cancel-safe: a read dropped part-way leaves what it had read in the reader, and the next
/// call goes on with the same line (nothing is consumed from the source without being kept).
#[derive(Debug)]
pub(crate) struct BoundedLines {
    limit: usize,
    overlong: Overlong,
    /// The line read so far; the head of an over-long line being skipped.
    line: Vec<u8>,
    /// The length so far of the over-long line being skipped.
    skipping: Option<u64>,
}

impl BoundedLines {
    /// A reader of lines of at most `limit` bytes.
    pub(crate) fn new(limit: usize, overlong: Overlong) -> BoundedLines {
        BoundedLines {
            limit,
            overlong,
            line: Vec::new(),
            skipping: None,
        }
    }

    /// The next line from `reader`; `None` at its end.
    pub(crate) async fn next<R: AsyncBufRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> std::io::Result<Option<Line>> {
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                let line = std::mem::take(&mut self.line);
                return Ok(match self.skipping.take() {
                    Some(bytes) => Some(Line::TooLong { bytes, head: line }),
                    None => (!line.is_empty()).then_some(Line::Complete(line)),
                });
            }
            let newline = memchr::memchr(b'\n', available);
            let chunk = &available[..newline.unwrap_or(available.len())];
            let used = newline.map_or(available.len(), |at| at + 1);
            let read = self.take(chunk, newline.is_some());
            reader.consume(used);
            if read.is_some() {
                return Ok(read);
            }
        }
    }

    /// Takes `chunk` of the current line (`ends` when its newline follows it): the line, once
    /// there is one to report.
    fn take(&mut self, chunk: &[u8], ends: bool) -> Option<Line> {
        if let Some(bytes) = self.skipping.as_mut() {
            *bytes += chunk.len() as u64;
            let bytes = *bytes;
            self.keep_head(chunk);
            return ends.then(|| self.too_long(bytes));
        }
        let length = self.line.len() + chunk.len();
        if length <= self.limit {
            self.line.extend_from_slice(chunk);
            return ends.then(|| Line::Complete(std::mem::take(&mut self.line)));
        }
        // Over the limit: keep the head only, and give the big buffer back.
        self.line.truncate(HEAD_BYTES);
        self.line.shrink_to_fit();
        self.keep_head(chunk);
        let bytes = length as u64;
        if ends || self.overlong == Overlong::Stop {
            return Some(self.too_long(bytes));
        }
        self.skipping = Some(bytes);
        None
    }

    /// Adds what of `chunk` still fits in the head of an over-long line.
    fn keep_head(&mut self, chunk: &[u8]) {
        let room = HEAD_BYTES.saturating_sub(self.line.len());
        self.line.extend_from_slice(&chunk[..room.min(chunk.len())]);
    }

    fn too_long(&mut self, bytes: u64) -> Line {
        self.skipping = None;
        Line::TooLong {
            bytes,
            head: std::mem::take(&mut self.line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input`, read through a buffer of `chunk` bytes.
    fn read_all(input: &[u8], limit: usize, overlong: Overlong, chunk: usize) -> Vec<Line> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut reader = tokio::io::BufReader::with_capacity(chunk, input);
            let mut lines = BoundedLines::new(limit, overlong);
            let mut read = Vec::new();
            while let Some(line) = lines.next(&mut reader).await.unwrap() {
                read.push(line);
                if overlong == Overlong::Stop && matches!(read.last(), Some(Line::TooLong { .. })) {
                    break;
                }
            }
            read
        })
    }

    fn complete(text: &str) -> Line {
        Line::Complete(text.as_bytes().to_vec())
    }

    #[test]
    fn lines_at_the_limit_pass_and_longer_ones_are_skipped_to_their_newline() {
        let input = b"abc\n12345678\n123456789 and more\n\nlast";
        for chunk in [1, 3, 5, 64] {
            let lines = read_all(input, 8, Overlong::Skip, chunk);
            assert_eq!(
                lines,
                vec![
                    complete("abc"),
                    complete("12345678"),
                    Line::TooLong {
                        bytes: 18,
                        head: b"123456789 and more".to_vec()
                    },
                    complete(""),
                    complete("last"),
                ],
                "read {chunk} bytes at a time"
            );
        }
    }

    #[test]
    fn an_over_long_line_keeps_only_its_head() {
        let mut input = vec![b'x'; HEAD_BYTES * 3];
        input.extend_from_slice(b"\nnext\n");
        let lines = read_all(&input, HEAD_BYTES * 2, Overlong::Skip, 4096);
        assert_eq!(lines.len(), 2);
        match &lines[0] {
            Line::TooLong { bytes, head } => {
                assert_eq!(*bytes, HEAD_BYTES as u64 * 3);
                assert_eq!(head.len(), HEAD_BYTES);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(lines[1], complete("next"));
    }

    #[test]
    fn an_over_long_line_at_the_end_of_input_is_reported() {
        let lines = read_all(b"ok\n0123456789", 4, Overlong::Skip, 2);
        assert_eq!(
            lines,
            vec![
                complete("ok"),
                Line::TooLong {
                    bytes: 10,
                    head: b"0123456789".to_vec()
                }
            ]
        );
    }

    #[test]
    fn stop_reports_an_over_long_line_once_the_limit_is_passed() {
        let lines = read_all(b"0123456789\n", 4, Overlong::Stop, 3);
        assert_eq!(
            lines,
            vec![Line::TooLong {
                bytes: 6,
                head: b"012345".to_vec()
            }]
        );
    }
}
