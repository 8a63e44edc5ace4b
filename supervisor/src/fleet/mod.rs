//! A fleet of nodes sharing one snapshot directory (docs/fleet.md): a session runs on one
//! node at a time, under that node's lease, and moves when its node stops holding it.
//!
//! - [`lease`]: the lease files and the rules that make two nodes never hold one session.
//! - [`LeaseBook`]: the leases this node holds, shared by the supervisor (which takes,
//!   renews and gives them up) and the host (which reads it to skip asking).

pub mod lease;

pub use lease::{Lease, LeaseDir, LeaseError};

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The leases this node holds.
#[derive(Debug)]
pub struct LeaseBook {
    dir: LeaseDir,
    held: Mutex<HashMap<String, Lease>>,
}

/// What a renewal round found: the sessions whose leases were lost (their workers must
/// stop here, without saving), and those given up because nothing here runs them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Renewal {
    /// Sessions another node holds now, or whose lease ran out unrenewed.
    pub lost: Vec<(String, LeaseError)>,
    /// Sessions whose lease was given up: no live worker and no waiting cell.
    pub released: Vec<String>,
}

impl LeaseBook {
    /// A book on `dir`'s leases, holding none yet.
    pub fn new(dir: LeaseDir) -> LeaseBook {
        LeaseBook {
            dir,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// How often held leases are renewed: a third of their time to live, so two renewals
    /// may fail before one runs out.
    pub fn renew_interval(&self) -> Duration {
        self.dir.ttl() / 3
    }

    /// Whether this node holds `session`'s lease.
    pub fn holds(&self, session: &str) -> bool {
        crate::locking::lock(&self.held).contains_key(session)
    }

    /// Takes `session`'s lease unless this node holds it already.
    pub fn acquire(&self, session: &str) -> Result<(), LeaseError> {
        if self.holds(session) {
            return Ok(());
        }
        let lease = self.dir.acquire(session, SystemTime::now())?;
        tracing::debug!(session, "lease taken");
        crate::locking::lock(&self.held).insert(session.to_string(), lease);
        Ok(())
    }

    /// Gives `session`'s lease up, once its workers here have stopped (and saved).
    pub fn release(&self, session: &str) {
        let Some(lease) = crate::locking::lock(&self.held).remove(session) else {
            return;
        };
        match self.dir.release(&lease) {
            Ok(()) => tracing::debug!(session, "lease released"),
            Err(err) => tracing::warn!(session, "cannot release the lease: {err}"),
        }
    }

    /// Gives every lease up (the daemon's stop, once its sessions have saved).
    pub fn release_all(&self) {
        let sessions: Vec<String> = crate::locking::lock(&self.held).keys().cloned().collect();
        for session in sessions {
            self.release(&session);
        }
    }

    /// Renews the leases of the sessions `in_use` says are still used here and gives up
    /// the others.
    pub fn renew(&self, in_use: impl Fn(&str) -> bool) -> Renewal {
        let leases: Vec<Lease> = crate::locking::lock(&self.held).values().cloned().collect();
        let now = SystemTime::now();
        let mut renewal = Renewal::default();
        for mut lease in leases {
            if !in_use(&lease.session) {
                self.release(&lease.session);
                renewal.released.push(lease.session);
                continue;
            }
            match self.dir.renew(&mut lease, now) {
                Ok(()) => {
                    crate::locking::lock(&self.held).insert(lease.session.clone(), lease);
                }
                Err(err @ LeaseError::Io { .. }) => {
                    // Kept: the next round tries again, and the lease outlives two misses.
                    tracing::warn!(session = %lease.session, "cannot renew the lease: {err}");
                }
                Err(err) => {
                    crate::locking::lock(&self.held).remove(&lease.session);
                    renewal.lost.push((lease.session, err));
                }
            }
        }
        renewal
    }

    /// The node holding `session`'s lease now, and for how long yet, if any does.
    pub fn holder(&self, session: &str) -> Option<(String, Duration)> {
        self.dir.holder(session, SystemTime::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_keeps_what_is_used_gives_up_the_rest_and_reports_what_was_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ttl = Duration::from_secs(30);
        let a = LeaseBook::new(LeaseDir::open(dir.path(), "a", ttl).expect("a"));
        let b = LeaseDir::open(dir.path(), "b", ttl).expect("b");
        for session in ["used", "unused", "stolen"] {
            a.acquire(session).expect("take");
        }
        // b takes "stolen" as if a's lease had run out.
        std::fs::remove_file(dir.path().join(".leases/stolen.lease")).expect("rm");
        b.acquire("stolen", SystemTime::now()).expect("b takes it");

        let renewal = a.renew(|s| s != "unused");
        assert_eq!(renewal.released, ["unused"]);
        assert_eq!(renewal.lost.len(), 1);
        assert_eq!(renewal.lost[0].0, "stolen");
        assert!(a.holds("used") && !a.holds("unused") && !a.holds("stolen"));
        assert_eq!(b.holder("unused", SystemTime::now()), None);
        a.release_all();
        assert_eq!(b.holder("used", SystemTime::now()), None);
    }
}
