//! The write path: the socket's sending side ([`SocketWriter`]), shared by the writer
//! thread that drains the outbox's queue, the senders that write a frame at once or hold
//! output back to merge, and the flusher thread that sends held output within
//! [`FLUSH_DELAY`]. A supervisor that reads slowly blocks the writers here, which slows the
//! cell down instead of growing a buffer; one that is gone ends the worker.

use crate::locking::lock;
use cellvisor_ipc::frame::{write_frame, FrameError};
use cellvisor_ipc::socket::Stream;
use cellvisor_ipc::FromWorker;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread;

use super::OUTPUT_CHUNK_BYTES;

/// Writes frames in order. What is already queued goes out together: adjacent output
/// chunks of one cell and stream are merged (up to [`OUTPUT_CHUNK_BYTES`]) and the frames
/// share one buffered write, so a cell printing many short lines costs a few frames, not
/// one per line. Nothing is held back: the buffer is flushed whenever the queue is empty.
pub(super) fn write_loop(
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
pub(super) const FLUSH_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// The socket's sending side, shared by the writer thread (everything queued in the outbox),
/// senders that write a frame at once (a `Done` with nothing queued ahead, a `Pong`) or hold
/// output back, and the flusher thread.
#[derive(Clone)]
pub(super) struct SocketWriter {
    wire: Arc<std::sync::Mutex<Wire>>,
    flusher: Arc<Flusher>,
}

/// The socket's buffer, with the output frame held back to merge with what follows.
pub(super) struct Wire<W: std::io::Write = StreamWriter> {
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
    pub(super) fn write(&mut self, frame: &FromWorker) {
        if let Some(held) = self.held.take() {
            send_frame(&mut self.out, &held);
        }
        send_frame(&mut self.out, frame);
    }

    /// Holds an output frame back, merged with the held one when they go together.
    pub(super) fn hold(&mut self, frame: FromWorker) {
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
    pub(super) fn flush(&mut self) {
        if let Some(held) = self.held.take() {
            send_frame(&mut self.out, &held);
        }
        if std::io::Write::flush(&mut self.out).is_err() {
            exit_lost_supervisor();
        }
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.held.is_some() || !self.out.buffer().is_empty()
    }
}

/// Wakes the flusher thread when output is held back.
#[derive(Default)]
struct Flusher {
    asked: std::sync::Mutex<bool>,
    wake: std::sync::Condvar,
}

/// The socket as `std::io::Write`, for the buffer in front of it.
pub(super) struct StreamWriter(Arc<Stream>);

impl std::io::Write for StreamWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

impl SocketWriter {
    pub(super) fn new(stream: Arc<Stream>) -> SocketWriter {
        SocketWriter {
            wire: Arc::new(std::sync::Mutex::new(Wire::new(StreamWriter(stream)))),
            flusher: Arc::default(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Wire> {
        lock(&self.wire)
    }

    /// The socket if no other thread is writing now.
    pub(super) fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, Wire>> {
        match self.wire.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Has the flusher thread send what was just held back, unless it was asked already
    /// (`wire` is the locked socket, so the flusher cannot be between its flush and
    /// forgetting the request).
    pub(super) fn arm_flusher(&self, wire: &mut Wire) {
        if !wire.flush_armed {
            wire.flush_armed = true;
            *lock(&self.flusher.asked) = true;
            self.flusher.wake.notify_one();
        }
    }

    /// The flusher thread: sleeps until output is held back, lets [`FLUSH_DELAY`] pass for
    /// more to join it, then sends it all.
    pub(super) fn flush_held_output(&self) {
        loop {
            {
                let mut asked = lock(&self.flusher.asked);
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
pub(super) struct FatalSent {
    sent: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl FatalSent {
    /// Only a supervisor that stopped reading could take this long.
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

    pub(super) fn mark(&self) {
        *lock(&self.sent) = true;
        self.changed.notify_all();
    }

    pub(super) fn wait(&self) {
        let sent = lock(&self.sent);
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use cellvisor_ipc::frame::read_frame;
    use cellvisor_ipc::OutputStream;

    /// An output frame, as engines send them.
    pub(in crate::runtime) fn output(
        cell_id: u64,
        stream: OutputStream,
        data: &[u8],
    ) -> FromWorker {
        FromWorker::Output {
            cell_id,
            stream,
            data: data.to_vec(),
        }
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
