//! The markers runner.py writes into the output stream (a cell's sync marker, its done
//! marker with its status, `yield_control()`'s), cut out of the bytes by a
//! [`MarkerScanner`] however the reads split them.

/// A piece of the output stream: plain bytes, a sync marker's cell id, or a done marker (the
/// cell's end with its status, sent this way when nothing of the cell went over fd 4).
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Bytes(&'a [u8]),
    Marker(u64),
    Done(u64, DoneStatus),
    /// `<prefix><n>:display\x1e`: display `n` (its bundle comes on fd 4) goes here, after
    /// exactly the output before it.
    Display(u64),
}

/// How a cell whose end came as a done marker ended (a failed cell's summary takes fd 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneStatus {
    Ok,
    Interrupted,
}

impl DoneStatus {
    fn parse(word: &[u8]) -> Option<DoneStatus> {
        match word {
            b"ok" => Some(DoneStatus::Ok),
            b"interrupted" => Some(DoneStatus::Interrupted),
            _ => None,
        }
    }

    /// The status as runner.py's `done` event spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DoneStatus::Ok => "ok",
            DoneStatus::Interrupted => "interrupted",
        }
    }
}

/// Longest decimal cell id in a marker.
const MAX_ID_DIGITS: usize = 20;
/// Longest status word of a done marker ("interrupted").
const MAX_STATUS_LETTERS: usize = 11;
const MARKER_END: u8 = 0x1e;

/// Cuts `<prefix><decimal id>\x1e` sync markers and `<prefix><decimal id>:<status>\x1e` done
/// markers out of a byte stream that arrives in arbitrary chunks; a marker split across
/// chunks is held back until it is complete.
pub struct MarkerScanner {
    prefix: Vec<u8>,
    finder: memchr::memmem::Finder<'static>,
    carry: Vec<u8>,
}

impl MarkerScanner {
    pub fn new(prefix: Vec<u8>) -> Self {
        let finder = memchr::memmem::Finder::new(&prefix).into_owned();
        MarkerScanner {
            prefix,
            finder,
            carry: Vec::new(),
        }
    }

    pub fn feed(&mut self, data: &[u8], sink: &mut dyn FnMut(Piece<'_>)) {
        if self.carry.is_empty() {
            let consumed = self.scan(data, sink);
            self.carry.extend_from_slice(&data[consumed..]);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(data);
            let consumed = self.scan(&joined, sink);
            joined.drain(..consumed);
            self.carry = joined;
        }
    }

    /// Flushes whatever was held back (at EOF).
    pub fn finish(&mut self, sink: &mut dyn FnMut(Piece<'_>)) {
        sink(Piece::Bytes(&std::mem::take(&mut self.carry)));
    }

    /// Emits what is certain; returns how many bytes were consumed (the rest may be the
    /// start of a marker).
    fn scan(&self, data: &[u8], sink: &mut dyn FnMut(Piece<'_>)) -> usize {
        let mut position = 0;
        while let Some(found) = self.finder.find(&data[position..]) {
            let start = position + found;
            let digits_start = start + self.prefix.len();
            let rest = &data[digits_start..];
            let digits = rest
                .iter()
                .take(MAX_ID_DIGITS + 1)
                .take_while(|b| b.is_ascii_digit())
                .count();
            match rest.get(digits) {
                None if digits <= MAX_ID_DIGITS => {
                    // The marker may continue in the next chunk.
                    sink(Piece::Bytes(&data[position..start]));
                    return start;
                }
                Some(&MARKER_END) if digits > 0 => {
                    if let Some(id) = parse_id(&rest[..digits]) {
                        sink(Piece::Bytes(&data[position..start]));
                        sink(Piece::Marker(id));
                        position = digits_start + digits + 1;
                        continue;
                    }
                    // Too large for a u64: not ours.
                    sink(Piece::Bytes(&data[position..=start]));
                    position = start + 1;
                }
                Some(b':') if digits > 0 => {
                    let word = &rest[digits + 1..];
                    let letters = word
                        .iter()
                        .take(MAX_STATUS_LETTERS + 1)
                        .take_while(|b| b.is_ascii_lowercase())
                        .count();
                    match word.get(letters) {
                        None if letters <= MAX_STATUS_LETTERS => {
                            sink(Piece::Bytes(&data[position..start]));
                            return start;
                        }
                        Some(&MARKER_END) if &word[..letters] == b"display" => {
                            if let Some(seq) = parse_id(&rest[..digits]) {
                                sink(Piece::Bytes(&data[position..start]));
                                sink(Piece::Display(seq));
                                position = digits_start + digits + 1 + letters + 1;
                                continue;
                            }
                            sink(Piece::Bytes(&data[position..=start]));
                            position = start + 1;
                        }
                        Some(&MARKER_END) => {
                            let done =
                                parse_id(&rest[..digits]).zip(DoneStatus::parse(&word[..letters]));
                            if let Some((id, status)) = done {
                                sink(Piece::Bytes(&data[position..start]));
                                sink(Piece::Done(id, status));
                                position = digits_start + digits + 1 + letters + 1;
                                continue;
                            }
                            sink(Piece::Bytes(&data[position..=start]));
                            position = start + 1;
                        }
                        _ => {
                            sink(Piece::Bytes(&data[position..=start]));
                            position = start + 1;
                        }
                    }
                }
                _ => {
                    // Looks like a marker but is not one: plain output.
                    sink(Piece::Bytes(&data[position..=start]));
                    position = start + 1;
                }
            }
        }
        let keep = self.partial_prefix_len(&data[position..]);
        let end = data.len() - keep;
        sink(Piece::Bytes(&data[position..end]));
        end
    }

    /// The length of the longest tail of `data` that is a proper start of the prefix.
    fn partial_prefix_len(&self, data: &[u8]) -> usize {
        let longest = (self.prefix.len() - 1).min(data.len());
        (1..=longest)
            .rev()
            .find(|&len| data[data.len() - len..] == self.prefix[..len])
            .unwrap_or(0)
    }
}

/// A marker's decimal cell id; `None` when it does not fit a u64.
fn parse_id(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &[u8] = b"\x1esync:abc:";

    fn scan_all(input: &[u8], chunk: usize) -> (Vec<u8>, Vec<u64>, Vec<(u64, DoneStatus)>) {
        let mut scanner = MarkerScanner::new(PREFIX.to_vec());
        let (mut bytes, mut markers, mut dones) = (Vec::new(), Vec::new(), Vec::new());
        let mut sink = |piece: Piece<'_>| match piece {
            Piece::Bytes(data) => bytes.extend_from_slice(data),
            Piece::Marker(id) => markers.push(id),
            Piece::Done(id, status) => dones.push((id, status)),
            Piece::Display(seq) => panic!("unexpected display marker {seq}"),
        };
        for part in input.chunks(chunk) {
            scanner.feed(part, &mut sink);
        }
        scanner.finish(&mut sink);
        (bytes, markers, dones)
    }

    fn scan_in_chunks(input: &[u8], chunk: usize) -> (Vec<u8>, Vec<u64>) {
        let (bytes, markers, dones) = scan_all(input, chunk);
        assert!(dones.is_empty(), "{dones:?}");
        (bytes, markers)
    }

    #[test]
    fn display_markers_are_cut_out_at_every_split() {
        let input = b"a\x1eP:7:display\x1eb";
        for chunk in 1..=input.len() {
            let mut scanner = MarkerScanner::new(b"\x1eP:".to_vec());
            let (mut bytes, mut displays) = (Vec::new(), Vec::new());
            for piece in input.chunks(chunk) {
                scanner.feed(piece, &mut |p| match p {
                    Piece::Bytes(b) => bytes.extend_from_slice(b),
                    Piece::Display(seq) => displays.push((seq, bytes.len())),
                    other => panic!("unexpected {other:?}"),
                });
            }
            scanner.finish(&mut |p| {
                if let Piece::Bytes(b) = p {
                    bytes.extend_from_slice(b)
                }
            });
            assert_eq!(bytes, b"ab", "chunk {chunk}");
            assert_eq!(displays, [(7, 1)], "chunk {chunk}");
        }
    }

    #[test]
    fn done_markers_are_cut_out_at_every_split() {
        let input = b"2\n\x1esync:abc:7:ok\x1ex\x1esync:abc:8\x1e\x1esync:abc:9:interrupted\x1e";
        for chunk in 1..=input.len() {
            let (bytes, markers, dones) = scan_all(input, chunk);
            assert_eq!(bytes, b"2\nx", "chunk {chunk}");
            assert_eq!(markers, vec![8], "chunk {chunk}");
            assert_eq!(
                dones,
                vec![(7, DoneStatus::Ok), (9, DoneStatus::Interrupted)],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn done_marker_near_misses_stay_output() {
        let input = b"\x1esync:abc:7:error\x1e \x1esync:abc:7:OK\x1e \x1esync:abc::ok\x1e \
                      \x1esync:abc:7:interruptedxx\x1e \x1esync:abc:7:ok";
        for chunk in 1..=input.len() {
            let (bytes, markers, dones) = scan_all(input, chunk);
            assert_eq!(bytes, input.to_vec(), "chunk {chunk}");
            assert!(markers.is_empty() && dones.is_empty(), "chunk {chunk}");
        }
    }

    #[test]
    fn markers_are_cut_out_at_every_split() {
        let input = b"hello\x1esync:abc:7\x1eworld\x1e\x1esync:abc:12\x1e\x1esync";
        for chunk in 1..=input.len() {
            let (bytes, markers) = scan_in_chunks(input, chunk);
            assert_eq!(bytes, b"helloworld\x1e\x1esync", "chunk {chunk}");
            assert_eq!(markers, vec![7, 12], "chunk {chunk}");
        }
    }

    #[test]
    fn near_misses_stay_output() {
        let input =
            b"\x1esync:abc:x\x1e \x1esync:abc:\x1e \x1esync:abc:99999999999999999999999\x1e";
        for chunk in 1..=input.len() {
            let (bytes, markers) = scan_in_chunks(input, chunk);
            assert_eq!(bytes, input.to_vec(), "chunk {chunk}");
            assert!(markers.is_empty());
        }
    }
}
