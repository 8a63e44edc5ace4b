//! Text normalisation before a notebook cell's stored output is compared with what the cell
//! printed here: what differs from run to run (timings, addresses, object ids, where a cell's
//! code lives) and what a terminal would not show (colour codes, text overwritten by `\r`,
//! trailing whitespace) is rewritten the same way on both sides. `docs/check.md` lists the
//! rules; anything not listed (unseeded random numbers, dates, process ids) is compared as it
//! is.

use regex::Regex;
use std::sync::LazyLock;

/// One rewrite: every match of the pattern becomes the replacement.
struct Rule {
    pattern: Regex,
    replacement: &'static str,
}

fn rule(pattern: &str, replacement: &'static str) -> Option<Rule> {
    Regex::new(pattern).ok().map(|pattern| Rule {
        pattern,
        replacement,
    })
}

/// Units a duration is printed in by `%time`, `%timeit`, progress bars and people.
const UNIT: &str = r"(?:ns|µs|μs|us|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hours?)";

/// The rules, in the order they apply (documented in `docs/check.md`, "What is normalised").
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    [
        // `%time`: the two lines it prints.
        rule(r"(?m)^CPU times: .*$", "<timing>"),
        rule(r"(?m)^Wall time: .*$", "<timing>"),
        // `%timeit`, IPython 7+ and the older "N loops, best of K" form.
        rule(
            &format!(r"(?m)^[0-9.,]+ ?{UNIT} ± [0-9.,]+ ?{UNIT} per loop \(.*\)$"),
            "<timing>",
        ),
        rule(
            &format!(r"(?m)^[0-9,]+ loops?, best of [0-9]+: [0-9.,]+ ?{UNIT} per loop$"),
            "<timing>",
        ),
        // Durations anywhere else: `1.23 s`, `45ms`, `0:00:01.5`.
        rule(
            &format!(r"\b[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)? ?{UNIT}\b"),
            "<duration>",
        ),
        rule(r"\b[0-9]+:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?\b", "<duration>"),
        // Memory addresses (`<Foo object at 0x7f3a...>`).
        rule(r"0x[0-9a-fA-F]{4,}", "0x…"),
        // CPython's `id()` on 64-bit Linux: 15-digit integers starting 13 or 14.
        rule(r"\b1[34][0-9]{13}\b", "<id>"),
        // Where a cell's code lives, in warnings and tracebacks printed to a stream.
        rule(r"/tmp/ipykernel_[0-9]+/[0-9]+\.py", "<cell>"),
        rule(r"<ipython-input-[0-9]+-[0-9a-f]+>", "<cell>"),
        rule(r"<cell [0-9]+>", "<cell>"),
    ]
    .into_iter()
    .flatten()
    .collect()
});

/// ANSI escape sequences (colours, cursor moves).
static ANSI: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07").ok());

/// `text` as it is compared: line endings unified, colour codes removed, each line what a
/// terminal leaves after `\r` overwrites, the rules applied, trailing whitespace removed from
/// every line, blank lines at the end dropped.
pub fn normalise(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let text = match ANSI.as_ref() {
        Some(ansi) => ansi.replace_all(&text, "").into_owned(),
        None => text,
    };
    let mut lines: Vec<String> = text.split('\n').map(overwritten).collect();
    let mut joined = lines.join("\n");
    for rule in RULES.iter() {
        if rule.pattern.is_match(&joined) {
            joined = rule
                .pattern
                .replace_all(&joined, rule.replacement)
                .into_owned();
        }
    }
    lines = joined
        .split('\n')
        .map(|line| line.trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

/// What a terminal shows of a line with carriage returns: the text after the last `\r` that
/// is followed by something (a progress bar's final state).
fn overwritten(line: &str) -> String {
    line.trim_end_matches('\r')
        .rsplit('\r')
        .next()
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn timings_become_placeholders() {
        let time = "CPU times: user 9 µs, sys: 1 µs, total: 10 µs\nWall time: 11.8 µs\n45\n";
        assert_eq!(normalise(time), "<timing>\n<timing>\n45");
        let timeit = "321 ns ± 39.2 ns per loop (mean ± std. dev. of 7 runs, 1,000,000 loops each)";
        assert_eq!(normalise(timeit), "<timing>");
        assert_eq!(
            normalise("1000 loops, best of 3: 1.23 ms per loop"),
            "<timing>"
        );
        assert_eq!(
            normalise("epoch 1 took 1.23 s (45ms per step), eta 0:01:02"),
            "epoch 1 took <duration> (<duration> per step), eta <duration>"
        );
    }

    #[test]
    fn addresses_ids_and_cell_files_are_masked() {
        assert_eq!(
            normalise("<object object at 0x7f91d8d153e0>"),
            "<object object at 0x…>"
        );
        assert_eq!(normalise("id: 140234567890123"), "id: <id>");
        assert_eq!(
            normalise("2**64 = 18446744073709551616"),
            "2**64 = 18446744073709551616"
        );
        let jupyter = "/tmp/ipykernel_4242/3188.py:2: FutureWarning: careful";
        let here = "<cell 1796393891210000>:2: FutureWarning: careful";
        assert_eq!(normalise(jupyter), normalise(here));
        assert_eq!(normalise("<ipython-input-3-5f2a9c>:1: W"), "<cell>:1: W");
    }

    #[test]
    fn whitespace_colours_and_carriage_returns_are_what_a_terminal_shows() {
        assert_eq!(normalise("a  \r\nb\t\n\n\n"), "a\nb");
        assert_eq!(normalise("\x1b[31mred\x1b[0m"), "red");
        assert_eq!(normalise("10%\r50%\r100%\r\ndone"), "100%\ndone");
        assert_eq!(normalise(""), "");
        assert_eq!(normalise("x = 1.5 s"), "x = <duration>");
        assert_eq!(normalise("values 1 2 3"), "values 1 2 3");
    }
}
