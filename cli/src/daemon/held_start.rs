//! A quick cell's `cell_started` event, held back a moment so it goes out in one write with
//! what follows it.

use cellvisor::cell::CellEvent;
use std::time::Duration;

/// How long a `cell_started` event may wait to go out in one write with what follows it (the
/// cell's first output, its `cell_done` and the result): a quick cell then wakes its client
/// once instead of twice, and the worker gets the cell before the client is woken.
const STARTED_LINGER: Duration = Duration::from_millis(1);

/// The `cell_started` event held back for [`STARTED_LINGER`]; anything else of the request
/// sends it first, so the order of events never changes.
#[derive(Default)]
pub(super) struct HeldStart(Option<(Vec<u8>, tokio::time::Instant)>);

impl HeldStart {
    /// When the held event must go out, if one is held.
    pub(super) fn until(&self) -> Option<tokio::time::Instant> {
        self.0.as_ref().map(|(_, until)| *until)
    }

    /// Resolves when the held event is due; never while none is held (and then no timer is
    /// made at all).
    pub(super) fn due(&self) -> impl std::future::Future<Output = ()> {
        let until = self.until();
        async move {
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        }
    }

    /// Holds `line` if it is a `cell_started` event; otherwise returns what to send, in
    /// order: the event held before it, then `line`.
    pub(super) fn hold_or_release(
        &mut self,
        event: &CellEvent,
        line: Vec<u8>,
    ) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let earlier = self.release();
        if matches!(event, CellEvent::CellStarted { .. }) {
            let until = tokio::time::Instant::now() + STARTED_LINGER;
            self.0 = Some((line, until));
            (earlier, None)
        } else {
            (earlier, Some(line))
        }
    }

    /// The held event, to send now.
    pub(super) fn release(&mut self) -> Option<Vec<u8>> {
        self.0.take().map(|(line, _)| line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cell_started_event_waits_for_what_follows_it_and_never_changes_the_order() {
        let started = |index| CellEvent::CellStarted {
            index,
            language: cellvisor_ipc::Language::JavaScript,
            title: None,
        };
        let output = CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: "2\n".into(),
        };
        let mut held = HeldStart::default();
        assert_eq!(held.until(), None);
        let patience = Duration::from_millis(200);
        assert!(
            tokio::time::timeout(patience, held.due()).await.is_err(),
            "nothing held: never due"
        );
        assert_eq!(
            held.hold_or_release(&started(0), b"s0".to_vec()),
            (None, None)
        );
        let until = held.until().expect("held");
        assert!(until <= tokio::time::Instant::now() + STARTED_LINGER);
        assert!(
            tokio::time::timeout(patience, held.due()).await.is_ok(),
            "a held event falls due"
        );
        // What follows goes out after it, in one batch.
        assert_eq!(
            held.hold_or_release(&output, b"o".to_vec()),
            (Some(b"s0".to_vec()), Some(b"o".to_vec()))
        );
        assert_eq!(held.until(), None);
        // A second start releases the first and is held in its place.
        held.hold_or_release(&started(0), b"s0".to_vec());
        assert_eq!(
            held.hold_or_release(&started(1), b"s1".to_vec()),
            (Some(b"s0".to_vec()), None)
        );
        assert_eq!(held.release(), Some(b"s1".to_vec()));
        assert_eq!(held.release(), None);
    }
}
