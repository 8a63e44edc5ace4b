//! A session's stops and its close: what follows the current worker's exit on request
//! (a restart, the close, forgetting the temporary files), who waits for a reset or a close,
//! why the supervisor closed it, what a cell cut short by the stop is told, and what became
//! of the snapshot saved before it.

use super::outcome::{Eviction, StopCause};
use super::state::SnapshotFate;
use super::SessionKey;
use tokio::sync::oneshot;

/// What to do once the current worker has exited on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStop {
    Restart,
    Close,
    /// The session forgets (a reset): its temporary files go with its state.
    ForgetTmp,
}

/// The stops asked for and the close under way (see the module).
#[derive(Default)]
pub(super) struct Closing {
    /// Set once a close is under way: why the supervisor closed it, if it did.
    eviction: Option<Option<Eviction>>,
    close_replies: Vec<oneshot::Sender<()>>,
    reset_replies: Vec<oneshot::Sender<()>>,
    after_stop: Vec<AfterStop>,
    /// What a cell cut short by a planned stop of the worker is told.
    pub cause: StopCause,
    /// What became of the snapshot before this session's close.
    pub fate: SnapshotFate,
}

/// What the stop that just ended was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StopActions(Vec<AfterStop>);

impl StopActions {
    pub fn closes(&self) -> bool {
        self.0.contains(&AfterStop::Close)
    }

    pub fn restarts(&self) -> bool {
        self.0.contains(&AfterStop::Restart)
    }

    /// Whether the stop removes the session's temporary directory, its namespace's snapshot
    /// having met `fate`: a reset and a close do, unless a snapshot was saved to restore the
    /// session from (an eviction that keeps the session).
    pub fn forgets_tmp(&self, fate: &SnapshotFate) -> bool {
        self.0.contains(&AfterStop::ForgetTmp) || (self.closes() && *fate != SnapshotFate::Saved)
    }
}

impl Closing {
    /// Whether a close is under way.
    pub fn is_closing(&self) -> bool {
        self.eviction.is_some()
    }

    /// A close was asked for (`reply` waits for its end); `daemon_stops`: the daemon's own
    /// stop, which the cut-short cell is told.
    pub fn asked(&mut self, reply: Option<oneshot::Sender<()>>, daemon_stops: bool) {
        self.close_replies.extend(reply);
        if daemon_stops {
            self.cause = StopCause::DaemonStopped;
        }
    }

    /// The close goes ahead once the worker is stopped: the first close's `eviction` is the
    /// one the supervisor hears of.
    pub fn begin(&mut self, eviction: Option<Eviction>) {
        if self.eviction.is_none() {
            self.eviction = Some(eviction);
        }
        self.after_stop.push(AfterStop::Close);
    }

    /// A reset was asked for; `reply` waits for it.
    pub fn reset_asked(&mut self, reply: Option<oneshot::Sender<()>>) {
        self.reset_replies.extend(reply);
    }

    /// Once the worker has stopped, `action` follows.
    pub fn then(&mut self, action: AfterStop) {
        self.after_stop.push(action);
    }

    /// Whether a stop was asked for that the worker's exit carries out.
    pub fn stop_pending(&self) -> bool {
        !self.after_stop.is_empty()
    }

    /// The worker is gone on request: what it was for, asked only once.
    pub fn take_actions(&mut self) -> StopActions {
        StopActions(std::mem::take(&mut self.after_stop))
    }

    /// What a cell still queued when session `key` closes is told.
    pub fn why_closed(&self, key: &SessionKey) -> String {
        match self.cause {
            StopCause::DaemonStopped => format!("session {key} was closed: the daemon stopped"),
            StopCause::ResetOrClosed => format!("session {key} was closed"),
        }
    }

    /// The close is done: everyone waiting for a close or a reset is answered; what the
    /// supervisor is told of it (the eviction, the snapshot's fate).
    pub fn closed(&mut self) -> (Option<Eviction>, SnapshotFate) {
        for reply in self
            .close_replies
            .drain(..)
            .chain(self.reset_replies.drain(..))
        {
            let _ = reply.send(());
        }
        (
            self.eviction.take().flatten(),
            std::mem::replace(&mut self.fate, SnapshotFate::NotTried),
        )
    }

    /// The reset is done: whoever waits for it is answered.
    pub fn reset_done(&mut self) {
        for reply in self.reset_replies.drain(..) {
            let _ = reply.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(list: &[AfterStop]) -> StopActions {
        StopActions(list.to_vec())
    }

    #[test]
    fn a_reset_and_a_close_forget_the_temporary_files_and_a_saved_eviction_keeps_them() {
        let reset = actions(&[AfterStop::Restart, AfterStop::ForgetTmp]);
        assert!(reset.forgets_tmp(&SnapshotFate::NotTried));
        assert!(actions(&[AfterStop::Close]).forgets_tmp(&SnapshotFate::NotTried));
        assert!(!actions(&[AfterStop::Close]).forgets_tmp(&SnapshotFate::Saved));
        // A recycle restarts from its snapshot: the session goes on, its files with it.
        assert!(!actions(&[AfterStop::Restart]).forgets_tmp(&SnapshotFate::Saved));
        assert!(!actions(&[AfterStop::Restart]).forgets_tmp(&SnapshotFate::NotTried));
    }

    #[test]
    fn the_first_close_is_the_one_reported_and_everyone_waiting_is_answered() {
        let mut closing = Closing::default();
        assert!(!closing.is_closing() && !closing.stop_pending());
        let (close, closed) = oneshot::channel();
        let (reset, was_reset) = oneshot::channel();
        closing.asked(Some(close), false);
        closing.reset_asked(Some(reset));
        let drained = Eviction::Drained {
            key: SessionKey::for_tests(),
        };
        closing.begin(Some(drained.clone()));
        closing.begin(None);
        assert!(closing.is_closing() && closing.stop_pending());
        let done = closing.take_actions();
        assert!(done.closes() && !done.restarts());
        assert!(!closing.stop_pending(), "taken once");
        closing.fate = SnapshotFate::Saved;
        assert_eq!(closing.closed(), (Some(drained), SnapshotFate::Saved));
        assert_eq!(closing.fate, SnapshotFate::NotTried);
        assert!(closed.blocking_recv().is_ok() && was_reset.blocking_recv().is_ok());
    }

    #[test]
    fn a_daemons_stop_says_so_to_the_cells_it_cuts_short() {
        let key = SessionKey::for_tests();
        let mut closing = Closing::default();
        assert_eq!(closing.why_closed(&key), "session s/py was closed");
        closing.asked(None, true);
        assert_eq!(closing.cause, StopCause::DaemonStopped);
        assert_eq!(
            closing.why_closed(&key),
            "session s/py was closed: the daemon stopped"
        );
    }
}
