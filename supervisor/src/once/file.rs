//! Where a session's remembered requests live between runs, behind a seam ([`RequestLog`]):
//! today a signed log beside the session's snapshots, so a session restored after a restart
//! or moved to another node of a fleet (which shares the snapshot directory) still
//! remembers; a fenced store can take over by implementing the trait.
//!
//! The file is `CVREQS02\n`, then one line per remembered request: the HMAC-SHA256 (hex) of
//! the previous line's tag and this entry's JSON, under a key derived for the session from
//! the snapshot key, a space, the JSON. A request appends one line (its cost does not grow
//! with the memory); past twice the memory's capacity in lines the file is written again
//! with the entries kept. The chain makes a line altered, moved, dropped from the middle, or
//! taken from another session's file fail its check; a line torn by a crash (the last one,
//! without its newline) is left out.

use super::memory::{Entry, RequestMemory};
use crate::locking::lock;
use crate::names::SessionName;
use crate::snapshots::SnapshotStore;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub(super) const MAGIC: &[u8] = b"CVREQS02\n";
const TAG_HEX: usize = 64;

/// Which write of a session's file the host last read or wrote: a file whose stamp changed
/// was written by another node (the session moved) and is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    /// The stamp of a committed pointer (etcd mode): its file's token and sequence number
    /// and its length, which change with every commit.
    pub(super) fn committed(token: i64, seq: u64, bytes: u64) -> Stamp {
        Stamp {
            ino: u64::try_from(token).unwrap_or_default(),
            len: bytes,
            mtime_ns: i128::from(seq),
        }
    }
}

/// Why remembered requests could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file system refused.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not one this session's key signed.
    #[error("{path} refused: {why}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// What failed.
        why: String,
    },
}

/// Keeps each session's remembered requests between runs.
pub trait RequestLog: Send + Sync + std::fmt::Debug {
    /// The stamp of what is kept for `session` now (`None`: nothing), cheap to ask.
    fn stamp(&self, session: &SessionName) -> Option<Stamp>;
    /// What is kept for `session`, checked: its entries oldest first, and its stamp.
    fn load(&self, session: &SessionName) -> Result<Option<(Vec<Entry>, Stamp)>, LogError>;
    /// Keeps `entry`, the newest of `memory` (which holds all that is to be kept, should
    /// the store rewrite it whole); answers the new stamp.
    fn append(
        &self,
        session: &SessionName,
        entry: &Entry,
        memory: &RequestMemory,
    ) -> Result<Stamp, LogError>;
    /// Forgets `session`'s requests (`close`, `reset`, a refused file).
    fn forget(&self, session: &SessionName) -> Result<(), LogError>;
    /// The progress of the requests that `session`'s committed states carry (etcd mode: one
    /// per language, the cells of it that state includes); none where states carry none.
    fn progress(&self, _session: &SessionName) -> Vec<super::progress::Progress> {
        Vec::new()
    }
    /// Whether what is kept for `session` and its committed progress can be read here now
    /// (etcd mode: only while this node can prove it holds the session's lease; what it
    /// read with the lease is current only then).
    fn current(&self, _session: &SessionName) -> bool {
        true
    }
    /// Whether what is kept for a session becomes current only under the session's lease
    /// (etcd mode): a request remembered by a session must then hold its lease.
    fn under_lease(&self) -> bool {
        false
    }
}

/// [`RequestLog`] as a signed, chained log in each session's snapshot directory.
#[derive(Debug)]
pub struct FileRequestLog {
    store: Arc<SnapshotStore>,
    /// Lines rewritten whole past this many (twice the memory's capacity).
    max_lines: usize,
    /// Per session as this host last read or wrote it: its lines and the last tag.
    tails: Mutex<HashMap<SessionName, Tail>>,
}

#[derive(Debug, Clone)]
struct Tail {
    lines: usize,
    tag: Vec<u8>,
    stamp: Stamp,
}

impl FileRequestLog {
    /// The log kept in `store`'s session directories, signed with its key, rewritten whole
    /// past twice `capacity` lines.
    pub fn new(store: Arc<SnapshotStore>, capacity: usize) -> FileRequestLog {
        FileRequestLog {
            store,
            max_lines: capacity.saturating_mul(2).max(2),
            tails: Mutex::new(HashMap::new()),
        }
    }

    /// Writes `memory` whole, as a new chain, in place of the file (atomically).
    fn rewrite(&self, session: &SessionName, memory: &RequestMemory) -> Result<Stamp, LogError> {
        let (path, key) = self.store.requests(session);
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let dir = self.store.prepare_session(session).map_err(io)?;
        let mut text = MAGIC.to_vec();
        let mut tag = MAGIC.to_vec();
        let mut lines = 0;
        for entry in memory.entries() {
            let (line, next) = signed_line(&key, &tag, entry).map_err(io)?;
            text.extend_from_slice(&line);
            tag = next;
            lines += 1;
        }
        let mut temp = tempfile::Builder::new()
            .prefix(".requests-")
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(io)?;
        temp.as_file_mut().write_all(&text).map_err(io)?;
        let meta = temp.as_file().metadata().map_err(io)?;
        temp.persist(&path).map_err(|e| io(e.error))?;
        let stamp = stamp_of(&meta);
        lock(&self.tails).insert(session.clone(), Tail { lines, tag, stamp });
        Ok(stamp)
    }
}

fn mac(key: &[u8], previous: &[u8], body: &[u8]) -> Vec<u8> {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        // HMAC takes keys of any length; this cannot fail.
        return Vec::new();
    };
    mac.update(previous);
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// The line of `entry` chained to `previous`, and its tag.
pub(super) fn signed_line(
    key: &[u8],
    previous: &[u8],
    entry: &Entry,
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let body = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
    let tag = mac(key, previous, &body);
    let mut line = encode_hex(&tag).into_bytes();
    line.push(b' ');
    line.extend_from_slice(&body);
    line.push(b'\n');
    Ok((line, tag))
}

fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
    Stamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    }
}

impl RequestLog for FileRequestLog {
    fn stamp(&self, session: &SessionName) -> Option<Stamp> {
        let (path, _) = self.store.requests(session);
        std::fs::symlink_metadata(path).ok().map(|m| stamp_of(&m))
    }

    fn load(&self, session: &SessionName) -> Result<Option<(Vec<Entry>, Stamp)>, LogError> {
        let (path, key) = self.store.requests(session);
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                lock(&self.tails).remove(session);
                return Ok(None);
            }
            Err(err) => return Err(io(err)),
        };
        let stamp = stamp_of(&file.metadata().map_err(io)?);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io)?;
        let (entries, tag) = parse_chain(&key, &bytes).map_err(|why| LogError::Refused {
            path: path.clone(),
            why,
        })?;
        let tail = Tail {
            lines: entries.len(),
            tag,
            stamp,
        };
        lock(&self.tails).insert(session.clone(), tail);
        Ok(Some((entries, stamp)))
    }

    fn append(
        &self,
        session: &SessionName,
        entry: &Entry,
        memory: &RequestMemory,
    ) -> Result<Stamp, LogError> {
        // Appended only onto the file as this host last saw it, and while short enough.
        let tail = lock(&self.tails).get(session).cloned();
        let current = self.stamp(session);
        let Some(tail) = tail.filter(|t| Some(t.stamp) == current && t.lines < self.max_lines)
        else {
            return self.rewrite(session, memory);
        };
        let (path, key) = self.store.requests(session);
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let (line, tag) = signed_line(&key, &tail.tag, entry).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        if let Err(err) = file.write_all(&line) {
            // A partial line would break the chain for the next append: start afresh.
            lock(&self.tails).remove(session);
            return Err(io(err));
        }
        let stamp = stamp_of(&file.metadata().map_err(io)?);
        let tail = Tail {
            lines: tail.lines + 1,
            tag,
            stamp,
        };
        lock(&self.tails).insert(session.clone(), tail);
        Ok(stamp)
    }

    fn forget(&self, session: &SessionName) -> Result<(), LogError> {
        lock(&self.tails).remove(session);
        let (path, _) = self.store.requests(session);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(LogError::Io { path, source: err })
            }
            _ => Ok(()),
        }
    }
}

/// The entries of a log's text `bytes` signed under `key`, checked line by line, and the
/// chain's last tag; `Err` says which line failed. A last line without its newline is a
/// write a crash cut: left out.
pub(super) fn parse_chain(key: &[u8], bytes: &[u8]) -> Result<(Vec<Entry>, Vec<u8>), String> {
    let mut rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| "not a file of remembered requests".to_string())?;
    let mut tag = MAGIC.to_vec();
    let mut entries = Vec::new();
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let (line, after) = (&rest[..end], &rest[end + 1..]);
        rest = after;
        let number = entries.len() + 1;
        if line.len() < TAG_HEX + 1 || line[TAG_HEX] != b' ' {
            return Err(format!("line {number} is not a signed entry"));
        }
        let (hex, body) = (&line[..TAG_HEX], &line[TAG_HEX + 1..]);
        let expected = mac(key, &tag, body);
        if decode_hex(hex).as_deref() != Some(expected.as_slice()) {
            return Err(format!(
                "line {number} failed its integrity check (altered, moved, or another \
                 session's)"
            ));
        }
        let entry: Entry =
            serde_json::from_slice(body).map_err(|e| format!("line {number}: {e}"))?;
        entries.push(entry);
        tag = expected;
    }
    Ok((entries, tag))
}

pub(super) fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    hex.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
