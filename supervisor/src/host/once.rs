//! The host's side of requests that run once: remembering a request's answer off the event
//! loop (in etcd mode it waits for the memory's fenced commit), answering a request whose
//! every cell an earlier run left in the committed state, and the lease a per-call request
//! with an id holds on its named session so that its id is remembered there.

use super::{Cellvisor, RequestError};
use crate::cell::{CellResult, CellSpec, EvalResult};
use crate::fleet::LeasePin;
use crate::names::SessionName;
use crate::once::Once;
use std::sync::atomic::Ordering;

/// Remembers `result` as `once`'s answer; when it cannot be kept, its last cell says so.
pub(super) async fn remember(once: Once, result: &mut EvalResult) {
    let kept = result.clone();
    let remembered = tokio::task::spawn_blocking(move || once.remember(&kept))
        .await
        .unwrap_or_else(|_| Err("the task keeping it ended early".into()));
    if let Err(why) = remembered {
        tell_not_remembered(result, &why);
    }
}

/// A request whose answer could not be kept where a restart finds it: its last cell says so
/// (a retry after a restart would run it again).
fn tell_not_remembered(result: &mut EvalResult, why: &str) {
    let line = format!(
        "this request's request_id could not be kept with the session's saved state, so a \
         retry after a restart or on another node would run it again: {why}"
    );
    if let Some(last) = result.cells.last_mut() {
        last.report.notice = Some(match last.report.notice.take() {
            Some(earlier) => format!("{earlier}\n{line}"),
            None => line,
        });
    }
}

impl Cellvisor {
    /// The answer of a request of `cells` whose every cell is in the session's committed
    /// state from an earlier run (its node stopped before the request's memory was
    /// committed), or whose run ended at a committed cell (the rest are skipped, as they
    /// were): nothing runs, and it is remembered now.
    pub(super) async fn answer_done(&self, once: Once, cells: &[CellSpec]) -> EvalResult {
        let (mut answered, replayed_cells) = once
            .done()
            .map_or((Vec::new(), 0), |d| (d.cells.clone(), d.replayed_cells));
        for (index, spec) in cells.iter().enumerate().skip(answered.len()) {
            let cell_id = self.next_cell.fetch_add(1, Ordering::Relaxed);
            let mut skipped = CellResult::skipped(index, cell_id, spec);
            skipped.node.clone_from(&self.node);
            answered.push(skipped);
        }
        let mut answer = EvalResult::from_cells(answered);
        answer.replayed = true;
        answer.replayed_cells = replayed_cells;
        remember(once, &mut answer).await;
        answer
    }

    /// For a per-call request with a `request_id` in etcd mode: takes (or proves) the named
    /// session's lease and keeps it for the request, since its id is remembered under that
    /// lease's fencing token. Another node holding the session answers `LEASED_ELSEWHERE`,
    /// so the router retries where the session's memory is current. `None`: no lease needed.
    pub(super) async fn hold_for_memory(
        &self,
        named: &SessionName,
    ) -> Result<Option<LeasePin>, RequestError> {
        let Some(book) = self.leases.as_ref().filter(|_| self.requests.under_lease()) else {
            return Ok(None);
        };
        // Pinned first, so a renewal round between taking and using it cannot give it up.
        let pin = book.pin(named);
        self.prove_lease(named).await?;
        Ok(Some(pin))
    }
}
