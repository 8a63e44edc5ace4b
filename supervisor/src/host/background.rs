//! Cells that went to the background: which session holds each, and `wait` and
//! `terminate` on them.

use super::{
    lock, Cellvisor, RequestError, SessionRef, WaitOptions, DEFAULT_WAIT, MAX_BACKGROUND_CELLS,
    MAX_WAIT_MS,
};
use crate::cell::{CellResult, CellStatus};
use crate::session::observation::Refusal;
use crate::session::SessionKey;
use crate::session::{TerminateCell, WaitCell};
use crate::supervisor::{CellCommand, ForCell};
use tokio::sync::oneshot;

impl Cellvisor {
    /// Watches a cell that went to the background: answers with what it printed since the
    /// last look once `yield_time_ms` passes (status `running`), or with its final result as
    /// soon as it ends. One wait per cell at a time; only the cell's own session may wait.
    pub async fn wait<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        cell_id: u64,
        options: WaitOptions,
    ) -> Result<CellResult, RequestError> {
        self.wait_with_events(session, cell_id, options, None).await
    }

    /// [`Cellvisor::wait`], with the cell's events (output, displays, `notify` and helper
    /// status) sent to `events` as they come while the wait watches, as `eval` streams them.
    pub async fn wait_with_events<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        cell_id: u64,
        options: WaitOptions,
        events: Option<tokio::sync::mpsc::Sender<crate::cell::CellEvent>>,
    ) -> Result<CellResult, RequestError> {
        let yield_time = match options.yield_time_ms {
            Some(ms) if ms > MAX_WAIT_MS => return Err(RequestError::WaitTime(ms)),
            Some(ms) => std::time::Duration::from_millis(ms),
            None => DEFAULT_WAIT,
        };
        if options.max_tokens == Some(0) {
            return Err(RequestError::MaxTokens);
        }
        let max_bytes = options
            .max_tokens
            .map(|t| t.saturating_mul(crate::directive::BYTES_PER_TOKEN));
        self.for_cell(session, cell_id, |reply| {
            CellCommand::Wait(WaitCell {
                cell_id,
                yield_time,
                max_bytes,
                events,
                reply,
            })
        })
        .await
    }

    /// Stops a cell that went to the background (interrupt, then the grace, then kill) and
    /// answers with its final result; the session and its state stay.
    pub async fn terminate<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        cell_id: u64,
    ) -> Result<CellResult, RequestError> {
        self.for_cell(session, cell_id, |reply| {
            CellCommand::Terminate(TerminateCell { cell_id, reply })
        })
        .await
    }

    /// Hands a `wait` or `terminate` to the session holding `cell_id`, if it is `session`
    /// (under `session+cwd`: the pair it names, or the only pair of its name).
    pub(super) async fn for_cell<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        cell_id: u64,
        command: impl FnOnce(crate::session::CellReply) -> CellCommand,
    ) -> Result<CellResult, RequestError> {
        let named = session.into();
        let key_name = self.resolve_one(named).await?;
        let session = named.name;
        let unknown = || RequestError::UnknownCell {
            session: session.to_string(),
            cell_id,
        };
        let key = {
            let cells = lock(&self.background);
            cells
                .get(&cell_id)
                .filter(|k| k.session == key_name)
                .cloned()
        }
        .ok_or_else(unknown)?;
        let (reply, answer) = oneshot::channel();
        self.supervisor
            .send(ForCell {
                key,
                command: command(reply),
            })
            .await
            .map_err(|_| RequestError::Stopped)?;
        let answer = answer.await.unwrap_or(Err(Refusal::Unknown));
        let ended = match &answer {
            Ok(result) => result.report.status != CellStatus::Running,
            Err(refusal) => matches!(refusal, Refusal::Unknown | Refusal::Dropped { .. }),
        };
        if ended {
            lock(&self.background).remove(&cell_id);
        }
        answer
            .map(|mut result| {
                result.node.clone_from(&self.node);
                result
            })
            .map_err(|refusal| match refusal {
                Refusal::Unknown => unknown(),
                Refusal::Dropped { cap } => RequestError::DroppedCell {
                    session: session.to_string(),
                    cell_id,
                    cap,
                },
                Refusal::NotYielded => RequestError::NotYielded(cell_id),
                Refusal::Observed => RequestError::AlreadyObserved(cell_id),
            })
    }

    /// Remembers that `cell_id` of `key` runs in the background (bounded: the oldest ids go
    /// first; their sessions drop uncollected results long before).
    pub(super) fn remember_background(&self, cell_id: u64, key: SessionKey) {
        let mut cells = lock(&self.background);
        while cells.len() >= MAX_BACKGROUND_CELLS {
            let Some(oldest) = cells.keys().min().copied() else {
                break;
            };
            cells.remove(&oldest);
        }
        cells.insert(cell_id, key);
    }
}
