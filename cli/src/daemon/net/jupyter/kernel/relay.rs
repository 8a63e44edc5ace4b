//! The relay of the cells other hosts (an agent's JSON-RPC or MCP) run in a kernel's
//! session: every connected client sees them as executions of their own.

use super::{forward, lock, mapping, Kernel, Outgoing};
use crate::jupyter::outputs::CellOutputs;
use cellvisor::cell::{CellEvent, CellSpec};
use cellvisor::WatchEvent;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::broadcast;

/// Shows every client the cells other hosts run in the kernel's session (in its language),
/// as an execution of their own: `busy`, `execute_input`, output, `error`, `idle`, with a
/// parent header naming the request.
pub(super) async fn relay(
    kernel: Arc<Kernel>,
    mut watched: broadcast::Receiver<Arc<cellvisor::Watched>>,
) {
    let mut ended = kernel.ended();
    // The request being shown: its parent header and cells.
    let mut current: Option<(u64, Value, Vec<CellSpec>)> = None;
    // The cell being shown: its execution count and what iopub got of it.
    let mut shown = (0, CellOutputs::default());
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
                if let Some((_, parent, _)) = current.take() {
                    // A request whose end never came (its host left): idle before the next.
                    kernel.set_running(false).await;
                    kernel.status(&parent, "idle");
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
                current = Some((item.request, parent, cells.clone()));
            }
            WatchEvent::Event(event) => {
                let Some((request, parent, cells)) = &current else {
                    continue;
                };
                if *request != item.request {
                    continue;
                }
                let index = match event {
                    CellEvent::CellStarted { index, .. }
                    | CellEvent::Output { index, .. }
                    | CellEvent::Display { index, .. }
                    | CellEvent::Status { index, .. }
                    | CellEvent::Value { index, .. }
                    | CellEvent::CellDone { index, .. } => *index,
                };
                let Some(cell) = cells.get(index).filter(|c| c.language == kernel.language) else {
                    continue;
                };
                match event {
                    CellEvent::CellStarted { .. } => {
                        let count = {
                            let mut state = lock(&kernel.state);
                            state.execution_count += 1;
                            let count = state.execution_count;
                            state.history.remember(count, &cell.code);
                            count
                        };
                        kernel.publish(Outgoing::new(
                            "iopub",
                            "execute_input",
                            parent,
                            mapping::execute_input(&cell.code, count),
                        ));
                        shown = (count, CellOutputs::default());
                    }
                    CellEvent::CellDone { status, .. } if !status.failed() => {
                        if let Some(result) = shown.1.execute_result(shown.0) {
                            kernel.publish(Outgoing::new(
                                "iopub",
                                "execute_result",
                                parent,
                                result,
                            ));
                        }
                    }
                    _ => {}
                }
                forward(&kernel, parent, &mut shown.1, event, false);
            }
            WatchEvent::Ended { cells: results } => {
                let Some((request, parent, _)) = current.take() else {
                    continue;
                };
                if request != item.request {
                    continue;
                }
                for result in results.iter().filter(|r| r.language == kernel.language) {
                    if let Some(failure) = mapping::failure_of(result) {
                        kernel.publish(Outgoing::new(
                            "iopub",
                            "error",
                            &parent,
                            failure.error_content(),
                        ));
                    }
                }
                kernel.set_running(false).await;
                kernel.status(&parent, "idle");
            }
        }
    }
}
