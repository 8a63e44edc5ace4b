//! What the supervisor and a worker say about a session's saved state: the orders to save,
//! load or list a namespace ([`StateTask`]), and what the worker answers ([`StateReport`]).
//!
//! A snapshot is written and read by the session's own worker only (it is code-executing
//! data); the supervisor names the file, hands over the session's integrity key, and reads
//! back nothing but these reports.

use serde::{Deserialize, Serialize};

/// What an `Execute` asks of the worker: run code (every host cell), or one of the state
/// tasks the supervisor sends between cells. A state task runs like a cell (one at a time,
/// under a deadline, ended by `Done`), and sends one [`FromWorker::State`] before its `Done`.
///
/// [`FromWorker::State`]: crate::FromWorker::State
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateTask {
    /// Run the cell's `code`.
    #[default]
    Code,
    /// Write the namespace to a snapshot file (boxed: every cell's frame carries a task).
    Save(Box<SaveOrder>),
    /// Read a snapshot file back into the namespace.
    Load(Box<LoadOrder>),
    /// List the namespace's user names.
    Names,
}

/// Where and how to write a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaveOrder {
    /// The snapshot file to create or replace (atomically: the worker writes a temporary
    /// file beside it and renames it).
    pub path: String,
    /// The session's integrity key (derived for this session and language by the daemon).
    pub key: Vec<u8>,
    /// A payload over this many bytes is not written: the report says `TooBig`.
    pub max_bytes: u64,
    /// When the supervisor ordered it, RFC 3339, kept in the file for the ledger.
    pub taken_at: String,
    /// Why (`idle eviction`, `daemon stop`, `checkpoint`, ...), kept in the file for the
    /// ledger.
    pub reason: String,
    /// The node whose worker writes it, kept in the file: a fleet's ledger names the node a
    /// moved session came from.
    pub node: String,
}

/// Which snapshot to read, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadOrder {
    /// The snapshot file.
    pub path: String,
    /// The key it must be tagged with; a file whose tag differs is refused unread.
    pub key: Vec<u8>,
    /// Remove the user names the namespace has now before loading (a host's `restore`):
    /// the namespace then holds what the snapshot held, nothing more.
    pub replace: bool,
}

/// A name that was not saved (or not restored), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SkippedName {
    /// The name, as cells know it.
    pub name: String,
    /// Why, in words a user can act on (`socket objects cannot be saved`).
    pub why: String,
}

/// What a snapshot file says about itself (kept inside it, under its integrity tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// The language of the worker that wrote it.
    pub language: crate::Language,
    /// When it was taken (RFC 3339), from the [`SaveOrder`].
    pub taken_at: String,
    /// Why it was taken, from the [`SaveOrder`].
    pub reason: String,
    /// The node that wrote it, from the [`SaveOrder`].
    pub node: String,
    /// The names it holds.
    pub saved: Vec<String>,
    /// The names that were left out when it was written, and why.
    pub skipped: Vec<SkippedName>,
    /// The size of the language's payload (the file less its trailer).
    pub payload_bytes: u64,
    /// The engine that wrote it (`Python 3.12.3`): a payload is read only by the same kind.
    pub engine: String,
}

/// One user name of a namespace, as `names` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NameInfo {
    /// The name.
    pub name: String,
    /// Its type as the language says it (`int`, `DataFrame`, `function`, `table`).
    pub kind: String,
    /// An estimate of its size in bytes, where the engine can tell.
    pub size_bytes: Option<u64>,
    /// Whether a snapshot would keep it.
    pub saveable: bool,
    /// Why it would not (or how it would be kept, e.g. `by source text`), if worth saying.
    pub note: Option<String>,
}

/// What the worker answers a state task with, in one `State` frame before the task's `Done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateReport {
    /// The snapshot was written.
    Saved {
        /// Its size on disk.
        bytes: u64,
        /// The names it holds.
        saved: Vec<String>,
        /// The names left out, and why.
        skipped: Vec<SkippedName>,
    },
    /// The snapshot was read back.
    Loaded {
        /// The names now back in the namespace.
        restored: Vec<String>,
        /// The names that could not be brought back (a module that no longer imports), or
        /// were left out when the snapshot was written.
        skipped: Vec<SkippedName>,
        /// What the file said about itself.
        meta: SnapshotMeta,
    },
    /// The namespace's user names.
    Names(Vec<NameInfo>),
    /// The task was not carried out; nothing of the file was run.
    Refused(StateRefusal),
}

/// Why a state task was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateRefusal {
    /// The payload would be over the order's `max_bytes` (`bytes` is as far as it got).
    TooBig {
        /// The size reached when the worker gave up (at least `max`).
        bytes: u64,
        /// The order's cap.
        max: u64,
    },
    /// The file's integrity tag does not match its content (altered, truncated, or
    /// written for another session): it was not loaded.
    Tampered {
        /// What was wrong with it.
        why: String,
    },
    /// There is no such file.
    Missing,
    /// The file was written by another kind of engine.
    WrongEngine {
        /// The engine that wrote it.
        wrote: String,
    },
    /// Anything else (an I/O error, an engine that failed), with why.
    Failed {
        /// What went wrong.
        why: String,
    },
}
