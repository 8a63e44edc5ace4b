//! The contract between the cellvisor supervisor and its worker processes.
//!
//! - [`message`]: what the two sides say to each other (serde types, bincode on the wire).
//! - [`frame`]: length-prefixed frames with a size cap, sync (workers) and async (supervisor).
//! - [`socket`]: the private runtime directory and the Unix sockets inside it.
//! - [`handshake`]: the version check that opens every connection.
//! - [`env`]: the environment variables a worker is spawned with.
//! - [`taken`]: the file in which a worker records the cell it took, read after a crash.
//! - [`state`]: saving, loading and listing a session's namespace (snapshots).
//! - [`stable_hash`]: the hash both sides name files on disk with (FNV-1a).

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod env;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod socket;
pub mod stable_hash;
pub mod state;
pub mod taken;

pub use frame::{FrameError, MAX_FRAME_BYTES};
pub use message::{
    CellOutcome, DoneUsage, ExecuteCell, FromWorker, Language, OutputStream, ToWorker, ToolInfo,
    PROTOCOL_VERSION,
};
