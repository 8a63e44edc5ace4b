//! Colours for the report on a terminal (the anchor's reporter is "TTY-aware auto color"):
//! `pass` green, `FAIL` red, table headers and the closing line bold, the failure sections'
//! titles red. Applied to the finished plain table, so the columns line up either way.

use anstyle::{AnsiColor, Style};

/// When the report is coloured (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set (to anything but empty) or `TERM=dumb`.
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour output that goes to a terminal (`is_terminal`) in this environment.
    pub fn enabled(self, is_terminal: bool, no_color: Option<&str>, term: Option<&str>) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                is_terminal && no_color.is_none_or(str::is_empty) && term != Some("dumb")
            }
        }
    }
}

const PASS: Style = AnsiColor::Green.on_default();
const FAIL: Style = AnsiColor::Red.on_default().bold();
const HEADER: Style = Style::new().bold();
const SECTION: Style = AnsiColor::Red.on_default().bold();

/// The first words of the tables' header lines.
const HEADERS: [&str; 7] = [
    "result ",
    "metric ",
    "tag ",
    "variant ",
    "case ",
    "notebook ",
    "diff ",
];

fn paint(style: Style, text: &str) -> String {
    format!("{}{text}{}", style.render(), style.render_reset())
}

/// `table`, as [`super::report::format_table`] made it, with colours.
pub fn colorize(table: &str) -> String {
    let mut out = String::with_capacity(table.len() + table.len() / 4);
    for line in table.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&colorize_line(body));
        out.push_str(end);
    }
    out
}

fn colorize_line(line: &str) -> String {
    if HEADERS.iter().any(|h| line.starts_with(h)) {
        return paint(HEADER, line);
    }
    if matches!(line, "failures:" | "mismatching cells:") {
        return paint(SECTION, line);
    }
    if line.contains(" case: ") || line.contains(" cases: ") {
        return paint(HEADER, line);
    }
    // `pass` / `FAIL` as a row's first word, and as a comparison cell's (`  pass 1.00`).
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut at_start = true;
    while !rest.is_empty() {
        let word = if at_start || out.ends_with("  ") {
            ["pass", "FAIL"].into_iter().find(|w| {
                rest.starts_with(w) && rest[w.len()..].chars().next().is_none_or(|c| c == ' ')
            })
        } else {
            None
        };
        match word {
            Some(word) => {
                out.push_str(&paint(if word == "pass" { PASS } else { FAIL }, word));
                rest = &rest[word.len()..];
            }
            None => {
                let next = rest.chars().next().map_or(1, char::len_utf8);
                out.push_str(&rest[..next]);
                rest = &rest[next..];
            }
        }
        at_start = false;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_and_fail_are_coloured_and_columns_keep_their_text() {
        let table = "result  case  score\npass    s/a   1.00\nFAIL    s/b   0.00\n\nfailures:\n  s/b #1\n\n2 cases: 1 passed\n";
        let coloured = colorize(table);
        assert!(
            coloured.contains("\u{1b}[32mpass\u{1b}[0m    s/a"),
            "{coloured:?}"
        );
        assert!(
            coloured.contains("\u{1b}[1m\u{1b}[31mFAIL\u{1b}[0m")
                || coloured.contains("FAIL\u{1b}[0m"),
            "{coloured:?}"
        );
        let plain: String = strip(&coloured);
        assert_eq!(plain, table);
        let row = colorize("s/a  pass 1.00  FAIL 0.50  -0.50");
        assert_eq!(row.matches("\u{1b}[0m").count(), 2, "{row:?}");
        assert_eq!(colorize("s/passing  0.5"), "s/passing  0.5");
    }

    #[test]
    fn auto_colours_a_terminal_unless_no_color_or_a_dumb_terminal() {
        assert!(ColorChoice::Auto.enabled(true, None, Some("xterm")));
        assert!(ColorChoice::Auto.enabled(true, Some(""), None));
        assert!(!ColorChoice::Auto.enabled(false, None, None));
        assert!(!ColorChoice::Auto.enabled(true, Some("1"), None));
        assert!(!ColorChoice::Auto.enabled(true, None, Some("dumb")));
        assert!(ColorChoice::Always.enabled(false, Some("1"), None));
        assert!(!ColorChoice::Never.enabled(true, None, None));
    }

    /// The text without its escape sequences.
    fn strip(text: &str) -> String {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
