//! `[workspaces]`: the directory of files every session served without a caller directory
//! works in (docs/workspaces.md), and the bounds on what it may hold.

use bytesize::ByteSize;
use std::path::PathBuf;

/// `[workspaces]`: where sessions' workspaces live and how much each may hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkspacesConfig {
    /// The directory holding every workspace (`<root>/<tenant>/<session>`); by default
    /// `$XDG_STATE_HOME/cellvisor/workspaces`. In a fleet, the shared volume.
    pub root: Option<PathBuf>,
    /// The most one workspace may hold, in bytes; unset: no bound.
    pub max_bytes: Option<ByteSize>,
    /// The most files (and directories) one workspace may hold; unset: no bound.
    pub max_files: Option<u64>,
}
