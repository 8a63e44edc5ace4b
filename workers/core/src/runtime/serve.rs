//! A worker's life: connect, load the engine and confine it, run the startup modules, shake
//! hands, start the writer, flusher and control threads, then run cells until `Shutdown`,
//! a lost supervisor or a fatal engine error.

use cellvisor_ipc::frame::write_frame;
use cellvisor_ipc::handshake::worker_handshake;
use cellvisor_ipc::socket::{connect, Stream};
use cellvisor_ipc::state::StateTask;
use cellvisor_ipc::taken::TakenRecord;
use cellvisor_ipc::{env, CellOutcome, ExecuteCell, FromWorker, OutputStream};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use super::frames::{ControlThread, FrameHandler};
use super::wire::{write_loop, FatalSent, SocketWriter};
use super::{Engine, Outbox, WorkerContext, WorkerError};
use crate::reader_token::ReaderToken;

/// How many frames may wait for the socket before senders block.
const OUTBOX_CAPACITY: usize = 256;

/// Connects to the supervisor at `socket` and serves cells with the engine `make_engine`
/// builds, until `Shutdown` or the supervisor disappears.
pub fn serve<E, F>(socket: &Path, make_engine: F) -> Result<(), WorkerError>
where
    E: Engine,
    F: FnOnce(&WorkerContext) -> Result<E, WorkerError>,
{
    share_one_allocator_arena();
    if let Err(err) = crate::warden::start() {
        eprintln!("cellvisor worker: cannot watch over cell processes: {err}");
    }
    let context = WorkerContext {
        runtime_dir: socket
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir),
    };
    let taken = Taken::open_from_env()?;
    let stream = Arc::new(connect(socket).map_err(|source| WorkerError::Connect {
        path: socket.display().to_string(),
        source,
    })?);
    let mut engine = make_engine(&context).inspect_err(|_| {
        // The connection stays open until the process exits, after the caller printed why:
        // the supervisor kills a worker whose connection drops, and reads its stderr then.
        std::mem::forget(Arc::clone(&stream));
    })?;
    // The engine is loaded: from here on, this thread and all it starts are confined (the
    // Python shim confined itself before starting its interpreter; this is then a no-op).
    crate::sandbox::confine_once(&[]).map_err(|e| WorkerError::Engine(format!("sandbox: {e}")))?;
    crate::warden::spare(engine.own_children());
    // Before the handshake: no frame is read (nor heartbeat answered) while modules run,
    // and the start timeout bounds them.
    let startup_failures = crate::startup::run(&mut engine);
    worker_handshake(
        &mut &*stream,
        &mut &*stream,
        E::LANGUAGE,
        &engine.engine_name(),
    )?;
    let link = Link::start(&stream, startup_failures, engine.interrupt_hook())?;
    Err(link.serve_cells(&mut engine, &taken))
}

/// Keeps every thread of the worker on glibc's main allocator arena.
///
/// By default each thread that allocates gets an arena of its own, reserving 64 MiB of
/// address space (128 MiB while it is being aligned). Under an operator's `limits.address-space`
/// those reservations, made after the engine sized its heap limit, are what left an engine at
/// its own limit with no room for the runtime: the next small allocation aborted the worker
/// (SIGABRT) instead of the cell getting its "not enough memory" error. The worker's threads
/// other than the engine's allocate little (frames, heartbeats), so one arena costs nothing
/// measurable and makes the address space the engine can count on predictable.
fn share_one_allocator_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The worker's threads and what the engine thread shares with them once the handshake is
/// done.
struct Link {
    outbox: Outbox,
    frames: FrameHandler,
    token: Arc<ReaderToken>,
    fatal_sent: Arc<FatalSent>,
}

impl Link {
    /// Starts the writer, flusher and control threads on `stream`, telling the supervisor
    /// first what the startup modules could not do.
    fn start(
        stream: &Arc<Stream>,
        startup_failures: Option<String>,
        hook: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> Result<Link, WorkerError> {
        let (mut outbox, rx) = Outbox::new(OUTBOX_CAPACITY);
        let socket = SocketWriter::new(Arc::clone(stream));
        let queued = Arc::new(AtomicU64::new(0));
        outbox.write_directly(socket.clone(), Arc::clone(&queued));
        let fatal_sent = Arc::new(FatalSent::default());
        thread::Builder::new()
            .name("frame-writer".into())
            .spawn({
                let socket = socket.clone();
                let fatal_sent = Arc::clone(&fatal_sent);
                move || write_loop(&socket, rx, &queued, &fatal_sent)
            })
            .map_err(|e| cannot_start(stream, "writer", e))?;
        thread::Builder::new()
            .name("frame-flusher".into())
            .spawn({
                let socket = socket.clone();
                move || socket.flush_held_output()
            })
            .map_err(|e| cannot_start(stream, "flusher", e))?;

        if let Some(message) = startup_failures {
            outbox.send(FromWorker::Notice { message });
        }

        let token = Arc::new(ReaderToken::default());
        outbox.tell_reader(Arc::clone(&token));
        let frames = FrameHandler::new(
            Arc::clone(stream),
            outbox.clone(),
            socket,
            Arc::clone(&token),
            hook,
        );
        ControlThread::start(frames.clone()).map_err(|e| cannot_start(stream, "control", e))?;
        Ok(Link {
            outbox,
            frames,
            token,
            fatal_sent,
        })
    }

    /// Reads frames and runs the cells they bring. Leaves by `Shutdown` or a lost supervisor
    /// (the process exits where that is read), or with the fatal error that stops the
    /// worker, which the supervisor has been told.
    fn serve_cells<E: Engine>(&self, engine: &mut E, taken: &Taken) -> WorkerError {
        // What the startup modules started is no cell's.
        crate::warden::mark_before_cells();
        loop {
            let read = match self.token.engine_frame() {
                Some(frame) => Ok(Some(frame)),
                None => self.frames.read(),
            };
            let Some(cell) = self.frames.handle(read) else {
                continue;
            };
            // A cell not recorded is not run: the worker goes, and the cell runs on the
            // replacement (once).
            let ran = taken
                .record(cell.cell_id)
                .and_then(|()| self.run_cell(engine, &cell));
            if let Err(fatal) = ran {
                return self.fail(fatal);
            }
        }
    }

    /// Runs one cell and sends its `Done` (unless the engine sent it early). `Err` is a
    /// fatal engine error.
    fn run_cell<E: Engine>(&self, engine: &mut E, cell: &ExecuteCell) -> Result<(), WorkerError> {
        let interrupt = self.frames.cell_interrupt();
        self.token.update_waking_control(|state| {
            let start = state.cell_starts(cell.cell_id, Instant::now());
            // An interrupt may have come for this cell before it started; any other raised
            // flag is stale.
            interrupt.clear();
            if start.interrupted {
                interrupt.raise();
            }
            ((), start.wake_control)
        });
        self.outbox
            .set_cells_process(engine.own_children().first().copied());
        let started = crate::warden::cell_begins();
        let outcome = match enter_cwd(cell.cwd.as_deref()) {
            Ok(()) => match &cell.task {
                StateTask::Code => {
                    engine.apply_env_changes(&cell.env_changes);
                    engine.execute(cell, &self.outbox, interrupt)
                }
                task => crate::state::run(engine, cell.cell_id, task, &self.outbox, interrupt),
            },
            Err(message) => {
                self.outbox
                    .output(cell.cell_id, OutputStream::Stderr, message.as_bytes());
                Ok(CellOutcome::Failed { summary: message })
            }
        };
        let done_sent = self.token.lock().engine_ends(cell.cell_id);
        // What a cancelled cell started ends with it, before its Done is sent.
        let processes = crate::warden::cell_ends(&started, interrupt.is_raised(), done_sent);
        if !processes.ended.theirs.is_empty() {
            engine.reap_ended(&processes.ended.theirs);
        }
        let outcome = outcome?;
        if !done_sent {
            self.outbox.done(
                cell.cell_id,
                outcome,
                u32::try_from(processes.ended.count).unwrap_or(u32::MAX),
                u32::try_from(processes.seen).unwrap_or(u32::MAX),
            );
        }
        Ok(())
    }

    /// The worker cannot go on: tells the supervisor why (the reason must reach it before
    /// this process is gone) and ends the processes the cells started.
    fn fail(&self, fatal: WorkerError) -> WorkerError {
        self.outbox.send(FromWorker::Fatal {
            message: fatal.to_string(),
        });
        self.fatal_sent.wait();
        crate::warden::end_descendants(&[]);
        fatal
    }
}

/// A thread that cannot start (the user's process limit) is told to the supervisor in a
/// Fatal frame: it may kill this process as soon as the connection closes, before stderr
/// could say anything.
fn cannot_start(stream: &Stream, what: &str, err: std::io::Error) -> WorkerError {
    let message = format!("cannot start the {what} thread: {err}");
    let _ = write_frame(
        &mut &*stream,
        &FromWorker::Fatal {
            message: message.clone(),
        },
    );
    WorkerError::Engine(message)
}

/// Where this worker records the cell it took (see [`cellvisor_ipc::taken`]); none when the
/// supervisor gave no record file.
struct Taken(Option<TakenRecord>);

impl Taken {
    /// Opens the record named in the environment: before the sandbox, which would refuse it.
    fn open_from_env() -> Result<Taken, WorkerError> {
        let Some(path) = std::env::var_os(env::TAKEN_RECORD).filter(|p| !p.is_empty()) else {
            return Ok(Taken(None));
        };
        TakenRecord::open(Path::new(&path))
            .map(|record| Taken(Some(record)))
            .map_err(|err| {
                WorkerError::Engine(format!(
                    "cannot open the record of taken cells {}: {err}",
                    Path::new(&path).display()
                ))
            })
    }

    /// Records that this worker took `cell_id`, just before running it: a worker that dies
    /// from here on took the cell with it, while a cell not taken is run again on the
    /// replacement. Recorded before the cell runs, so a cell that ends the process at once
    /// (Python's `os._exit`) cannot look untaken. A cell that cannot be recorded must not
    /// run: if it ran and then ended the worker, the record would name the cell before it,
    /// and it would run again.
    fn record(&self, cell_id: u64) -> Result<(), WorkerError> {
        match &self.0 {
            Some(record) => record.record(cell_id).map_err(|err| {
                WorkerError::Engine(format!("cannot record cell {cell_id} as taken: {err}"))
            }),
            None => Ok(()),
        }
    }
}

fn enter_cwd(cwd: Option<&str>) -> Result<(), String> {
    match cwd {
        None => Ok(()),
        Some(dir) => std::env::set_current_dir(dir)
            .map_err(|e| format!("cannot enter working directory {dir}: {e}\n")),
    }
}
