//! The output pipe's thread: the child's stdout and stderr, relayed to the outbox as they
//! come, with the sync markers cut out (see `markers`), and the [`Routing`] it shares with
//! `execute`: which cell the output belongs to, and what it has seen of the markers.

use super::events::Event;
use super::markers::{DoneStatus, MarkerScanner, Piece};
use crate::runtime::{Outbox, OUTPUT_CHUNK_BYTES};
use cellvisor_ipc::OutputStream;
use std::fs::File;
use std::io::Read;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;

/// The cell id of the marker `yield_control()` writes into the output (no cell has id 0): the
/// output thread sends the yield where it finds it, after exactly the output before it.
const YIELD_MARKER: u64 = 0;

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
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Sends `data` to the cell's outbox, leaving a direct write unflushed (see
    /// [`Outbox::output_unflushed`]); returns the outbox to flush, if it went to one.
    fn forward(&self, data: &[u8]) -> Option<Outbox> {
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
        outbox.output_unflushed(cell_id, OutputStream::Stdout, data);
        Some(outbox)
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

/// Drains the output pipe until EOF: bytes go to the outbox as they come, sync markers are
/// cut out and announced, and a done marker goes to `execute` as the cell's `Done` event.
/// What one read brought is flushed to the supervisor together, or, when it ends with the
/// running cell's done marker, left for that cell's `Done` frame to take along.
pub fn spawn_output_thread(
    output: File,
    marker_prefix: Vec<u8>,
    routing: Arc<SharedRouting>,
    events: Sender<Event>,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name("python-output".into())
        .spawn(move || {
            let mut output = output;
            let mut scanner = MarkerScanner::new(marker_prefix);
            let mut buffer = vec![0; OUTPUT_CHUNK_BYTES];
            loop {
                let read = match output.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(read) => read,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let mut unflushed: Option<Outbox> = None;
                let mut done_follows = false;
                scanner.feed(&buffer[..read], &mut |piece| match piece {
                    Piece::Bytes(data) => {
                        if let Some(outbox) = routing.forward(data) {
                            unflushed = Some(outbox);
                            done_follows = false;
                        }
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
                });
                if let Some(outbox) = unflushed.filter(|_| !done_follows) {
                    outbox.flush();
                }
            }
            drop(events);
            scanner.finish(&mut |piece| {
                if let Piece::Bytes(data) = piece {
                    if let Some(outbox) = routing.forward(data) {
                        outbox.flush();
                    }
                }
            });
            routing.mark(|s| s.closed = true);
        })
        .map(drop)
}
