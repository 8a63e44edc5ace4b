//! The supervisor's end of one worker connection, as two tasks.
//!
//! The reader task owns the running cell's [`OutputSink`], so output goes from the socket into
//! the sink (and to the host's event stream, awaiting a slow host: backpressure all the way to
//! the worker) without passing through the session actor's mailbox. Control frames (`Done`,
//! `Pong`) and the worker's exit become messages to the [`Session`] actor. The writer task owns
//! the send half.

use crate::cell::CellEvent;
use crate::output::{OutputSink, SinkResult};
use crate::session::Session;
use crate::spawn::{describe_exit, kill_group, StartedWorker, StderrTail};
use actix::{Addr, Message};
use cellvisor_ipc::frame::{read_frame_async, write_frame_async};
use cellvisor_ipc::{CellOutcome, FromWorker, OutputStream, ToWorker};
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

/// A cell whose output the reader task is collecting.
pub(crate) struct ActiveCell {
    pub cell_id: u64,
    pub index: usize,
    pub sink: OutputSink,
    pub displays: Vec<serde_json::Value>,
    pub events: Option<mpsc::Sender<CellEvent>>,
    text_carry: Vec<u8>,
}

impl ActiveCell {
    pub fn new(
        cell_id: u64,
        index: usize,
        sink: OutputSink,
        events: Option<mpsc::Sender<CellEvent>>,
    ) -> ActiveCell {
        ActiveCell {
            cell_id,
            index,
            sink,
            displays: Vec::new(),
            events,
            text_carry: Vec::new(),
        }
    }

    fn finish(self) -> (SinkResult, Vec<serde_json::Value>) {
        (self.sink.finish(), self.displays)
    }
}

/// The reader found the cell done.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CellFinished {
    pub generation: u64,
    pub cell_id: u64,
    pub outcome: CellOutcome,
    pub output: SinkResult,
    pub displays: Vec<serde_json::Value>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PongReceived {
    pub generation: u64,
}

/// The worker's connection ended and its process group is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerExited {
    pub generation: u64,
    /// How it ended: the worker's own last word (`Fatal`) or its exit status.
    pub reason: String,
    pub stderr_tail: String,
    /// The cell that was running, with the output it produced before the end.
    pub partial: Option<(u64, SinkResult, Vec<serde_json::Value>)>,
}

/// The session's handle on a live connection.
pub(crate) struct Link {
    pub pid: u32,
    pub engine: String,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    cells: mpsc::UnboundedSender<ActiveCell>,
}

impl Link {
    /// Starts the reader and writer tasks for `worker`.
    pub fn spawn(worker: StartedWorker, generation: u64, session: Addr<Session>) -> Link {
        let StartedWorker {
            pid,
            engine,
            child,
            stream,
            stderr_tail,
        } = worker;
        let (reader, mut writer) = tokio::io::split(stream);
        let (to_worker, mut outgoing) = mpsc::unbounded_channel::<ToWorker>();
        let (cells, incoming_cells) = mpsc::unbounded_channel::<ActiveCell>();
        actix::spawn(async move {
            while let Some(frame) = outgoing.recv().await {
                if write_frame_async(&mut writer, &frame).await.is_err() {
                    break;
                }
            }
        });
        let reader_task = ReaderTask {
            generation,
            pid,
            session,
            cells: incoming_cells,
            current: None,
            fatal: None,
        };
        actix::spawn(reader_task.run(reader, child, stderr_tail));
        Link {
            pid,
            engine,
            to_worker,
            cells,
        }
    }

    pub fn send(&self, frame: ToWorker) {
        let _ = self.to_worker.send(frame);
    }

    /// Hands the reader a new cell's sink. Must come before the `Execute` frame is sent.
    pub fn begin(&self, cell: ActiveCell) {
        let _ = self.cells.send(cell);
    }
}

struct ReaderTask {
    generation: u64,
    pid: u32,
    session: Addr<Session>,
    cells: mpsc::UnboundedReceiver<ActiveCell>,
    current: Option<ActiveCell>,
    fatal: Option<String>,
}

impl ReaderTask {
    async fn run(
        mut self,
        mut reader: tokio::io::ReadHalf<cellvisor_ipc::socket::AsyncStream>,
        mut child: tokio::process::Child,
        stderr_tail: StderrTail,
    ) {
        loop {
            let frame = read_frame_async::<_, FromWorker>(&mut reader).await;
            // A cell is always handed over before its Execute frame is sent, so every cell
            // a frame can belong to is in the channel by now.
            while let Ok(cell) = self.cells.try_recv() {
                self.current = Some(cell);
            }
            match frame {
                Ok(Some(frame)) => {
                    if !self.handle(frame).await {
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    self.fatal = Some(format!("sent a bad frame ({err})"));
                    break;
                }
            }
        }
        // Kill the group before reaping the leader, so no process a cell started survives
        // and the group id cannot have been reused.
        kill_group(self.pid, Signal::SIGKILL);
        let reason = match child.wait().await {
            Ok(status) => {
                let exit = describe_exit(status);
                match self.fatal.take() {
                    Some(fatal) => format!("{fatal} ({exit})"),
                    None => exit,
                }
            }
            Err(err) => format!("could not be reaped: {err}"),
        };
        let partial = self.current.take().map(|cell| {
            let id = cell.cell_id;
            let (output, displays) = cell.finish();
            (id, output, displays)
        });
        self.session.do_send(WorkerExited {
            generation: self.generation,
            reason,
            stderr_tail: stderr_tail.text(),
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
            } => {
                if let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) {
                    cell.sink.write(&data);
                    if let Some(events) = &cell.events {
                        let text = decode_streamed(&mut cell.text_carry, &data);
                        if !text.is_empty() {
                            let event = CellEvent::Output {
                                index: cell.index,
                                stream: match stream {
                                    OutputStream::Stdout => "stdout",
                                    OutputStream::Stderr => "stderr",
                                },
                                text,
                            };
                            // A host that went away just stops getting events.
                            if events.send(event).await.is_err() {
                                cell.events = None;
                            }
                        }
                    }
                }
            }
            FromWorker::Display {
                cell_id,
                bundle_json,
            } => {
                if let Some(cell) = self.current.as_mut().filter(|c| c.cell_id == cell_id) {
                    let bundle = serde_json::from_str(&bundle_json)
                        .unwrap_or_else(|_| serde_json::json!({ "text/plain": bundle_json }));
                    if let Some(events) = &cell.events {
                        let event = CellEvent::Display {
                            index: cell.index,
                            bundle: bundle.clone(),
                        };
                        if events.send(event).await.is_err() {
                            cell.events = None;
                        }
                    }
                    cell.displays.push(bundle);
                }
            }
            FromWorker::Done { cell_id, outcome } => {
                if self.current.as_ref().is_some_and(|c| c.cell_id == cell_id) {
                    if let Some(cell) = self.current.take() {
                        let (output, displays) = cell.finish();
                        self.session.do_send(CellFinished {
                            generation: self.generation,
                            cell_id,
                            outcome,
                            output,
                            displays,
                        });
                    }
                }
            }
            FromWorker::Pong { .. } => self.session.do_send(PongReceived {
                generation: self.generation,
            }),
            FromWorker::Fatal { message } => self.fatal = Some(message),
            FromWorker::Hello { .. } => {
                self.fatal = Some("said Hello twice".to_string());
                return false;
            }
        }
        true
    }
}

/// Decodes streamed bytes as UTF-8, holding back a character cut at the chunk's end so it is
/// not turned into replacement characters.
fn decode_streamed(carry: &mut Vec<u8>, data: &[u8]) -> String {
    carry.extend_from_slice(data);
    let keep_from = match std::str::from_utf8(carry) {
        Ok(_) => carry.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => carry.len(),
    };
    let rest = carry.split_off(keep_from);
    let text = String::from_utf8_lossy(carry).into_owned();
    *carry = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::decode_streamed;

    #[test]
    fn a_character_split_across_chunks_is_kept_whole() {
        let mut carry = Vec::new();
        let bytes = "é".as_bytes();
        assert_eq!(decode_streamed(&mut carry, &[b'a', bytes[0]]), "a");
        assert_eq!(decode_streamed(&mut carry, &[bytes[1], b'b']), "éb");
        assert_eq!(decode_streamed(&mut carry, b"\xff!"), "\u{fffd}!");
    }
}
