//! What a lease store does for a [`LeaseBook`](super::LeaseBook): the file leases in the
//! shared snapshot directory (one host, or machines that never pause), or etcd's (fenced,
//! safe across machines that can pause).

#[cfg(feature = "etcd")]
use super::etcd::EtcdLeases;
use super::lease::{Lease, LeaseDir, LeaseError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// A store of session leases, seen from one node.
pub trait LeaseBackend: Send + Sync + std::fmt::Debug {
    /// How long a lease lasts unless renewed.
    fn ttl(&self) -> Duration;
    /// Takes `session`'s lease; its fencing token when the store gives one.
    fn acquire(&self, session: &str) -> Result<Option<i64>, LeaseError>;
    /// Keeps `session`'s lease held (a file lease is renewed; an etcd lease renews itself
    /// and is checked): `Err(Lost)` once it is not held any more. An `Io` error leaves it
    /// held, to be tried again.
    fn renew(&self, session: &str) -> Result<(), LeaseError>;
    /// Whether the lease on `session` is provably this node's now.
    fn provable(&self, session: &str) -> bool;
    /// Gives `session`'s lease up.
    fn release(&self, session: &str);
    /// The node holding `session`'s lease, and how long it has yet.
    fn holder(&self, session: &str) -> Option<(String, Duration)>;
    /// Waits for what released leases still have under way (the daemon's stop).
    fn settle(&self) {}
}

/// Leases as files in the snapshot directory: safe only while nodes' clocks agree and no
/// node pauses past its lease (a paused holder does not know it lost it).
#[derive(Debug)]
pub struct FileLeases {
    dir: LeaseDir,
    held: Mutex<HashMap<String, Lease>>,
}

impl FileLeases {
    /// The leases of `dir`, none held yet.
    pub fn new(dir: LeaseDir) -> FileLeases {
        FileLeases {
            dir,
            held: Mutex::new(HashMap::new()),
        }
    }
}

impl LeaseBackend for FileLeases {
    fn ttl(&self) -> Duration {
        self.dir.ttl()
    }

    fn acquire(&self, session: &str) -> Result<Option<i64>, LeaseError> {
        let lease = self.dir.acquire(session, SystemTime::now())?;
        crate::locking::lock(&self.held).insert(session.to_string(), lease);
        Ok(None)
    }

    fn renew(&self, session: &str) -> Result<(), LeaseError> {
        let Some(mut lease) = crate::locking::lock(&self.held).get(session).cloned() else {
            return Err(LeaseError::Lost {
                session: session.to_string(),
                why: "not held here".into(),
            });
        };
        match self.dir.renew(&mut lease, SystemTime::now()) {
            Ok(()) => {
                crate::locking::lock(&self.held).insert(session.to_string(), lease);
                Ok(())
            }
            Err(err @ LeaseError::Io { .. }) => Err(err),
            Err(err) => {
                crate::locking::lock(&self.held).remove(session);
                Err(err)
            }
        }
    }

    fn provable(&self, session: &str) -> bool {
        crate::locking::lock(&self.held)
            .get(session)
            .is_some_and(|lease| lease.expires > SystemTime::now())
    }

    fn release(&self, session: &str) {
        let Some(lease) = crate::locking::lock(&self.held).remove(session) else {
            return;
        };
        if let Err(err) = self.dir.release(&lease) {
            tracing::warn!(session, "cannot release the lease: {err}");
        }
    }

    fn holder(&self, session: &str) -> Option<(String, Duration)> {
        self.dir.holder(session, SystemTime::now())
    }
}

#[cfg(feature = "etcd")]
impl LeaseBackend for EtcdLeases {
    fn ttl(&self) -> Duration {
        EtcdLeases::ttl(self)
    }

    fn acquire(&self, session: &str) -> Result<Option<i64>, LeaseError> {
        EtcdLeases::acquire(self, session).map(Some)
    }

    fn renew(&self, session: &str) -> Result<(), LeaseError> {
        self.check(session)
    }

    fn provable(&self, session: &str) -> bool {
        EtcdLeases::provable(self, session)
    }

    fn release(&self, session: &str) {
        EtcdLeases::release(self, session);
    }

    fn holder(&self, session: &str) -> Option<(String, Duration)> {
        EtcdLeases::holder(self, session)
    }

    fn settle(&self) {
        EtcdLeases::settle(self, Duration::from_secs(5));
    }
}
