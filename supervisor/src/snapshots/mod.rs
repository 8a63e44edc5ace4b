//! State that survives a worker, on the supervisor's side (the worker writes and reads the
//! files; see `cellvisor-workers`' `state` module):
//!
//! - [`store`]: the snapshot directory: where each session's snapshots live, the daemon's key
//!   and each session's key derived from it, checkpoints listed and forgotten.
//! - [`prune`]: the sweep's deletion of old snapshots (plain data: [`prune::to_delete`]).
//! - [`tree`]: a session's workspace recorded with its state (content-addressed files and
//!   authenticated manifests).
//! - [`policy`]: which stops save a snapshot and what the next cell is told (plain data).

pub mod policy;
pub mod prune;
pub mod store;
pub mod tree;

pub use store::{check_checkpoint_name, rfc3339, SnapshotStore, StoreError};
