//! HTML tables as aligned Markdown tables, keeping every cell where it stands.
//!
//! The converter's own table handler keeps only the `<td>` cells of a body row, so a table
//! whose rows start with a header cell (a pandas frame's index: `<tr><th>r1</th><td>1</td>`)
//! lost its labels and shifted every value one column left. This handler replaces it: it lays
//! the table out as a grid first (a `rowspan`/`colspan` cell fills every slot it covers, so a
//! multi-level index or column header stays aligned), takes the leading rows made only of
//! header cells as the header (several such rows are joined per column with ` / `, as a named
//! index's row below the column names), and writes every body row with all its cells, header
//! cells included.

use htmd::element_handler::{HandlerResult, Handlers};
use htmd::Element;
use markup5ever_rcdom::{Node, NodeData};
use std::rc::Rc;

/// One slot of the laid-out grid: the text of the cell that covers it, whether that cell is a
/// header cell, and which cell it is (a spanning cell covers several slots).
#[derive(Debug, Clone, PartialEq)]
struct Slot {
    text: String,
    header: bool,
    cell: usize,
}

/// A table row as its cells: (text, is header, rowspan, colspan).
type RawRow = Vec<(String, bool, usize, usize)>;

/// The `table` handler registered with the converter (see [`crate::render::html_to_markdown`]).
pub fn table_handler(handlers: &dyn Handlers, element: Element) -> Option<HandlerResult> {
    let mut rows: Vec<(RawRow, bool)> = Vec::new();
    collect_rows(handlers, element.node, false, &mut rows);
    if expanded_slots(&rows) > MAX_TABLE_SLOTS {
        // Spans that would expand a small document into a huge grid: each row's cells as
        // written, never laid out in the daemon's memory.
        let lines: Vec<String> = rows
            .iter()
            .map(|(row, _)| {
                let cells: Vec<&str> = row.iter().map(|(text, ..)| text.as_str()).collect();
                cells.join(" | ")
            })
            .filter(|line| !line.is_empty())
            .collect();
        return Some(format!("\n\n{}\n\n", lines.join("\n")).into());
    }
    let grid = lay_out(&rows);
    let markdown = to_markdown(&grid)?;
    Some(format!("\n\n{markdown}\n\n").into())
}

/// The most slots a table's grid may have once its spans are expanded: far beyond any table
/// a person reads in a text view, far below what a cell's `colspan`/`rowspan` could ask for.
const MAX_TABLE_SLOTS: usize = 200_000;

/// How many slots [`lay_out`] would fill for `rows`.
fn expanded_slots(rows: &[(RawRow, bool)]) -> usize {
    rows.iter()
        .enumerate()
        .flat_map(|(r, (row, _))| {
            let below = rows.len() - r;
            row.iter()
                .map(move |(_, _, rowspan, colspan)| (*rowspan).min(below).saturating_mul(*colspan))
        })
        .fold(0usize, usize::saturating_add)
}

fn tag(node: &Rc<Node>) -> Option<String> {
    match &node.data {
        NodeData::Element { name, .. } => Some(name.local.to_string()),
        _ => None,
    }
}

fn span(node: &Rc<Node>, attr: &str) -> usize {
    let NodeData::Element { attrs, .. } = &node.data else {
        return 1;
    };
    attrs
        .borrow()
        .iter()
        .find(|a| a.name.local.as_ref() == attr)
        .and_then(|a| a.value.trim().parse::<usize>().ok())
        // A span of 0 or an absurd one is treated as 1 / capped: a table is not a memory bomb.
        .map_or(1, |n| n.clamp(1, 1000))
}

/// The rows of a table in document order (rows of a nested table are not this table's),
/// each with whether it sits in a `<thead>`.
fn collect_rows(
    handlers: &dyn Handlers,
    node: &Rc<Node>,
    in_head: bool,
    rows: &mut Vec<(RawRow, bool)>,
) {
    for child in node.children.borrow().iter() {
        match tag(child).as_deref() {
            Some("thead") => collect_rows(handlers, child, true, rows),
            Some("tbody") | Some("tfoot") => collect_rows(handlers, child, in_head, rows),
            Some("tr") => {
                let mut row = RawRow::new();
                for cell in child.children.borrow().iter() {
                    let header = match tag(cell).as_deref() {
                        Some("th") => true,
                        Some("td") => false,
                        _ => continue,
                    };
                    let text = cell_text(&handlers.walk_children(cell).content);
                    row.push((text, header, span(cell, "rowspan"), span(cell, "colspan")));
                }
                rows.push((row, in_head));
            }
            _ => {}
        }
    }
}

/// A cell's Markdown on one line, with the pipes that would end it escaped.
fn cell_text(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The rows as a grid of slots, spans expanded; each grid row keeps its `<thead>` flag.
fn lay_out(rows: &[(RawRow, bool)]) -> Vec<(Vec<Option<Slot>>, bool)> {
    let mut grid: Vec<(Vec<Option<Slot>>, bool)> = Vec::new();
    let mut cell_id = 0;
    for (r, (row, in_head)) in rows.iter().enumerate() {
        if grid.len() <= r {
            grid.push((Vec::new(), *in_head));
        }
        grid[r].1 = *in_head;
        let mut col = 0;
        for (text, header, rowspan, colspan) in row {
            while grid[r].0.get(col).is_some_and(Option::is_some) {
                col += 1;
            }
            // A rowspan reaches no further than the table's last row.
            let last = (r + rowspan).min(rows.len());
            for (rr, row_in_head) in rows.iter().enumerate().take(last).skip(r) {
                if grid.len() <= rr {
                    grid.push((Vec::new(), row_in_head.1));
                }
                let slots = &mut grid[rr].0;
                if slots.len() < col + colspan {
                    slots.resize(col + colspan, None);
                }
                for slot in &mut slots[col..col + colspan] {
                    *slot = Some(Slot {
                        text: text.clone(),
                        header: *header,
                        cell: cell_id,
                    });
                }
            }
            cell_id += 1;
            col += colspan;
        }
    }
    grid
}

/// The grid as an aligned Markdown table; `None` for a table with no cells.
fn to_markdown(grid: &[(Vec<Option<Slot>>, bool)]) -> Option<String> {
    let columns = grid.iter().map(|(slots, _)| slots.len()).max()?;
    if columns == 0 {
        return None;
    }
    // The header: the rows of the <thead>, or else the leading rows made only of <th> cells.
    let has_head = grid.iter().any(|(_, in_head)| *in_head);
    let head_rows = grid
        .iter()
        .take_while(|(slots, in_head)| {
            if has_head {
                *in_head
            } else {
                !slots.is_empty() && slots.iter().flatten().all(|slot| slot.header)
            }
        })
        .count();
    let (head, body) = grid.split_at(head_rows);
    let header: Vec<String> = (0..columns)
        .map(|c| {
            let mut parts: Vec<&Slot> = Vec::new();
            for slot in head.iter().filter_map(|(slots, _)| slots.get(c)?.as_ref()) {
                // A cell spanning rows down the header is named once.
                if !slot.text.is_empty() && parts.last().is_none_or(|last| last.cell != slot.cell) {
                    parts.push(slot);
                }
            }
            parts
                .iter()
                .map(|slot| slot.text.as_str())
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .collect();
    let body: Vec<Vec<String>> = body
        .iter()
        .map(|(slots, _)| {
            (0..columns)
                .map(|c| {
                    slots
                        .get(c)
                        .and_then(Option::as_ref)
                        .map_or_else(String::new, |slot| slot.text.clone())
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            std::iter::once(&header)
                .chain(body.iter())
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
                .max(3)
        })
        .collect();
    let line = |row: &[String]| {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!(" {cell:<width$} "))
            .collect();
        format!("|{}|", cells.join("|"))
    };
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(w + 2)).collect();
    let mut lines = vec![line(&header), format!("|{}|", rule.join("|"))];
    lines.extend(body.iter().map(|row| line(row)));
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use crate::render::html_to_markdown;

    #[test]
    fn spans_that_would_expand_into_a_huge_grid_are_not_laid_out() {
        // 40 KB of HTML asking for 10^9 slots: converted without the grid, quickly.
        let mut html = String::from("<table><tr>");
        html.push_str(&"<td colspan=1000 rowspan=1000>x</td>".repeat(1000));
        html.push_str("</tr>");
        html.push_str(&"<tr></tr>".repeat(999));
        html.push_str("</table>");
        let markdown = html_to_markdown(&html).unwrap_or_default();
        assert!(markdown.len() < 1 << 20, "{} bytes", markdown.len());
        assert!(markdown.contains('x'), "{markdown}");
    }

    #[test]
    fn a_body_rows_header_cell_stays_in_its_column() {
        let html = "<table><thead><tr><th></th><th>a</th><th>b</th></tr></thead>\
                    <tbody><tr><th>r1</th><td>1</td><td>x</td></tr>\
                    <tr><th>r2</th><td>2</td><td>y</td></tr></tbody></table>";
        assert_eq!(
            html_to_markdown(html).expect("markdown"),
            "|     | a   | b   |\n|-----|-----|-----|\n| r1  | 1   | x   |\n| r2  | 2   | y   |"
        );
    }

    #[test]
    fn spans_fill_every_slot_they_cover_and_header_rows_join_per_column() {
        let html = "<table><thead><tr><th></th><th></th><th colspan=\"2\">A</th></tr>\
                    <tr><th>k1</th><th>k2</th><th>x</th><th>y</th></tr></thead>\
                    <tbody><tr><th rowspan=\"2\">p</th><th>1</th><td>a</td><td>b</td></tr>\
                    <tr><th>2</th><td>c</td><td>d</td></tr></tbody></table>";
        let markdown = html_to_markdown(html).expect("markdown");
        let lines: Vec<&str> = markdown.lines().collect();
        assert_eq!(lines[0], "| k1  | k2  | A / x | A / y |");
        assert_eq!(lines[2], "| p   | 1   | a     | b     |");
        assert_eq!(lines[3], "| p   | 2   | c     | d     |");
    }

    #[test]
    fn a_table_without_header_cells_has_an_empty_header_and_pipes_are_escaped() {
        let markdown =
            html_to_markdown("<table><tr><td>a|b</td><td>c</td></tr></table>").expect("markdown");
        assert_eq!(markdown, "|      |     |\n|------|-----|\n| a\\|b | c   |");
    }
}
