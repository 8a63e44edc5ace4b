//! A case's trajectory: what its cells did, in order, as grouped steps with their durations
//! (`trajectory` in `result.json`). Built from the timed events the case streamed.
//!
//! Each cell is a `cell` step (named by its language, with its title, status and its own
//! `duration_ms`). The events inside a cell follow it as `output` (named by the stream),
//! `display` and `status` steps (named by the helper's `op`: `read`, `write`, `notify`,
//! ...; helper calls are what a check case's cells call, as no host tools are offered).
//! Consecutive events of the same kind and name in the same cell collapse into one step
//! with a `count`; their `duration_ms` is approximate: from the group's first event to the
//! event after its last one.

use super::run::TimedEvent;
use cellvisor::cell::{CellEvent, CellResult, CellStatus};
use serde::{Deserialize, Serialize};

/// Ordered, grouped steps of one case.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub steps: Vec<Step>,
    /// Events across all steps (the sum of `count`).
    pub total_blocks: usize,
}

/// What a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Cell,
    Output,
    Display,
    Status,
}

/// One grouped step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub kind: StepKind,
    /// The cell's language, the output's stream, or the status event's `op`.
    pub name: Option<String>,
    /// `setup` or `cells`.
    pub phase: String,
    /// The cell's place in its request (from 0).
    pub cell: usize,
    /// Events grouped into this step.
    pub count: usize,
    /// Milliseconds from the case's start to the step's first event.
    pub at_ms: f64,
    /// A cell's own `duration_ms`; for other steps, approximate (see the module).
    pub duration_ms: Option<f64>,
    /// A cell step's title, as the case gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// How a cell step ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CellStatus>,
}

/// The trajectory of a case from its timed events and the results of its setup and cells.
pub fn build(events: &[TimedEvent], setup: &[CellResult], cells: &[CellResult]) -> Trajectory {
    let mut steps: Vec<Step> = Vec::new();
    // Where the group that is open (its last step) would end: the next event's time.
    let mut open_group: Option<usize> = None;
    for event in events {
        if let Some(at) = open_group.take() {
            if let Some(step) = steps.get_mut(at) {
                step.duration_ms = Some((event.elapsed_ms - step.at_ms).max(0.0));
            }
        }
        let phase = event.phase.to_string();
        let results = if event.phase == "setup" { setup } else { cells };
        let (kind, name, index) = match &event.event {
            CellEvent::CellStarted {
                index,
                language,
                title,
            } => {
                let result = results.iter().find(|c| c.index == *index);
                steps.push(Step {
                    kind: StepKind::Cell,
                    name: Some(language.to_string()),
                    phase,
                    cell: *index,
                    count: 1,
                    at_ms: event.elapsed_ms,
                    duration_ms: result.map(|c| c.report.duration_ms),
                    title: title.clone(),
                    status: result.map(|c| c.report.status),
                });
                continue;
            }
            CellEvent::CellDone { index, status } => {
                let cell = steps.iter_mut().rev().find(|s| {
                    s.kind == StepKind::Cell && s.cell == *index && s.phase == event.phase
                });
                if let Some(cell) = cell {
                    cell.status.get_or_insert(*status);
                }
                continue;
            }
            CellEvent::Output { index, stream, .. } => {
                (StepKind::Output, Some(stream.to_string()), *index)
            }
            CellEvent::Display { index, .. } => (StepKind::Display, None, *index),
            // The value is in the output and displays already.
            CellEvent::Value { .. } => continue,
            // A clear shows nothing: the output around it makes the steps.
            CellEvent::ClearOutput { .. } => continue,
            CellEvent::Status { index, status } => {
                let op = status.get("op").and_then(|v| v.as_str()).map(String::from);
                (StepKind::Status, op, *index)
            }
        };
        let same = steps.last_mut().filter(|last| {
            last.kind == kind && last.name == name && last.cell == index && last.phase == phase
        });
        match same {
            Some(last) => last.count += 1,
            None => steps.push(Step {
                kind,
                name,
                phase,
                cell: index,
                count: 1,
                at_ms: event.elapsed_ms,
                duration_ms: None,
                title: None,
                status: None,
            }),
        }
        open_group = Some(steps.len() - 1);
    }
    let total_blocks = steps.iter().map(|s| s.count).sum();
    Trajectory {
        steps,
        total_blocks,
    }
}

/// The trajectory in one line, no colour: each step as `kind:name` (`cell:py`,
/// `output:stdout`, `status:write`, `display`), `×N` when it groups N events, a cell's own
/// time and how it ended when not `complete`, setup steps marked `setup/`, joined by ` → `.
pub fn line(trajectory: &Trajectory) -> String {
    let steps: Vec<String> = trajectory
        .steps
        .iter()
        .map(|step| {
            let kind = match step.kind {
                StepKind::Cell => "cell",
                StepKind::Output => "output",
                StepKind::Display => "display",
                StepKind::Status => "status",
            };
            let mut text = if step.phase == "setup" {
                format!("setup/{kind}")
            } else {
                kind.to_string()
            };
            if let Some(name) = &step.name {
                text.push(':');
                text.push_str(name);
            }
            if step.count > 1 {
                text.push_str(&format!(" ×{}", step.count));
            }
            if step.kind == StepKind::Cell {
                if let Some(status) = step.status.filter(|s| *s != CellStatus::Complete) {
                    text.push_str(&format!(" {status}"));
                }
                if let Some(ms) = step.duration_ms {
                    text.push_str(&format!(" {ms:.0}ms"));
                }
            }
            text
        })
        .collect();
    if steps.is_empty() {
        "(no steps)".to_string()
    } else {
        steps.join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixtures::completed;
    use cellvisor_ipc::Language;
    use serde_json::json;

    fn at(elapsed_ms: f64, phase: &'static str, event: CellEvent) -> TimedEvent {
        TimedEvent {
            at: String::new(),
            elapsed_ms,
            phase,
            event,
        }
    }

    fn output(index: usize, text: &str) -> CellEvent {
        CellEvent::Output {
            index,
            stream: "stdout",
            text: text.into(),
        }
    }

    #[test]
    fn events_become_ordered_grouped_steps() {
        let events = [
            at(
                1.0,
                "setup",
                CellEvent::CellStarted {
                    index: 0,
                    language: Language::Python,
                    title: None,
                },
            ),
            at(
                3.0,
                "setup",
                CellEvent::CellDone {
                    index: 0,
                    status: CellStatus::Complete,
                },
            ),
            at(
                10.0,
                "cells",
                CellEvent::CellStarted {
                    index: 0,
                    language: Language::Lua,
                    title: Some("load".into()),
                },
            ),
            at(11.0, "cells", output(0, "a")),
            at(12.0, "cells", output(0, "b")),
            at(
                15.0,
                "cells",
                CellEvent::Status {
                    index: 0,
                    status: json!({"op": "write", "path": "x"}),
                },
            ),
            at(
                16.0,
                "cells",
                CellEvent::Status {
                    index: 0,
                    status: json!({"op": "write", "path": "y"}),
                },
            ),
            at(
                18.0,
                "cells",
                CellEvent::Status {
                    index: 0,
                    status: json!({"op": "read"}),
                },
            ),
            at(
                19.0,
                "cells",
                CellEvent::Display {
                    index: 0,
                    bundle: json!({"image/png": ""}),
                },
            ),
            at(
                25.0,
                "cells",
                CellEvent::CellDone {
                    index: 0,
                    status: CellStatus::Error,
                },
            ),
        ];
        let setup = [completed("", 2.0)];
        let mut failed = completed("", 14.5);
        failed.report.status = CellStatus::Error;
        let trajectory = build(&events, &setup, &[failed]);
        type Row<'a> = (StepKind, Option<&'a str>, &'a str, usize, Option<f64>);
        let summary: Vec<Row> = trajectory
            .steps
            .iter()
            .map(|s| {
                (
                    s.kind,
                    s.name.as_deref(),
                    s.phase.as_str(),
                    s.count,
                    s.duration_ms,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (StepKind::Cell, Some("py"), "setup", 1, Some(2.0)),
                (StepKind::Cell, Some("lua"), "cells", 1, Some(14.5)),
                (StepKind::Output, Some("stdout"), "cells", 2, Some(4.0)),
                (StepKind::Status, Some("write"), "cells", 2, Some(3.0)),
                (StepKind::Status, Some("read"), "cells", 1, Some(1.0)),
                (StepKind::Display, None, "cells", 1, Some(6.0)),
            ]
        );
        assert_eq!(trajectory.steps[1].title.as_deref(), Some("load"));
        assert_eq!(trajectory.steps[1].status, Some(CellStatus::Error));
        assert_eq!(trajectory.steps[1].at_ms, 10.0);
        assert_eq!(trajectory.total_blocks, 8);
        assert_eq!(
            line(&trajectory),
            "setup/cell:py 2ms → cell:lua error 14ms → output:stdout ×2 → status:write ×2 → \
             status:read → display"
        );
        assert_eq!(line(&Trajectory::default()), "(no steps)");
        assert_eq!(build(&[], &[], &[]), Trajectory::default());
    }
}
