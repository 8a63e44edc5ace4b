//! Where a new cell goes under the per-language cap (`max-sessions`): a plain function of
//! the language's live sessions, unit-tested without actors.

use std::time::Instant;

/// A live session of the request's language, as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot<K> {
    pub key: K,
    /// Idle (or failed), with no cell in flight and no request under way using it.
    pub evictable: bool,
    /// Already being closed (its room is coming).
    pub closing: bool,
    pub last_active: Instant,
}

/// What to do with a cell for session `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement<K> {
    /// The session is live: queue the cell there.
    RunHere,
    /// There is room: start the session.
    Start,
    /// Close this least recently used idle session; the cell waits for the room it leaves.
    Evict(K),
    /// Every session is busy (or the room is already being made): wait.
    Wait,
}

/// Decides where a cell for `key` goes, given `slots` (every live session of its language)
/// and the cap.
pub fn place<K: Clone + PartialEq>(key: &K, slots: &[Slot<K>], cap: usize) -> Placement<K> {
    if let Some(own) = slots.iter().find(|s| &s.key == key) {
        return for_live(own.closing);
    }
    if slots.len() < cap {
        return Placement::Start;
    }
    if slots.iter().any(|s| s.closing) {
        return Placement::Wait;
    }
    slots
        .iter()
        .filter(|s| s.evictable)
        .min_by_key(|s| s.last_active)
        .map_or(Placement::Wait, |lru| Placement::Evict(lru.key.clone()))
}

/// Where a cell for a live session goes (the first rule of [`place`], on its own so the
/// common case needs no list of slots).
pub fn for_live<K>(closing: bool) -> Placement<K> {
    if closing {
        Placement::Wait
    } else {
        Placement::RunHere
    }
}

/// How full one enabled language is, for [`readiness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Its live sessions (closing ones included).
    pub live: usize,
    /// Those of them that could be evicted to make room.
    pub evictable: usize,
    /// `max-sessions`.
    pub cap: usize,
}

impl Room {
    /// A new session of the language could start now, or after an eviction.
    pub fn has_room(&self) -> bool {
        self.live < self.cap || self.evictable > 0
    }
}

/// Whether the node takes new sessions: not while draining, nor when every enabled language
/// is at its cap with no idle session to evict (a node with no language enabled takes
/// none). The error says why, for a probe's answer.
pub fn readiness<L: std::fmt::Display>(draining: bool, rooms: &[(L, Room)]) -> Result<(), String> {
    if draining {
        return Err("draining: this node takes no new sessions".into());
    }
    if rooms.is_empty() {
        return Err("no language is enabled".into());
    }
    if rooms.iter().any(|(_, room)| room.has_room()) {
        return Ok(());
    }
    let full: Vec<String> = rooms
        .iter()
        .map(|(language, room)| format!("{language} {}/{}", room.live, room.cap))
        .collect();
    Err(format!(
        "every enabled language is at max-sessions with no idle session to evict ({})",
        full.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn room(live: usize, evictable: usize, cap: usize) -> Room {
        Room {
            live,
            evictable,
            cap,
        }
    }

    #[test]
    fn a_node_with_room_in_some_language_is_ready() {
        assert_eq!(
            readiness(false, &[("py", room(2, 0, 2)), ("js", room(0, 0, 2))]),
            Ok(())
        );
        assert_eq!(readiness(false, &[("py", room(2, 1, 2))]), Ok(()));
    }

    #[test]
    fn a_draining_node_is_never_ready() {
        let reason = readiness(true, &[("py", room(0, 0, 4))]).unwrap_err();
        assert!(reason.contains("draining"), "{reason}");
    }

    #[test]
    fn a_node_full_of_busy_sessions_is_not_ready_and_says_where() {
        let reason =
            readiness(false, &[("py", room(2, 0, 2)), ("lua", room(1, 0, 1))]).unwrap_err();
        assert!(
            reason.contains("py 2/2") && reason.contains("lua 1/1"),
            "{reason}"
        );
        assert!(readiness::<&str>(false, &[]).is_err());
    }

    fn slot(key: &'static str, evictable: bool, age_secs: u64) -> Slot<&'static str> {
        Slot {
            key,
            evictable,
            closing: false,
            last_active: Instant::now() - Duration::from_secs(age_secs),
        }
    }

    #[test]
    fn a_live_session_runs_its_cell() {
        let slots = [slot("a", false, 1)];
        assert_eq!(place(&"a", &slots, 1), Placement::RunHere);
    }

    #[test]
    fn a_session_being_closed_waits_for_its_successor() {
        let mut closing = slot("a", true, 1);
        closing.closing = true;
        assert_eq!(place(&"a", &[closing], 4), Placement::Wait);
    }

    #[test]
    fn under_the_cap_a_new_session_starts() {
        let slots = [slot("a", true, 1)];
        assert_eq!(place(&"b", &slots, 2), Placement::Start);
    }

    #[test]
    fn at_the_cap_the_least_recently_used_idle_session_is_evicted() {
        let slots = [slot("a", true, 5), slot("b", true, 50), slot("c", true, 10)];
        assert_eq!(place(&"d", &slots, 3), Placement::Evict("b"));
    }

    #[test]
    fn a_busy_session_is_never_evicted_however_old() {
        let slots = [slot("old-busy", false, 500), slot("idle", true, 1)];
        assert_eq!(place(&"new", &slots, 2), Placement::Evict("idle"));
        let all_busy = [slot("a", false, 500), slot("b", false, 400)];
        assert_eq!(place(&"new", &all_busy, 2), Placement::Wait);
    }

    #[test]
    fn room_already_being_made_is_waited_for_not_made_twice() {
        let mut closing = slot("a", false, 1);
        closing.closing = true;
        let slots = [closing, slot("b", true, 100)];
        assert_eq!(place(&"c", &slots, 2), Placement::Wait);
    }
}
