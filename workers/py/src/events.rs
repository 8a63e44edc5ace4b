//! The event pipe's thread: runner.py's NDJSON [`Event`]s on fd 4, handed to `execute`, and
//! the host tool calls among them, relayed to the outbox and answered on the command pipe.

use super::output_relay::SharedRouting;
use crate::locking::lock;
use serde::Deserialize;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// A display bundle larger than this could not travel in one frame (and a frame too large
/// ends the worker), so it is replaced by a note saying so.
const MAX_DISPLAY_BYTES: usize = cellvisor_ipc::MAX_FRAME_BYTES / 2;

/// How often a thread waiting for a tool's answer checks that its cell still runs.
const TOOL_WAIT_POLL: Duration = Duration::from_millis(200);

/// What runner.py says on fd 4.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    Ready {
        version: String,
    },
    Display {
        id: u64,
        bundle: serde_json::Value,
        /// The display's number when the runner also marked its place in the output (see
        /// `SharedRouting::park_display`).
        #[serde(default)]
        seq: Option<u64>,
    },
    Done {
        id: u64,
        status: String,
        #[serde(default)]
        summary: Option<String>,
        #[serde(default)]
        marker: bool,
    },
    /// The report of the state task `id` (a snapshot, a restore, a names listing), just
    /// before its `done`.
    State {
        id: u64,
        report: serde_json::Value,
    },
    /// Something the host should hear with the running cell (which shell the session runs,
    /// said with its first cell): the cell's `notice`.
    Notice {
        message: String,
    },
    /// The cell `id` yields (`yield_control()`) and could not mark the output pipe: the
    /// yield goes to the host from here, without its place among the output.
    Yield {
        id: u64,
    },
    /// The cell `id` calls host tool `name`; the runner waits on fd 3 for `call_id`'s result.
    #[serde(rename = "tool_call")]
    ToolCall {
        id: u64,
        call_id: u64,
        name: String,
        #[serde(default)]
        args: serde_json::Value,
    },
    /// Not from the runner: the event pipe reached EOF (the output thread also holds a
    /// sender, so the channel alone would not say so while the output pipe is open).
    #[serde(skip)]
    Closed,
}

/// Locks the command pipe; a thread that panicked while writing left at worst a torn line,
/// which the runner skips, so a poisoned lock is still usable.
pub fn lock_commands(commands: &Mutex<File>) -> MutexGuard<'_, File> {
    lock(commands)
}

/// Reads events until EOF. Displays go straight to the outbox of the cell they belong to,
/// tool calls to the host (see [`relay_tool_call`]); everything else goes to `execute`
/// through `events`; EOF sends [`Event::Closed`], which is how `execute` learns that python
/// is gone.
pub fn spawn_event_thread(
    events: File,
    routing: Arc<SharedRouting>,
    sender: Sender<Event>,
    commands: Arc<Mutex<File>>,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name("python-events".into())
        .spawn(move || {
            let mut reader = BufReader::new(events);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => {
                        routing.events_closed();
                        let _ = sender.send(Event::Closed);
                        return;
                    }
                    Ok(_) => {}
                }
                // A line that is not ours (a cell writing to fd 4) is ignored.
                let Ok(event) = serde_json::from_slice::<Event>(&line) else {
                    continue;
                };
                match event {
                    Event::Display { id, bundle, seq } => {
                        let bundle = sendable_bundle(&bundle);
                        // A display with a place in the output goes out from there.
                        let now = match seq {
                            Some(seq) => routing.park_display(seq, id, bundle),
                            None => Some((id, bundle)),
                        };
                        let outbox = routing.lock().outbox.clone();
                        if let (Some((id, bundle)), Some(outbox)) = (now, outbox) {
                            outbox.display(id, bundle);
                        }
                    }
                    Event::Notice { message } => {
                        let outbox = routing.lock().outbox.clone();
                        if let Some(outbox) = outbox {
                            outbox.send(cellvisor_ipc::FromWorker::Notice { message });
                        }
                    }
                    Event::Yield { id } => {
                        let outbox = routing.lock().outbox.clone();
                        if let Some(outbox) = outbox {
                            outbox.yield_control(id);
                        }
                    }
                    Event::ToolCall {
                        id,
                        call_id,
                        name,
                        args,
                    } => {
                        if let Some(found) = local_tool_search(&routing, &name, &args) {
                            write_tool_result(&commands, call_id, found);
                        } else {
                            relay_tool_call(&routing, &commands, id, call_id, &name, &args);
                        }
                    }
                    other => {
                        if sender.send(other).is_err() {
                            return;
                        }
                    }
                }
            }
        })
        .map(drop)
}

/// The bundle as JSON text, or a `text/plain` note when it is too large to send.
fn sendable_bundle(bundle: &serde_json::Value) -> String {
    let text = bundle.to_string();
    if text.len() <= MAX_DISPLAY_BYTES {
        return text;
    }
    let note = format!(
        "[cellvisor: a display of {} bytes was dropped: the limit is {MAX_DISPLAY_BYTES} bytes]",
        text.len()
    );
    serde_json::json!({ "text/plain": note }).to_string()
}

/// `tools.tool_search({query, limit?})` is answered by the shim itself (see
/// [`crate::tools::search`]) unless the host declared a tool of that name; `None` for any
/// other call.
fn local_tool_search(
    routing: &SharedRouting,
    name: &str,
    args: &serde_json::Value,
) -> Option<Result<String, String>> {
    if name != "tool_search" {
        return None;
    }
    let state = routing.lock();
    if state.tools.iter().any(|tool| tool.name == name) {
        return None;
    }
    let query = args["query"].as_str().unwrap_or_default();
    let limit = match &args["limit"] {
        serde_json::Value::Null => None,
        limit => Some(limit.as_f64().unwrap_or(f64::NAN)),
    };
    Some(
        crate::tools::search(&state.tools, query, limit)
            .map(|found| found.to_string())
            .map_err(|err| err.to_string()),
    )
}

/// Passes a tool call to the host and starts a thread that waits for the answer and writes
/// it to the runner as a `tool_result` line. The waiting happens off the event thread so that
/// displays and `done` keep flowing; the waiter gives up once its cell is no longer the one
/// running (the runtime fails calls of interrupted cells, but a test host may never answer).
fn relay_tool_call(
    routing: &Arc<SharedRouting>,
    commands: &Arc<Mutex<File>>,
    cell_id: u64,
    call_id: u64,
    name: &str,
    args: &serde_json::Value,
) {
    let outbox = routing.lock().outbox.clone();
    let Some(outbox) = outbox else {
        write_tool_result(commands, call_id, Err("no cell is running".into()));
        return;
    };
    let args = if args.is_null() {
        "{}".to_string()
    } else {
        args.to_string()
    };
    let pending = outbox.call_tool(cell_id, name, args);
    let waiter_routing = Arc::clone(routing);
    let waiter_commands = Arc::clone(commands);
    let waiter = thread::Builder::new()
        .name("python-tool-wait".into())
        .spawn(move || loop {
            match pending.answer.recv_timeout(TOOL_WAIT_POLL) {
                Ok(outcome) => return write_tool_result(&waiter_commands, call_id, outcome),
                Err(RecvTimeoutError::Disconnected) => {
                    let lost = Err("the tool call was dropped without an answer".into());
                    return write_tool_result(&waiter_commands, call_id, lost);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let state = waiter_routing.lock();
                    if state.cell_id != cell_id || state.closed {
                        return;
                    }
                }
            }
        });
    if let Err(e) = waiter {
        let failed = Err(format!("cannot wait for the tool's answer: {e}"));
        write_tool_result(commands, call_id, failed);
    }
}

/// Writes one `tool_result` line to the runner: the result as JSON (or as a string when the
/// host's text is not JSON), or the error message.
fn write_tool_result(commands: &Mutex<File>, call_id: u64, outcome: Result<String, String>) {
    let message = match outcome {
        Ok(text) => {
            let result = serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or(serde_json::Value::String(text));
            serde_json::json!({"type": "tool_result", "call_id": call_id, "ok": true, "result": result})
        }
        Err(error) => serde_json::json!({
            "type": "tool_result", "call_id": call_id, "ok": false, "error": error,
        }),
    };
    let mut line = message.to_string();
    line.push('\n');
    // A runner that is gone cannot read it; its death is noticed by `execute`.
    let _ = lock_commands(commands).write_all(line.as_bytes());
}
