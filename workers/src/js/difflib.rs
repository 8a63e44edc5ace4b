//! `diff(a, b)`: a unified diff that matches Python's `difflib.unified_diff(a, b, "a", "b",
//! lineterm="")` line for line, so the `diff` helper prints the same in py and js cells.
//! This is a port of difflib's `SequenceMatcher` (no junk function, `autojunk` on), which is
//! not a minimal diff: copying its heuristics is what keeps the hunks identical.

use std::collections::HashMap;

/// Lines of context around each change, as in `diff -u`.
const CONTEXT: usize = 3;

/// A unified diff of two texts and how many lines it adds and removes.
pub(super) struct UnifiedDiff {
    pub text: String,
    pub added: usize,
    pub removed: usize,
}

/// Diffs the lines of `a` against the lines of `b` (split like Python's `splitlines`).
pub(super) fn unified_diff(a: &str, b: &str) -> UnifiedDiff {
    let a_lines = split_lines(a);
    let b_lines = split_lines(b);
    let matcher = SequenceMatcher::new(&a_lines, &b_lines);
    let mut out: Vec<String> = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for group in matcher.grouped_opcodes(CONTEXT) {
        if out.is_empty() {
            out.push("--- a".into());
            out.push("+++ b".into());
        }
        let (first, last) = (group[0], group[group.len() - 1]);
        out.push(format!(
            "@@ -{} +{} @@",
            unified_range(first.i1, last.i2),
            unified_range(first.j1, last.j2)
        ));
        for op in group {
            if op.tag == Tag::Equal {
                out.extend(a_lines[op.i1..op.i2].iter().map(|line| format!(" {line}")));
                continue;
            }
            if matches!(op.tag, Tag::Replace | Tag::Delete) {
                removed += op.i2 - op.i1;
                out.extend(a_lines[op.i1..op.i2].iter().map(|line| format!("-{line}")));
            }
            if matches!(op.tag, Tag::Replace | Tag::Insert) {
                added += op.j2 - op.j1;
                out.extend(b_lines[op.j1..op.j2].iter().map(|line| format!("+{line}")));
            }
        }
    }
    UnifiedDiff {
        text: out.join("\n"),
        added,
        removed,
    }
}

/// The lines of a text split on `\n` only, a final newline ending the last line (what the
/// Python prelude feeds to difflib, so CRLF texts diff the same in both).
pub(super) fn split_lines(text: &str) -> Vec<&str> {
    super::host::lines_of(text).0
}

fn unified_range(start: usize, stop: usize) -> String {
    let length = stop - start;
    match length {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{length}", start + 1),
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Tag {
    Equal,
    Replace,
    Delete,
    Insert,
}

#[derive(Clone, Copy, Debug)]
struct Opcode {
    tag: Tag,
    i1: usize,
    i2: usize,
    j1: usize,
    j2: usize,
}

struct SequenceMatcher<'s> {
    a: &'s [&'s str],
    b: &'s [&'s str],
    /// Where each (non-popular) line of `b` occurs, ascending.
    b2j: HashMap<&'s str, Vec<usize>>,
}

impl<'s> SequenceMatcher<'s> {
    fn new(a: &'s [&'s str], b: &'s [&'s str]) -> Self {
        let mut b2j: HashMap<&str, Vec<usize>> = HashMap::new();
        for (j, line) in b.iter().enumerate() {
            b2j.entry(line).or_default().push(j);
        }
        // difflib's autojunk: in long texts, lines more common than 1% are not anchors.
        if b.len() >= 200 {
            let popular_over = b.len() / 100 + 1;
            b2j.retain(|_, places| places.len() <= popular_over);
        }
        SequenceMatcher { a, b, b2j }
    }

    fn find_longest_match(&self, alo: usize, ahi: usize, blo: usize, bhi: usize) -> Match {
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        let mut j2len: HashMap<usize, usize> = HashMap::new();
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
                        .and_then(|prev| j2len.get(&prev))
                        .copied()
                        .unwrap_or(0)
                        + 1;
                    next.insert(j, k);
                    if k > bestsize {
                        besti = i + 1 - k;
                        bestj = j + 1 - k;
                        bestsize = k;
                    }
                }
            }
            j2len = next;
        }
        while besti > alo && bestj > blo && self.a[besti - 1] == self.b[bestj - 1] {
            besti -= 1;
            bestj -= 1;
            bestsize += 1;
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && self.a[besti + bestsize] == self.b[bestj + bestsize]
        {
            bestsize += 1;
        }
        Match {
            i: besti,
            j: bestj,
            size: bestsize,
        }
    }

    fn matching_blocks(&self) -> Vec<Match> {
        let mut queue = vec![(0, self.a.len(), 0, self.b.len())];
        let mut blocks = Vec::new();
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let found = self.find_longest_match(alo, ahi, blo, bhi);
            if found.size > 0 {
                blocks.push(found);
                if alo < found.i && blo < found.j {
                    queue.push((alo, found.i, blo, found.j));
                }
                if found.i + found.size < ahi && found.j + found.size < bhi {
                    queue.push((found.i + found.size, ahi, found.j + found.size, bhi));
                }
            }
        }
        blocks.sort_by_key(|block| (block.i, block.j, block.size));
        let mut merged: Vec<Match> = Vec::new();
        let mut current = Match {
            i: 0,
            j: 0,
            size: 0,
        };
        for block in blocks {
            if current.i + current.size == block.i && current.j + current.size == block.j {
                current.size += block.size;
            } else {
                if current.size > 0 {
                    merged.push(current);
                }
                current = block;
            }
        }
        if current.size > 0 {
            merged.push(current);
        }
        merged.push(Match {
            i: self.a.len(),
            j: self.b.len(),
            size: 0,
        });
        merged
    }

    fn opcodes(&self) -> Vec<Opcode> {
        let (mut i, mut j) = (0, 0);
        let mut codes = Vec::new();
        for block in self.matching_blocks() {
            let tag = if i < block.i && j < block.j {
                Some(Tag::Replace)
            } else if i < block.i {
                Some(Tag::Delete)
            } else if j < block.j {
                Some(Tag::Insert)
            } else {
                None
            };
            if let Some(tag) = tag {
                codes.push(Opcode {
                    tag,
                    i1: i,
                    i2: block.i,
                    j1: j,
                    j2: block.j,
                });
            }
            i = block.i + block.size;
            j = block.j + block.size;
            if block.size > 0 {
                codes.push(Opcode {
                    tag: Tag::Equal,
                    i1: block.i,
                    i2: i,
                    j1: block.j,
                    j2: j,
                });
            }
        }
        codes
    }

    fn grouped_opcodes(&self, context: usize) -> Vec<Vec<Opcode>> {
        let mut codes = self.opcodes();
        if codes.is_empty() {
            codes.push(Opcode {
                tag: Tag::Equal,
                i1: 0,
                i2: 1,
                j1: 0,
                j2: 1,
            });
        }
        if let Some(first) = codes.first_mut().filter(|code| code.tag == Tag::Equal) {
            first.i1 = first.i1.max(first.i2.saturating_sub(context));
            first.j1 = first.j1.max(first.j2.saturating_sub(context));
        }
        if let Some(last) = codes.last_mut().filter(|code| code.tag == Tag::Equal) {
            last.i2 = last.i2.min(last.i1 + context);
            last.j2 = last.j2.min(last.j1 + context);
        }
        let mut groups = Vec::new();
        let mut group = Vec::new();
        for mut code in codes {
            if code.tag == Tag::Equal && code.i2 - code.i1 > 2 * context {
                group.push(Opcode {
                    i2: code.i2.min(code.i1 + context),
                    j2: code.j2.min(code.j1 + context),
                    ..code
                });
                groups.push(std::mem::take(&mut group));
                code.i1 = code.i1.max(code.i2.saturating_sub(context));
                code.j1 = code.j1.max(code.j2.saturating_sub(context));
            }
            group.push(code);
        }
        // A last group of context only is no hunk.
        let context_only = matches!(
            group.as_slice(),
            [] | [Opcode {
                tag: Tag::Equal,
                ..
            }]
        );
        if !context_only {
            groups.push(group);
        }
        groups
    }
}

#[derive(Clone, Copy, Debug)]
struct Match {
    i: usize,
    j: usize,
    size: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_texts_have_no_diff() {
        let diff = unified_diff("a\nb\n", "a\nb\n");
        assert_eq!(diff.text, "");
        assert_eq!((diff.added, diff.removed), (0, 0));
        assert_eq!(unified_diff("", "").text, "");
    }

    #[test]
    fn matches_python_difflib() {
        // python3 -c 'import difflib; print("\n".join(difflib.unified_diff(
        //   "a\nb\nc\nd\ne\nf\ng\nh\ni".splitlines(), "a\nB\nc\nd\ne\nf\ng\nh\ni\nj".splitlines(),
        //   "a", "b", lineterm="")))'
        let diff = unified_diff("a\nb\nc\nd\ne\nf\ng\nh\ni", "a\nB\nc\nd\ne\nf\ng\nh\ni\nj");
        assert_eq!(
            diff.text,
            "--- a\n+++ b\n@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n@@ -7,3 +7,4 @@\n g\n h\n i\n+j"
        );
        assert_eq!((diff.added, diff.removed), (2, 1));
        let diff = unified_diff("", "x\n");
        assert_eq!(diff.text, "--- a\n+++ b\n@@ -0,0 +1 @@\n+x");
        let diff = unified_diff("x\ny\n", "");
        assert_eq!(diff.text, "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y");
    }

    #[test]
    fn splits_lines_like_the_python_prelude() {
        assert_eq!(split_lines("a\r\nb\rc\n"), vec!["a\r", "b\rc"]);
        assert_eq!(split_lines("a\n\n"), vec!["a", ""]);
        assert!(split_lines("").is_empty());
    }
}
