//! The MCP text of a request's result: one text block per cell, each followed by its images
//! and audio, in the words `cellvisor eval` uses on a terminal (`crate::render`), and by a
//! link to its whole output when that was cut (the resource `cellvisor://artifact/<id>`).

use crate::render::{self, MediaKind, Shown};
use cellvisor::cell::{CellResult, CellStatus, EvalResult};
use rmcp::model::{CallToolResult, ContentBlock, Resource};

/// A request's result as MCP content: one text block per cell (header, notice, output,
/// status, text displays), each followed by the cell's images.
pub(super) fn render_result(result: &EvalResult) -> CallToolResult {
    let total = result.cells.len();
    let mut content = Vec::new();
    for cell in &result.cells {
        let (text, images) = render_cell(cell, total);
        content.push(ContentBlock::text(text));
        content.extend(images);
        content.extend(artifact_link(cell));
    }
    if let Some(failed) = result.failed_cell.as_ref().filter(|_| total > 1) {
        content.push(ContentBlock::text(failed.summary_line(&result.cells)));
    }
    if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// A link to the whole output of a cell whose output was cut: small, whatever the output's
/// size, so the result stays bounded and a client fetches the rest if it wants it.
fn artifact_link(cell: &CellResult) -> Option<ContentBlock> {
    let path = cell.report.truncation.artifact_path.as_ref()?;
    let id = path.file_stem()?.to_str()?;
    let resource = Resource::new(super::resources::Artifacts::uri(id), id)
        .with_description(format!(
            "The whole output of the cell ({} bytes, {} lines)",
            cell.report.truncation.total_bytes, cell.report.truncation.total_lines
        ))
        .with_mime_type("text/plain");
    Some(ContentBlock::resource_link(resource))
}

fn render_cell(cell: &CellResult, total: usize) -> (String, Vec<ContentBlock>) {
    let mut text = String::new();
    let mut line = |line: &str| {
        text.push_str(line);
        if !line.is_empty() && !line.ends_with('\n') {
            text.push('\n');
        }
    };
    if let Some(header) = render::cell_header(cell, total) {
        line(&header);
    }
    if let Some(notice) = &cell.report.notice {
        line(&format!("({})", notice.trim_end()));
    }
    line(&cell.report.output);
    if let Some(placeholder) = render::placeholder(cell) {
        line(placeholder);
    }
    if let Some(note) = render::truncation_note(cell) {
        line(&note);
    }
    if let Some(note) = render::out_of_memory_note(cell) {
        line(&note);
    }
    let mut media = Vec::new();
    for bundle in cell.displays_beyond_output() {
        match render::display(bundle) {
            Shown::Text(shown) => line(&shown),
            Shown::Media {
                kind: MediaKind::Image,
                mime,
                base64,
            } => media.push(ContentBlock::image(base64, mime)),
            Shown::Media {
                kind: MediaKind::Audio,
                mime,
                base64,
            } => media.push(ContentBlock::audio(base64, mime)),
            Shown::Nothing => {}
        }
    }
    // Every cell ends with its status and how long it ran, as the anchor's result view
    // shows each cell's status and duration.
    let took = render::duration_text(cell.report.duration_ms);
    match cell.report.status {
        CellStatus::Complete => line(&format!("(complete in {took})")),
        CellStatus::Skipped if cell.report.output.is_empty() => {
            line("(skipped: an earlier cell failed)")
        }
        CellStatus::Skipped => line("(skipped)"),
        CellStatus::Running => line(&format!(
            "(still running in the background after {took} as cell {id}: call `wait` with \
             cell_id {id} for the rest, or `terminate` to stop it)",
            id = cell.cell_id
        )),
        failed => line(&format!("({failed} after {took})")),
    }
    (text, media)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor::cell::{CellReport, Truncation};
    use cellvisor_ipc::Language;
    use serde_json::{json, Value};

    fn cell(index: usize, status: CellStatus, output: &str, displays: Vec<Value>) -> CellResult {
        CellResult {
            index,
            cell_id: 0,
            title: None,
            language: Language::Python,
            exit_code: i32::from(status != CellStatus::Complete),
            report: CellReport {
                status,
                output: output.to_string(),
                duration_ms: 1.0,
                displays,
                status_events: Vec::new(),
                truncation: Truncation::default(),
                notice: None,
                state: None,
                processes_ended: None,
                usage: None,
                out_of_memory: None,
                saved: None,
            },
            node: String::new(),
        }
    }

    fn texts(result: &CallToolResult) -> Vec<String> {
        result
            .content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn results_render_headers_statuses_and_displays() {
        let result = EvalResult::from_cells(vec![
            cell(
                0,
                CellStatus::Complete,
                "42\n",
                vec![
                    json!({"application/json": {"k": [1]}, "text/plain": "{'k': [1]}"}),
                    json!({"image/png": "iVBO\nRw==", "text/plain": "<Png>"}),
                    json!({"audio/wav": "UklG", "text/plain": "<audio audio/wav>"}),
                ],
            ),
            cell(1, CellStatus::Error, "Traceback\n", vec![]),
            cell(2, CellStatus::Skipped, "", vec![]),
        ]);
        let rendered = render_result(&result);
        assert_eq!(rendered.is_error, Some(true));
        let texts = texts(&rendered);
        assert_eq!(texts.len(), 4);
        assert!(
            texts[0].starts_with("[1/3] py\n42\n{\n  \"k\": ["),
            "{}",
            texts[0]
        );
        assert!(texts[0].ends_with("(complete in 1 ms)\n"), "{}", texts[0]);
        assert!(
            texts[1].ends_with("Traceback\n(error after 1 ms)\n"),
            "{}",
            texts[1]
        );
        assert!(texts[2].contains("(skipped"), "{}", texts[2]);
        // The call ends naming its failed cell (issue 28, item 1).
        assert_eq!(
            texts[3],
            "cell 2 of 3 failed with an error; the cell after it was skipped"
        );
        let image = rendered.content.iter().find_map(|c| match c {
            ContentBlock::Image(i) => Some(i),
            _ => None,
        });
        let image = image.expect("an image block");
        assert_eq!(image.mime_type, "image/png");
        assert_eq!(image.data, "iVBORw==");
        let audio = rendered.content.iter().find_map(|c| match c {
            ContentBlock::Audio(a) => Some(a),
            _ => None,
        });
        let audio = audio.expect("an audio block");
        assert_eq!(
            (audio.mime_type.as_str(), audio.data.as_str()),
            ("audio/wav", "UklG")
        );
    }

    #[test]
    fn a_single_quiet_cell_says_so() {
        let result = EvalResult::from_cells(vec![cell(0, CellStatus::Complete, "", vec![])]);
        let rendered = render_result(&result);
        assert_eq!(rendered.is_error, Some(false));
        assert_eq!(
            texts(&rendered),
            vec!["(no output)\n(complete in 1 ms)\n".to_string()]
        );
    }

    #[test]
    fn a_cell_with_displays_but_no_text_says_no_text_output() {
        let png = json!({"image/png": "iVBORw==", "text/plain": "<Png>"});
        let result = EvalResult::from_cells(vec![cell(0, CellStatus::Complete, "", vec![png])]);
        let rendered = render_result(&result);
        assert_eq!(
            texts(&rendered),
            vec!["(no text output)\n(complete in 1 ms)\n".to_string()]
        );
        assert_eq!(rendered.content.len(), 2, "the image follows the text");
        let status = json!({"application/x-cellvisor-status": {"op": "read"}});
        let result = EvalResult::from_cells(vec![
            cell(0, CellStatus::Complete, "", vec![status]),
            cell(1, CellStatus::Complete, "1\n", vec![]),
        ]);
        let texts = texts(&render_result(&result));
        assert_eq!(
            texts[0], "[1/2] py\n(no output)\n(complete in 1 ms)\n",
            "status data is not output"
        );
        assert_eq!(texts[1], "[2/2] py\n1\n(complete in 1 ms)\n");
    }
}
