//! The part of a worker that is the same for every language.
//!
//! Threads: the engine runs cells on the main thread and, between cells, reads the
//! supervisor's frames itself, so a quick cell costs the worker one wake-up. While a cell
//! runs, a control thread reads them instead (answering `Ping` and raising interrupts even
//! while a cell spins); who reads when is the `reader_token` module's business.
//! Everything the worker says goes through the [`Outbox`]: a cell's `Done` (and its first
//! output) with nothing queued ahead of it is written to the socket by the thread that sends
//! it, so a cell's result costs no wake-up of another thread; the output after it is held
//! back in the socket's bounded buffer, merged, and sent by whatever frame follows or by a
//! flusher thread within `wire::FLUSH_DELAY` (unless its sender flushes itself); everything else
//! joins the bounded queue that a writer thread drains. Either way a supervisor that reads
//! slowly slows the cell down instead of growing a buffer. An engine thread that learns of a
//! cell's end first (the Python shim's pipe reader) sends its `Done` itself
//! ([`Outbox::complete_early`]).
//!
//! Whether a worker that died had taken its cell is told by a file the supervisor reads only
//! after the death ([`cellvisor_ipc::taken`]), not by a frame per cell.
//!
//! Here: the [`Engine`] trait every language implements, the cell's [`Interrupt`] flag and
//! the [`WorkerError`]s. Beside it:
//! - `serve`: a worker's life, from connecting to its last cell ([`serve()`]), and the
//!   record of the cell it took.
//! - `outbox`: the [`Outbox`], which frame may skip the queue, and the host tool calls
//!   waiting for their answer.
//! - `wire`: the write path: the socket's buffer with the output held back to merge, the
//!   writer and flusher threads.
//! - `meter`: what each `Done` reports of the worker's tree and descriptors.
//! - `frames`: the read path: acting on the supervisor's frames, and the control thread.

mod frames;
mod meter;
mod outbox;
mod serve;
mod wire;

pub use outbox::{Outbox, ToolOutcome};
pub use serve::serve;

pub use crate::state::{LoadedState, SavedState, StateError};
use cellvisor_ipc::frame::FrameError;
use cellvisor_ipc::handshake::HandshakeError;
use cellvisor_ipc::state::NameInfo;
use cellvisor_ipc::{CellOutcome, ExecuteCell, Language};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Output is cut into frames of at most this many bytes.
pub const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;

/// Why a worker stopped other than by `Shutdown`.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The supervisor's socket cannot be reached: the supervisor is gone or the path is wrong.
    #[error("cannot connect to the supervisor at {path}: {source}")]
    Connect {
        /// The socket tried.
        path: String,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// The supervisor and this worker disagree on the protocol.
    #[error("handshake with the supervisor failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The connection to the supervisor broke.
    #[error("lost the supervisor: {0}")]
    Link(#[from] FrameError),
    /// The language runtime cannot go on; the text says why.
    #[error("{0}")]
    Engine(String),
    /// A `CELLVISOR_*` variable the supervisor set is not valid text.
    #[error(transparent)]
    Environment(#[from] cellvisor_ipc::env::BadBytes),
}

/// A language runtime that keeps its state between cells.
pub trait Engine {
    /// The language this engine runs, announced in the handshake.
    const LANGUAGE: Language;

    /// Engine name and version, reported in the handshake.
    fn engine_name(&self) -> String;

    /// Something the thread that reads an `Interrupt` calls (besides raising the cell's
    /// [`Interrupt`] flag) to stop a running cell, such as sending SIGINT to a child
    /// interpreter. Must be cheap and must not block (it runs under the reader token's lock).
    fn interrupt_hook(&self) -> Option<Arc<dyn Fn() + Send + Sync>> {
        None
    }

    /// The processes a cancelled cell started were ended, and these `pids`, dead, are
    /// children of the engine's own child (a Python interpreter), which alone can reap
    /// them: have it reap them before the next cell.
    fn reap_ended(&mut self, pids: &[u32]) {
        let _ = pids;
    }

    /// Child processes the engine itself runs and waits for (the Python interpreter): the
    /// worker neither reaps them nor ends them with an interrupted cell's processes.
    fn own_children(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Applies the caller's environment changes before a cell (`None` removes a variable).
    /// An engine that runs its cells in this process sees them in its own environment, which
    /// `process.env` and `os.getenv` read; set here, on the thread that runs the cells,
    /// before the cell starts, so nothing of the cell reads the environment meanwhile.
    fn apply_env_changes(&mut self, changes: &[(String, Option<String>)]) {
        for (name, value) in changes {
            match value {
                Some(value) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }
    }

    /// Runs one cell to its end, streaming output through `outbox`. Errors in user code are a
    /// `Failed` outcome (with the traceback sent as output first), never an `Err`; `Err` means
    /// the engine itself can no longer run cells and the worker exits.
    fn execute(
        &mut self,
        cell: &ExecuteCell,
        outbox: &Outbox,
        interrupt: &Interrupt,
    ) -> Result<CellOutcome, WorkerError>;

    /// Writes the namespace's user names (not the prelude's) into the empty file `payload`,
    /// in the engine's own format, and says which names it kept and which it left out and
    /// why. Stops with [`StateError::TooBig`] once the payload passes `max_bytes`. Names
    /// that cannot be saved are skipped, never a reason to fail.
    fn save_state(
        &mut self,
        payload: &Path,
        max_bytes: u64,
        interrupt: &Interrupt,
    ) -> Result<SavedState, StateError> {
        let _ = (payload, max_bytes, interrupt);
        Err(StateError::Unsupported)
    }

    /// Reads back what [`Engine::save_state`] wrote: the first `len` bytes of `payload`
    /// (checked against its integrity tag before this is called). With `replace`, the
    /// namespace's current user names are removed first.
    fn load_state(
        &mut self,
        payload: &Path,
        len: u64,
        replace: bool,
        interrupt: &Interrupt,
    ) -> Result<LoadedState, StateError> {
        let _ = (payload, len, replace, interrupt);
        Err(StateError::Unsupported)
    }

    /// The namespace's user names: type, size estimate, whether a snapshot would keep each.
    fn list_names(&mut self, interrupt: &Interrupt) -> Result<Vec<NameInfo>, StateError> {
        let _ = interrupt;
        Err(StateError::Unsupported)
    }
}

/// The interrupt flag of the running cell, raised by whichever thread reads the `Interrupt`.
#[derive(Clone, Default)]
pub struct Interrupt {
    raised: Arc<AtomicBool>,
}

impl Interrupt {
    /// Whether the cell was asked to stop; engines poll it between steps.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Relaxed)
    }

    /// The shared flag itself, for engines whose interrupt handler wants an `AtomicBool`.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.raised)
    }

    fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
    }

    fn clear(&self) {
        self.raised.store(false, Ordering::SeqCst);
    }
}

/// Where a worker runs: what an engine may need to know to start.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    /// The supervisor's private (0700) runtime directory, where the socket lives; a worker
    /// may keep files here (the Python runner script, say).
    pub runtime_dir: PathBuf,
}
