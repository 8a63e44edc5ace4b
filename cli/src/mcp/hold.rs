//! Holding a tool call while its cell runs: the cell's events go out as progress
//! ([`Progress`]), and a client that gives the call up (`notifications/cancelled`, which
//! rmcp turns into the request's cancellation token) or goes away has the cell interrupted,
//! so the session is free for the next call and keeps its state.

use super::progress::Progress;
use super::{until_true, CellvisorMcp};
use cellvisor::cell::CellEvent;
use rmcp::service::{RequestContext, RoleServer};
use std::future::Future;
use tokio::sync::mpsc;

/// What a client giving the call up does to the cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnCancel {
    /// Interrupt it (an `eval`: its cell runs for this call alone).
    Interrupt,
    /// Leave it running (a `wait`: the cell runs in the background, for later calls).
    Leave,
}

/// The channel of a call's events, made only when progress is sent (a call without a
/// `progressToken` costs what it did before).
pub(super) fn events_for(
    progress: &Progress,
) -> (
    Option<mpsc::Sender<CellEvent>>,
    Option<mpsc::Receiver<CellEvent>>,
) {
    if progress.wanted() {
        let (sender, receiver) = mpsc::channel(64);
        (Some(sender), Some(receiver))
    } else {
        (None, None)
    }
}

impl CellvisorMcp {
    /// Awaits `work` (the call's cells), sending `events` as `progress` meanwhile; a cancel
    /// or a disconnect interrupts the session's cell when `on_cancel` says so, and the call
    /// then winds down with the cell's (cancelled) result.
    pub(super) async fn hold<T>(
        &self,
        work: impl Future<Output = T>,
        mut events: Option<mpsc::Receiver<CellEvent>>,
        mut progress: Progress,
        context: &RequestContext<RoleServer>,
        on_cancel: OnCancel,
    ) -> T {
        tokio::pin!(work);
        // Not run until polled: only after a cancel or a disconnect.
        let interrupt = async {
            let _ = self.cv.interrupt(&self.session, None).await;
        };
        tokio::pin!(interrupt);
        let mut interrupting = false;
        let mut interrupted = false;
        let mut cancelled = false;
        let watch_disconnect = on_cancel == OnCancel::Interrupt;
        loop {
            tokio::select! {
                biased;
                result = &mut work => return result,
                Some(event) = next(&mut events) => progress.take(&event),
                () = &mut interrupt, if interrupting && !interrupted => interrupted = true,
                () = context.ct.cancelled(), if !cancelled => {
                    // The client gave this call up: nobody reads its progress any more.
                    cancelled = true;
                    progress.stop();
                    if on_cancel == OnCancel::Interrupt && !interrupting {
                        tracing::info!(session = %self.session, "eval cancelled by the client: interrupting its cell");
                        interrupting = true;
                    }
                }
                () = until_true(self.disconnected.clone()), if watch_disconnect && !interrupting => {
                    tracing::info!(session = %self.session, "client disconnected during eval");
                    progress.stop();
                    interrupting = true;
                }
                () = progress.due() => progress.send().await,
            }
        }
    }
}

/// The next event, if the call has a channel of them (pending for ever otherwise).
async fn next(events: &mut Option<mpsc::Receiver<CellEvent>>) -> Option<CellEvent> {
    match events.as_mut() {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}
