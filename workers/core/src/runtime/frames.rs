//! The read path: the supervisor's frames, read by the engine thread between cells and by
//! the control thread while a cell runs (who reads when is the reader token's business),
//! and acted on the same way by both ([`FrameHandler`]): `Ping` is answered, an `Interrupt`
//! raises the cell's flag, a tool's answer goes to the call waiting for it, `Shutdown` or
//! a closed socket ends the worker, and an `Execute` goes back to the engine.

use crate::locking::lock;
use cellvisor_ipc::frame::{read_frame, FrameError};
use cellvisor_ipc::socket::Stream;
use cellvisor_ipc::{ExecuteCell, FromWorker, ToWorker};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::sync::Arc;
use std::thread;

use super::wire::SocketWriter;
use super::{Interrupt, Outbox};
use crate::reader_token::{InterruptAction, ReaderToken};

/// What the engine and control threads share to act on the supervisor's frames, whichever
/// of them read the frame.
#[derive(Clone)]
pub(super) struct FrameHandler {
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
    /// Acts on the frames read from `stream` (by whichever thread holds `token`): answers
    /// through `outbox` and `socket`, and on an interrupt also calls `hook`.
    pub(super) fn new(
        stream: Arc<Stream>,
        outbox: Outbox,
        socket: SocketWriter,
        token: Arc<ReaderToken>,
        hook: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> FrameHandler {
        FrameHandler {
            input: Arc::new(std::sync::Mutex::new(FrameReader::new(stream))),
            outbox,
            socket,
            token,
            interrupt: Interrupt::default(),
            hook,
        }
    }

    /// The running cell's interrupt flag, which an `Interrupt` frame raises.
    pub(super) fn cell_interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// The next frame from the supervisor (the caller holds the reader token, so the lock is
    /// never contended).
    pub(super) fn read(&self) -> Result<Option<ToWorker>, FrameError> {
        let mut input = lock(&self.input);
        read_frame(&mut input.0)
    }

    /// Acts on what was read; an `Execute` is given back for the engine to run.
    pub(super) fn handle(&self, read: Result<Option<ToWorker>, FrameError>) -> Option<ExecuteCell> {
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
                .cancel_tool_calls("the tool call was cancelled: the cell was interrupted");
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
pub(super) struct ControlThread {
    frames: FrameHandler,
}

impl ControlThread {
    /// Starts the control thread on `frames`.
    pub(super) fn start(frames: FrameHandler) -> std::io::Result<()> {
        let control = ControlThread { frames };
        thread::Builder::new()
            .name("frame-control".into())
            .spawn(move || control.run())
            .map(drop)
    }

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
