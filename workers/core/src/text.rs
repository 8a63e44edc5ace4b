//! Line helpers behind the JavaScript and Lua `sort`, `uniq` and `diff` (Python's prelude
//! uses the standard library), on bytes: Lua strings are bytes, and byte order is code point
//! order for UTF-8, so JavaScript's strings sort the same.
//!
//! `unified_diff` is the `similar` crate's patience diff laid out like Python's
//! `difflib.unified_diff(..., lineterm="")`: the same headers and hunk ranges, though not
//! always the same hunks (both are valid diffs of the same texts).

use similar::{Algorithm, DiffTag};
use std::time::{Duration, Instant};

/// The lines of `text`, split on `\n` only; a final newline ends the last line rather than
/// starting an empty one.
pub fn lines(text: &[u8]) -> Vec<&[u8]> {
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
pub fn sort(text: &[u8], reverse: bool, unique: bool) -> (Vec<u8>, usize) {
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
pub fn uniq(text: &[u8], count: bool) -> (Vec<u8>, usize) {
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

/// A unified diff of two texts with headers `--- a` / `+++ b` and 3 lines of context, laid out
/// like `"\n".join(difflib.unified_diff(a_lines, b_lines, "a", "b", lineterm=""))`; also the
/// numbers of added and removed lines.
pub fn unified_diff(a: &[u8], b: &[u8]) -> (Vec<u8>, usize, usize) {
    const CONTEXT: usize = 3;
    // Past this, `similar` settles for a valid but less minimal diff instead of searching on,
    // so a huge diff cannot hold the cell (and its interrupt) for long.
    const DEADLINE: Duration = Duration::from_secs(2);
    let (a, b) = (lines(a), lines(b));
    let ops = similar::capture_diff_slices_deadline(
        Algorithm::Patience,
        &a,
        &b,
        Some(Instant::now() + DEADLINE),
    );
    let mut out: Vec<Vec<u8>> = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for group in similar::group_diff_ops(ops, CONTEXT) {
        if out.is_empty() {
            out.push(b"--- a".to_vec());
            out.push(b"+++ b".to_vec());
        }
        out.push(
            similar::udiff::UnifiedHunkHeader::new(&group)
                .to_string()
                .into_bytes(),
        );
        for op in group {
            let (tag, old, new) = op.as_tag_tuple();
            let prefixed = |prefix: u8, line: &&[u8]| {
                let mut row = vec![prefix];
                row.extend_from_slice(line);
                row
            };
            if tag == DiffTag::Equal {
                out.extend(a[old].iter().map(|l| prefixed(b' ', l)));
                continue;
            }
            if matches!(tag, DiffTag::Replace | DiffTag::Delete) {
                removed += old.len();
                out.extend(a[old].iter().map(|l| prefixed(b'-', l)));
            }
            if matches!(tag, DiffTag::Replace | DiffTag::Insert) {
                added += new.len();
                out.extend(b[new].iter().map(|l| prefixed(b'+', l)));
            }
        }
    }
    (out.join(&b'\n'), added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Applies a diff as `unified_diff` writes it to the lines of `a`: the lines it gives, and
    /// the numbers of `+` and `-` lines. Panics when a hunk's range or context does not fit.
    fn patch(a: &str, diff: &str) -> (Vec<String>, usize, usize) {
        let a: Vec<&str> = lines(a.as_bytes())
            .iter()
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        let (mut out, mut at, mut added, mut removed) = (Vec::new(), 0, 0, 0);
        for row in diff.lines().skip(2) {
            if let Some(header) = row.strip_prefix("@@ -") {
                let old = header.split(' ').next().unwrap();
                let (start, len) = old.split_once(',').unwrap_or((old, "1"));
                let (start, len): (usize, usize) = (start.parse().unwrap(), len.parse().unwrap());
                let first = if len == 0 { start } else { start - 1 };
                assert!(first >= at, "hunks overlap in {diff}");
                out.extend(a[at..first].iter().map(|l| l.to_string()));
                at = first;
                continue;
            }
            let (sign, line) = row.split_at(1);
            match sign {
                "+" => {
                    added += 1;
                    out.push(line.to_string());
                }
                "-" | " " => {
                    assert_eq!(a[at], line, "context or removal mismatch in {diff}");
                    at += 1;
                    if sign == "-" {
                        removed += 1;
                    } else {
                        out.push(line.to_string());
                    }
                }
                _ => panic!("unexpected row {row:?} in {diff}"),
            }
        }
        out.extend(a[at..].iter().map(|l| l.to_string()));
        (out, added, removed)
    }

    #[test]
    fn diffs_turn_the_first_text_into_the_second() {
        for (a, b) in random_texts() {
            let (diff, added, removed) = unified_diff(a.as_bytes(), b.as_bytes());
            let diff = text(diff);
            if a == b {
                assert_eq!(diff, "");
                continue;
            }
            assert!(diff.starts_with("--- a\n+++ b\n@@ -"), "{diff}");
            let (patched, plus, minus) = patch(&a, &diff);
            let expected: Vec<&str> = b.lines().collect();
            assert_eq!(patched, expected, "{a:?} -> {b:?}:\n{diff}");
            assert_eq!((added, removed), (plus, minus), "{diff}");
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
    fn diff_headers_and_ranges_read_like_difflib() {
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
