//! The python child process: spawning it with its pipes, and the two threads that drain
//! them (output, with the sync markers cut out, and NDJSON events, host tool calls included).

use super::interpreter::Interpreter;
use crate::runtime::{Outbox, OUTPUT_CHUNK_BYTES};
use cellvisor_ipc::OutputStream;
use serde::Deserialize;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// A display bundle larger than this could not travel in one frame (and a frame too large
/// ends the worker), so it is replaced by a note saying so.
const MAX_DISPLAY_BYTES: usize = cellvisor_ipc::MAX_FRAME_BYTES / 2;

/// How often a thread waiting for a tool's answer checks that its cell still runs.
const TOOL_WAIT_POLL: Duration = Duration::from_millis(200);

/// The cell id of the marker `yield_control()` writes into the output (no cell has id 0): the
/// output thread sends the yield where it finds it, after exactly the output before it.
const YIELD_MARKER: u64 = 0;

/// Output produced before the first cell (site warnings, say) kept for that cell, at most.
const MAX_PENDING_BYTES: usize = 64 * 1024;

/// The running child and our ends of its pipes.
pub struct Spawned {
    pub child: Child,
    /// Write end of the command pipe (the runner's fd 3).
    pub commands: File,
    /// Read end of the event pipe (the runner's fd 4).
    pub events: File,
    /// Read end of the output pipe (the runner's fd 1 and 2).
    pub output: File,
}

/// Starts `python -u runner` with stdin on /dev/null, stdout and stderr on one pipe, the
/// command pipe on fd 3 and the event pipe on fd 4.
pub fn spawn(
    interpreter: &Interpreter,
    runner: &Path,
    sync_token: &str,
) -> Result<Spawned, String> {
    let (output_read, output_write) = cloexec_pipe()?;
    let (commands_read, commands_write) = cloexec_pipe()?;
    let (events_read, events_write) = cloexec_pipe()?;

    let mut command = Command::new(&interpreter.program);
    command
        .arg("-u")
        .arg(runner)
        .stdin(Stdio::null())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONIOENCODING", "utf-8")
        .env(cellvisor_ipc::env::SYNC_TOKEN, sync_token);
    if let Some(venv) = &interpreter.venv {
        let mut path = OsString::from(venv.join("bin"));
        if let Some(rest) = std::env::var_os("PATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(rest);
        }
        command
            .env("PATH", path)
            .env("VIRTUAL_ENV", venv)
            .env_remove("PYTHONHOME");
    }

    // Our ends stay in the parent; the child's ends are dup'ed onto 1-4 in the child.
    let targets: [(RawFd, RawFd); 4] = [
        (output_write.as_raw_fd(), 1),
        (output_write.as_raw_fd(), 2),
        (commands_read.as_raw_fd(), 3),
        (events_write.as_raw_fd(), 4),
    ];
    let parent = std::process::id();
    // SAFETY: the closure only makes async-signal-safe calls (fcntl, dup2, prctl, getppid,
    // signal, _exit) and touches no allocator or lock.
    unsafe {
        command.pre_exec(move || wire_child_fds(&targets, parent));
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", interpreter.program.display()))?;
    // The child's ends close here, so EOF on ours means the child (and anything it let
    // inherit them) is gone.
    drop((output_write, commands_read, events_write));
    Ok(Spawned {
        child,
        commands: File::from(commands_write),
        events: File::from(events_read),
        output: File::from(output_read),
    })
}

/// Runs in the forked child before exec. Sources are first copied above 9 so that moving one
/// onto 1-4 cannot clobber another source that happens to sit there; the copies and the
/// originals are close-on-exec, the dup2'ed targets are not.
fn wire_child_fds(targets: &[(RawFd, RawFd); 4], parent: u32) -> std::io::Result<()> {
    let mut high = [0; 4];
    for (slot, (source, _)) in high.iter_mut().zip(targets) {
        // SAFETY: plain fd syscalls.
        *slot = unsafe { libc::fcntl(*source, libc::F_DUPFD_CLOEXEC, 10) };
        if *slot < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for (copy, (_, target)) in high.iter().zip(targets) {
        // SAFETY: as above.
        if unsafe { libc::dup2(*copy, *target) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: prctl/getppid/signal/_exit are async-signal-safe.
    unsafe {
        // Python dies with the worker even if the worker is SIGKILLed.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() as u32 != parent {
            libc::_exit(1);
        }
        // An inherited "ignore SIGINT" would stop Python from installing its handler, and
        // interrupts would be lost.
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
    Ok(())
}

fn cloexec_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds, which we own from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(format!(
            "cannot create a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both fds were just returned by pipe2 and are not owned elsewhere.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

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
    },
    Done {
        id: u64,
        status: String,
        #[serde(default)]
        summary: Option<String>,
        #[serde(default)]
        marker: bool,
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
    commands.lock().unwrap_or_else(|e| e.into_inner())
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
                    Event::Display { id, bundle } => {
                        let outbox = routing.lock().outbox.clone();
                        if let Some(outbox) = outbox {
                            outbox.display(id, sendable_bundle(&bundle));
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

/// A piece of the output stream: plain bytes, a sync marker's cell id, or a done marker (the
/// cell's end with its status, sent this way when nothing of the cell went over fd 4).
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Bytes(&'a [u8]),
    Marker(u64),
    Done(u64, DoneStatus),
}

/// How a cell whose end came as a done marker ended (a failed cell's summary takes fd 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneStatus {
    Ok,
    Interrupted,
}

impl DoneStatus {
    fn parse(word: &[u8]) -> Option<DoneStatus> {
        match word {
            b"ok" => Some(DoneStatus::Ok),
            b"interrupted" => Some(DoneStatus::Interrupted),
            _ => None,
        }
    }

    /// The status as runner.py's `done` event spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DoneStatus::Ok => "ok",
            DoneStatus::Interrupted => "interrupted",
        }
    }
}

/// Longest decimal cell id in a marker.
const MAX_ID_DIGITS: usize = 20;
/// Longest status word of a done marker ("interrupted").
const MAX_STATUS_LETTERS: usize = 11;
const MARKER_END: u8 = 0x1e;

/// Cuts `<prefix><decimal id>\x1e` sync markers and `<prefix><decimal id>:<status>\x1e` done
/// markers out of a byte stream that arrives in arbitrary chunks; a marker split across
/// chunks is held back until it is complete.
pub struct MarkerScanner {
    prefix: Vec<u8>,
    finder: memchr::memmem::Finder<'static>,
    carry: Vec<u8>,
}

impl MarkerScanner {
    pub fn new(prefix: Vec<u8>) -> Self {
        let finder = memchr::memmem::Finder::new(&prefix).into_owned();
        MarkerScanner {
            prefix,
            finder,
            carry: Vec::new(),
        }
    }

    pub fn feed(&mut self, data: &[u8], sink: &mut dyn FnMut(Piece<'_>)) {
        if self.carry.is_empty() {
            let consumed = self.scan(data, sink);
            self.carry.extend_from_slice(&data[consumed..]);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(data);
            let consumed = self.scan(&joined, sink);
            joined.drain(..consumed);
            self.carry = joined;
        }
    }

    /// Flushes whatever was held back (at EOF).
    pub fn finish(&mut self, sink: &mut dyn FnMut(Piece<'_>)) {
        sink(Piece::Bytes(&std::mem::take(&mut self.carry)));
    }

    /// Emits what is certain; returns how many bytes were consumed (the rest may be the
    /// start of a marker).
    fn scan(&self, data: &[u8], sink: &mut dyn FnMut(Piece<'_>)) -> usize {
        let mut position = 0;
        while let Some(found) = self.finder.find(&data[position..]) {
            let start = position + found;
            let digits_start = start + self.prefix.len();
            let rest = &data[digits_start..];
            let digits = rest
                .iter()
                .take(MAX_ID_DIGITS + 1)
                .take_while(|b| b.is_ascii_digit())
                .count();
            match rest.get(digits) {
                None if digits <= MAX_ID_DIGITS => {
                    // The marker may continue in the next chunk.
                    sink(Piece::Bytes(&data[position..start]));
                    return start;
                }
                Some(&MARKER_END) if digits > 0 => {
                    if let Some(id) = parse_id(&rest[..digits]) {
                        sink(Piece::Bytes(&data[position..start]));
                        sink(Piece::Marker(id));
                        position = digits_start + digits + 1;
                        continue;
                    }
                    // Too large for a u64: not ours.
                    sink(Piece::Bytes(&data[position..=start]));
                    position = start + 1;
                }
                Some(b':') if digits > 0 => {
                    let word = &rest[digits + 1..];
                    let letters = word
                        .iter()
                        .take(MAX_STATUS_LETTERS + 1)
                        .take_while(|b| b.is_ascii_lowercase())
                        .count();
                    match word.get(letters) {
                        None if letters <= MAX_STATUS_LETTERS => {
                            sink(Piece::Bytes(&data[position..start]));
                            return start;
                        }
                        Some(&MARKER_END) => {
                            let done =
                                parse_id(&rest[..digits]).zip(DoneStatus::parse(&word[..letters]));
                            if let Some((id, status)) = done {
                                sink(Piece::Bytes(&data[position..start]));
                                sink(Piece::Done(id, status));
                                position = digits_start + digits + 1 + letters + 1;
                                continue;
                            }
                            sink(Piece::Bytes(&data[position..=start]));
                            position = start + 1;
                        }
                        _ => {
                            sink(Piece::Bytes(&data[position..=start]));
                            position = start + 1;
                        }
                    }
                }
                _ => {
                    // Looks like a marker but is not one: plain output.
                    sink(Piece::Bytes(&data[position..=start]));
                    position = start + 1;
                }
            }
        }
        let keep = self.partial_prefix_len(&data[position..]);
        let end = data.len() - keep;
        sink(Piece::Bytes(&data[position..end]));
        end
    }

    /// The length of the longest tail of `data` that is a proper start of the prefix.
    fn partial_prefix_len(&self, data: &[u8]) -> usize {
        let longest = (self.prefix.len() - 1).min(data.len());
        (1..=longest)
            .rev()
            .find(|&len| data[data.len() - len..] == self.prefix[..len])
            .unwrap_or(0)
    }
}

/// A marker's decimal cell id; `None` when it does not fit a u64.
fn parse_id(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &[u8] = b"\x1esync:abc:";

    fn scan_all(input: &[u8], chunk: usize) -> (Vec<u8>, Vec<u64>, Vec<(u64, DoneStatus)>) {
        let mut scanner = MarkerScanner::new(PREFIX.to_vec());
        let (mut bytes, mut markers, mut dones) = (Vec::new(), Vec::new(), Vec::new());
        let mut sink = |piece: Piece<'_>| match piece {
            Piece::Bytes(data) => bytes.extend_from_slice(data),
            Piece::Marker(id) => markers.push(id),
            Piece::Done(id, status) => dones.push((id, status)),
        };
        for part in input.chunks(chunk) {
            scanner.feed(part, &mut sink);
        }
        scanner.finish(&mut sink);
        (bytes, markers, dones)
    }

    fn scan_in_chunks(input: &[u8], chunk: usize) -> (Vec<u8>, Vec<u64>) {
        let (bytes, markers, dones) = scan_all(input, chunk);
        assert!(dones.is_empty(), "{dones:?}");
        (bytes, markers)
    }

    #[test]
    fn done_markers_are_cut_out_at_every_split() {
        let input = b"2\n\x1esync:abc:7:ok\x1ex\x1esync:abc:8\x1e\x1esync:abc:9:interrupted\x1e";
        for chunk in 1..=input.len() {
            let (bytes, markers, dones) = scan_all(input, chunk);
            assert_eq!(bytes, b"2\nx", "chunk {chunk}");
            assert_eq!(markers, vec![8], "chunk {chunk}");
            assert_eq!(
                dones,
                vec![(7, DoneStatus::Ok), (9, DoneStatus::Interrupted)],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn done_marker_near_misses_stay_output() {
        let input = b"\x1esync:abc:7:error\x1e \x1esync:abc:7:OK\x1e \x1esync:abc::ok\x1e \
                      \x1esync:abc:7:interruptedxx\x1e \x1esync:abc:7:ok";
        for chunk in 1..=input.len() {
            let (bytes, markers, dones) = scan_all(input, chunk);
            assert_eq!(bytes, input.to_vec(), "chunk {chunk}");
            assert!(markers.is_empty() && dones.is_empty(), "chunk {chunk}");
        }
    }

    #[test]
    fn markers_are_cut_out_at_every_split() {
        let input = b"hello\x1esync:abc:7\x1eworld\x1e\x1esync:abc:12\x1e\x1esync";
        for chunk in 1..=input.len() {
            let (bytes, markers) = scan_in_chunks(input, chunk);
            assert_eq!(bytes, b"helloworld\x1e\x1esync", "chunk {chunk}");
            assert_eq!(markers, vec![7, 12], "chunk {chunk}");
        }
    }

    #[test]
    fn near_misses_stay_output() {
        let input =
            b"\x1esync:abc:x\x1e \x1esync:abc:\x1e \x1esync:abc:99999999999999999999999\x1e";
        for chunk in 1..=input.len() {
            let (bytes, markers) = scan_in_chunks(input, chunk);
            assert_eq!(bytes, input.to_vec(), "chunk {chunk}");
            assert!(markers.is_empty());
        }
    }
}
