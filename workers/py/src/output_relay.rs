//! The output thread: the child's stdout and stderr pipes, relayed to the outbox as they
//! come, each labelled as its stream, with the sync markers cut out of stdout (see `markers`), and the [`Routing`] it shares with
//! `execute`: which cell the output belongs to, and what it has seen of the markers.

use super::events::Event;
use super::markers::{DoneStatus, MarkerScanner, Piece};
use crate::locking::lock;
use crate::runtime::{Outbox, OUTPUT_CHUNK_BYTES};
use cellvisor_ipc::OutputStream;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::io::Read;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;

/// The cell id of the marker `yield_control()` writes into the output (no cell has id 0): the
/// output thread sends the yield where it finds it, after exactly the output before it.
const YIELD_MARKER: u64 = 0;

/// How long the output thread waits, at a display's marker, for the display's event (written
/// right after the marker): past it the output goes on, and the display follows when it
/// comes (only a runner stuck between the two writes takes that long).
const DISPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Output produced before the first cell (site warnings, say) kept for that cell, at most.
const MAX_PENDING_BYTES: usize = 64 * 1024;

/// Where output goes and what the output thread has seen, shared with `execute`.
#[derive(Default)]
pub struct Routing {
    /// The cell output is attributed to: the running one, or the last one between cells.
    pub cell_id: u64,
    /// `None` until the first cell: output is then kept in `pending`.
    pub outbox: Option<Outbox>,
    pub pending: Vec<u8>,
    /// Bytes of start-up output that did not fit in `pending`.
    pub dropped: usize,
    /// The cell id of the last sync marker read.
    pub last_marker: Option<u64>,
    /// The output pipe reached EOF.
    pub closed: bool,
    /// The host tools of the running cell, for `tools.tool_search` (answered here).
    pub tools: Vec<cellvisor_ipc::ToolInfo>,
    /// Displays read from fd 4 whose place in the output (their marker) the output thread
    /// has not reached yet: sequence number -> (cell id, bundle as JSON text).
    pub parked_displays: std::collections::HashMap<u64, (u64, String)>,
    /// The sequence number of the last display marker the output thread passed: a display
    /// that arrives after its marker was passed goes out at once.
    pub displays_passed: u64,
    /// The event pipe reached EOF: no parked display will come any more.
    pub events_closed: bool,
}

/// [`Routing`] plus the condvar that announces markers and EOF.
#[derive(Default)]
pub struct SharedRouting {
    state: Mutex<Routing>,
    changed: Condvar,
}

impl SharedRouting {
    /// Locks the state; a panic elsewhere while holding the lock leaves plain data behind,
    /// so a poisoned lock is still usable.
    pub fn lock(&self) -> MutexGuard<'_, Routing> {
        lock(&self.state)
    }

    /// Waits (bounded) until `done` holds.
    pub fn wait_until(
        &self,
        timeout: std::time::Duration,
        done: impl Fn(&Routing) -> bool,
    ) -> MutexGuard<'_, Routing> {
        let guard = self.lock();
        self.changed
            .wait_timeout_while(guard, timeout, |state| !done(state))
            .map(|(guard, _)| guard)
            .unwrap_or_else(|e| e.into_inner().0)
    }

    /// Sends `data` to the cell's outbox as `stream` (before the first cell it is kept,
    /// whichever stream it came on), leaving a direct write unflushed (see
    /// [`Outbox::output_unflushed`]); returns the outbox to flush, if it went to one.
    fn forward(&self, data: &[u8], stream: OutputStream) -> Option<Outbox> {
        if data.is_empty() {
            return None;
        }
        let (cell_id, outbox) = {
            let mut state = self.lock();
            match &state.outbox {
                Some(outbox) => (state.cell_id, outbox.clone()),
                None => {
                    let room = MAX_PENDING_BYTES.saturating_sub(state.pending.len());
                    let kept = room.min(data.len());
                    state.pending.extend_from_slice(&data[..kept]);
                    state.dropped += data.len() - kept;
                    return None;
                }
            }
        };
        // Sent without the lock: a slow supervisor blocks this send, and `execute` must still
        // be able to look at the state meanwhile.
        outbox.output_unflushed(cell_id, stream, data);
        Some(outbox)
    }

    /// The event thread read display `seq`: parked for the output thread, which sends it at
    /// its marker, after exactly the output before it; handed back when the output thread
    /// already passed that marker (it waited [`DISPLAY_WAIT`] in vain), to be sent at once.
    pub fn park_display(&self, seq: u64, cell_id: u64, bundle: String) -> Option<(u64, String)> {
        let mut state = self.lock();
        if seq <= state.displays_passed {
            return Some((cell_id, bundle));
        }
        state.parked_displays.insert(seq, (cell_id, bundle));
        drop(state);
        self.changed.notify_all();
        None
    }

    /// The event pipe is closed: nothing parked is coming any more.
    pub fn events_closed(&self) {
        self.mark(|s| s.events_closed = true);
    }

    /// The output thread reached display `seq`'s marker: the display (the runner writes its
    /// event right after the marker, so it is at most a wake-up away), sent in its place.
    fn display_at_marker(&self, seq: u64) {
        let mut state = self.wait_until(DISPLAY_WAIT, |s| {
            s.parked_displays.contains_key(&seq) || s.events_closed
        });
        state.displays_passed = state.displays_passed.max(seq);
        let parked = state.parked_displays.remove(&seq);
        let outbox = state.outbox.clone();
        drop(state);
        if let (Some((cell_id, bundle)), Some(outbox)) = (parked, outbox) {
            outbox.display(cell_id, bundle);
        }
    }

    /// A `yield_control()` marker: the yield goes out in its place among the cell's output.
    fn yielded(&self) {
        let (cell_id, outbox) = {
            let state = self.lock();
            (state.cell_id, state.outbox.clone())
        };
        if let Some(outbox) = outbox {
            outbox.yield_control(cell_id);
        }
    }

    fn mark(&self, update: impl FnOnce(&mut Routing)) {
        update(&mut self.lock());
        self.changed.notify_all();
    }
}

/// The most one drain of the error pipe reads: more than a pipe holds, so everything written
/// to stderr before a marker is taken, and bounded, so a process that writes stderr without
/// pause cannot keep the thread from the output pipe.
const MAX_ERRORS_DRAIN_BYTES: usize = 1024 * 1024;

/// Drains the output and error pipes until both reach EOF: bytes go to the outbox as they
/// come, labelled by their stream, sync markers are cut out of the output and announced, and
/// a done marker goes to `execute` as the cell's `Done` event. At each marker the error pipe
/// is drained first, so what the cell wrote to stderr before its marker goes out before the
/// marker does. What one wake-up brought is flushed to the supervisor together, or, when it
/// ends with the running cell's done marker, left for that cell's `Done` frame to take along.
///
/// The two streams are ordered as the pipes allow: each keeps its own order and stderr
/// written before a marker is always ahead of it, but when both pipes hold something at one
/// wake-up, stdout goes first (a print, then a traceback, is the common order), so stderr
/// written an instant before stdout may follow it (Jupyter's streams are separate too).
pub fn spawn_output_thread(
    output: File,
    errors: File,
    marker_prefix: Vec<u8>,
    routing: Arc<SharedRouting>,
    events: Sender<Event>,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name("python-output".into())
        .spawn(move || {
            let mut relay = Relay {
                routing,
                scanner: MarkerScanner::new(marker_prefix),
                buffer: vec![0; OUTPUT_CHUNK_BYTES],
                error_buffer: vec![0; OUTPUT_CHUNK_BYTES],
                errors: Some(errors),
            };
            relay.run(output, events);
        })
        .map(drop)
}

/// The output thread's state.
struct Relay {
    routing: Arc<SharedRouting>,
    scanner: MarkerScanner,
    buffer: Vec<u8>,
    error_buffer: Vec<u8>,
    /// The error pipe, until its EOF.
    errors: Option<File>,
}

impl Relay {
    fn run(&mut self, mut output: File, events: Sender<Event>) {
        loop {
            let (output_ready, errors_ready) = self.wait_readable(Some(&output));
            let mut unflushed = None;
            // With both readable, stdout first: a print and then a traceback is the common
            // order, and stderr written before a marker is still taken before the marker.
            if output_ready {
                let read = match output.read(&mut self.buffer) {
                    Ok(0) => break,
                    Ok(read) => read,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                unflushed = self.pass_on(read, &events);
            }
            if errors_ready {
                if let Some(outbox) = self.drain_errors() {
                    unflushed = Some(outbox);
                }
            }
            if let Some(outbox) = unflushed {
                outbox.flush();
            }
        }
        drop(events);
        let routing = &self.routing;
        self.scanner.finish(&mut |piece| {
            if let Piece::Bytes(data) = piece {
                if let Some(outbox) = routing.forward(data, OutputStream::Stdout) {
                    outbox.flush();
                }
            }
        });
        // Whatever still holds stderr (a cell's child, say) is heard to its end.
        while self.errors.is_some() {
            if self.wait_readable(None).1 {
                if let Some(outbox) = self.drain_errors() {
                    outbox.flush();
                }
            }
        }
        self.routing.mark(|s| s.closed = true);
    }

    /// Sleeps until the output pipe (if given) or the error pipe (while open) is readable or
    /// closed; says which.
    fn wait_readable(&self, output: Option<&File>) -> (bool, bool) {
        use std::os::fd::AsFd;
        let wanted = PollFlags::POLLIN;
        let mut fds = Vec::with_capacity(2);
        if let Some(output) = output {
            fds.push(PollFd::new(output.as_fd(), wanted));
        }
        if let Some(errors) = &self.errors {
            fds.push(PollFd::new(errors.as_fd(), wanted));
        }
        if fds.is_empty() {
            return (false, false);
        }
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                // Let the reads find out what is wrong.
                Err(_) => return (output.is_some(), self.errors.is_some()),
            }
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|events| !events.is_empty());
        match (output.is_some(), fds.as_slice()) {
            (true, [out, err]) => (ready(out), ready(err)),
            (true, [out]) => (ready(out), false),
            (false, [err]) => (false, ready(err)),
            _ => (false, false),
        }
    }

    /// Reads what the error pipe holds now (it is non-blocking) and forwards it as stderr;
    /// closes it at EOF. Returns the outbox to flush, if any went to one.
    fn drain_errors(&mut self) -> Option<Outbox> {
        drain(&mut self.errors, &mut self.error_buffer, &self.routing)
    }

    /// Passes on `read` bytes of output: the bytes forwarded, and at each marker first what
    /// the error pipe holds (written before the marker), then the marker announced. Returns
    /// the outbox to flush, unless the running cell's `Done` takes its output along.
    fn pass_on(&mut self, read: usize, events: &Sender<Event>) -> Option<Outbox> {
        let routing = &self.routing;
        let errors = &mut self.errors;
        let error_buffer = &mut self.error_buffer;
        let mut unflushed = None;
        let mut done_follows = false;
        self.scanner.feed(&self.buffer[..read], &mut |piece| {
            if !matches!(piece, Piece::Bytes(_)) {
                if let Some(outbox) = drain(errors, error_buffer, routing) {
                    unflushed = Some(outbox);
                    done_follows = false;
                }
            }
            match piece {
                Piece::Bytes(data) => {
                    if let Some(outbox) = routing.forward(data, OutputStream::Stdout) {
                        unflushed = Some(outbox);
                        done_follows = false;
                    }
                }
                Piece::Display(seq) => {
                    routing.display_at_marker(seq);
                    done_follows = false;
                }
                Piece::Marker(YIELD_MARKER) => routing.yielded(),
                Piece::Marker(cell_id) => routing.mark(|s| s.last_marker = Some(cell_id)),
                Piece::Done(cell_id, status) => {
                    let mut running = None;
                    routing.mark(|s| {
                        s.last_marker = Some(cell_id);
                        if s.cell_id == cell_id {
                            running.clone_from(&s.outbox);
                        }
                    });
                    // A completed cell's Done leaves from here, with its output, without
                    // waiting for the engine thread to wake.
                    let completed = match (status, &running) {
                        (DoneStatus::Ok, Some(outbox)) => outbox.complete_early(cell_id),
                        _ => false,
                    };
                    let sent = events
                        .send(Event::Done {
                            id: cell_id,
                            status: status.as_str().to_string(),
                            summary: None,
                            marker: true,
                        })
                        .is_ok();
                    // The Done sent here took the output along. Any other Done (an
                    // interrupted cell's waits for its processes to end) comes later:
                    // what the cell printed goes out now.
                    done_follows = sent && completed;
                }
            }
        });
        unflushed.filter(|_| !done_follows)
    }
}

/// Reads what the (non-blocking) error pipe holds now and forwards it as stderr; closes it
/// at EOF. Returns the outbox to flush, if any went to one.
fn drain(errors: &mut Option<File>, buffer: &mut [u8], routing: &SharedRouting) -> Option<Outbox> {
    let pipe = errors.as_mut()?;
    let mut unflushed = None;
    let mut taken = 0;
    while taken < MAX_ERRORS_DRAIN_BYTES {
        match pipe.read(buffer) {
            Ok(0) => {
                *errors = None;
                break;
            }
            Ok(read) => {
                taken += read;
                if let Some(outbox) = routing.forward(&buffer[..read], OutputStream::Stderr) {
                    unflushed = Some(outbox);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                *errors = None;
                break;
            }
        }
    }
    unflushed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_display_is_parked_for_its_marker_unless_the_marker_was_passed() {
        let routing = SharedRouting::default();
        assert_eq!(routing.park_display(1, 7, "a".into()), None);
        assert_eq!(
            routing.lock().parked_displays.get(&1),
            Some(&(7, "a".to_string()))
        );
        routing.display_at_marker(1); // no outbox yet: taken all the same
        assert!(routing.lock().parked_displays.is_empty());
        assert_eq!(routing.lock().displays_passed, 1);
        // The output thread gave up on display 2 (its event never came in time).
        routing.events_closed();
        routing.display_at_marker(2);
        assert_eq!(
            routing.park_display(2, 7, "late".into()),
            Some((7, "late".to_string()))
        );
        assert_eq!(routing.park_display(3, 7, "next".into()), None);
    }
}
