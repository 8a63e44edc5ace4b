//! A session's state that survives its worker: the ledger a cell's result carries when its
//! namespace came back from a snapshot, the named checkpoints a host takes, and the rows of
//! `names` (what a namespace holds and whether a snapshot would keep it). See
//! docs/snapshots.md.

use crate::Language;
use serde::{Deserialize, Serialize};

pub use cellvisor_ipc::state::{NameInfo, SkippedName};

/// What came back when a session's namespace was restored on a fresh worker: the first
/// cell after an eviction, a daemon restart or a crash carries it, and so does `restore`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateLedger {
    /// The names back in the namespace (`np (module)` for a module brought back by import).
    pub restored: Vec<String>,
    /// The names that did not come back, and why.
    pub skipped: Vec<SkippedName>,
    /// The snapshot they came from.
    pub from: SnapshotOrigin,
    /// The files of the session's workspace the restore changed, when the snapshot recorded
    /// its workspace (a daemon-made one: a caller's own directory is never recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FileChanges>,
}

/// The files of a session's workspace a restore changed (directories are not listed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileChanges {
    /// Files that were there with other content (or mode, or kind), put back as recorded.
    pub restored: Vec<String>,
    /// Files that were gone (deleted since), written back.
    pub added: Vec<String>,
    /// Files that were not in the recording (made since), deleted.
    pub removed: Vec<String>,
}

impl FileChanges {
    /// Whether the restore changed no file.
    pub fn is_empty(&self) -> bool {
        self.restored.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }
}

/// What a checkpoint recorded of the session's workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FilesRecorded {
    /// Regular files in the workspace.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of content no earlier recording had: what this checkpoint cost on disk.
    pub new_bytes: u64,
    /// Files left out (fifos, sockets, devices), and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedName>,
}

/// Which snapshot a ledger's names came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SnapshotOrigin {
    /// When it was taken (RFC 3339).
    pub taken_at: String,
    /// Why: `idle eviction`, `lru eviction`, `memory recycle`, `config reload`,
    /// `daemon stop`, `after cell` (`every-cell`), `checkpoint`.
    pub reason: String,
    /// Cells that ran after it was taken, whose effects are not in it (the cell that
    /// crashed its worker, say).
    pub cells_since: u64,
    /// The checkpoint's name, for a host's `restore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The node that wrote it (`daemon.node`): in a fleet, where a moved session came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// One named checkpoint (or the latest snapshot) of one language of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CheckpointInfo {
    /// The session.
    pub session: String,
    /// The language whose namespace it holds.
    pub language: Language,
    /// The name the host gave it.
    pub name: String,
    /// Its size on disk.
    pub bytes: u64,
    /// When it was written (RFC 3339).
    pub taken_at: String,
    /// What it recorded of the session's workspace (in `checkpoint`'s answer, when the
    /// session works in a daemon-made workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<FilesRecorded>,
}

/// A checkpoint brought back: the ledger of one language.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RestoredState {
    /// The language restored.
    pub language: Language,
    /// What came back.
    pub ledger: StateLedger,
}

/// The user names of one language of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionNames {
    /// The session.
    pub session: String,
    /// The language.
    pub language: Language,
    /// Its names, sorted.
    pub names: Vec<NameInfo>,
}
