//! Jupyter's kernel protocol over cellvisor's sessions: the messages as the legacy JSON
//! framing carries them, the mapping of cells and their events to Jupyter messages (plain
//! data, for the daemon's Kernel Gateway API and a ZMQ kernel alike), and the small cells
//! that answer completion and inspection from a session's live namespace.
//!
//! - `framing`: the binary `v1.kernel.websocket.jupyter.org` framing, to and from JSON.
//! - `message`: a client's request read leniently, a reply or broadcast written whole.
//! - `mapping`: kernelspecs, `language_info`, kernel ids, events to iopub, results to
//!   replies, `is_complete`.
//! - `outputs`: one cell's events as iopub messages, its value the `execute_result`.
//! - `snippets`: the name at the cursor, and the cells that complete and inspect it.
//! - `history`: the cells a kernel ran, as `history_request` selects them.
//! - `shell`: the shell requests answered without a cell, an execution's reply.
//! - `traceback`: a failed cell's error report as the `error` message's traceback.
//! - `wire`: a message as ZeroMQ frames, signed and checked with the connection's key.

pub mod framing;
pub mod history;
pub mod mapping;
pub mod message;
pub mod outputs;
pub mod shell;
pub mod snippets;
pub mod traceback;
pub mod wire;
