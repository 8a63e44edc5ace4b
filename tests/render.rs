//! Text views of rich displays (issue 42, items 1 and 2), through the real binary: a pandas
//! frame's HTML table keeps its index as the first column, aligned, and a bundle's text forms
//! are ranked as the anchors rank them (`text/markdown`, then `text/plain`, then `text/html`
//! converted).

mod common;

use common::World;

/// `cellvisor eval --no-daemon -l py CODE` run by the test venv's Python (with pandas and
/// IPython, whose `publish_display_data` sends a bundle as it is): its stdout.
fn eval_in_venv(world: &World, code: &str) -> String {
    let venv = common::test_venv(&["pandas", "IPython"]);
    let output = world
        .command()
        .env("VIRTUAL_ENV", &venv)
        .args(["eval", "--no-daemon", "-l", "py", code])
        .output()
        .expect("run cellvisor");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The lines of `text` from the one starting with `first` on, `count` of them.
fn table_at<'a>(text: &'a str, first: &str, count: usize) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.starts_with(first))
        .unwrap_or_else(|| panic!("no line starting with {first:?} in:\n{text}"));
    lines[start..(start + count).min(lines.len())].to_vec()
}

/// Each frame's HTML only (as a styled table or a library's HTML report reaches a text
/// host), so the text view has to convert the table.
const FRAMES: &str = "import pandas as pd\n\
from IPython.display import publish_display_data\n\
def show(df):\n    publish_display_data({'text/html': df.to_html()})\n\
show(pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']}, index=['r1', 'r2']))\n\
show(pd.DataFrame({'a': [1, 2]}, index=pd.Index(['r1', 'r2'], name='key')))\n\
idx = pd.MultiIndex.from_tuples([('p', 1), ('p', 2), ('q', 1)], names=['k1', 'k2'])\n\
cols = pd.MultiIndex.from_tuples([('A', 'x'), ('A', 'y')])\n\
show(pd.DataFrame([[1, 2], [3, 4], [5, 6]], index=idx, columns=cols))\n\
show(pd.DataFrame({'v': [7, 8]}))\n";

#[test]
fn pandas_html_tables_keep_their_index_aligned_in_text_views() {
    let world = World::new();
    let text = eval_in_venv(&world, FRAMES);
    // An unnamed index: the labels stay in the first column, every value under its column.
    assert_eq!(
        table_at(&text, "|     | a ", 4),
        [
            "|     | a   | b   |",
            "|-----|-----|-----|",
            "| r1  | 1   | x   |",
            "| r2  | 2   | y   |",
        ],
        "{text}"
    );
    // A named index: its name heads the index column (pandas puts it on a header row of
    // its own).
    assert_eq!(
        table_at(&text, "| key", 4),
        [
            "| key | a   |",
            "|-----|-----|",
            "| r1  | 1   |",
            "| r2  | 2   |",
        ],
        "{text}"
    );
    // Two index levels (the outer label spanning rows) under two column levels.
    assert_eq!(
        table_at(&text, "| k1", 5),
        [
            "| k1  | k2  | A / x | A / y |",
            "|-----|-----|-------|-------|",
            "| p   | 1   | 1     | 2     |",
            "| p   | 2   | 3     | 4     |",
            "| q   | 1   | 5     | 6     |",
        ],
        "{text}"
    );
    // The default RangeIndex.
    assert_eq!(
        table_at(&text, "|     | v ", 4),
        [
            "|     | v   |",
            "|-----|-----|",
            "| 0   | 7   |",
            "| 1   | 8   |",
        ],
        "{text}"
    );
    world.assert_no_processes_left(std::time::Duration::from_secs(5));
}

/// The anchor's ranking, with its own words for the forms: `plain-form` is shown where a
/// bundle also has `html-form`, Markdown beats both, and HTML alone is converted.
#[test]
fn text_views_rank_markdown_then_plain_then_converted_html() {
    let world = World::new();
    let code = "from IPython.display import publish_display_data\n\
publish_display_data({'text/plain': 'plain-form', 'text/html': '<i>html-form</i>'})\n\
publish_display_data({'text/markdown': '**markdown-form**', 'text/plain': 'plain-form-2', 'text/html': '<i>html-form-2</i>'})\n\
publish_display_data({'text/html': '<p>only <b>html-form-3</b></p>'})\n";
    let text = &eval_in_venv(&world, code);
    assert!(text.contains("plain-form\n"), "{text}");
    assert!(!text.contains("html-form*"), "{text}");
    assert!(text.contains("**markdown-form**\n"), "{text}");
    assert!(
        !text.contains("plain-form-2") && !text.contains("html-form-2"),
        "{text}"
    );
    assert!(text.contains("only **html-form-3**"), "{text}");
    world.assert_no_processes_left(std::time::Duration::from_secs(5));
}
