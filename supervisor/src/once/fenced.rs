//! Remembered requests under etcd's fenced pointer (etcd mode, docs/fleet.md): the signed,
//! chained log of [`file`](super::file), written to files named by the lease's fencing token
//! (`<session>/requests.d/<token>-<seq>.log`, never written by two holders), and current only
//! up to the length and chain tag a [`RequestsPointer`] committed under that token names. A
//! node that lost its lease may still write a file, but its commit is refused, so a session
//! moved to another node remembers exactly what its committed holders remembered: a retried
//! `request_id` is answered with the first result there, and what a stale node ran is not.

use super::file::{encode_hex, parse_chain, signed_line, LogError, RequestLog, Stamp, MAGIC};
use super::memory::{Entry, RequestMemory};
use crate::fleet::etcd::EtcdLeases;
use crate::fleet::pointer::{self, RequestsPointer};
use crate::locking::lock;
use crate::names::SessionName;
use crate::snapshots::SnapshotStore;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The directory of a session's request files, beside its languages' snapshot directories.
const DIR: &str = "requests.d";

/// How long a request's answer waits for etcd to commit its memory.
const COMMIT_WITHIN: Duration = Duration::from_secs(10);

/// [`RequestLog`] in files behind a fenced pointer in etcd.
#[derive(Debug)]
pub struct FencedRequestLog {
    store: Arc<SnapshotStore>,
    etcd: Arc<EtcdLeases>,
    /// Lines written anew past this many (twice the memory's capacity).
    max_lines: usize,
    /// Per session, the file this node appends to (under its current token).
    tails: Mutex<HashMap<SessionName, Tail>>,
}

#[derive(Debug, Clone)]
struct Tail {
    file: String,
    lines: usize,
    bytes: u64,
    tag: Vec<u8>,
}

impl FencedRequestLog {
    /// The log of `store`'s sessions behind `etcd`'s pointers, written anew past twice
    /// `capacity` lines.
    pub fn new(
        store: Arc<SnapshotStore>,
        etcd: Arc<EtcdLeases>,
        capacity: usize,
    ) -> FencedRequestLog {
        FencedRequestLog {
            store,
            etcd,
            max_lines: capacity.saturating_mul(2).max(2),
            tails: Mutex::new(HashMap::new()),
        }
    }

    fn dir(&self, session: &SessionName) -> PathBuf {
        let (path, _) = self.store.requests(session);
        path.with_file_name(DIR)
    }

    /// Writes `memory` whole to a new file under `session`'s token: the first write of a
    /// holder, and past `max_lines`.
    fn write_new(&self, session: &SessionName, memory: &RequestMemory) -> Result<Tail, LogError> {
        let dir = self.dir(session);
        let io = |source| LogError::Io {
            path: dir.clone(),
            source,
        };
        let (token, seq) = self.etcd.next_seq(session).ok_or_else(|| not_held(&dir))?;
        let (_, key) = self.store.requests(session);
        self.store.prepare_session(session).map_err(io)?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(err)),
            _ => {}
        }
        let mut text = MAGIC.to_vec();
        let mut tag = MAGIC.to_vec();
        let mut lines = 0;
        for entry in memory.entries() {
            let (line, next) = signed_line(&key, &tag, entry).map_err(io)?;
            text.extend_from_slice(&line);
            tag = next;
            lines += 1;
        }
        let file = pointer::requests_file_name(token, seq);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(&file))
            .map_err(io)?;
        out.write_all(&text).map_err(io)?;
        Ok(Tail {
            file,
            lines,
            bytes: text.len() as u64,
            tag,
        })
    }

    /// Appends `entry` to this node's file `tail`.
    fn append_line(
        &self,
        session: &SessionName,
        tail: Tail,
        entry: &Entry,
    ) -> Result<Tail, LogError> {
        let path = self.dir(session).join(&tail.file);
        let io = |source| LogError::Io {
            path: path.clone(),
            source,
        };
        let (_, key) = self.store.requests(session);
        let (line, tag) = signed_line(&key, &tail.tag, entry).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        if file.metadata().map_err(io)?.len() != tail.bytes {
            return Err(LogError::Refused {
                path,
                why: "changed by someone else since this node wrote it".into(),
            });
        }
        file.write_all(&line).map_err(io)?;
        Ok(Tail {
            file: tail.file,
            lines: tail.lines + 1,
            bytes: tail.bytes + line.len() as u64,
            tag,
        })
    }
}

fn not_held(path: &std::path::Path) -> LogError {
    LogError::Refused {
        path: path.to_path_buf(),
        why: "this node holds no lease on the session: what it remembers cannot become current"
            .into(),
    }
}

fn stamp_of(pointer: &RequestsPointer) -> Stamp {
    let seq = pointer::requests_file_order(&pointer.file).map_or(0, |(_, seq)| seq);
    Stamp::committed(pointer.token, seq, pointer.bytes)
}

impl RequestLog for FencedRequestLog {
    fn stamp(&self, session: &SessionName) -> Option<Stamp> {
        self.etcd
            .requests(session)
            .ok()
            .flatten()
            .map(|p| stamp_of(&p))
    }

    fn load(&self, session: &SessionName) -> Result<Option<(Vec<Entry>, Stamp)>, LogError> {
        let Some(current) = self.etcd.requests(session).ok().flatten() else {
            lock(&self.tails).remove(session);
            return Ok(None);
        };
        let path = self.dir(session).join(&current.file);
        let refuse = |why: String| LogError::Refused {
            path: path.clone(),
            why,
        };
        let mut bytes = Vec::new();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes))
            .map_err(|e| {
                refuse(format!(
                    "the file etcd names as current cannot be read: {e}"
                ))
            })?;
        let Some(committed) = usize::try_from(current.bytes)
            .ok()
            .and_then(|n| bytes.get(..n))
        else {
            return Err(refuse(format!(
                "shorter ({} bytes) than the {} bytes etcd names as current: never read",
                bytes.len(),
                current.bytes
            )));
        };
        let (_, key) = self.store.requests(session);
        let (entries, tag) = parse_chain(&key, committed).map_err(&refuse)?;
        if encode_hex(&tag) != current.tag {
            return Err(refuse(
                "not the one etcd names as current (its chain ends elsewhere): never read".into(),
            ));
        }
        // Appended to only under this node's own token.
        let own = self.etcd.token(session) == Some(current.token);
        if own {
            let tail = Tail {
                file: current.file.clone(),
                lines: entries.len(),
                bytes: current.bytes,
                tag,
            };
            lock(&self.tails).insert(session.clone(), tail);
        } else {
            lock(&self.tails).remove(session);
        }
        Ok(Some((entries, stamp_of(&current))))
    }

    fn append(
        &self,
        session: &SessionName,
        entry: &Entry,
        memory: &RequestMemory,
    ) -> Result<Stamp, LogError> {
        let tail = lock(&self.tails).remove(session);
        let written = match tail.filter(|t| t.lines < self.max_lines) {
            Some(tail) => self
                .append_line(session, tail, entry)
                .or_else(|_| self.write_new(session, memory))?,
            None => self.write_new(session, memory)?,
        };
        let dir = self.dir(session);
        let Some((token, _)) = pointer::requests_file_order(&written.file) else {
            return Err(not_held(&dir));
        };
        let committed = RequestsPointer {
            file: written.file.clone(),
            bytes: written.bytes,
            tag: encode_hex(&written.tag),
            node: self.store.node().to_string(),
            token,
        };
        self.etcd
            .commit_requests(session, committed.clone(), COMMIT_WITHIN)
            .map_err(|err| LogError::Refused {
                path: dir.join(&written.file),
                why: format!("not committed as the session's memory in etcd: {err}"),
            })?;
        for stale in pointer::unreferenced_requests(&dir, &written.file) {
            let _ = std::fs::remove_file(stale);
        }
        lock(&self.tails).insert(session.clone(), written);
        Ok(stamp_of(&committed))
    }

    fn progress(&self, session: &SessionName) -> Vec<super::progress::Progress> {
        self.etcd.progress(session)
    }

    fn under_lease(&self) -> bool {
        true
    }

    fn current(&self, session: &SessionName) -> bool {
        self.etcd.provable(session)
    }

    /// Forgets the pointer (fenced) and the files written under this node's token or older
    /// ones; a node that holds no lease forgets nothing (a newer holder's files stay).
    fn forget(&self, session: &SessionName) -> Result<(), LogError> {
        lock(&self.tails).remove(session);
        let Some(token) = self.etcd.token(session) else {
            return Ok(());
        };
        self.etcd.forget_requests(session);
        let dir = self.dir(session);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => {
                return Err(LogError::Io {
                    path: dir,
                    source: err,
                })
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if pointer::requests_file_order(&name.to_string_lossy())
                .is_some_and(|(t, _)| t <= token)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "etcd"))]
#[path = "fenced_tests.rs"]
mod tests;
