//! One log line when a cell is handed to its session and one when its answer is back
//! (target `cellvisor::cell`, level info): session, language, cell id, request id, node, the lease's
//! fencing token and wall-clock milliseconds. Between them lies every moment the cell's
//! worker may have run it, so an audit of a fleet's logs (scripts/fleet_faults.py) can
//! show that no session ran on two nodes at once, and under which token each cell ran.
//! Operators who want no line per cell set `CELLVISOR_LOG=info,cellvisor::cell=warn`.

use crate::cell::CellResult;
use cellvisor_ipc::Language;
use std::time::{SystemTime, UNIX_EPOCH};

/// What a cell's two lines share.
pub(super) struct CellLog<'a> {
    pub session: &'a str,
    pub language: Language,
    pub cell_id: u64,
    /// The request's `request_id`, if it has one: how an audit finds the client's answer.
    pub request: Option<&'a str>,
    pub node: &'a str,
    /// The fencing token of the node's lease on the session (etcd leases only).
    pub token: Option<i64>,
}

/// Milliseconds since the Unix epoch, now (0 on a clock set before 1970).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn token_text(token: Option<i64>) -> String {
    token.map_or_else(|| "none".to_string(), |t| t.to_string())
}

impl CellLog<'_> {
    /// The cell is handed to its session now.
    pub(super) fn started(&self) {
        tracing::info!(
            target: "cellvisor::cell",
            session = self.session,
            language = %self.language,
            cell_id = self.cell_id,
            request = self.request.unwrap_or("none"),
            node = self.node,
            token = %token_text(self.token),
            wall_ms = wall_ms(),
            "cell start"
        );
    }

    /// The cell's answer is back: its status and whether its state was saved (`none`
    /// when nothing was to be saved before the answer).
    pub(super) fn ended(&self, result: &CellResult) {
        let saved = match &result.report.saved {
            None => "none",
            Some(saved) if saved.saved => "true",
            Some(_) => "false",
        };
        tracing::info!(
            target: "cellvisor::cell",
            session = self.session,
            language = %self.language,
            cell_id = self.cell_id,
            request = self.request.unwrap_or("none"),
            node = self.node,
            token = %token_text(self.token),
            wall_ms = wall_ms(),
            status = ?result.report.status,
            saved,
            "cell end"
        );
    }
}
