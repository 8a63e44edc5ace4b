//! A fleet of nodes sharing one snapshot directory (docs/fleet.md): a session runs on one
//! node at a time, under that node's lease, and moves when its node stops holding it.
//!
//! - [`lease`]: the lease files and the rules that make two nodes never hold one session.
//! - [`etcd`]: leases in etcd, whose creating revision is a fencing token, and the fenced
//!   pointers to sessions' snapshots (with the `etcd` feature; without it, `etcd_absent`
//!   refuses `leases = "etcd"` at start).
//! - [`backend`]: what either store does for the book ([`LeaseBackend`]).
//! - [`proof`]: whether a lease is provably still held (plain data).
//! - [`pointer`]: immutable snapshot blobs and the pointer naming the current one (plain
//!   data).
//! - [`LeaseBook`]: the leases this node holds, shared by the supervisor (which takes,
//!   renews and gives them up) and the host (which reads it to skip asking).

pub mod backend;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(not(feature = "etcd"))]
#[path = "etcd_absent.rs"]
pub mod etcd;
mod etcd_settings;
pub mod lease;
pub mod pointer;
pub mod proof;

pub use backend::{FileLeases, LeaseBackend};
pub use lease::{LeaseDir, LeaseError};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The leases this node holds.
#[derive(Debug)]
pub struct LeaseBook {
    backend: Arc<dyn LeaseBackend>,
    /// Each held session with its fencing token (none for file leases).
    held: Mutex<HashMap<String, Option<i64>>>,
    /// Sessions whose lease a request needs though no worker of theirs runs here (a
    /// per-call request remembering its `request_id` in etcd mode), by how many.
    pins: Mutex<HashMap<String, usize>>,
}

/// Keeps a session's lease from being given up by the renewal round while it lives.
#[derive(Debug)]
pub struct LeasePin {
    book: Arc<LeaseBook>,
    session: String,
}

impl Drop for LeasePin {
    fn drop(&mut self) {
        let mut pins = crate::locking::lock(&self.book.pins);
        if let Some(count) = pins.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                pins.remove(&self.session);
            }
        }
    }
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
    /// A book on `dir`'s lease files, holding none yet.
    pub fn new(dir: LeaseDir) -> LeaseBook {
        LeaseBook::with_backend(Arc::new(FileLeases::new(dir)))
    }

    /// A book on `backend`'s leases, holding none yet.
    pub fn with_backend(backend: Arc<dyn LeaseBackend>) -> LeaseBook {
        LeaseBook {
            backend,
            held: Mutex::new(HashMap::new()),
            pins: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `session`'s lease, once taken, from being given up as unused until the pin is
    /// dropped.
    pub fn pin(self: &Arc<Self>, session: &str) -> LeasePin {
        *crate::locking::lock(&self.pins)
            .entry(session.to_string())
            .or_default() += 1;
        LeasePin {
            book: Arc::clone(self),
            session: session.to_string(),
        }
    }

    fn pinned(&self, session: &str) -> bool {
        crate::locking::lock(&self.pins).contains_key(session)
    }

    /// How long a lease lasts unless renewed (fixed at the node's start).
    pub fn ttl(&self) -> Duration {
        self.backend.ttl()
    }

    /// How often held leases are renewed (or, in etcd, checked): a third of their time to
    /// live, so two renewals may fail before one runs out.
    pub fn renew_interval(&self) -> Duration {
        self.backend.ttl() / 3
    }

    /// Whether this node holds `session`'s lease.
    pub fn holds(&self, session: &str) -> bool {
        crate::locking::lock(&self.held).contains_key(session)
    }

    /// The fencing token under which this node holds `session` (etcd leases only): what
    /// its cells' log lines carry, so an audit can tell two holders apart.
    pub fn token(&self, session: &str) -> Option<i64> {
        crate::locking::lock(&self.held)
            .get(session)
            .copied()
            .flatten()
    }

    /// Whether this node can prove now that it holds `session`'s lease (what it must before
    /// running a cell of it).
    pub fn provable(&self, session: &str) -> bool {
        self.holds(session) && self.backend.provable(session)
    }

    /// Takes `session`'s lease unless this node holds it already. Blocks at most about the
    /// lease's time to live on an etcd backend: hosts call it off their event loop.
    pub fn acquire(&self, session: &str) -> Result<(), LeaseError> {
        if self.holds(session) {
            return Ok(());
        }
        let token = self.backend.acquire(session)?;
        tracing::debug!(session, ?token, "lease taken");
        crate::locking::lock(&self.held).insert(session.to_string(), token);
        Ok(())
    }

    /// Gives `session`'s lease up, once its workers here have stopped (and saved).
    pub fn release(&self, session: &str) {
        if crate::locking::lock(&self.held).remove(session).is_none() {
            return;
        }
        self.backend.release(session);
        tracing::debug!(session, "lease released");
    }

    /// Gives every lease up (the daemon's stop, once its sessions have saved).
    pub fn release_all(&self) {
        let sessions: Vec<String> = crate::locking::lock(&self.held).keys().cloned().collect();
        for session in sessions {
            self.release(&session);
        }
        self.backend.settle();
    }

    /// Renews the leases of the sessions `in_use` says are still used here and gives up
    /// the others.
    pub fn renew(&self, in_use: impl Fn(&str) -> bool) -> Renewal {
        let sessions: Vec<String> = crate::locking::lock(&self.held).keys().cloned().collect();
        let mut renewal = Renewal::default();
        for session in sessions {
            if !in_use(&session) && !self.pinned(&session) {
                self.release(&session);
                renewal.released.push(session);
                continue;
            }
            match self.backend.renew(&session) {
                Ok(()) => {}
                Err(err @ LeaseError::Io { .. }) => {
                    // Kept: the next round tries again, and the lease outlives two misses.
                    tracing::warn!(%session, "cannot renew the lease: {err}");
                }
                Err(err) => {
                    crate::locking::lock(&self.held).remove(&session);
                    renewal.lost.push((session, err));
                }
            }
        }
        renewal
    }

    /// The node holding `session`'s lease now, and for how long yet, if any does.
    pub fn holder(&self, session: &str) -> Option<(String, Duration)> {
        self.backend.holder(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

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

    #[test]
    fn a_pinned_lease_outlives_renewals_until_its_pin_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ttl = Duration::from_secs(30);
        let a = Arc::new(LeaseBook::new(
            LeaseDir::open(dir.path(), "a", ttl).expect("a"),
        ));
        a.acquire("s").expect("take");
        let first = a.pin("s");
        let second = a.pin("s");
        assert_eq!(a.renew(|_| false).released, Vec::<String>::new());
        drop(first);
        assert!(a.renew(|_| false).released.is_empty(), "one pin is left");
        drop(second);
        assert_eq!(a.renew(|_| false).released, ["s"]);
        assert!(!a.holds("s"));
    }
}
