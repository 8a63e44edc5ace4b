//! Leases on sessions, as files in the snapshot directory a fleet's nodes share:
//!
//! ```text
//! <snapshots.dir>/.leases/<session>.lease   {"session", "node", "nonce", "expires_unix_ms"}
//! ```
//!
//! Only a shared file system's plainest guarantees are relied on (they hold on NFS and the
//! usual ReadWriteMany volumes): a hard link fails if its name exists, a rename is atomic.
//! A lease is created whole under a temporary name and linked into place, so no node ever
//! reads half of one. An expired lease is moved aside before a new one is made; if what
//! was moved is not the lease that was judged expired (another node took it over in
//! between), it is linked back. Nodes' clocks must agree to well within the lease's time
//! to live, which NTP gives.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The directory the leases live in, under the snapshot directory.
pub const LEASES_DIR: &str = ".leases";
const SUFFIX: &str = ".lease";
/// How many times a contended acquisition is retried before it gives up.
const ATTEMPTS: usize = 4;

/// One node's view of the leases: where they are, who it is, how long a lease lasts.
#[derive(Debug)]
pub struct LeaseDir {
    dir: PathBuf,
    node: String,
    ttl: Duration,
}

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The session it is on.
    pub session: String,
    nonce: String,
    /// When it ends unless renewed.
    pub expires: SystemTime,
}

/// What a lease file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    session: String,
    node: String,
    nonce: String,
    expires_unix_ms: u64,
}

/// Why a lease was not taken, or is no longer held.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseError {
    /// Another node holds it, for this long yet unless it renews it.
    #[error("session {session} is held by node {node} (its lease ends in {} unless renewed)", humantime::format_duration(*expires_in))]
    HeldBy {
        /// The session.
        session: String,
        /// The node holding it.
        node: String,
        /// Until its lease runs out, to the millisecond.
        expires_in: Duration,
    },
    /// The lease this node held was taken over or removed: the session may be running
    /// elsewhere now.
    #[error("the lease on session {session} was lost: {why}")]
    Lost {
        /// The session.
        session: String,
        /// What happened to it.
        why: String,
    },
    /// The lease directory cannot be read or written.
    #[error("lease {path}: {why}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        why: String,
    },
}

impl LeaseDir {
    /// Opens (creating, mode 0700) the lease directory under `snapshots`.
    pub fn open(snapshots: &Path, node: &str, ttl: Duration) -> Result<LeaseDir, LeaseError> {
        let dir = snapshots.join(LEASES_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_error(&dir))?;
        Ok(LeaseDir {
            dir,
            node: node.to_string(),
            ttl,
        })
    }

    /// How long a lease lasts unless renewed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn path(&self, session: &str) -> PathBuf {
        self.dir.join(format!(
            "{}{SUFFIX}",
            crate::names::encode_component(session)
        ))
    }

    /// Takes the lease on `session`: made when there is none, taken over when it expired
    /// or is this node's own from an earlier life (a restart under the same name), refused
    /// while another node holds it.
    pub fn acquire(&self, session: &str, now: SystemTime) -> Result<Lease, LeaseError> {
        let path = self.path(session);
        for _ in 0..ATTEMPTS {
            let lease = self.new_lease(session, now);
            match self.create_exclusive(&path, &lease) {
                Ok(()) => return Ok(lease),
                Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
                Err(err) => return Err(io_error(&path)(err)),
            }
            let Some(found) = read_record(&path).map_err(io_error(&path))? else {
                continue; // released meanwhile
            };
            if found.node == self.node {
                self.write_over(&path, &lease).map_err(io_error(&path))?;
                return Ok(lease);
            }
            let expires = from_unix_ms(found.expires_unix_ms);
            if let Ok(left) = expires.duration_since(now) {
                // To the millisecond, as the record keeps it.
                let expires_in =
                    Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
                if !expires_in.is_zero() {
                    return Err(LeaseError::HeldBy {
                        session: session.to_string(),
                        node: found.node,
                        expires_in,
                    });
                }
            }
            self.remove_expired(&path, &found, &lease.nonce)
                .map_err(io_error(&path))?;
        }
        Err(LeaseError::Io {
            path,
            why: format!("still contended after {ATTEMPTS} attempts; retry"),
        })
    }

    /// Extends `lease` by the lease's time to live from `now`. A lease that already ran
    /// out, or whose file is no longer this node's, is lost: the session must stop here.
    pub fn renew(&self, lease: &mut Lease, now: SystemTime) -> Result<(), LeaseError> {
        let lost = |why: String| LeaseError::Lost {
            session: lease.session.clone(),
            why,
        };
        if lease.expires <= now {
            return Err(lost(
                "it ran out before it was renewed (was this node paused?)".into(),
            ));
        }
        let path = self.path(&lease.session);
        match read_record(&path).map_err(io_error(&path))? {
            None => return Err(lost("its file was removed".into())),
            Some(found) if found.nonce != lease.nonce => {
                return Err(lost(format!("node {} holds it now", found.node)));
            }
            Some(_) => {}
        }
        let renewed = Lease {
            expires: now + self.ttl,
            ..lease.clone()
        };
        self.write_over(&path, &renewed).map_err(io_error(&path))?;
        *lease = renewed;
        Ok(())
    }

    /// Gives `lease` up, if its file is still this node's.
    pub fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        let path = self.path(&lease.session);
        match read_record(&path).map_err(io_error(&path))? {
            Some(found) if found.nonce == lease.nonce => {
                remove_if_present(&path).map_err(io_error(&path))
            }
            _ => Ok(()),
        }
    }

    /// The node holding `session`'s lease now, and for how long yet; `None` when no live
    /// lease is on it.
    pub fn holder(&self, session: &str, now: SystemTime) -> Option<(String, Duration)> {
        let found = read_record(&self.path(session)).ok()??;
        let left = from_unix_ms(found.expires_unix_ms)
            .duration_since(now)
            .ok()?;
        let left = Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        (!left.is_zero()).then_some((found.node, left))
    }

    fn new_lease(&self, session: &str, now: SystemTime) -> Lease {
        Lease {
            session: session.to_string(),
            nonce: nonce(),
            expires: now + self.ttl,
        }
    }

    fn record(&self, lease: &Lease) -> Record {
        Record {
            session: lease.session.clone(),
            node: self.node.clone(),
            nonce: lease.nonce.clone(),
            expires_unix_ms: unix_ms(lease.expires),
        }
    }

    /// Writes `lease` whole under a temporary name, then links it to `path`: the link fails
    /// if `path` exists, so exactly one of several nodes creates it.
    fn create_exclusive(&self, path: &Path, lease: &Lease) -> std::io::Result<()> {
        let temp = self.write_temp(lease)?;
        let linked = fs::hard_link(&temp, path);
        let _ = fs::remove_file(&temp);
        linked
    }

    /// Replaces this node's own lease file at `path` (a renewal, or a takeover of its own).
    fn write_over(&self, path: &Path, lease: &Lease) -> std::io::Result<()> {
        let temp = self.write_temp(lease)?;
        fs::rename(&temp, path).inspect_err(|_| {
            let _ = fs::remove_file(&temp);
        })
    }

    fn write_temp(&self, lease: &Lease) -> std::io::Result<PathBuf> {
        let temp = self.dir.join(format!(".{}.tmp", lease.nonce));
        let bytes = serde_json::to_vec(&self.record(lease)).map_err(std::io::Error::other)?;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        Ok(temp)
    }

    /// Moves the expired lease `judged` out of the way; puts back what was moved if it is
    /// not that lease (another node replaced it in between).
    fn remove_expired(&self, path: &Path, judged: &Record, mine: &str) -> std::io::Result<()> {
        let aside = self.dir.join(format!(".{mine}.stale"));
        match fs::rename(path, &aside) {
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(()),
            other => other?,
        }
        let moved = read_record(&aside)?;
        if moved.as_ref().map(|m| &m.nonce) != Some(&judged.nonce) {
            // Not ours to remove: back it goes, unless yet another lease is in place now,
            // which then stands.
            let _ = fs::hard_link(&aside, path);
        }
        remove_if_present(&aside)
    }
}

/// The record at `path`: `None` when there is no file. A file that is not a lease record
/// (tampered with, or written by something else) reads as an expired lease of no node, so
/// it delays nothing and is replaced.
fn read_record(path: &Path) -> std::io::Result<Option<Record>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).unwrap_or(Record {
            session: String::new(),
            node: String::new(),
            nonce: String::new(),
            expires_unix_ms: 0,
        }))),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> LeaseError + '_ {
    move |err| LeaseError::Io {
        path: path.to_path_buf(),
        why: err.to_string(),
    }
}

/// 128 random bits, hex: which lease this is, whoever's node name it carries.
fn nonce() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Unique enough within one process when the kernel cannot give randomness.
        let now = unix_ms(SystemTime::now()) as u128;
        bytes = (now ^ ((std::process::id() as u128) << 64)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
