//! The waiting room under the cap (`max-sessions`): requests that [`capacity::place`] told to
//! wait, kept in arrival order until room frees or their wait times out. Plain data,
//! unit-tested without actors; the supervisor admits, drains and expires.
//!
//! [`capacity::place`]: super::capacity::place

use std::collections::VecDeque;
use std::time::Duration;

/// Requests waiting for room, grouped by `G` (their language), in arrival order.
#[derive(Debug)]
pub struct WaitingRoom<G, T> {
    waiting: VecDeque<Waiter<G, T>>,
    next_id: u64,
}

#[derive(Debug)]
struct Waiter<G, T> {
    id: u64,
    group: G,
    item: T,
    timeout: Duration,
}

impl<G: PartialEq, T> Default for WaitingRoom<G, T> {
    fn default() -> Self {
        WaitingRoom {
            waiting: VecDeque::new(),
            next_id: 1,
        }
    }
}

impl<G: PartialEq, T> WaitingRoom<G, T> {
    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether any waiting item is one `matches` picks.
    pub fn any(&self, matches: impl Fn(&T) -> bool) -> bool {
        self.waiting.iter().any(|w| matches(&w.item))
    }

    /// Whether a request of `group` must wait behind earlier ones without even trying for
    /// room: a new session (`live` false) never overtakes a waiter of its language; a live
    /// session's cell just runs.
    pub fn must_queue(&self, group: &G, live: bool) -> bool {
        !live && self.waiting.iter().any(|w| &w.group == group)
    }

    /// Lets `item` wait for at most `timeout`; the id names it to [`WaitingRoom::expire`].
    pub fn admit(&mut self, group: G, item: T, timeout: Duration) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Waiter {
            id,
            group,
            item,
            timeout,
        });
        id
    }

    /// Offers every waiter to `place` in arrival order (room may have freed); what `place`
    /// gives back keeps waiting, in its place in line and under its id; the rest leave.
    pub fn drain(&mut self, mut place: impl FnMut(T) -> Option<T>) {
        let mut still_waiting = VecDeque::with_capacity(self.waiting.len());
        for waiter in std::mem::take(&mut self.waiting) {
            let Waiter {
                id,
                group,
                item,
                timeout,
            } = waiter;
            if let Some(item) = place(item) {
                still_waiting.push_back(Waiter {
                    id,
                    group,
                    item,
                    timeout,
                });
            }
        }
        self.waiting = still_waiting;
    }

    /// Waiter `id`'s wait timed out: it leaves, with how long it waited; `None` if it already
    /// left (it was placed).
    pub fn expire(&mut self, id: u64) -> Option<(T, Duration)> {
        let pos = self.waiting.iter().position(|w| w.id == id)?;
        self.waiting.remove(pos).map(|w| (w.item, w.timeout))
    }

    /// Everybody leaves (the supervisor is stopping), in arrival order.
    pub fn close(&mut self) -> impl Iterator<Item = T> + '_ {
        self.waiting.drain(..).map(|w| w.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn room(items: &[(&'static str, &'static str)]) -> WaitingRoom<&'static str, &'static str> {
        let mut room = WaitingRoom::default();
        for (group, item) in items {
            room.admit(*group, *item, SECOND);
        }
        room
    }

    #[test]
    fn a_new_session_waits_behind_its_languages_waiters_a_live_one_does_not() {
        let room = room(&[("py", "a")]);
        assert!(room.must_queue(&"py", false));
        assert!(!room.must_queue(&"py", true), "a live session's cell runs");
        assert!(
            !room.must_queue(&"js", false),
            "another language's waiters are no line"
        );
        assert!(!WaitingRoom::<&str, &str>::default().must_queue(&"py", false));
    }

    #[test]
    fn waiters_are_offered_room_in_arrival_order_and_those_given_back_keep_their_place() {
        let mut room = room(&[("py", "a"), ("py", "b"), ("py", "c"), ("py", "d")]);
        let mut offered = Vec::new();
        // Room for one, and "c" is abandoned (it leaves without a place).
        let mut free = 1;
        room.drain(|item| {
            offered.push(item);
            if item == "c" {
                return None;
            }
            if free > 0 {
                free -= 1;
                return None;
            }
            Some(item)
        });
        assert_eq!(offered, ["a", "b", "c", "d"]);
        let left: Vec<_> = room.close().collect();
        assert_eq!(left, ["b", "d"]);
        assert!(room.is_empty());
    }

    #[test]
    fn a_timed_out_wait_removes_only_its_own_waiter_once() {
        let mut room = WaitingRoom::default();
        let a = room.admit("py", "a", SECOND);
        let b = room.admit("py", "b", 2 * SECOND);
        // Still waiting after a drain that found no room: same id.
        room.drain(Some);
        assert_eq!(room.expire(b), Some(("b", 2 * SECOND)));
        assert_eq!(room.expire(b), None);
        // One placed before its timer fired is not expired.
        room.drain(|_| None);
        assert_eq!(room.expire(a), None);
        assert!(room.is_empty());
    }
}
