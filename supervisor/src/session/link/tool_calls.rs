//! A cell's calls of the host's tools: reported as status events, handed to the host, and
//! answered back to the worker unless the cell ends first.

use super::ReaderTask;
use crate::cell::{CellEvent, ToolCallRequest};
use cellvisor_ipc::ToWorker;
use tokio::sync::oneshot;

impl ReaderTask {
    /// A cell's call of a host tool as a status event (`{"op": "tool", "name": ...}`), as
    /// the anchor reports its helpers' and tools' calls: in the cell's `status_events` and,
    /// live, as a `status` event.
    pub(super) async fn tool_status(&mut self, cell_id: u64, name: &str) {
        let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) else {
            return;
        };
        let status = serde_json::json!({"op": "tool", "name": name});
        cell.output.status(status.clone());
        let event = CellEvent::Status {
            index: cell.index,
            status,
        };
        if cell.events().is_some() {
            self.host.deliver(&mut cell.events, event).await;
        }
    }

    /// Hands a cell's tool call to the host and sends the answer back to the worker when it
    /// comes, unless the cell ends first.
    pub(super) fn call_tool(&mut self, cell_id: u64, call_id: u64, name: String, args_json: &str) {
        let answer =
            move |outcome: Result<String, String>| ToWorker::ToolResult { call_id, outcome };
        let Some(cell) = self.current.as_ref().filter(|c| c.cell_id == cell_id) else {
            let _ = self
                .to_worker
                .send(answer(Err("the cell has ended".into())));
            return;
        };
        let host = match &cell.tool_host {
            Some(host) if cell.tools.contains(&name) => host.clone(),
            _ => {
                let offered = if cell.tools.is_empty() {
                    "the request declares no tools".to_string()
                } else {
                    format!("the request declares: {}", cell.tools.join(", "))
                };
                let _ = self
                    .to_worker
                    .send(answer(Err(format!("unknown tool `{name}`; {offered}"))));
                return;
            }
        };
        let arguments: serde_json::Value = match serde_json::from_str(args_json) {
            Ok(arguments) => arguments,
            Err(err) => {
                let _ = self
                    .to_worker
                    .send(answer(Err(format!("tool arguments are not JSON: {err}"))));
                return;
            }
        };
        let mut alive = cell.alive.subscribe();
        let to_worker = self.to_worker.clone();
        actix::spawn(async move {
            let (reply, result) = oneshot::channel();
            let call = ToolCallRequest {
                name,
                arguments,
                reply,
            };
            if host.send(call).await.is_err() {
                let _ = to_worker.send(answer(Err("the host is gone".into())));
                return;
            }
            tokio::select! {
                result = result => {
                    let outcome = match result {
                        Ok(Ok(value)) => Ok(value.to_string()),
                        Ok(Err(message)) => Err(message),
                        Err(_) => Err("the host dropped the tool call".into()),
                    };
                    let _ = to_worker.send(answer(outcome));
                }
                // The cell ended (done, interrupted, or its worker died): nobody waits.
                _ = alive.changed() => {}
            }
        });
    }
}
