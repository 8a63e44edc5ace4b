//! The supervisor's end of one worker connection, as two tasks.
//!
//! The reader task writes the running cell's output into its [`CellOutput`] (shared with the
//! session, which cuts it when the cell yields), so output goes from the socket into a bounded
//! sink (and to the host's event stream, awaiting a slow host: backpressure all the way to the
//! worker) without passing through the session actor's mailbox. Control frames (`Done`,
//! `Yield`) and the worker's exit become messages to the [`Session`] actor. The writer task owns
//! the send half.

mod decode;
mod tool_calls;

use decode::{decode_streamed, is_disconnect, stderr_beyond};

use super::descriptors::Descriptors;
use super::messages::{CellFinished, CellYield, WorkerExited, WorkerNotice};
use super::observation::YieldCause;
use super::outcome::WorkerEnd;
use super::window::CellOutput;
use super::Session;
use crate::cell::{CellEvent, ToolCallRequest};
use crate::output::SinkResult;
use crate::socket_halves::ReadSide;
use crate::spawn::{ProcessHandle, StartedWorker, StderrTail, WorkerProcess};
use crate::usage::{CellReadings, TreeReading};
use actix::Addr;
use cellvisor_ipc::frame::{read_frame_async, FrameError};
use cellvisor_ipc::state::StateReport;
use cellvisor_ipc::taken::TakenRecord;
use cellvisor_ipc::{DoneUsage, FromWorker, OutputStream, ToWorker};
use nix::sys::signal::Signal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// The MIME type of status events: what a prelude helper did ("read 120 lines of x").
pub const STATUS_MIME: &str = "application/x-cellvisor-status";
/// The key of the display bundle a worker sends for its cell's trailing value (a
/// [`CellEvent::Value`]): the value's own bundle under it.
pub const VALUE_MIME: &str = "application/x-cellvisor-value";
/// The key of the display bundle a worker sends for a `clear_output(wait=...)` (a
/// [`CellEvent::ClearOutput`]): `{"wait": bool}` under it.
pub const CLEAR_MIME: &str = "application/x-cellvisor-clear";

/// A cell whose output the reader task is collecting.
pub(crate) struct ActiveCell {
    pub cell_id: u64,
    pub index: usize,
    /// Shared with the session, which cuts it when the cell yields.
    pub output: Arc<CellOutput>,
    pub events: Option<mpsc::Sender<CellEvent>>,
    text_carry: Vec<u8>,
    /// Names of the tools the host declared, and where calls go.
    tools: Vec<String>,
    tool_host: Option<mpsc::Sender<ToolCallRequest>>,
    /// Dropped when the cell ends, which cancels its tool calls still waiting for the host.
    alive: watch::Sender<()>,
    /// What a state task's worker answered (none for a host's cell).
    state: Option<StateReport>,
}

/// What a finished (or abandoned) cell produced since it was last observed.
pub(crate) struct CellProducts {
    pub cell_id: u64,
    /// Whether the worker took the cell (so it may have run, in part or whole).
    pub started: bool,
    pub output: SinkResult,
    pub displays: Vec<serde_json::Value>,
    pub status_events: Vec<serde_json::Value>,
    /// A state task's report.
    pub state: Option<StateReport>,
    /// The worker's tree before and after the cell, for its usage.
    pub readings: CellReadings,
}

impl ActiveCell {
    pub fn new(
        cell_id: u64,
        index: usize,
        output: Arc<CellOutput>,
        events: Option<mpsc::Sender<CellEvent>>,
    ) -> ActiveCell {
        ActiveCell {
            cell_id,
            index,
            output,
            events,
            text_carry: Vec::new(),
            tools: Vec::new(),
            tool_host: None,
            alive: watch::channel(()).0,
            state: None,
        }
    }

    /// Lets the cell call the host's tools.
    pub fn with_tools(
        mut self,
        tools: Vec<String>,
        host: Option<mpsc::Sender<ToolCallRequest>>,
    ) -> ActiveCell {
        self.tools = tools;
        self.tool_host = host;
        self
    }

    /// The host's event stream; once the cell went to the background (its request has
    /// returned and nobody reads that stream any more), the stream of the `wait` watching
    /// it, if one does.
    fn events(&mut self) -> &mut Option<mpsc::Sender<CellEvent>> {
        if self.output.in_background() {
            self.events = self.output.watcher();
        }
        &mut self.events
    }

    /// What the cell produced; `started` says whether the worker took it.
    fn finish(self, started: bool, readings: CellReadings) -> CellProducts {
        let observed = self.output.finish();
        CellProducts {
            cell_id: self.cell_id,
            started,
            output: observed.output,
            displays: observed.displays,
            status_events: observed.status_events,
            state: self.state,
            readings,
        }
    }
}

/// The session's handle on a live connection.
pub(crate) struct Link {
    pub pid: u32,
    pub engine: String,
    /// Signals for the worker and its descendants.
    pub process: ProcessHandle,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    cells: mpsc::UnboundedSender<ActiveCell>,
    host: HostLine,
    frames_read: FramesRead,
    /// `frames_read` at the heartbeat's previous look.
    frames_seen: u64,
}

/// How many frames the reader has read from the worker. Any frame proves the worker alive,
/// a pong as much as output: the heartbeat compares the count between its ticks, so a pong read
/// behind a long backlog of output (thousands of quick cells on a busy machine) cannot make a
/// busy worker look silent, and no message per pong goes through the session's mailbox.
#[derive(Clone, Default)]
struct FramesRead(Arc<AtomicU64>);

/// The reader's line to the host's event stream. A host that reads slowly makes the reader
/// wait (backpressure all the way to the worker); while it waits, pongs are not read either,
/// so the session must not take the silence for a dead worker. And once the worker is being
/// killed, nobody waits for the host any more.
#[derive(Clone)]
struct HostLine {
    stalled: Arc<AtomicBool>,
    abandon: watch::Sender<bool>,
}

impl HostLine {
    fn new() -> HostLine {
        HostLine {
            stalled: Arc::default(),
            abandon: watch::channel(false).0,
        }
    }

    /// Sends `event`, waiting while the host catches up unless the link is abandoned; a host
    /// that went away, or an abandoned link, just stops getting events.
    async fn deliver(&self, events: &mut Option<mpsc::Sender<CellEvent>>, event: CellEvent) {
        let Some(sender) = events.as_ref() else {
            return;
        };
        let event = match sender.try_send(event) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                *events = None;
                return;
            }
            Err(mpsc::error::TrySendError::Full(event)) => event,
        };
        self.stalled.store(true, Ordering::SeqCst);
        let mut abandon = self.abandon.subscribe();
        let delivered = tokio::select! {
            sent = sender.send(event) => sent.is_ok(),
            _ = abandon.wait_for(|abandoned| *abandoned) => false,
        };
        self.stalled.store(false, Ordering::SeqCst);
        if !delivered {
            *events = None;
        }
    }
}

impl Link {
    /// Starts the reader and writer tasks for `worker`.
    pub fn spawn(worker: StartedWorker, generation: u64, session: Addr<Session>) -> Link {
        let StartedWorker {
            pid,
            engine,
            child,
            reader,
            mut writer,
            stderr_tail,
            taken,
        } = worker;
        let process = child.handle();
        let (to_worker, mut outgoing) = mpsc::unbounded_channel::<ToWorker>();
        let (cells, incoming_cells) = mpsc::unbounded_channel::<ActiveCell>();
        actix::spawn(async move {
            while let Some(frame) = outgoing.recv().await {
                let Ok(bytes) = cellvisor_ipc::frame::encode(&frame) else {
                    break;
                };
                if writer.write_all(&bytes).await.is_err() {
                    break;
                }
            }
        });
        let host = HostLine::new();
        let frames_read = FramesRead::default();
        let reader_task = ReaderTask {
            pid,
            last_reading: TreeReading::default(),
            last_read_at: std::time::Instant::now(),
            members: Vec::new(),
            generation,
            session,
            host: host.clone(),
            frames_read: frames_read.clone(),
            to_worker: to_worker.clone(),
            cells: incoming_cells,
            current: None,
            fatal: None,
        };
        actix::spawn(reader_task.run(reader, child, stderr_tail, taken));
        Link {
            pid,
            engine,
            process,
            to_worker,
            cells,
            host,
            frames_read,
            frames_seen: 0,
        }
    }

    /// Whether the worker sent anything since the previous call (see [`FramesRead`]).
    pub fn heard_since_last_look(&mut self) -> bool {
        let read = self.frames_read.0.load(Ordering::Relaxed);
        std::mem::replace(&mut self.frames_seen, read) != read
    }

    /// Whether the reader is waiting for a slow host (and so cannot be reading pongs).
    pub fn host_stalled(&self) -> bool {
        self.host.stalled.load(Ordering::SeqCst)
    }

    /// Stops waiting for the host: the worker is being killed or stopped, and its exit must
    /// be seen even if the host never reads again.
    pub fn abandon_host(&self) {
        let _ = self.host.abandon.send(true);
    }

    pub fn send(&self, frame: ToWorker) {
        let _ = self.to_worker.send(frame);
    }

    /// Hands the reader a new cell's sink. Must come before the `Execute` frame is sent.
    pub fn begin(&self, cell: ActiveCell) {
        let _ = self.cells.send(cell);
    }
}

/// A cell's usage is read from the known members of its worker's tree when the previous
/// reading is this recent (a cell this quick rarely leaves a process running; one that does
/// is counted from the next longer cell on, and any it reaped counts in its parent's).
const REDISCOVER_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

struct ReaderTask {
    /// The worker's pid: the root of the tree read for each cell's usage.
    pid: u32,
    /// The tree at the end of the previous cell (or the worker's start).
    last_reading: TreeReading,
    /// When it was read, and the members it found last time it looked for them.
    last_read_at: std::time::Instant,
    members: Vec<u32>,
    generation: u64,
    session: Addr<Session>,
    host: HostLine,
    frames_read: FramesRead,
    /// For answering tool calls.
    to_worker: mpsc::UnboundedSender<ToWorker>,
    cells: mpsc::UnboundedReceiver<ActiveCell>,
    current: Option<ActiveCell>,
    fatal: Option<String>,
}

impl ReaderTask {
    async fn run(
        mut self,
        reader: ReadSide,
        child: WorkerProcess,
        stderr_tail: StderrTail,
        taken: TakenRecord,
    ) {
        self.last_reading = self.read_tree().await;
        self.read_frames(reader).await;
        self.wrap_up(child, stderr_tail, taken).await;
    }

    /// Reads and handles the worker's frames until its connection ends.
    async fn read_frames(&mut self, reader: ReadSide) {
        // One read usually brings several frames (header and payload included).
        let mut reader = tokio::io::BufReader::with_capacity(128 * 1024, reader);
        loop {
            let frame = read_frame_async::<_, FromWorker>(&mut reader).await;
            // A cell is always handed over before its Execute frame is sent, so every cell
            // a frame can belong to is in the channel by now.
            while let Ok(cell) = self.cells.try_recv() {
                self.current = Some(cell);
            }
            match frame {
                Ok(Some(frame)) => {
                    self.frames_read.0.fetch_add(1, Ordering::Relaxed);
                    if !self.handle(frame).await {
                        break;
                    }
                }
                Ok(None) => break,
                // The worker died mid-write: its exit status tells the story.
                Err(FrameError::Io(err)) if is_disconnect(&err) => break,
                Err(FrameError::Truncated { .. }) => break,
                Err(err) => {
                    self.fatal = Some(format!("sent a bad frame ({err})"));
                    break;
                }
            }
        }
    }

    /// The connection ended: the worker's tree is killed and reaped, and the session told
    /// how it ended, with what the running cell produced.
    async fn wrap_up(
        mut self,
        mut child: WorkerProcess,
        stderr_tail: StderrTail,
        taken: TakenRecord,
    ) {
        // The running cell's usage, while the unreaped worker still holds its CPU counters.
        let readings = match self.current.is_some() {
            true => self.readings_now().await,
            false => CellReadings::default(),
        };
        // Kill the group before reaping the leader, so no process a cell started survives
        // and the group id cannot have been reused.
        child.handle().signal_group(Signal::SIGKILL);
        let ended = WorkerEnd {
            exit: child.wait().await,
            fatal: self.fatal.take(),
        };
        // Read only now: the worker records a cell before running it, which costs no frame
        // (and no wake-up of this task) per cell. An unreadable record counts as taken, so a
        // cell is never run twice.
        let last_taken = taken.last().ok();
        let partial = self.current.take().map(|cell| {
            let started = last_taken.is_none_or(|id| id == cell.cell_id);
            cell.finish(started, readings)
        });
        // The worker's last words, once its stderr has closed (bounded: a descendant that
        // escaped the kill could hold the pipe open).
        stderr_tail
            .settled(std::time::Duration::from_millis(20))
            .await;
        self.session.do_send(WorkerExited {
            generation: self.generation,
            stderr_tail: stderr_beyond(&stderr_tail.text(), ended.fatal.as_deref()),
            ended,
            partial,
        });
    }

    /// Handles one frame; `false` ends the connection.
    async fn handle(&mut self, frame: FromWorker) -> bool {
        match frame {
            FromWorker::Output {
                cell_id,
                stream,
                data,
            } => self.output(cell_id, stream, &data).await,
            FromWorker::Display {
                cell_id,
                bundle_json,
            } => self.display(cell_id, bundle_json).await,
            FromWorker::Done {
                cell_id,
                outcome,
                processes_ended,
                processes_seen,
                usage,
            } => {
                let counts = (processes_ended, processes_seen);
                self.done(cell_id, outcome, counts, usage).await;
            }
            FromWorker::Yield { cell_id } => {
                if let Some(cell) = self.current.as_ref().filter(|c| c.cell_id == cell_id) {
                    // The host gets the output up to here, however late the session cuts.
                    cell.output.hold();
                    self.session.do_send(CellYield {
                        cell_id,
                        cause: YieldCause::Control,
                    });
                }
            }
            // Counted with every frame (see `FramesRead`).
            FromWorker::Pong { .. } => {}
            FromWorker::ToolCall {
                cell_id,
                call_id,
                name,
                args_json,
            } => {
                self.tool_status(cell_id, &name).await;
                self.call_tool(cell_id, call_id, name, &args_json);
            }
            FromWorker::State { cell_id, report } => {
                if let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) {
                    cell.state = Some(report);
                }
            }
            FromWorker::Fatal { message } => self.fatal = Some(message),
            FromWorker::Notice { message } => self.session.do_send(WorkerNotice {
                generation: self.generation,
                message,
            }),
            FromWorker::Hello { .. } => {
                self.fatal = Some("said Hello twice".to_string());
                return false;
            }
        }
        true
    }
}

impl ReaderTask {
    /// The running cell's output: into its sink, and to its host's events as text.
    async fn output(&mut self, cell_id: u64, stream: OutputStream, data: &[u8]) {
        let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) else {
            return;
        };
        cell.output.write(data);
        if cell.events().is_none() {
            return;
        }
        let text = decode_streamed(&mut cell.text_carry, data);
        if !text.is_empty() {
            let event = CellEvent::Output {
                index: cell.index,
                stream: match stream {
                    OutputStream::Stdout => "stdout",
                    OutputStream::Stderr => "stderr",
                },
                text,
            };
            self.host.deliver(&mut cell.events, event).await;
        }
    }

    /// A display bundle of the running cell: its trailing value, a `clear_output`, a
    /// helper's status, or something it showed.
    async fn display(&mut self, cell_id: u64, bundle_json: String) {
        let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) else {
            return;
        };
        let bundle: serde_json::Value = serde_json::from_str(&bundle_json)
            .unwrap_or_else(|_| serde_json::json!({ "text/plain": bundle_json }));
        let index = cell.index;
        let event = match bundle.get(STATUS_MIME) {
            // The value's bundle is for the events alone: its text is in the
            // output and its rich form is a display of its own.
            None if bundle.get(VALUE_MIME).is_some() => CellEvent::Value {
                index,
                bundle: bundle[VALUE_MIME].clone(),
            },
            // What the cell showed goes (or goes with its next output).
            None if bundle.get(CLEAR_MIME).is_some() => {
                let wait = bundle[CLEAR_MIME]["wait"].as_bool().unwrap_or(false);
                cell.output.clear(wait);
                CellEvent::ClearOutput { index, wait }
            }
            Some(status) => {
                cell.output.status(status.clone());
                CellEvent::Status {
                    index,
                    status: status.clone(),
                }
            }
            None => {
                cell.output.display(bundle.clone());
                CellEvent::Display { index, bundle }
            }
        };
        if cell.events().is_some() {
            self.host.deliver(&mut cell.events, event).await;
        }
    }

    /// The running cell is done: what it produced goes to the session, with its usage
    /// (`counts`: the processes the worker ended with it, and saw).
    async fn done(
        &mut self,
        cell_id: u64,
        outcome: cellvisor_ipc::CellOutcome,
        counts: (u32, u32),
        usage: DoneUsage,
    ) {
        if self.current.as_ref().is_none_or(|c| c.cell_id != cell_id) {
            return;
        }
        let readings = self.readings_reported(usage).await;
        let Some(cell) = self.current.take() else {
            return;
        };
        let products = cell.finish(true, readings);
        self.session.do_send(CellFinished {
            generation: self.generation,
            cell_id,
            outcome,
            processes_ended: counts.0,
            processes_seen: counts.1,
            output: products.output,
            displays: products.displays,
            status_events: products.status_events,
            state: products.state,
            readings,
            descriptors: (usage != DoneUsage::default()).then(|| Descriptors::reported(usage)),
        });
    }

    /// Reads the worker's tree. A quick cell rereads the members found last time (a `stat`
    /// read each: the worker and its interpreter); after a longer stretch the tree is found
    /// afresh, which on kernels without children lists scans all of `/proc`, too much for
    /// every cell. Either way it runs here: a hop to the blocking pool and back cost the
    /// cell's answer more than the reads.
    async fn read_tree(&mut self) -> TreeReading {
        let quick = self.last_read_at.elapsed() < REDISCOVER_AFTER;
        self.last_read_at = std::time::Instant::now();
        if quick && !self.members.is_empty() {
            return TreeReading::of_members(&self.members);
        }
        let (reading, members) = TreeReading::discover(self.pid);
        self.members = members;
        reading
    }

    /// The running cell's readings as its worker's `Done` reported the tree (no `/proc`
    /// read here); a worker that reported none (a scripted test worker) is read here.
    async fn readings_reported(&mut self, usage: DoneUsage) -> CellReadings {
        if usage == DoneUsage::default() {
            return self.readings_now().await;
        }
        let after = TreeReading {
            cpu_ticks: usage.cpu_ticks,
            rss_bytes: usage.rss_bytes,
        };
        let before = std::mem::replace(&mut self.last_reading, after);
        CellReadings { before, after }
    }

    /// The tree now, and at the previous reading: the running cell's readings.
    async fn readings_now(&mut self) -> CellReadings {
        let after = self.read_tree().await;
        let before = std::mem::replace(&mut self.last_reading, after);
        CellReadings { before, after }
    }
}
