//! Text for the text hosts, written once: `cellvisor eval` and `cellvisor status` on a
//! terminal and the MCP server's tool results show the same headers, the same choice of
//! what a display bundle becomes, and the same status table. A host keeps only what is its
//! own: where text goes (stdout or stderr, one content block) and what an image becomes (a
//! file, a content block).
//!
//! HTML offered without Markdown is converted to Markdown here (with `htmd`), once for every
//! language: the workers send `text/html` as the code gave it. The states' words are their
//! `Display` (beside the types, in `cellvisor-client`).

use cellvisor::cell::{CellResult, CellStatus};
use cellvisor::state::StateLedger;
use cellvisor::SessionStatus;
use serde_json::Value;
use std::fmt;

mod table;

/// `[2/3] title` (or the language when the cell has no title) above each cell of a request
/// with several cells; `None` for a lone cell.
pub fn cell_header(cell: &CellResult, total: usize) -> Option<String> {
    (total > 1).then(|| {
        let label = cell
            .title
            .clone()
            .unwrap_or_else(|| cell.language.to_string());
        format!("[{}/{total}] {label}", cell.index + 1)
    })
}

/// What a restore brought back, in one line: `restored x, df, np (module) from checkpoint
/// "before" (taken at ...); not restored: conn (socket objects cannot be saved)`.
pub fn ledger_line(ledger: &StateLedger) -> String {
    let from = match &ledger.from.checkpoint {
        Some(name) => format!("checkpoint {name:?}"),
        None => format!("the snapshot of {}", ledger.from.reason),
    };
    let names = if ledger.restored.is_empty() {
        "no names".to_string()
    } else {
        ledger.restored.join(", ")
    };
    let mut line = format!(
        "restored {names} from {from} (taken at {})",
        ledger.from.taken_at
    );
    if !ledger.skipped.is_empty() {
        let skipped: Vec<String> = ledger
            .skipped
            .iter()
            .map(|s| format!("{} ({})", s.name, s.why))
            .collect();
        line.push_str(&format!("; not restored: {}", skipped.join(", ")));
    }
    if let Some(files) = &ledger.files {
        line.push_str(&files_phrase(files));
    }
    line
}

/// `; files: restored a, b; added c; removed d` (or `; files unchanged`).
fn files_phrase(files: &cellvisor::state::FileChanges) -> String {
    if files.is_empty() {
        return "; files unchanged".to_string();
    }
    let mut parts = Vec::new();
    for (verb, paths) in [
        ("restored", &files.restored),
        ("added", &files.added),
        ("removed", &files.removed),
    ] {
        if !paths.is_empty() {
            parts.push(format!("{verb} {}", paths.join(", ")));
        }
    }
    format!("; files: {}", parts.join("; "))
}

/// `(output truncated: ...)` for a cell whose output was cut, saying where the whole is.
pub fn truncation_note(cell: &CellResult) -> Option<String> {
    let truncation = &cell.report.truncation;
    truncation.truncated.then(|| {
        let whole = match &truncation.artifact_path {
            Some(path) => format!(
                "; the whole output is in {} ({})",
                path.display(),
                cellvisor_ipc::env::artifact_reference(path)
            ),
            None => String::new(),
        };
        format!(
            "(output truncated: {} bytes, {} lines in all{whole})",
            truncation.total_bytes, truncation.total_lines
        )
    })
}

/// `(28 processes the cell started were ended with it)` for a cancelled cell whose processes
/// were ended (all of them gone before the session's next cell).
pub fn processes_ended_note(cell: &CellResult) -> Option<String> {
    cell.report.processes_ended.map(|ended| match ended {
        1 => "(1 process the cell started was ended with it)".to_string(),
        n => format!("({n} processes the cell started were ended with it)"),
    })
}

/// `(out of memory: 512 MiB limit ([limits] max-rss), 530 MiB used)` for a cell that memory
/// ended: the typed verdict in one line, whichever limit it was.
pub fn out_of_memory_note(cell: &CellResult) -> Option<String> {
    cell.report
        .out_of_memory
        .as_ref()
        .map(|verdict| format!("({verdict})"))
}

/// The placeholder for a completed cell that printed no text, as the anchor's `eval` tool
/// words it: `(no text output)` when it has displays to show (images, JSON, ...), `(no
/// output)` when it has nothing at all. `None` when it printed text, or when its status line
/// (error, skipped, running) already says what happened.
pub fn placeholder(cell: &CellResult) -> Option<&'static str> {
    if cell.report.status != CellStatus::Complete || !cell.report.output.trim().is_empty() {
        return None;
    }
    let shown = cell
        .displays_beyond_output()
        .any(|bundle| display(bundle) != Shown::Nothing);
    Some(if shown {
        "(no text output)"
    } else {
        "(no output)"
    })
}

/// How long a cell ran, for a person: `12 ms` under a second, else `1.5 s`.
pub fn duration_text(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{:.0} ms", ms.max(0.0))
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// Whether a media display is a picture or a sound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    Audio,
}

/// What a display bundle becomes on a text host.
#[derive(Debug, Clone, PartialEq)]
pub enum Shown<'a> {
    /// An image or audio clip: base64 data (line breaks removed) the host shows its own way.
    Media {
        kind: MediaKind,
        mime: &'a str,
        base64: String,
    },
    /// Text to show as it is.
    Text(String),
    /// Nothing worth showing (only cellvisor's own status data).
    Nothing,
}

/// The image types a text host can show, best first.
const IMAGES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The best form of a display bundle for a text host: an image, then audio, then JSON
/// (pretty-printed); then, as the anchors rank text forms, Markdown, plain text, HTML as
/// Markdown; then SVG or LaTeX source; failing all that, a note naming the MIME types it had.
pub fn display(bundle: &Value) -> Shown<'_> {
    let Some(bundle) = bundle.as_object() else {
        return Shown::Text(bundle.to_string());
    };
    let image = IMAGES
        .iter()
        .find_map(|mime| bundle.get_key_value(*mime))
        .map(|entry| (MediaKind::Image, entry));
    let audio = || {
        bundle
            .iter()
            .find(|(mime, _)| mime.starts_with("audio/"))
            .map(|entry| (MediaKind::Audio, entry))
    };
    if let Some((kind, (mime, Value::String(data)))) = image.or_else(audio) {
        // Base64 as the workers send it; tolerate line breaks some encoders add.
        let base64 = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        return Shown::Media {
            kind,
            mime: mime.as_str(),
            base64,
        };
    }
    if let Some(json) = bundle.get("application/json") {
        return Shown::Text(
            serde_json::to_string_pretty(json).unwrap_or_else(|_| json.to_string()),
        );
    }
    let text = |mime: &str| bundle.get(mime).and_then(Value::as_str);
    if let Some(markdown) = text("text/markdown") {
        return Shown::Text(markdown.to_string());
    }
    // A plain form that is only an object's default repr (`<__main__.Page at 0x7f...>`) says
    // nothing the HTML would not: there the HTML is shown (a documented difference from the
    // anchors, which would show the address).
    let html_form = text("text/html").filter(|_| text("text/plain").is_some_and(is_default_repr));
    if let Some(plain) = text("text/plain").filter(|_| html_form.is_none()) {
        return Shown::Text(plain.to_string());
    }
    if let Some(markdown) = text("text/html").and_then(html_to_markdown) {
        return Shown::Text(markdown);
    }
    for mime in ["image/svg+xml", "text/html", "text/latex"] {
        if let Some(value) = text(mime) {
            return Shown::Text(value.to_string());
        }
    }
    let kinds: Vec<&str> = bundle
        .keys()
        .map(String::as_str)
        .filter(|mime| !mime.starts_with("application/x-cellvisor"))
        .collect();
    if kinds.is_empty() {
        Shown::Nothing
    } else {
        Shown::Text(format!("[display: {}]", kinds.join(", ")))
    }
}

/// Whether `plain` is only an object's default repr: one line `<... at 0x...>`.
fn is_default_repr(plain: &str) -> bool {
    let plain = plain.trim();
    plain.starts_with('<')
        && plain.ends_with('>')
        && plain.contains(" at 0x")
        && !plain.contains('\n')
}

/// HTML as Markdown for text-only hosts (headings, emphasis, links, lists, tables, code),
/// scripts and styles dropped; `None` when it cannot be converted or nothing is left.
pub fn html_to_markdown(html: &str) -> Option<String> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec!["script", "style", "head", "template", "noscript"])
        .add_handler(vec!["table"], table::table_handler)
        .build();
    let markdown = converter.convert(html).ok()?;
    let markdown = markdown.trim();
    (!markdown.is_empty()).then(|| markdown.to_string())
}

/// The `status` table of live sessions, as `cellvisor status` and the MCP `sessions` tool
/// show it; `own` marks the session of the asking connection.
pub struct StatusTable<'a> {
    pub rows: &'a [SessionStatus],
    pub own: Option<&'a str>,
}

impl fmt::Display for StatusTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rows.is_empty() {
            return writeln!(
                f,
                "No live sessions (a worker starts with the first cell of its language)."
            );
        }
        const HEADER: [&str; 12] = [
            "SESSION", "LANG", "PID", "STATE", "RSS", "CPU", "IDLE", "CELLS", "RESTARTS", "QUEUED",
            "SANDBOX", "ENGINE",
        ];
        let dash = || "-".to_string();
        let mut table: Vec<Vec<String>> = vec![HEADER.iter().map(|h| h.to_string()).collect()];
        for row in self.rows {
            let session = if Some(row.session.as_str()) == self.own {
                format!("{} (this connection)", row.session)
            } else {
                row.session.clone()
            };
            let idle = std::time::Duration::from_secs(row.idle_ms / 1000);
            table.push(vec![
                session,
                row.language.to_string(),
                row.pid.map_or_else(dash, |pid| pid.to_string()),
                state_text(row),
                row.rss_bytes
                    .map_or_else(dash, |bytes| bytesize::ByteSize::b(bytes).to_string()),
                row.cpu_percent
                    .map_or_else(dash, |cpu| format!("{cpu:.0}%")),
                humantime::format_duration(idle).to_string(),
                row.cells_run.to_string(),
                row.restarts.to_string(),
                row.queued.to_string(),
                row.sandbox
                    .as_ref()
                    .map_or_else(|| "off".to_string(), |sandbox| sandbox.short()),
                row.engine.clone().unwrap_or_else(dash),
            ]);
        }
        let widths: Vec<usize> = (0..HEADER.len())
            .map(|column| {
                table
                    .iter()
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &table {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            writeln!(f, "{}", line.join("  ").trim_end())?;
        }
        for row in self.rows {
            if let Some(reason) = &row.reason {
                writeln!(f, "{} {}: {reason}", row.session, row.language)?;
            }
            if let Some(warning) = row.sandbox.as_ref().and_then(|s| s.warning.as_ref()) {
                writeln!(f, "warning: {} {}: {warning}", row.session, row.language)?;
            }
        }
        Ok(())
    }
}

/// The state, with the running cell's id (and whether it runs in the background).
fn state_text(row: &SessionStatus) -> String {
    match (row.cell_id, row.background) {
        (Some(id), true) => format!("{} (cell {id}, background)", row.state),
        (Some(id), false) => format!("{} (cell {id})", row.state),
        (None, _) => row.state.to_string(),
    }
}

/// The `zygotes` rows under `cellvisor status`: one line per Python zygote.
pub struct ZygoteLines<'a>(pub &'a serde_json::Value);

impl fmt::Display for ZygoteLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in self.0.as_array().into_iter().flatten() {
            let text = |key: &str| row[key].as_str().unwrap_or("").to_string();
            write!(f, "python zygote {}", text("interpreter"))?;
            if let Some(pid) = row["pid"].as_u64() {
                write!(f, " (pid {pid}, {})", text("version"))?;
            }
            write!(
                f,
                ": {}, {} worker(s) forked",
                text("state"),
                row["forks"].as_u64().unwrap_or(0)
            )?;
            let preloaded: Vec<&str> = row["preloaded"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m.as_str())
                .collect();
            if !preloaded.is_empty() {
                write!(f, "; preloaded {}", preloaded.join(", "))?;
            }
            for failed in row["failed"].as_array().into_iter().flatten() {
                write!(
                    f,
                    "; could not preload {} ({})",
                    failed["module"].as_str().unwrap_or("?"),
                    failed["error"].as_str().unwrap_or("?")
                )?;
            }
            if let Some(error) = row["error"].as_str() {
                write!(f, "; {error}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    #[test]
    fn a_ledger_line_names_what_came_back_and_what_did_not() {
        use cellvisor::state::{SkippedName, SnapshotOrigin, StateLedger};
        let ledger = StateLedger {
            restored: vec!["x".into(), "np (module)".into()],
            skipped: vec![SkippedName {
                name: "conn".into(),
                why: "socket objects cannot be saved".into(),
            }],
            from: SnapshotOrigin {
                taken_at: "2026-12-02T07:00:00Z".into(),
                reason: "checkpoint".into(),
                cells_since: 0,
                checkpoint: Some("before".into()),
                node: None,
            },
            files: None,
        };
        assert_eq!(
            super::ledger_line(&ledger),
            "restored x, np (module) from checkpoint \"before\" (taken at \
             2026-12-02T07:00:00Z); not restored: conn (socket objects cannot be saved)"
        );
        let with_files = StateLedger {
            files: Some(cellvisor::state::FileChanges {
                restored: vec!["data.csv".into()],
                added: vec!["b.txt".into()],
                removed: vec![],
            }),
            ..ledger
        };
        assert!(
            super::ledger_line(&with_files).ends_with("; files: restored data.csv; added b.txt"),
            "{}",
            super::ledger_line(&with_files)
        );
    }

    use super::*;
    use cellvisor_ipc::Language;
    use serde_json::json;

    #[test]
    fn a_cancelled_cell_says_how_many_of_its_processes_were_ended() {
        let mut cell = cellvisor::cell::CellReport::error("Interrupted".into()).into_result(
            0,
            1,
            &cellvisor::CellSpec::new(Language::Python, ""),
        );
        assert_eq!(processes_ended_note(&cell), None);
        cell.report.processes_ended = Some(28);
        assert_eq!(
            processes_ended_note(&cell).as_deref(),
            Some("(28 processes the cell started were ended with it)")
        );
        assert_eq!(out_of_memory_note(&cell), None);
        cell.report.out_of_memory = Some(cellvisor_client::usage::OutOfMemory {
            limit: cellvisor_client::usage::MemoryLimit::LuaHeap,
            limit_bytes: 32 << 20,
            used_bytes: 32 << 20,
        });
        assert_eq!(
            out_of_memory_note(&cell).as_deref(),
            Some("(out of memory: 32 MiB limit ([lua] memory-limit), 32 MiB used)")
        );
        cell.report.processes_ended = Some(1);
        assert_eq!(
            processes_ended_note(&cell).as_deref(),
            Some("(1 process the cell started was ended with it)")
        );
    }

    #[test]
    fn displays_pick_media_then_json_then_markdown_then_text() {
        let image =
            json!({"image/png": "iVBO\nRw==", "application/json": {}, "text/plain": "<Png>"});
        assert_eq!(
            display(&image),
            Shown::Media {
                kind: MediaKind::Image,
                mime: "image/png",
                base64: "iVBORw==".into()
            }
        );
        let audio = json!({"audio/wav": "UklG", "text/plain": "<audio>"});
        assert!(matches!(
            display(&audio),
            Shown::Media {
                kind: MediaKind::Audio,
                mime: "audio/wav",
                ..
            }
        ));
        assert_eq!(
            display(&json!({"application/json": {"k": [1]}, "text/plain": "x"})),
            Shown::Text("{\n  \"k\": [\n    1\n  ]\n}".into())
        );
        assert_eq!(
            display(&json!({"text/markdown": "*m*", "text/html": "<b>h</b>", "text/plain": "p"})),
            Shown::Text("*m*".into())
        );
        assert_eq!(
            display(&json!({"text/html": "<p>hi <i>there</i></p>", "text/plain": "p"})),
            Shown::Text("p".into())
        );
        assert_eq!(
            display(&json!({"text/html": "<p>hi <i>there</i></p>"})),
            Shown::Text("hi *there*".into())
        );
        assert_eq!(
            display(&json!({"text/html": "<b>h</b>", "text/plain": "<__main__.Page at 0x7f00>"})),
            Shown::Text("**h**".into())
        );
        assert_eq!(
            display(&json!({"text/plain": "p"})),
            Shown::Text("p".into())
        );
        assert_eq!(
            display(&json!({"application/pdf": "JVBE", "application/x-cellvisor-status": {}})),
            Shown::Text("[display: application/pdf]".into())
        );
        assert_eq!(
            display(&json!({"application/x-cellvisor-status": {"op": "read"}})),
            Shown::Nothing
        );
    }

    #[test]
    fn html_becomes_markdown_without_scripts_or_styles() {
        let page = "<h2>Title</h2><p>Some <b>bold</b> and <a href=\"http://x\">link</a></p>\
                    <ul><li>one</li><li>two</li></ul>\
                    <table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>\
                    <pre>code\n  indented</pre><script>bad()</script><style>p {}</style>";
        let markdown = html_to_markdown(page).expect("markdown");
        for part in [
            "## Title",
            "Some **bold** and [link](http://x)",
            "one",
            "two",
            "| k   | v   |",
            "code\n  indented",
        ] {
            assert!(markdown.contains(part), "{part:?} in {markdown}");
        }
        assert!(
            !markdown.contains("bad()") && !markdown.contains("p {}"),
            "{markdown}"
        );
        assert_eq!(html_to_markdown("<script>x()</script>"), None);
    }

    #[test]
    fn cells_get_a_header_only_among_several_and_a_note_when_cut() {
        let spec = cellvisor::cell::CellSpec::new(Language::Lua, "");
        let mut cell = CellResult::skipped(1, 0, &spec);
        assert_eq!(cell_header(&cell, 1), None);
        assert_eq!(cell_header(&cell, 3).as_deref(), Some("[2/3] lua"));
        cell.title = Some("setup".into());
        assert_eq!(cell_header(&cell, 3).as_deref(), Some("[2/3] setup"));
        assert_eq!(truncation_note(&cell), None);
        cell.report.truncation.truncated = true;
        cell.report.truncation.total_bytes = 9000;
        cell.report.truncation.total_lines = 12;
        assert_eq!(
            truncation_note(&cell).as_deref(),
            Some("(output truncated: 9000 bytes, 12 lines in all)")
        );
    }

    #[test]
    fn the_status_table_aligns_its_columns_and_marks_the_own_session() {
        assert!(StatusTable {
            rows: &[],
            own: None
        }
        .to_string()
        .starts_with("No live sessions"));
        let row: SessionStatus = serde_json::from_value(json!({
            "session": "mcp-1", "language": "py", "pid": 42, "engine": null, "state": "busy",
            "cells_run": 3, "restarts": 0, "idle_ms": 65_000, "queued": 1,
            "rss_bytes": 2_097_152, "cpu_percent": 12.4
        }))
        .expect("a status row");
        let table = StatusTable {
            rows: &[row],
            own: Some("mcp-1"),
        }
        .to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        for (column, value) in [("LANG", "py "), ("STATE", "busy"), ("ENGINE", " -")] {
            let value_at = lines[1]
                .rfind(value)
                .map(|at| at + value.len() - value.trim_start().len());
            assert_eq!(lines[0].find(column), value_at, "{column}: {table}");
        }
        for part in [
            "mcp-1 (this connection)",
            "py",
            "42",
            "busy",
            "MiB",
            "12%",
            "1m 5s",
        ] {
            assert!(lines[1].contains(part), "{part:?} in {table}");
        }
    }
}
