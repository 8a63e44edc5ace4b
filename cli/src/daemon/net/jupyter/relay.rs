//! The relay of a kernel: every client connected to it sees the cells other hosts (an
//! agent's JSON-RPC or MCP) run in its session, in its language, as an execution of their
//! own: `busy`, `execute_input`, output, a failed cell's report as its `error`'s traceback,
//! `idle`, with a parent header naming the request.

use super::super::super::lock;
use super::kernel::{forward, Kernel};
use crate::jupyter::mapping;
use crate::jupyter::message::Outgoing;
use crate::jupyter::traceback::Outputs;
use cellvisor::cell::{CellEvent, CellSpec};
use cellvisor::WatchEvent;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;

/// The request being shown.
struct Shown {
    request: u64,
    /// Its parent header.
    parent: Value,
    cells: Vec<CellSpec>,
    /// The output of its cells that started and did not end well yet, by index: a failed
    /// cell's is finished with its failure once the request's results say what it was.
    outputs: HashMap<usize, Outputs>,
    /// The execution count each of its cells was shown with, by index.
    counts: HashMap<usize, u64>,
}

/// Relays the session's cells to the kernel's clients until the kernel ends.
pub(super) async fn relay(
    kernel: Arc<Kernel>,
    mut watched: broadcast::Receiver<Arc<cellvisor::Watched>>,
) {
    let mut ended = kernel.ended();
    let mut current: Option<Shown> = None;
    loop {
        let item = tokio::select! {
            item = watched.recv() => item,
            _ = ended.changed() => return,
        };
        let item = match item {
            Ok(item) => item,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(kernel = %kernel.id, missed, "the relay fell behind its session's events");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if item.origin == kernel.origin {
            continue;
        }
        match &item.what {
            WatchEvent::Began { cells } => {
                if let Some(shown) = current.take() {
                    // A request whose end never came (its host left): idle before the next.
                    kernel.set_running(false).await;
                    kernel.status(&shown.parent, "idle");
                }
                if !cells.iter().any(|c| c.language == kernel.language) {
                    continue;
                }
                let parent = json!({
                    "msg_id": format!("cellvisor-request-{}", item.request),
                    "msg_type": "execute_request",
                    "session": format!("cellvisor-origin-{}", item.origin),
                    "username": "cellvisor", "date": crate::jupyter::message::now(),
                    "version": crate::jupyter::message::PROTOCOL_VERSION,
                });
                kernel.set_running(true).await;
                kernel.status(&parent, "busy");
                current = Some(Shown {
                    request: item.request,
                    parent,
                    cells: cells.clone(),
                    outputs: HashMap::new(),
                    counts: HashMap::new(),
                });
            }
            WatchEvent::Event(event) => {
                if let Some(shown) = current.as_mut().filter(|s| s.request == item.request) {
                    show(&kernel, shown, event);
                }
            }
            WatchEvent::Ended { cells: results } => {
                let Some(mut shown) = current.take() else {
                    continue;
                };
                if shown.request != item.request {
                    current = Some(shown);
                    continue;
                }
                for result in results.iter().filter(|r| r.language == kernel.language) {
                    if let Some(failure) = mapping::failure_of(result) {
                        let mut outputs = shown
                            .outputs
                            .remove(&result.index)
                            .unwrap_or_else(|| Outputs::new(kernel.language));
                        let count = shown.counts.get(&result.index).copied().unwrap_or(0);
                        kernel.publish_all(&shown.parent, outputs.finish(Some(&failure), count));
                    }
                }
                for (index, mut outputs) in shown.outputs.drain() {
                    let count = shown.counts.get(&index).copied().unwrap_or(0);
                    kernel.publish_all(&shown.parent, outputs.finish(None, count));
                }
                kernel.set_running(false).await;
                kernel.status(&shown.parent, "idle");
            }
        }
    }
}

/// One event of a cell of the request shown.
fn show(kernel: &Kernel, shown: &mut Shown, event: &CellEvent) {
    let index = match event {
        CellEvent::CellStarted { index, .. }
        | CellEvent::Output { index, .. }
        | CellEvent::Display { index, .. }
        | CellEvent::Status { index, .. }
        | CellEvent::Value { index, .. }
        | CellEvent::ClearOutput { index, .. }
        | CellEvent::CellDone { index, .. } => *index,
    };
    let Some(cell) = shown
        .cells
        .get(index)
        .filter(|c| c.language == kernel.language)
    else {
        return;
    };
    if let CellEvent::CellStarted { .. } = event {
        let count = {
            let mut state = lock(&kernel.state);
            state.execution_count += 1;
            let count = state.execution_count;
            state.history.remember(count, &cell.code);
            count
        };
        shown.counts.insert(index, count);
        kernel.publish(Outgoing::new(
            "iopub",
            "execute_input",
            &shown.parent,
            mapping::execute_input(&cell.code, count),
        ));
    }
    let outputs = shown
        .outputs
        .entry(index)
        .or_insert_with(|| Outputs::new(kernel.language));
    forward(kernel, &shown.parent, outputs, event, false);
    if let CellEvent::CellDone { status, .. } = event {
        if !status.failed() {
            if let Some(mut outputs) = shown.outputs.remove(&index) {
                let count = shown.counts.get(&index).copied().unwrap_or(0);
                kernel.publish_all(&shown.parent, outputs.finish(None, count));
            }
        }
    }
}
