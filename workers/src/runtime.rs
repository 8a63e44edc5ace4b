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
//! flusher thread within `FLUSH_DELAY` (unless its sender flushes itself); everything else
//! joins the bounded queue that a writer thread drains. Either way a supervisor that reads
//! slowly slows the cell down instead of growing a buffer. An engine thread that learns of a
//! cell's end first (the Python shim's pipe reader) sends its `Done` itself
//! ([`Outbox::complete_early`]).
//!
//! Whether a worker that died had taken its cell is told by a file the supervisor reads only
//! after the death ([`cellvisor_ipc::taken`]), not by a frame per cell.

use cellvisor_ipc::frame::{read_frame, write_frame, FrameError};
use cellvisor_ipc::handshake::{worker_handshake, HandshakeError};
use cellvisor_ipc::socket::{connect, Stream};
use cellvisor_ipc::taken::TakenRecord;
use cellvisor_ipc::{env, CellOutcome, ExecuteCell, FromWorker, Language, OutputStream, ToWorker};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::reader_token::{InterruptAction, ReaderToken};

/// Output is cut into frames of at most this many bytes.
pub const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;

/// How many frames may wait for the socket before senders block.
const OUTBOX_CAPACITY: usize = 256;

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

    /// Child processes the engine itself runs and waits for (the Python interpreter): the
    /// worker neither reaps them nor ends them with an interrupted cell's processes.
    fn own_children(&self) -> Vec<u32> {
        Vec::new()
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

/// The worker's way to the supervisor; cheap to clone and usable from any thread.
#[derive(Clone)]
pub struct Outbox {
    tx: SyncSender<FromWorker>,
    tools: Arc<PendingToolCalls>,
    /// The socket, for frames with nothing queued ahead of them (`None` without a socket).
    direct: Option<DirectWrite>,
    /// Told when a cell waits for a tool's answer, so that somebody reads it at once (`None`
    /// without a socket).
    reader: Option<Arc<ReaderToken>>,
}

/// Writing a frame on the sender's own thread, in order with the queue: `queued` counts the
/// frames sent to the queue and not yet on the wire (the writer lowers it, holding the
/// socket, once it has written them), so a sender holding the socket that sees zero has
/// nothing ahead of it.
#[derive(Clone)]
struct DirectWrite {
    socket: SocketWriter,
    queued: Arc<AtomicU64>,
    /// An output frame went out directly since the cell's last `Done`: the output that
    /// follows it is held back and merged in the socket's buffer, so a cell's many short
    /// writes cost a few frames and about one write per [`FLUSH_DELAY`], while a cell's one
    /// line of output (and its `Done`) goes out at once; neither costs a thread hop.
    output_streak: Arc<AtomicBool>,
}

/// How a frame may skip the queue, as far as its kind goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Written (and flushed, unless the sender says otherwise) by the sending thread.
    Now,
    /// Held back in the socket's buffer to merge with the output that follows; the flusher
    /// thread sends it within [`FLUSH_DELAY`] unless another frame takes it along first.
    Hold,
    /// Through the queue and the writer thread.
    Queue,
}

impl Route {
    /// The route of `frame`, given (and updating) whether output went out since the last
    /// `Done`.
    fn of(frame: &FromWorker, output_streak: &AtomicBool) -> Route {
        match frame {
            FromWorker::Output { .. } if output_streak.swap(true, Ordering::SeqCst) => Route::Hold,
            FromWorker::Output { .. } => Route::Now,
            FromWorker::Done { .. } => {
                output_streak.store(false, Ordering::SeqCst);
                Route::Now
            }
            // The rest (Pong, displays, tool calls, notices) queue as before; a Fatal must,
            // since the writer tells the engine once it is on the wire.
            _ => Route::Queue,
        }
    }
}

/// Host tool calls waiting for their answer, by call id.
#[derive(Default)]
struct PendingToolCalls {
    next_id: AtomicU64,
    waiting: std::sync::Mutex<std::collections::HashMap<u64, mpsc::Sender<ToolOutcome>>>,
}

/// A host tool's answer: its result as JSON text, or the error message.
pub type ToolOutcome = Result<String, String>;

impl PendingToolCalls {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, mpsc::Sender<ToolOutcome>>> {
        match self.waiting.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn answer(&self, call_id: u64, outcome: ToolOutcome) {
        if let Some(waiter) = self.lock().remove(&call_id) {
            let _ = waiter.send(outcome);
        }
    }

    /// Fails every call in flight: the cell they belong to was interrupted.
    fn cancel_all(&self, why: &str) {
        for (_, waiter) in self.lock().drain() {
            let _ = waiter.send(Err(why.to_string()));
        }
    }
}

/// A tool call in flight; its answer arrives on `answer`.
pub struct PendingToolCall {
    /// The id the worker chose for the call, echoed by the supervisor's answer.
    pub call_id: u64,
    /// Where the answer arrives.
    pub answer: Receiver<ToolOutcome>,
}

impl Outbox {
    /// An outbox and the receiving end of its queue, for driving an engine without a socket
    /// (unit tests of the engines use this).
    pub fn new(capacity: usize) -> (Outbox, Receiver<FromWorker>) {
        let (tx, rx) = mpsc::sync_channel(capacity);
        let tools = Arc::default();
        (
            Outbox {
                tx,
                tools,
                direct: None,
                reader: None,
            },
            rx,
        )
    }

    /// Asks the host to run tool `name` with `args_json` for `cell_id`. Does not block: wait
    /// on the returned call's `answer` (it is failed if the cell is interrupted meanwhile).
    pub fn call_tool(&self, cell_id: u64, name: &str, args_json: String) -> PendingToolCall {
        let call_id = self.tools.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, answer) = mpsc::channel();
        self.tools.lock().insert(call_id, tx);
        if let Some(reader) = &self.reader {
            reader.tool_call_waits();
        }
        self.send(FromWorker::ToolCall {
            cell_id,
            call_id,
            name: name.to_string(),
            args_json,
        });
        PendingToolCall { call_id, answer }
    }

    /// Delivers a tool's answer to the call waiting for it (used by whichever thread reads
    /// frames, and by tests that play the host).
    pub fn deliver_tool_result(&self, call_id: u64, outcome: ToolOutcome) {
        self.tools.answer(call_id, outcome);
    }

    /// Sends `data` as output of `cell_id`, cut into frames of [`OUTPUT_CHUNK_BYTES`].
    pub fn output(&self, cell_id: u64, stream: OutputStream, data: &[u8]) {
        self.output_then(cell_id, stream, data, true);
    }

    /// Like [`Outbox::output`], but a frame written at once stays in the socket's buffer: the
    /// caller has more to write right after (a cell's `Done`, which flushes both in one write
    /// and so wakes the supervisor once) or calls [`Outbox::flush`] itself.
    pub fn output_unflushed(&self, cell_id: u64, stream: OutputStream, data: &[u8]) {
        self.output_then(cell_id, stream, data, false);
    }

    fn output_then(&self, cell_id: u64, stream: OutputStream, data: &[u8], flush: bool) {
        for chunk in data.chunks(OUTPUT_CHUNK_BYTES) {
            let frame = FromWorker::Output {
                cell_id,
                stream,
                data: chunk.to_vec(),
            };
            self.send_then(frame, flush);
        }
    }

    /// Writes out what [`Outbox::output_unflushed`] left in the socket's buffer. A thread
    /// holding the socket now flushes it anyway when it is done, so this one need not wait.
    pub fn flush(&self) {
        if let Some(direct) = &self.direct {
            if let Some(mut wire) = direct.socket.try_lock() {
                if wire.is_dirty() {
                    wire.flush();
                }
            }
        }
    }

    /// Sends a MIME bundle (a JSON object) as a display of `cell_id`.
    pub fn display(&self, cell_id: u64, bundle_json: String) {
        self.send(FromWorker::Display {
            cell_id,
            bundle_json,
        });
    }

    /// Tells the host that `cell_id` yields (`yield_control()`): its output so far goes to
    /// the host now, and the cell goes on.
    pub fn yield_control(&self, cell_id: u64) {
        self.send(FromWorker::Yield { cell_id });
    }

    /// Sends any frame: a `Done` or a cell's first output is written at once by this thread
    /// when nothing is queued ahead of it and the socket is free, and the output after it is
    /// held back in the socket's buffer to merge; the rest is queued for the writer thread.
    /// If the supervisor is gone
    /// the process has already ended, so a failed send has nobody to report to.
    pub fn send(&self, frame: FromWorker) {
        self.send_then(frame, true);
    }

    /// Sends the `Done` of `cell_id`, which completed, from a thread of the engine that
    /// learns of its end before `execute` returns (the Python worker's output thread, reading
    /// the runner's done marker): the supervisor then hears without waiting for the engine
    /// thread to wake, and the runtime does not send it again. Returns false, sending
    /// nothing, unless `cell_id` is the running cell and no interrupt was raised for it.
    pub fn complete_early(&self, cell_id: u64) -> bool {
        let Some(token) = &self.reader else {
            return false;
        };
        if !token.lock().ends_early(cell_id) {
            return false;
        }
        self.send(FromWorker::Done {
            cell_id,
            outcome: CellOutcome::Completed,
        });
        true
    }

    /// [`Outbox::send`]; without `flush`, a frame written at once is left in the buffer.
    fn send_then(&self, frame: FromWorker, flush: bool) {
        if let Some(direct) = &self.direct {
            let route = match Route::of(&frame, &direct.output_streak) {
                // A sender that flushes itself (the Python shim's pipe reader) hands the
                // writing to the writer thread and goes back to draining its pipe: on two
                // cores that overlaps, where holding would make it write in turn.
                Route::Hold if !flush => Route::Queue,
                route => route,
            };
            if route != Route::Queue {
                if let Some(mut wire) = direct.socket.try_lock() {
                    if direct.queued.load(Ordering::SeqCst) == 0 {
                        if route == Route::Hold {
                            wire.hold(frame);
                            direct.socket.arm_flusher(&mut wire);
                        } else {
                            wire.write(&frame);
                            if flush {
                                wire.flush();
                            }
                        }
                        return;
                    }
                }
            }
            direct.queued.fetch_add(1, Ordering::SeqCst);
        }
        let _ = self.tx.send(frame);
    }
}

/// Where a worker runs: what an engine may need to know to start.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    /// The supervisor's private (0700) runtime directory, where the socket lives; a worker
    /// may keep files here (the Python runner script, say).
    pub runtime_dir: PathBuf,
}

/// Connects to the supervisor at `socket` and serves cells with the engine `make_engine`
/// builds, until `Shutdown` or the supervisor disappears.
pub fn serve<E, F>(socket: &Path, make_engine: F) -> Result<(), WorkerError>
where
    E: Engine,
    F: FnOnce(&WorkerContext) -> Result<E, WorkerError>,
{
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
    let mut engine = make_engine(&context)?;
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

    // A thread that cannot start (the user's process limit) is told to the supervisor in a
    // Fatal frame: it may kill this process as soon as the connection closes, before stderr
    // could say anything.
    let fatal_stream = Arc::clone(&stream);
    let cannot_start = move |what: &str, err: std::io::Error| {
        let message = format!("cannot start the {what} thread: {err}");
        let _ = write_frame(
            &mut &*fatal_stream,
            &FromWorker::Fatal {
                message: message.clone(),
            },
        );
        WorkerError::Engine(message)
    };
    let (mut outbox, rx) = Outbox::new(OUTBOX_CAPACITY);
    let socket = SocketWriter::new(Arc::clone(&stream));
    let queued = Arc::new(AtomicU64::new(0));
    outbox.direct = Some(DirectWrite {
        socket: socket.clone(),
        queued: Arc::clone(&queued),
        output_streak: Arc::default(),
    });
    let fatal_sent = Arc::new(FatalSent::default());
    thread::Builder::new()
        .name("frame-writer".into())
        .spawn({
            let socket = socket.clone();
            let fatal_sent = Arc::clone(&fatal_sent);
            move || write_loop(&socket, rx, &queued, &fatal_sent)
        })
        .map_err(|e| cannot_start("writer", e))?;
    thread::Builder::new()
        .name("frame-flusher".into())
        .spawn({
            let socket = socket.clone();
            move || socket.flush_held_output()
        })
        .map_err(|e| cannot_start("flusher", e))?;

    if let Some(message) = startup_failures {
        outbox.send(FromWorker::Notice { message });
    }

    let token = Arc::new(ReaderToken::default());
    outbox.reader = Some(Arc::clone(&token));
    let frames = FrameHandler {
        input: Arc::new(std::sync::Mutex::new(FrameReader::new(Arc::clone(&stream)))),
        outbox: outbox.clone(),
        socket,
        token: Arc::clone(&token),
        interrupt: Interrupt::default(),
        hook: engine.interrupt_hook(),
    };
    let control = ControlThread {
        frames: frames.clone(),
    };
    thread::Builder::new()
        .name("frame-control".into())
        .spawn(move || control.run())
        .map_err(|e| cannot_start("control", e))?;

    let interrupt = &frames.interrupt;
    // Leaves by `Shutdown` or a lost supervisor (the process exits where that is read), or by
    // a fatal engine error.
    loop {
        let read = match token.engine_frame() {
            Some(frame) => Ok(Some(frame)),
            None => frames.read(),
        };
        let Some(cell) = frames.handle(read) else {
            continue;
        };
        if let Err(fatal) = taken.record(cell.cell_id) {
            // Not run: the worker goes, and the cell runs on the replacement (once).
            outbox.send(FromWorker::Fatal {
                message: fatal.to_string(),
            });
            fatal_sent.wait();
            crate::warden::end_descendants(&[]);
            return Err(fatal);
        }
        token.update_waking_control(|state| {
            let start = state.cell_starts(cell.cell_id, Instant::now());
            // An interrupt may have come for this cell before it started; any other raised
            // flag is stale.
            interrupt.clear();
            if start.interrupted {
                interrupt.raise();
            }
            ((), start.wake_control)
        });
        let started = crate::process_tree::ticks_since_boot();
        let outcome = match enter_cwd(cell.cwd.as_deref()) {
            Ok(()) => engine.execute(&cell, &outbox, interrupt),
            Err(message) => {
                outbox.output(cell.cell_id, OutputStream::Stderr, message.as_bytes());
                Ok(CellOutcome::Failed { summary: message })
            }
        };
        let done_sent = token.lock().engine_ends(cell.cell_id);
        if interrupt.is_raised() {
            // What the cancelled cell started ends with it, before its Done is sent.
            crate::warden::end_cell_processes(started);
        }
        match outcome {
            Ok(_) if done_sent => {}
            Ok(outcome) => outbox.send(FromWorker::Done {
                cell_id: cell.cell_id,
                outcome,
            }),
            Err(fatal) => {
                outbox.send(FromWorker::Fatal {
                    message: fatal.to_string(),
                });
                // The reason must reach the supervisor before this process is gone.
                fatal_sent.wait();
                crate::warden::end_descendants(&[]);
                return Err(fatal);
            }
        }
    }
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

/// Writes frames in order. What is already queued goes out together: adjacent output
/// chunks of one cell and stream are merged (up to [`OUTPUT_CHUNK_BYTES`]) and the frames
/// share one buffered write, so a cell printing many short lines costs a few frames, not
/// one per line. Nothing is held back: the buffer is flushed whenever the queue is empty.
fn write_loop(
    socket: &SocketWriter,
    rx: Receiver<FromWorker>,
    queued: &AtomicU64,
    fatal_sent: &FatalSent,
) {
    while let Ok(mut frame) = rx.recv() {
        let mut fatal = false;
        let mut taken = 1;
        let mut wire = socket.lock();
        loop {
            fatal |= matches!(frame, FromWorker::Fatal { .. });
            let Ok(next) = rx.try_recv() else {
                break;
            };
            taken += 1;
            if let Some(unmerged) = merge_output(&mut frame, next) {
                wire.write(&frame);
                frame = unmerged;
            }
        }
        wire.write(&frame);
        wire.flush();
        // Still holding the socket: a direct sender that sees zero comes after these.
        queued.fetch_sub(taken, Ordering::SeqCst);
        drop(wire);
        if fatal {
            fatal_sent.mark();
        }
    }
}

/// How long output may be held back in the socket's buffer to merge with the output that
/// follows it. A cell that prints line after line then costs the supervisor about one
/// wake-up per this delay instead of one per line, and the worker no wake-up of its writer
/// thread per line; a line printed before a long silence still arrives this soon.
const FLUSH_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// The socket's sending side, shared by the writer thread (everything queued in the outbox),
/// senders that write a frame at once (a `Done` with nothing queued ahead, a `Pong`) or hold
/// output back, and the flusher thread.
#[derive(Clone)]
struct SocketWriter {
    wire: Arc<std::sync::Mutex<Wire>>,
    flusher: Arc<Flusher>,
}

/// The socket's buffer, with the output frame held back to merge with what follows.
struct Wire<W: std::io::Write = StreamWriter> {
    out: std::io::BufWriter<W>,
    /// Output of one cell and stream, not yet in the buffer: the next output of the same cell
    /// and stream is appended to it (up to [`OUTPUT_CHUNK_BYTES`]); any other frame written
    /// puts it in the buffer first, so order is kept.
    held: Option<FromWorker>,
    /// The flusher thread was asked to flush and has not yet.
    flush_armed: bool,
}

impl<W: std::io::Write> Wire<W> {
    fn new(out: W) -> Wire<W> {
        Wire {
            out: std::io::BufWriter::with_capacity(2 * OUTPUT_CHUNK_BYTES, out),
            held: None,
            flush_armed: false,
        }
    }

    /// Puts `frame` in the buffer, after whatever was held back.
    fn write(&mut self, frame: &FromWorker) {
        if let Some(held) = self.held.take() {
            send_frame(&mut self.out, &held);
        }
        send_frame(&mut self.out, frame);
    }

    /// Holds an output frame back, merged with the held one when they go together.
    fn hold(&mut self, frame: FromWorker) {
        match &mut self.held {
            None => self.held = Some(frame),
            Some(held) => {
                if let Some(next) = merge_output(held, frame) {
                    let full = std::mem::replace(held, next);
                    send_frame(&mut self.out, &full);
                }
            }
        }
    }

    /// Sends everything held back and buffered.
    fn flush(&mut self) {
        if let Some(held) = self.held.take() {
            send_frame(&mut self.out, &held);
        }
        if std::io::Write::flush(&mut self.out).is_err() {
            exit_lost_supervisor();
        }
    }

    fn is_dirty(&self) -> bool {
        self.held.is_some() || !self.out.buffer().is_empty()
    }
}

/// Wakes the flusher thread when output is held back.
#[derive(Default)]
struct Flusher {
    asked: std::sync::Mutex<bool>,
    wake: std::sync::Condvar,
}

struct StreamWriter(Arc<Stream>);

impl std::io::Write for StreamWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

impl SocketWriter {
    fn new(stream: Arc<Stream>) -> SocketWriter {
        SocketWriter {
            wire: Arc::new(std::sync::Mutex::new(Wire::new(StreamWriter(stream)))),
            flusher: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wire> {
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The socket if no other thread is writing now.
    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, Wire>> {
        match self.wire.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Has the flusher thread send what was just held back, unless it was asked already
    /// (`wire` is the locked socket, so the flusher cannot be between its flush and
    /// forgetting the request).
    fn arm_flusher(&self, wire: &mut Wire) {
        if !wire.flush_armed {
            wire.flush_armed = true;
            *self.flusher.asked.lock().unwrap_or_else(|e| e.into_inner()) = true;
            self.flusher.wake.notify_one();
        }
    }

    /// The flusher thread: sleeps until output is held back, lets [`FLUSH_DELAY`] pass for
    /// more to join it, then sends it all.
    fn flush_held_output(&self) {
        loop {
            {
                let mut asked = self.flusher.asked.lock().unwrap_or_else(|e| e.into_inner());
                while !*asked {
                    asked = self
                        .flusher
                        .wake
                        .wait(asked)
                        .unwrap_or_else(|e| e.into_inner());
                }
                *asked = false;
            }
            thread::sleep(FLUSH_DELAY);
            let mut wire = self.lock();
            wire.flush_armed = false;
            if wire.is_dirty() {
                wire.flush();
            }
        }
    }
}

/// Set once a `Fatal` frame is on the wire: the engine thread waits for it before the
/// worker exits, so the supervisor learns why.
#[derive(Default)]
struct FatalSent {
    sent: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl FatalSent {
    /// Only a supervisor that stopped reading could take this long.
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

    fn mark(&self) {
        *self.sent.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    fn wait(&self) {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .changed
            .wait_timeout_while(sent, Self::PATIENCE, |sent| !*sent);
    }
}

/// Appends `next` to `frame` when both are output of the same cell and stream and the result
/// fits in a chunk; otherwise gives `next` back.
fn merge_output(frame: &mut FromWorker, next: FromWorker) -> Option<FromWorker> {
    match (frame, next) {
        (
            FromWorker::Output {
                cell_id,
                stream,
                data,
            },
            FromWorker::Output {
                cell_id: next_cell,
                stream: next_stream,
                data: next_data,
            },
        ) if *cell_id == next_cell
            && *stream == next_stream
            && data.len() + next_data.len() <= OUTPUT_CHUNK_BYTES =>
        {
            data.extend_from_slice(&next_data);
            None
        }
        (_, next) => Some(next),
    }
}

fn send_frame<W: std::io::Write>(writer: &mut W, frame: &FromWorker) {
    if let Err(err) = write_frame(writer, frame) {
        match err {
            // A frame we could not encode is our bug; say so instead of the frame.
            FrameError::Encode(_) | FrameError::TooLarge { .. } => {
                let fatal = FromWorker::Fatal {
                    message: format!("worker produced an unsendable frame: {err}"),
                };
                if write_frame(writer, &fatal).is_err() {
                    exit_lost_supervisor();
                }
            }
            _ => exit_lost_supervisor(),
        }
    }
}

/// The supervisor is gone: nobody will read our results, so leave at once, taking every
/// process the cells started with us.
fn exit_lost_supervisor() -> ! {
    crate::warden::leave(0);
}

/// Kills every process in this worker's process group, this one included. Only when the
/// worker leads its own group (as the supervisor starts it): a worker run by hand inside
/// someone else's group must not take that group down.
pub fn kill_own_group() {
    let group = nix::unistd::getpgrp();
    if group == nix::unistd::getpid() {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// What the engine and control threads share to act on the supervisor's frames, whichever
/// of them read the frame.
#[derive(Clone)]
struct FrameHandler {
    /// The socket's receiving side; only the holder of the reader token reads it.
    input: Arc<std::sync::Mutex<FrameReader>>,
    outbox: Outbox,
    socket: SocketWriter,
    token: Arc<ReaderToken>,
    /// The running cell's interrupt flag.
    interrupt: Interrupt,
    hook: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl FrameHandler {
    /// The next frame from the supervisor (the caller holds the reader token, so the lock is
    /// never contended).
    fn read(&self) -> Result<Option<ToWorker>, FrameError> {
        let mut input = self.input.lock().unwrap_or_else(|e| e.into_inner());
        read_frame(&mut input.0)
    }

    /// Acts on what was read; an `Execute` is given back for the engine to run.
    fn handle(&self, read: Result<Option<ToWorker>, FrameError>) -> Option<ExecuteCell> {
        match read {
            Ok(Some(ToWorker::Execute(cell))) => return Some(cell),
            Ok(Some(ToWorker::Ping { seq })) => self.pong(seq),
            Ok(Some(ToWorker::ToolResult { call_id, outcome })) => {
                self.outbox.deliver_tool_result(call_id, outcome);
            }
            Ok(Some(ToWorker::Interrupt { cell_id })) => self.interrupt(cell_id),
            Ok(Some(ToWorker::Shutdown)) | Ok(None) => exit_on_shutdown(),
            Ok(Some(ToWorker::Hello { .. })) => {
                self.outbox.send(FromWorker::Fatal {
                    message: "unexpected second Hello".into(),
                });
            }
            Err(err) => {
                self.outbox.send(FromWorker::Fatal {
                    message: format!("bad frame from the supervisor: {err}"),
                });
                exit_on_shutdown();
            }
        }
        None
    }

    /// Answers a heartbeat: at once when nobody else is writing (no order to keep with other
    /// frames), else through the queue.
    fn pong(&self, seq: u64) {
        let pong = FromWorker::Pong { seq };
        match self.socket.try_lock() {
            Some(mut wire) => {
                wire.write(&pong);
                wire.flush();
            }
            None => self.outbox.send(pong),
        }
    }

    /// Stops the running cell if the interrupt names it, or has the named cell start
    /// interrupted if it was received and has not started. Decided and acted on under the
    /// token's lock, so the flag cannot be raised for a cell that started meanwhile.
    fn interrupt(&self, cell_id: u64) {
        let mut state = self.token.lock();
        if state.interrupt(cell_id) == InterruptAction::Raise {
            self.interrupt.raise();
            self.outbox
                .tools
                .cancel_all("the tool call was cancelled: the cell was interrupted");
            if let Some(hook) = &self.hook {
                hook();
            }
        }
        drop(state);
    }
}

/// The supervisor's frames, read through a buffer (a frame, header and payload, costs one
/// `recv`), which passes between the engine and control threads with the reader token.
struct FrameReader(std::io::BufReader<InputOnly>);

impl FrameReader {
    fn new(stream: Arc<Stream>) -> FrameReader {
        FrameReader(std::io::BufReader::new(InputOnly(stream)))
    }
}

/// The socket's receiving side, sleeping in `poll` for input before each `recv`. A thread
/// asleep in `recv` itself on a Unix socket is also woken each time the supervisor reads
/// what this worker wrote (the write-space wake-up shares the socket's wait queue), only to
/// find nothing and sleep again: that cost every quick cell a second wake-up (20-30 us of
/// CPU here), and a streaming cell one per frame the supervisor took. `poll` for `POLLIN`
/// sleeps for input only.
struct InputOnly(Arc<Stream>);

impl std::io::Read for InputOnly {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        let Stream::UdSocket(socket) = &*self.0;
        let mut wanted = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut wanted, PollTimeout::NONE) {
                // Readable, or the end of the link or an error, which `read` reports.
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
        (&*self.0).read(buf)
    }
}

/// Reads the supervisor's frames while a cell runs: sleeps until the [`ReaderToken`] says a
/// cell has run past its grace (or waits for a tool), then reads until it hands the token
/// back to the engine with the first frame after the cell.
struct ControlThread {
    frames: FrameHandler,
}

impl ControlThread {
    fn run(self) {
        loop {
            self.frames.token.control_wait_for_turn();
            loop {
                let frame = match self.frames.read() {
                    Ok(Some(frame)) => frame,
                    // The end of the link, or a bad frame: the worker exits there.
                    other => {
                        self.frames.handle(other);
                        continue;
                    }
                };
                let (mine, still_reading) = self.frames.token.control_read(frame);
                if let Some(frame) = mine {
                    self.frames.handle(Ok(Some(frame)));
                }
                if !still_reading {
                    break;
                }
            }
        }
    }
}

/// Shutdown (or the supervisor's end of the socket closing): the engine may be in the middle
/// of a cell that will never finish, so leave now rather than wait for it, and take every
/// process the cells started with us.
fn exit_on_shutdown() -> ! {
    crate::warden::leave(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(cell_id: u64, stream: OutputStream, data: &[u8]) -> FromWorker {
        FromWorker::Output {
            cell_id,
            stream,
            data: data.to_vec(),
        }
    }

    #[test]
    fn a_cells_first_output_and_its_done_go_now_the_output_between_is_held() {
        let streak = AtomicBool::new(false);
        let routes: Vec<Route> = [
            output(1, OutputStream::Stdout, b"a"),
            output(1, OutputStream::Stdout, b"b"),
            FromWorker::Pong { seq: 1 },
            output(1, OutputStream::Stderr, b"c"),
            FromWorker::Done {
                cell_id: 1,
                outcome: CellOutcome::Completed,
            },
            output(2, OutputStream::Stdout, b"d"),
        ]
        .iter()
        .map(|frame| Route::of(frame, &streak))
        .collect();
        assert_eq!(
            routes,
            [
                Route::Now,
                Route::Hold,
                Route::Queue,
                Route::Hold,
                Route::Now,
                Route::Now
            ]
        );
    }

    fn decoded(bytes: &[u8]) -> Vec<FromWorker> {
        let mut reader = bytes;
        std::iter::from_fn(|| read_frame(&mut reader).expect("a frame"))
            .collect::<Vec<FromWorker>>()
    }

    #[test]
    fn held_output_is_merged_and_goes_out_before_any_later_frame() {
        let mut wire = Wire::new(Vec::new());
        wire.hold(output(1, OutputStream::Stdout, b"a\n"));
        wire.hold(output(1, OutputStream::Stdout, b"b\n"));
        assert!(wire.is_dirty());
        assert!(wire.out.get_ref().is_empty(), "held, not yet in the buffer");
        wire.write(&FromWorker::Pong { seq: 7 });
        wire.hold(output(1, OutputStream::Stderr, b"e"));
        wire.hold(output(1, OutputStream::Stdout, b"c\n"));
        wire.flush();
        assert!(!wire.is_dirty());
        assert_eq!(
            decoded(wire.out.get_ref()),
            [
                output(1, OutputStream::Stdout, b"a\nb\n"),
                FromWorker::Pong { seq: 7 },
                output(1, OutputStream::Stderr, b"e"),
                output(1, OutputStream::Stdout, b"c\n"),
            ]
        );
    }

    #[test]
    fn adjacent_output_of_one_cell_and_stream_is_merged() {
        let mut frame = output(1, OutputStream::Stdout, b"a\n");
        assert!(merge_output(&mut frame, output(1, OutputStream::Stdout, b"b\n")).is_none());
        assert_eq!(frame, output(1, OutputStream::Stdout, b"a\nb\n"));
    }

    #[test]
    fn other_streams_cells_frames_and_full_chunks_are_not_merged() {
        let mut frame = output(1, OutputStream::Stdout, b"a");
        for next in [
            output(1, OutputStream::Stderr, b"b"),
            output(2, OutputStream::Stdout, b"b"),
            FromWorker::Pong { seq: 1 },
            output(1, OutputStream::Stdout, &vec![b'x'; OUTPUT_CHUNK_BYTES]),
        ] {
            assert_eq!(merge_output(&mut frame, next.clone()), Some(next));
        }
        assert_eq!(frame, output(1, OutputStream::Stdout, b"a"));
    }
}
