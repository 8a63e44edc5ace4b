//! A session's workspace recorded with its state: a content-addressed tree store.
//!
//! A recording walks the workspace by descriptors (links are recorded as links, never
//! followed) and writes each regular file's content once, as a blob named by its SHA-256,
//! plus a manifest (path → kind, mode, hash, size). An unchanged file is shared by every
//! manifest that names it, and a file whose (inode, size, mtime, ctime) match the previous
//! manifest is not even read again, so a checkpoint of a large workspace costs what changed.
//!
//! - [`blobs`]: the blob directory (write once, verify on read, collect the unreferenced).
//! - [`walk`]: reading a tree by descriptors and recording it.
//! - [`diff`]: what a restore changes (plain data).
//! - [`apply`]: carrying a restore out inside the workspace, by descriptors.
//! - [`sealed`]: a manifest's file, authenticated with the session's key.
//! - [`session`]: one session's trees (`latest` and checkpoints), locked and collected.
//! - `lock`: the lock they change under, waited for at most a bound.

pub mod apply;
pub mod blobs;
pub mod diff;
mod lock;
pub mod sealed;
pub mod session;
pub mod walk;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A blob's name: the SHA-256 of its content.
pub type Hash = [u8; 32];

/// A path inside the workspace: its components joined by `/`, as bytes (names need not be
/// UTF-8).
pub type RelPath = Vec<u8>;

/// One recorded tree: every entry under the root, parents before their children.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The entries by path.
    pub entries: BTreeMap<RelPath, Entry>,
}

/// One file, directory or link of a manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// Its permission bits (`0o7777`).
    pub mode: u32,
    /// What the file system said when it was recorded, to skip re-reading it next time.
    pub stamp: Stamp,
}

/// The kinds of entries a tree keeps (devices, sockets and fifos are skipped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file, its content in the blob `hash`.
    File {
        /// The blob holding the content.
        hash: Hash,
        /// Its length in bytes.
        size: u64,
    },
    /// A symbolic link, kept as its target text and never followed.
    Symlink {
        /// The link's target, as written.
        target: Vec<u8>,
    },
}

/// The identity of a file's content as the file system reports it: when all of it is
/// unchanged, so is the content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Inode number.
    pub ino: u64,
    /// Length.
    pub size: u64,
    /// Last modification (seconds, nanoseconds).
    pub mtime: (i64, u64),
    /// Last status change (seconds, nanoseconds): moves when anything rewrites the file,
    /// even one that puts its mtime back.
    pub ctime: (i64, u64),
}

/// A file the tree does not keep, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Where it is.
    pub path: String,
    /// Why it was left out.
    pub why: String,
}

/// Why a tree could not be recorded or restored.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A file system call failed.
    #[error("workspace snapshot: {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A blob's content does not hash to its name: it was changed after it was written.
    #[error("workspace snapshot refused: the content of {path} (blob {hash}) fails its SHA-256 check; the blob was altered, nothing was restored")]
    Tampered {
        /// The workspace path the blob is for.
        path: String,
        /// The blob's name.
        hash: String,
    },
    /// A blob a manifest names is not in the store.
    #[error("workspace snapshot refused: the content of {path} (blob {hash}) is missing from the snapshot directory, nothing was restored")]
    MissingBlob {
        /// The workspace path the blob is for.
        path: String,
        /// The blob's name.
        hash: String,
    },
    /// A manifest failed its authentication or cannot be read.
    #[error("workspace snapshot {file} refused: {why}")]
    Manifest {
        /// The manifest's file.
        file: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The workspace is not a directory, or is a link.
    #[error("workspace {0} is not a directory of its own (a symbolic link or another kind of file); it is neither recorded nor restored")]
    NotADirectory(PathBuf),
    /// Another process kept the session's recording locked past the bound: a node paused
    /// or stuck while it recorded the session's files.
    #[error("workspace snapshot {path} stayed locked by another process for {}: a node paused or stuck while recording this session's files holds it", humantime::format_duration(*waited))]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// How long it was waited for.
        waited: std::time::Duration,
    },
    /// The tree is nested deeper than a recording follows.
    #[error("workspace snapshot: {0} is nested deeper than {MAX_DEPTH} directories")]
    TooDeep(String),
}

/// The deepest directory nesting recorded (each level holds a descriptor while walked).
pub const MAX_DEPTH: usize = 256;

/// A path as text, for the ledger and errors (bytes outside UTF-8 shown as `\u{fffd}`).
pub fn display(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// A hash as lowercase hex, the blob's file name.
pub fn hex(hash: &Hash) -> String {
    use std::fmt::Write;
    hash.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
