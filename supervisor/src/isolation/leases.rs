//! Which uid each live session holds: plain data, leased and released by the supervisor.
//!
//! A uid released by its session is not leased again until every process that ran as it
//! is gone ([`UidLeases::reclaimed`]): a new session must never find an old session's
//! process running as itself.

use cellvisor_config::UidRange;
use std::collections::{BTreeSet, HashMap};

/// Every uid is leased, or still held by processes of ended sessions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no uid left for a new session: all {count} uids of isolation.uids = \"{range}\" are leased \
     to live sessions ({live}) or still held by processes of ended ones ({ending}); close a \
     session, or widen isolation.uids"
)]
pub struct Exhausted {
    /// The range (`isolation.uids`).
    pub range: UidRange,
    /// How many uids it holds.
    pub count: u32,
    /// Uids leased to live sessions.
    pub live: usize,
    /// Uids of ended sessions whose processes are still being ended.
    pub ending: usize,
}

/// The leases of one range.
#[derive(Debug)]
pub struct UidLeases {
    range: UidRange,
    /// Session name -> its uid.
    by_session: HashMap<String, u32>,
    /// Uids released whose processes may still run.
    ending: BTreeSet<u32>,
    /// Where the next search starts: uids are handed out in turn, so a released uid is the
    /// last to be reused.
    next: u32,
}

impl UidLeases {
    /// No uid of `range` leased yet.
    pub fn new(range: UidRange) -> UidLeases {
        UidLeases {
            range,
            by_session: HashMap::new(),
            ending: BTreeSet::new(),
            next: range.first,
        }
    }

    /// The range leased from.
    pub fn range(&self) -> UidRange {
        self.range
    }

    /// The uid of `session`: the one it holds, or a free one leased to it now.
    pub fn lease(&mut self, session: &str) -> Result<u32, Exhausted> {
        if let Some(uid) = self.by_session.get(session) {
            return Ok(*uid);
        }
        let held: BTreeSet<u32> = self.by_session.values().copied().collect();
        let count = self.range.len();
        let free = (0..count)
            .map(|step| self.range.first + (self.next - self.range.first + step) % count)
            .find(|uid| !held.contains(uid) && !self.ending.contains(uid));
        let Some(uid) = free else {
            return Err(Exhausted {
                range: self.range,
                count,
                live: self.by_session.len(),
                ending: self.ending.len(),
            });
        };
        self.next = if uid == self.range.last {
            self.range.first
        } else {
            uid + 1
        };
        self.by_session.insert(session.to_string(), uid);
        Ok(uid)
    }

    /// The uid `session` holds, if any.
    pub fn uid_of(&self, session: &str) -> Option<u32> {
        self.by_session.get(session).copied()
    }

    /// `session` ended: its uid waits until its processes are gone. Returns that uid.
    pub fn release(&mut self, session: &str) -> Option<u32> {
        let uid = self.by_session.remove(session)?;
        self.ending.insert(uid);
        Some(uid)
    }

    /// Every process of `uid` is gone: it may be leased again.
    pub fn reclaimed(&mut self, uid: u32) {
        self.ending.remove(&uid);
    }

    /// Live leases.
    pub fn leased(&self) -> usize {
        self.by_session.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u32, last: u32) -> UidRange {
        UidRange { first, last }
    }

    #[test]
    fn each_session_gets_its_own_uid_and_keeps_it() {
        let mut leases = UidLeases::new(range(61000, 61999));
        let a = leases.lease("a").unwrap();
        let b = leases.lease("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(
            leases.lease("a"),
            Ok(a),
            "a session's languages share one uid"
        );
        assert!(range(61000, 61999).contains(a) && range(61000, 61999).contains(b));
        assert_eq!(leases.uid_of("b"), Some(b));
        assert_eq!(leases.leased(), 2);
    }

    #[test]
    fn a_released_uid_is_reused_only_once_reclaimed_and_after_the_others() {
        let mut leases = UidLeases::new(range(61000, 61001));
        let a = leases.lease("a").unwrap();
        assert_eq!(leases.release("a"), Some(a));
        assert_eq!(leases.release("a"), None);
        let b = leases.lease("b").unwrap();
        assert_ne!(a, b, "a released uid waits for its processes");
        let err = leases.lease("c").unwrap_err();
        assert_eq!(err.live, 1);
        assert_eq!(err.ending, 1);
        leases.reclaimed(a);
        assert_eq!(leases.lease("c"), Ok(a));
    }

    #[test]
    fn exhaustion_names_the_range_and_the_key() {
        let mut leases = UidLeases::new(range(61000, 61000));
        leases.lease("a").unwrap();
        let message = leases.lease("b").unwrap_err().to_string();
        assert!(
            message.contains("isolation.uids = \"61000-61000\""),
            "{message}"
        );
        assert!(message.contains("all 1 uids"), "{message}");
    }

    #[test]
    fn uids_are_handed_out_in_turn() {
        let mut leases = UidLeases::new(range(5000, 5002));
        let first = leases.lease("a").unwrap();
        leases.release("a");
        leases.reclaimed(first);
        // The next lease goes to the next uid, not back to the one just freed.
        assert_eq!(leases.lease("b"), Ok(first + 1));
        assert_eq!(leases.lease("c"), Ok(first + 2));
        assert_eq!(
            leases.lease("d"),
            Ok(first),
            "wraps around to the freed one"
        );
    }
}
