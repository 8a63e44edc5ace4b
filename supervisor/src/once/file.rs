//! Where a session's remembered requests live between runs, behind a seam ([`RequestLog`]):
//! today a signed file beside the session's snapshots, so a session restored after a
//! restart or moved to another node of a fleet (which shares the snapshot directory) still
//! remembers; a fenced store can take over by implementing the trait.
//!
//! The file is `CVREQS01\n`, the HMAC-SHA256 (hex) of the body under a key derived for the
//! session from the snapshot key, `\n`, then the body (JSON). A file altered, cut, or copied
//! from another session fails its tag and is refused.

use super::memory::RequestMemory;
use crate::names::SessionName;
use crate::snapshots::SnapshotStore;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

const MAGIC: &[u8] = b"CVREQS01\n";
const TAG_HEX: usize = 64;

/// Which write of a session's file the host last read or wrote: a file whose stamp changed
/// was written by another node (the session moved) and is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
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
    /// What is kept for `session`, checked, with its stamp.
    fn load(&self, session: &SessionName) -> Result<Option<(RequestMemory, Stamp)>, LogError>;
    /// Keeps `memory` for `session` (replacing what was kept); answers the new stamp.
    fn save(&self, session: &SessionName, memory: &RequestMemory) -> Result<Stamp, LogError>;
    /// Forgets `session`'s requests (`close`, `reset`, a refused file).
    fn forget(&self, session: &SessionName) -> Result<(), LogError>;
}

/// [`RequestLog`] as a signed file in each session's snapshot directory.
#[derive(Debug)]
pub struct FileRequestLog {
    store: Arc<SnapshotStore>,
}

impl FileRequestLog {
    /// The log kept in `store`'s session directories, signed with its key.
    pub fn new(store: Arc<SnapshotStore>) -> FileRequestLog {
        FileRequestLog { store }
    }
}

fn tag(key: &[u8], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(body);
    mac
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

    fn load(&self, session: &SessionName) -> Result<Option<(RequestMemory, Stamp)>, LogError> {
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
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io(err)),
        };
        let stamp = stamp_of(&file.metadata().map_err(io)?);
        let bytes = std::io::read_to_string(file).map_err(io)?.into_bytes();
        let refuse = |why: &str| LogError::Refused {
            path: path.clone(),
            why: why.to_string(),
        };
        let rest = bytes
            .strip_prefix(MAGIC)
            .ok_or_else(|| refuse("not a file of remembered requests"))?;
        if rest.len() < TAG_HEX + 1 || rest[TAG_HEX] != b'\n' {
            return Err(refuse("cut short"));
        }
        let (hex, body) = (&rest[..TAG_HEX], &rest[TAG_HEX + 1..]);
        let expected = decode_hex(hex).ok_or_else(|| refuse("its tag is not hex"))?;
        tag(&key, body)
            .verify_slice(&expected)
            .map_err(|_| refuse("its integrity check failed (altered, or another session's)"))?;
        let memory = serde_json::from_slice(body).map_err(|e| refuse(&e.to_string()))?;
        Ok(Some((memory, stamp)))
    }

    fn save(&self, session: &SessionName, memory: &RequestMemory) -> Result<Stamp, LogError> {
        let (path, key) = self.store.requests(session);
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let dir = self.store.prepare_session(session).map_err(io)?;
        let body = serde_json::to_vec(memory).map_err(|e| io(std::io::Error::other(e)))?;
        let mac = tag(&key, &body).finalize().into_bytes();
        let mut temp = tempfile::Builder::new()
            .prefix(".requests-")
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(io)?;
        let file = temp.as_file_mut();
        file.write_all(MAGIC).map_err(io)?;
        file.write_all(encode_hex(&mac).as_bytes()).map_err(io)?;
        file.write_all(b"\n").map_err(io)?;
        file.write_all(&body).map_err(io)?;
        file.flush().map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        temp.persist(&path).map_err(|e| io(e.error))?;
        Ok(stamp_of(&meta))
    }

    fn forget(&self, session: &SessionName) -> Result<(), LogError> {
        let (path, _) = self.store.requests(session);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(LogError::Io { path, source: err })
            }
            _ => Ok(()),
        }
    }
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    hex.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::memory::Entry;
    use super::*;

    fn log(dir: &std::path::Path, node: &str) -> FileRequestLog {
        let store = SnapshotStore::open(&dir.join("snapshots"), None, node).expect("store");
        FileRequestLog::new(Arc::new(store))
    }

    fn memory(id: &str) -> RequestMemory {
        let mut memory = RequestMemory::default();
        memory.remember(
            Entry {
                id: id.into(),
                fingerprint: "f".into(),
                result: Some(crate::cell::EvalResult::from_cells(Vec::new())),
                bytes: 10,
            },
            8,
            1000,
        );
        memory
    }

    #[test]
    fn what_is_saved_comes_back_and_a_new_write_changes_the_stamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log(dir.path(), "n");
        let session = SessionName::from("s");
        assert!(log.load(&session).expect("load").is_none());
        assert_eq!(log.stamp(&session), None);
        let first = log.save(&session, &memory("a")).expect("save");
        assert_eq!(log.stamp(&session), Some(first));
        let (back, stamp) = log.load(&session).expect("load").expect("kept");
        assert_eq!((back, stamp), (memory("a"), first));
        let second = log.save(&session, &memory("b")).expect("save");
        assert_ne!(first, second);
        log.forget(&session).expect("forget");
        assert!(log.load(&session).expect("load").is_none());
    }

    #[test]
    fn an_altered_cut_or_other_sessions_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log(dir.path(), "n");
        let (mine, other) = (SessionName::from("mine"), SessionName::from("other"));
        log.save(&mine, &memory("a")).expect("save");
        log.save(&other, &memory("b")).expect("save");
        let (path, _) = log.store.requests(&mine);
        let (other_path, _) = log.store.requests(&other);
        // Another session's file, copied over this one's.
        std::fs::copy(&other_path, &path).expect("copy");
        let err = log.load(&mine).expect_err("copied");
        assert!(err.to_string().contains("integrity check failed"), "{err}");
        // Altered: one byte of the body.
        log.save(&mine, &memory("a")).expect("save");
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 2;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(log.load(&mine), Err(LogError::Refused { .. })));
        // Cut.
        std::fs::write(&path, &bytes[..20]).expect("write");
        assert!(log
            .load(&mine)
            .expect_err("cut")
            .to_string()
            .contains("cut short"));
        // A file another daemon's key signed.
        let stranger = self::log(&dir.path().join("elsewhere"), "n");
        stranger.save(&mine, &memory("a")).expect("save");
        let (theirs, _) = stranger.store.requests(&mine);
        std::fs::copy(theirs, &path).expect("copy");
        assert!(matches!(log.load(&mine), Err(LogError::Refused { .. })));
    }
}
