//! Line helpers behind the JavaScript and Lua `sort`, `uniq` and `diff` (Python's prelude
//! uses the standard library), on bytes: Lua strings are bytes, and byte order is code point
//! order for UTF-8, so JavaScript's strings sort the same.
//!
//! `unified_diff` ports Python's `difflib.SequenceMatcher` (with its default "autojunk"
//! heuristic) and `difflib.unified_diff`, so `diff(a, b)` gives the same hunks in Lua as in
//! Python, not merely an equivalent diff.

use std::collections::HashMap;

/// The lines of `text`, split on `\n` only; a final newline ends the last line rather than
/// starting an empty one.
pub(crate) fn lines(text: &[u8]) -> Vec<&[u8]> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    if text.ends_with(b"\n") {
        lines.pop();
    }
    lines
}

/// Lines joined with `\n`, ending with one iff `like` (the input) did.
fn join(lines: &[Vec<u8>], like: &[u8]) -> Vec<u8> {
    let mut out = lines.join(&b'\n');
    if !lines.is_empty() && like.ends_with(b"\n") {
        out.push(b'\n');
    }
    out
}

/// `sort(text, reverse?, unique?)`: the text and how many lines it has.
pub(crate) fn sort(text: &[u8], reverse: bool, unique: bool) -> (Vec<u8>, usize) {
    let mut sorted: Vec<Vec<u8>> = lines(text).into_iter().map(<[u8]>::to_vec).collect();
    sorted.sort();
    if reverse {
        sorted.reverse();
    }
    if unique {
        sorted.dedup();
    }
    (join(&sorted, text), sorted.len())
}

/// `uniq(text, count?)`: adjacent duplicates collapsed (with `count`, prefixed by their
/// number like `uniq -c`); the text and how many lines it has.
pub(crate) fn uniq(text: &[u8], count: bool) -> (Vec<u8>, usize) {
    let mut groups: Vec<(&[u8], usize)> = Vec::new();
    for line in lines(text) {
        match groups.last_mut() {
            Some((last, times)) if *last == line => *times += 1,
            _ => groups.push((line, 1)),
        }
    }
    let out: Vec<Vec<u8>> = groups
        .iter()
        .map(|(line, times)| {
            if count {
                let mut counted = format!("{times:7} ").into_bytes();
                counted.extend_from_slice(line);
                counted
            } else {
                line.to_vec()
            }
        })
        .collect();
    (join(&out, text), out.len())
}

/// A unified diff of two texts with headers `--- a` / `+++ b` and 3 lines of context, like
/// `"\n".join(difflib.unified_diff(a_lines, b_lines, "a", "b", lineterm=""))`; also the
/// numbers of added and removed lines.
pub(crate) fn unified_diff(a: &[u8], b: &[u8]) -> (Vec<u8>, usize, usize) {
    const CONTEXT: usize = 3;
    let (a, b) = (lines(a), lines(b));
    let matcher = SequenceMatcher::new(&a, &b);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for group in grouped_opcodes(matcher.opcodes(), CONTEXT) {
        if out.is_empty() {
            out.push(b"--- a".to_vec());
            out.push(b"+++ b".to_vec());
        }
        let (first, last) = (group[0], group[group.len() - 1]);
        out.push(
            format!(
                "@@ -{} +{} @@",
                unified_range(first.i1, last.i2),
                unified_range(first.j1, last.j2)
            )
            .into_bytes(),
        );
        for op in group {
            let prefixed = |prefix: u8, line: &[u8]| {
                let mut row = vec![prefix];
                row.extend_from_slice(line);
                row
            };
            if op.tag == Tag::Equal {
                out.extend(a[op.i1..op.i2].iter().map(|l| prefixed(b' ', l)));
                continue;
            }
            if matches!(op.tag, Tag::Replace | Tag::Delete) {
                removed += op.i2 - op.i1;
                out.extend(a[op.i1..op.i2].iter().map(|l| prefixed(b'-', l)));
            }
            if matches!(op.tag, Tag::Replace | Tag::Insert) {
                added += op.j2 - op.j1;
                out.extend(b[op.j1..op.j2].iter().map(|l| prefixed(b'+', l)));
            }
        }
    }
    (out.join(&b'\n'), added, removed)
}

/// difflib's `_format_range_unified`.
fn unified_range(start: usize, stop: usize) -> String {
    let length = stop - start;
    match length {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{length}", start + 1),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Equal,
    Replace,
    Delete,
    Insert,
}

#[derive(Debug, Clone, Copy)]
struct Opcode {
    tag: Tag,
    i1: usize,
    i2: usize,
    j1: usize,
    j2: usize,
}

/// difflib's `get_grouped_opcodes(n)`: hunks with `n` lines of context.
fn grouped_opcodes(mut codes: Vec<Opcode>, n: usize) -> Vec<Vec<Opcode>> {
    if codes.is_empty() {
        codes.push(Opcode {
            tag: Tag::Equal,
            i1: 0,
            i2: 1,
            j1: 0,
            j2: 1,
        });
    }
    if let Some(first) = codes.first_mut().filter(|c| c.tag == Tag::Equal) {
        first.i1 = first.i1.max(first.i2.saturating_sub(n));
        first.j1 = first.j1.max(first.j2.saturating_sub(n));
    }
    if let Some(last) = codes.last_mut().filter(|c| c.tag == Tag::Equal) {
        last.i2 = last.i2.min(last.i1 + n);
        last.j2 = last.j2.min(last.j1 + n);
    }
    let mut groups = Vec::new();
    let mut group = Vec::new();
    for mut code in codes {
        if code.tag == Tag::Equal && code.i2 - code.i1 > 2 * n {
            group.push(Opcode {
                i2: code.i2.min(code.i1 + n),
                j2: code.j2.min(code.j1 + n),
                ..code
            });
            groups.push(std::mem::take(&mut group));
            code.i1 = code.i1.max(code.i2.saturating_sub(n));
            code.j1 = code.j1.max(code.j2.saturating_sub(n));
        }
        group.push(code);
    }
    // A last group of nothing but context is no hunk.
    match group.as_slice() {
        [] => {}
        [only] if only.tag == Tag::Equal => {}
        _ => groups.push(group),
    }
    groups
}

/// difflib's `SequenceMatcher(None, a, b)` (autojunk on, no junk function).
struct SequenceMatcher<'a> {
    a: &'a [&'a [u8]],
    b: &'a [&'a [u8]],
    /// Where each line of `b` occurs, ascending; lines that are "popular" (more than 1% of
    /// a `b` of 200 lines or more) are left out, as difflib does.
    b2j: HashMap<&'a [u8], Vec<usize>>,
}

impl<'a> SequenceMatcher<'a> {
    fn new(a: &'a [&'a [u8]], b: &'a [&'a [u8]]) -> Self {
        let mut b2j: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (j, line) in b.iter().enumerate() {
            b2j.entry(line).or_default().push(j);
        }
        if b.len() >= 200 {
            let limit = b.len() / 100 + 1;
            b2j.retain(|_, places| places.len() <= limit);
        }
        SequenceMatcher { a, b, b2j }
    }

    /// The longest matching block in `a[alo..ahi]` and `b[blo..bhi]`, earliest on ties, as
    /// `(i, j, size)`.
    fn longest_match(
        &self,
        alo: usize,
        ahi: usize,
        blo: usize,
        bhi: usize,
    ) -> (usize, usize, usize) {
        let (mut best_i, mut best_j, mut best_size) = (alo, blo, 0);
        let mut lengths: HashMap<usize, usize> = HashMap::new();
        for i in alo..ahi {
            let mut next: HashMap<usize, usize> = HashMap::new();
            if let Some(places) = self.b2j.get(self.a[i]) {
                for &j in places {
                    if j < blo {
                        continue;
                    }
                    if j >= bhi {
                        break;
                    }
                    let k = j
                        .checked_sub(1)
                        .and_then(|p| lengths.get(&p))
                        .copied()
                        .unwrap_or(0)
                        + 1;
                    next.insert(j, k);
                    if k > best_size {
                        (best_i, best_j, best_size) = (i + 1 - k, j + 1 - k, k);
                    }
                }
            }
            lengths = next;
        }
        // Popular lines are not in b2j but still match: extend over equal neighbours.
        while best_i > alo && best_j > blo && self.a[best_i - 1] == self.b[best_j - 1] {
            (best_i, best_j, best_size) = (best_i - 1, best_j - 1, best_size + 1);
        }
        while best_i + best_size < ahi
            && best_j + best_size < bhi
            && self.a[best_i + best_size] == self.b[best_j + best_size]
        {
            best_size += 1;
        }
        (best_i, best_j, best_size)
    }

    fn matching_blocks(&self) -> Vec<(usize, usize, usize)> {
        let (la, lb) = (self.a.len(), self.b.len());
        let mut queue = vec![(0, la, 0, lb)];
        let mut blocks = Vec::new();
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let (i, j, k) = self.longest_match(alo, ahi, blo, bhi);
            if k > 0 {
                blocks.push((i, j, k));
                if alo < i && blo < j {
                    queue.push((alo, i, blo, j));
                }
                if i + k < ahi && j + k < bhi {
                    queue.push((i + k, ahi, j + k, bhi));
                }
            }
        }
        blocks.sort_unstable();
        let mut merged: Vec<(usize, usize, usize)> = Vec::new();
        let (mut i1, mut j1, mut k1) = (0, 0, 0);
        for (i2, j2, k2) in blocks {
            if i1 + k1 == i2 && j1 + k1 == j2 {
                k1 += k2;
            } else {
                if k1 > 0 {
                    merged.push((i1, j1, k1));
                }
                (i1, j1, k1) = (i2, j2, k2);
            }
        }
        if k1 > 0 {
            merged.push((i1, j1, k1));
        }
        merged.push((la, lb, 0));
        merged
    }

    fn opcodes(&self) -> Vec<Opcode> {
        let (mut i, mut j) = (0, 0);
        let mut codes = Vec::new();
        for (ai, bj, size) in self.matching_blocks() {
            let tag = match (i < ai, j < bj) {
                (true, true) => Some(Tag::Replace),
                (true, false) => Some(Tag::Delete),
                (false, true) => Some(Tag::Insert),
                (false, false) => None,
            };
            if let Some(tag) = tag {
                codes.push(Opcode {
                    tag,
                    i1: i,
                    i2: ai,
                    j1: j,
                    j2: bj,
                });
            }
            (i, j) = (ai + size, bj + size);
            if size > 0 {
                codes.push(Opcode {
                    tag: Tag::Equal,
                    i1: ai,
                    i2: i,
                    j1: bj,
                    j2: j,
                });
            }
        }
        codes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn sort_and_uniq_keep_the_final_newline_rule() {
        assert_eq!(
            sort(b"b\na\nc\na\n", false, false),
            (b"a\na\nb\nc\n".to_vec(), 4)
        );
        assert_eq!(sort(b"b\na\nb", true, true), (b"b\na".to_vec(), 2));
        assert_eq!(sort(b"", false, false), (Vec::new(), 0));
        assert_eq!(sort(b"\n", false, false), (b"\n".to_vec(), 1));
        assert_eq!(uniq(b"a\na\nb\na\n", false), (b"a\nb\na\n".to_vec(), 3));
        assert_eq!(text(uniq(b"a\na\nb", true).0), "      2 a\n      1 b");
    }

    #[test]
    fn diff_matches_python_difflib() {
        let cases: Vec<(String, String)> = random_texts();
        let ours: Vec<String> = cases
            .iter()
            .map(|(a, b)| text(unified_diff(a.as_bytes(), b.as_bytes()).0))
            .collect();
        let script = "import difflib, json, sys\n\
            def lines(t):\n    l = t.split('\\n') if t else []\n    \
            return l[:-1] if t.endswith('\\n') else l\n\
            for a, b in json.load(sys.stdin):\n    \
            print(json.dumps('\\n'.join(difflib.unified_diff(lines(a), lines(b), 'a', 'b', lineterm=''))))";
        let mut python = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the reference diff");
        let input = serde_json::to_vec(&cases).unwrap();
        python.stdin.take().unwrap().write_all(&input).unwrap();
        let output = python.wait_with_output().unwrap();
        assert!(output.status.success());
        let expected: Vec<String> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(expected.len(), cases.len());
        for ((case, ours), expected) in cases.iter().zip(&ours).zip(&expected) {
            assert_eq!(ours, expected, "{case:?}");
        }
    }

    /// Pairs of texts that exercise hunks, context merging, empty sides and popular lines.
    fn random_texts() -> Vec<(String, String)> {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let mut cases = vec![
            (String::new(), String::new()),
            (String::new(), "a\n".into()),
            ("a\nb\n".into(), String::new()),
            ("same\n".into(), "same\n".into()),
        ];
        for round in 0..120 {
            let length = if round % 10 == 0 {
                260
            } else {
                1 + next(30) as usize
            };
            let alphabet = 2 + next(8);
            let a: Vec<String> = (0..length)
                .map(|_| format!("l{}", next(alphabet)))
                .collect();
            let mut b = a.clone();
            for _ in 0..1 + next(6) {
                let at = next(b.len() as u64 + 1) as usize;
                match next(3) {
                    0 if at < b.len() => {
                        b.remove(at);
                    }
                    1 => b.insert(at, format!("n{}", next(alphabet))),
                    _ if at < b.len() => b[at] = format!("c{}", next(alphabet)),
                    _ => b.push("end".into()),
                }
            }
            let end = if next(2) == 0 { "\n" } else { "" };
            cases.push((a.join("\n") + end, b.join("\n") + end));
        }
        cases
    }

    #[test]
    fn diff_hunks_and_ends_match_python_difflib() {
        // python3 -c 'import difflib; print("\n".join(difflib.unified_diff(
        //   "a\nb\nc\nd\ne\nf\ng\nh\ni".splitlines(), "a\nB\nc\nd\ne\nf\ng\nh\ni\nj".splitlines(),
        //   "a", "b", lineterm="")))'
        let (text, added, removed) = unified_diff(
            b"a\nb\nc\nd\ne\nf\ng\nh\ni",
            b"a\nB\nc\nd\ne\nf\ng\nh\ni\nj",
        );
        assert_eq!(
            String::from_utf8_lossy(&text),
            "--- a\n+++ b\n@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n@@ -7,3 +7,4 @@\n g\n h\n i\n+j"
        );
        assert_eq!((added, removed), (2, 1));
        let (text, _, _) = unified_diff(b"", b"x\n");
        assert_eq!(
            String::from_utf8_lossy(&text),
            "--- a\n+++ b\n@@ -0,0 +1 @@\n+x"
        );
        let (text, _, _) = unified_diff(b"x\ny\n", b"");
        assert_eq!(
            String::from_utf8_lossy(&text),
            "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y"
        );
    }
}
