//! The snapshot directory: one private directory per session and language, holding its
//! latest snapshot and its named checkpoints, and the daemon's key, from which each
//! session's integrity key is derived.
//!
//! ```text
//! <dir>/.key                         32 random bytes, 0600: the daemon's key
//! <dir>/<session>/<lang>/latest.snap the snapshot the next cell restores
//! <dir>/<session>/<lang>/checkpoints/<name>.snap
//! ```
//!
//! A worker gets only its own session's derived key, so a cell that reads it from its
//! worker's memory can forge nothing but its own session's snapshots. A fleet's nodes
//! share one master key instead (`snapshots.key-file`), so each verifies what another
//! wrote and nothing else.

use crate::names::SessionName;
use crate::session::SessionKey;
use crate::state::CheckpointInfo;
use cellvisor_ipc::Language;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const KEY_FILE: &str = ".key";
const KEY_BYTES: usize = 32;
/// The shortest master key a key file may hold.
pub const MIN_KEY_FILE_BYTES: usize = KEY_BYTES;
const LATEST: &str = "latest.snap";
const CHECKPOINTS: &str = "checkpoints";
const SUFFIX: &str = ".snap";
/// The directory of a session's recorded workspaces (no language's short name).
const WORKSPACE: &str = "workspace";
/// The file of a session's remembered requests (no language's short name either).
const REQUESTS: &str = "requests.mem";
/// The longest checkpoint name.
pub const MAX_CHECKPOINT_NAME: usize = 64;

/// The snapshot directory of a daemon.
#[derive(Debug)]
pub struct SnapshotStore {
    root: PathBuf,
    key: Vec<u8>,
    /// This node's name, written into every snapshot for the ledger.
    node: String,
    /// In etcd mode, where the current snapshots are named (`fleet::etcd`): latest snapshots
    /// are then immutable blobs behind fenced pointers, not `latest.snap`.
    fenced: std::sync::OnceLock<std::sync::Arc<crate::fleet::etcd::EtcdLeases>>,
    /// How long a recorded workspace's change waits for its lock ([`Self::set_tree_lock_wait`]:
    /// it follows `snapshots.timeout` through a reload).
    tree_lock_wait: std::sync::Mutex<std::time::Duration>,
}

/// Why the snapshot directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory or its key file cannot be created or read.
    #[error("snapshot directory {path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key file is not one this code wrote.
    #[error("snapshot key {0} is not {KEY_BYTES} bytes: remove it (existing snapshots then fail their integrity check) or restore it")]
    BadKey(PathBuf),
    /// `snapshots.key-file` cannot serve as the fleet's key.
    #[error("snapshots.key-file {path}: {why}")]
    KeyFile {
        /// The file named.
        path: PathBuf,
        /// What is wrong with it and what is allowed.
        why: String,
    },
}

impl SnapshotStore {
    /// Opens (creating, mode 0700) the directory `root`; its master key is read from
    /// `key_file` when one is given, else from (or made at) `<root>/.key`. `node` names
    /// this daemon in the snapshots it writes.
    pub fn open(
        root: &Path,
        key_file: Option<&Path>,
        node: &str,
    ) -> Result<SnapshotStore, StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        private_dir(root).map_err(io(root))?;
        let key = match key_file {
            Some(path) => read_key_file(path)?,
            None => {
                let key_path = root.join(KEY_FILE);
                match fs::read(&key_path) {
                    Ok(bytes) if bytes.len() == KEY_BYTES => bytes,
                    Ok(_) => return Err(StoreError::BadKey(key_path)),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        new_key(&key_path).map_err(io(&key_path))?.to_vec()
                    }
                    Err(err) => return Err(io(&key_path)(err)),
                }
            }
        };
        Ok(SnapshotStore {
            root: root.to_path_buf(),
            key,
            node: node.to_string(),
            fenced: std::sync::OnceLock::new(),
            tree_lock_wait: std::sync::Mutex::new(super::tree::session::DEFAULT_LOCK_WAIT),
        })
    }

    /// Its recorded workspaces wait `wait` at most for a lock another process holds, from
    /// the next change on.
    pub fn set_tree_lock_wait(&self, wait: std::time::Duration) {
        *crate::locking::lock(&self.tree_lock_wait) = wait;
    }

    /// Puts the latest snapshots behind `etcd`'s fenced pointers (etcd mode).
    pub fn fence(&self, etcd: std::sync::Arc<crate::fleet::etcd::EtcdLeases>) {
        let _ = self.fenced.set(etcd);
    }

    /// The fenced pointers, in etcd mode.
    pub fn fenced(&self) -> Option<&std::sync::Arc<crate::fleet::etcd::EtcdLeases>> {
        self.fenced.get()
    }

    /// The blob `name` of `key` (etcd mode).
    pub fn blob(&self, key: &SessionKey, name: &str) -> PathBuf {
        self.dir(key)
            .join(crate::fleet::pointer::BLOBS_DIR)
            .join(name)
    }

    /// This node's name, as its snapshots record it.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The directory a session's worker in `language` keeps its snapshots in (the only
    /// state path it may write under the sandbox besides its others).
    pub fn dir(&self, key: &SessionKey) -> PathBuf {
        self.session_root(&key.session)
            .join(key.language.short_name())
    }

    fn session_root(&self, session: &SessionName) -> PathBuf {
        self.root.join(session.dir_name())
    }

    /// Creates [`dir`](Self::dir) (0700, and its checkpoints directory).
    pub fn prepare(&self, key: &SessionKey) -> std::io::Result<PathBuf> {
        let dir = self.dir(key);
        if crate::isolation::dirs::foreign_owner(&dir).is_some() {
            // The session's own uid owns it (`isolation.level = "uid"`): made and given to
            // it when the session started.
            return Ok(dir);
        }
        private_dir(&self.session_root(&key.session))?;
        private_dir(&dir)?;
        private_dir(&dir.join(CHECKPOINTS))?;
        if self.fenced().is_some() {
            private_dir(&dir.join(crate::fleet::pointer::BLOBS_DIR))?;
        }
        Ok(dir)
    }

    /// The snapshot the next cell of `key` restores.
    pub fn latest(&self, key: &SessionKey) -> PathBuf {
        self.dir(key).join(LATEST)
    }

    /// Whether `key` has a latest snapshot (in etcd mode: a pointer, read when this node
    /// took the session's lease).
    pub fn has_latest(&self, key: &SessionKey) -> bool {
        match self.fenced() {
            Some(etcd) => etcd.pointer(&key.session, key.language).is_some(),
            None => self.latest(key).is_file(),
        }
    }

    /// The file of checkpoint `name` (already checked by [`check_checkpoint_name`]).
    pub fn checkpoint(&self, key: &SessionKey, name: &str) -> PathBuf {
        self.dir(key)
            .join(CHECKPOINTS)
            .join(format!("{name}{SUFFIX}"))
    }

    /// The integrity key of one session's snapshots in one language.
    pub fn session_key(&self, key: &SessionKey) -> Vec<u8> {
        derive(&self.key, &key.session, key.language)
    }

    /// The recorded workspaces of `session` (`<dir>/<session>/workspace`), authenticated
    /// with a key derived for its workspace alone.
    pub fn trees(&self, session: &SessionName) -> super::tree::session::SessionTrees {
        super::tree::session::SessionTrees::new(
            self.session_root(session).join(WORKSPACE),
            derive_for(&self.key, session, WORKSPACE),
            &self.node,
        )
        .with_lock_wait(*crate::locking::lock(&self.tree_lock_wait))
    }

    /// The file that remembers `session`'s recent request ids and their answers
    /// (`<dir>/<session>/requests.mem`), beside its snapshots, and the key that signs it.
    pub fn requests(&self, session: &SessionName) -> (PathBuf, Vec<u8>) {
        (
            self.session_root(session).join(REQUESTS),
            derive_for(&self.key, session, REQUESTS),
        )
    }

    /// Creates `session`'s directory (0700), for a file of the session's own.
    pub fn prepare_session(&self, session: &SessionName) -> std::io::Result<PathBuf> {
        let root = self.session_root(session);
        private_dir(&root)?;
        Ok(root)
    }

    /// The recorded workspaces of every session that has some (for the sweep).
    pub fn all_trees(&self) -> Vec<super::tree::session::SessionTrees> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().join(WORKSPACE).is_dir())
            .filter_map(|e| {
                let name = decode_component(&e.file_name().to_string_lossy())?;
                SessionName::parse_key(&name).ok()
            })
            .map(|session| self.trees(&session))
            .collect()
    }

    /// Deletes everything of `session` (one language, or all): `close` and `reset` mean
    /// "forget".
    pub fn forget(&self, session: &SessionName, language: Option<Language>) -> std::io::Result<()> {
        let target = match language {
            Some(language) => self.session_root(session).join(language.short_name()),
            None => self.session_root(session),
        };
        match fs::remove_dir_all(&target) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    }

    /// The checkpoints of `session`, in every language, sorted by language and name.
    pub fn checkpoints(&self, session: &SessionName) -> Vec<CheckpointInfo> {
        let mut found = Vec::new();
        for language in Language::ALL {
            let key = SessionKey {
                session: session.clone(),
                language,
            };
            let Ok(entries) = fs::read_dir(self.dir(&key).join(CHECKPOINTS)) else {
                continue;
            };
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                    continue;
                };
                if check_checkpoint_name(name).is_err() {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                found.push(CheckpointInfo {
                    session: session.to_string(),
                    language,
                    name: name.to_string(),
                    bytes: meta.len(),
                    taken_at: rfc3339(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)),
                    workspace: None,
                });
            }
        }
        found.sort_by(|a, b| (a.language, &a.name).cmp(&(b.language, &b.name)));
        found
    }

    /// The languages of `session` with a checkpoint `name`.
    pub fn languages_with_checkpoint(&self, session: &SessionName, name: &str) -> Vec<Language> {
        Language::ALL
            .into_iter()
            .filter(|&language| {
                let key = SessionKey {
                    session: session.clone(),
                    language,
                };
                self.checkpoint(&key, name).is_file()
            })
            .collect()
    }

    /// The languages of `session` with a latest snapshot.
    pub fn languages_with_latest(&self, session: &SessionName) -> Vec<Language> {
        Language::ALL
            .into_iter()
            .filter(|&language| {
                self.has_latest(&SessionKey {
                    session: session.clone(),
                    language,
                })
            })
            .collect()
    }

    /// The root, for the sweep.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// A checkpoint name is a file name: 1 to [`MAX_CHECKPOINT_NAME`] characters from
/// `A-Z a-z 0-9 . _ -`, not starting with a dot (no hidden files, no `..`).
pub fn check_checkpoint_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > MAX_CHECKPOINT_NAME
        || name.starts_with('.')
        || !name.chars().all(allowed)
    {
        return Err(name.to_string());
    }
    Ok(())
}

/// The key of one session and language: HMAC-SHA256 of both under the daemon's key.
fn derive(master: &[u8], session: &str, language: Language) -> Vec<u8> {
    derive_for(master, session, language.short_name())
}

/// The key of one session's `what` (a language's short name, or its workspace).
fn derive_for(master: &[u8], session: &str, what: &str) -> Vec<u8> {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(master) else {
        // HMAC takes keys of any length; this cannot fail.
        return master.to_vec();
    };
    mac.update(b"cellvisor session snapshot key\0");
    mac.update(session.as_bytes());
    mac.update(b"\0");
    mac.update(what.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// The text [`crate::names::encode_component`] made `component` from (`None` for a name
/// no encoding makes).
fn decode_component(component: &str) -> Option<String> {
    if component == "%" {
        return Some(String::new());
    }
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = component.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (crate::names::encode_component(&text) == component).then_some(text)
}

/// A fleet's master key: at least [`MIN_KEY_FILE_BYTES`] bytes, readable by no one but its
/// owner and group (a Kubernetes Secret mounted with mode 0440 or tighter).
fn read_key_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    let refuse = |why: String| StoreError::KeyFile {
        path: path.to_path_buf(),
        why,
    };
    let meta = fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(refuse(format!(
            "mode {mode:03o} lets other users read or change the key; make it 0400 or 0440 \
             (chmod, or the Secret volume's defaultMode)"
        )));
    }
    let key = fs::read(path).map_err(|e| refuse(e.to_string()))?;
    if key.len() < MIN_KEY_FILE_BYTES {
        return Err(refuse(format!(
            "holds {} bytes; a key needs at least {MIN_KEY_FILE_BYTES} random bytes \
             (e.g. `head -c 32 /dev/urandom`)",
            key.len()
        )));
    }
    Ok(key)
}

fn new_key(path: &Path) -> std::io::Result<[u8; KEY_BYTES]> {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(std::io::Error::other)?;
    // create_new: two daemons starting at once must not both write a key; the loser reads.
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            file.write_all(&key)?;
            file.sync_all()?;
            Ok(key)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::read(path)?.try_into().map_err(|_| {
                std::io::Error::other("the key file another daemon wrote is not 32 bytes")
            })
        }
        Err(err) => Err(err),
    }
}

/// Creates `dir` if needed and makes it 0700 (it is ours: the check refuses another uid's).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    cellvisor_ipc::socket::ensure_private_dir_nofollow(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// `time` as RFC 3339, to the second, in UTC.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
#[path = "store_properties.rs"]
mod properties;

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
