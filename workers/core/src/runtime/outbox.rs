//! The [`Outbox`]: everything the worker says to the supervisor goes through it, from any
//! thread. A cell's `Done` (and its first output) with nothing queued ahead of it is written
//! to the socket by the thread that sends it; the output after it is held back in the
//! socket's buffer to merge (see [`Route`]); everything else joins the bounded queue the
//! writer thread drains (the `wire` module). Host tool calls wait here for their answer.

use cellvisor_ipc::{CellOutcome, FromWorker, OutputStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

use super::meter::Meter;
use super::wire::SocketWriter;
use super::OUTPUT_CHUNK_BYTES;
use crate::reader_token::ReaderToken;

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
    /// What each `Done` reports of the worker's tree and descriptors.
    meter: Meter,
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
    /// writes cost a few frames and about one write per [`FLUSH_DELAY`](super::wire::FLUSH_DELAY), while a cell's one
    /// line of output (and its `Done`) goes out at once; neither costs a thread hop.
    output_streak: Arc<AtomicBool>,
}

/// How a frame may skip the queue, as far as its kind goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Written (and flushed, unless the sender says otherwise) by the sending thread.
    Now,
    /// Held back in the socket's buffer to merge with the output that follows; the flusher
    /// thread sends it within [`FLUSH_DELAY`](super::wire::FLUSH_DELAY) unless another frame takes it along first.
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
                meter: Meter::default(),
            },
            rx,
        )
    }

    /// Lets frames with nothing queued ahead of them skip the queue: their sender writes
    /// them to `socket`. `queued` counts the frames sent to the queue and not yet on the wire
    /// (the writer thread lowers it once it has written them).
    pub(super) fn write_directly(&mut self, socket: SocketWriter, queued: Arc<AtomicU64>) {
        self.direct = Some(DirectWrite {
            socket,
            queued,
            output_streak: Arc::default(),
        });
    }

    /// Tells `token` when a cell waits for a tool's answer, and asks it whether a cell may
    /// end early ([`Outbox::complete_early`]).
    pub(super) fn tell_reader(&mut self, token: Arc<ReaderToken>) {
        self.reader = Some(token);
    }

    /// Fails every tool call in flight: the cell they belong to was interrupted.
    pub(super) fn cancel_tool_calls(&self, why: &str) {
        self.tools.cancel_all(why);
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
        PendingToolCall { answer }
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
    /// nothing, unless `cell_id` is the running cell and no interrupt was raised for it, and
    /// the cell left no process to count (one read of the pid counter; a cell that may have,
    /// has its processes counted by the engine thread, which then sends its `Done`).
    pub fn complete_early(&self, cell_id: u64) -> bool {
        let Some(token) = &self.reader else {
            return false;
        };
        if !crate::warden::cell_ended_without_processes() {
            return false;
        }
        if !token.lock().ends_early(cell_id) {
            return false;
        }
        self.done(cell_id, CellOutcome::Completed, 0, 0);
        true
    }

    /// Sends the `Done` of `cell_id`, with the worker's tree and descriptors as the cell left
    /// them (see the `meter` module).
    pub(super) fn done(
        &self,
        cell_id: u64,
        outcome: CellOutcome,
        processes_ended: u32,
        processes_seen: u32,
    ) {
        self.send(FromWorker::Done {
            cell_id,
            outcome,
            processes_ended,
            processes_seen,
            usage: self.meter.read(),
        });
    }

    /// Names the process whose descriptors a cell uses, when it is not the worker's own
    /// (Python's interpreter).
    pub(super) fn set_cells_process(&self, pid: Option<u32>) {
        self.meter.set_cells_process(pid);
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

#[cfg(test)]
mod tests {
    use super::super::wire::tests::output;
    use super::*;

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
                processes_ended: 0,
                processes_seen: 0,
                usage: Default::default(),
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
}
