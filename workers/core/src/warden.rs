//! The worker's care for the processes its cells start.
//!
//! A worker is a child subreaper: a cell's child that calls `setsid()`, `setpgid()` or is
//! double-forked still ends up under the worker, not under init. So whenever the worker
//! stops (Shutdown, a lost supervisor, SIGTERM from the supervisor or as its parent-death
//! signal, a dead interpreter) it first ends every descendant it has, by walking its tree;
//! a process-group signal alone would miss those that left the group.
//!
//! The warden thread does two things: on SIGTERM (relayed by an async-signal-safe handler
//! through a pipe) it ends everything and exits; otherwise, about once a second, it reaps
//! orphans adopted by the worker that have exited (a zombie that stayed unreaped across two
//! looks, so a child some code is about to wait for is left to it).
//!
//! Which processes are a cell's is decided exactly (see `process_tree::ownership`): started
//! after the cell began, through parents that are the cell's. A cell's start is its clock
//! tick and, when it begins in the tick the previous cell ended in, the last pid the kernel
//! had handed out when that cell ended (read once per cell, at its end, through a file
//! opened before the confinement): every process of an earlier cell had its pid by then, and
//! every one this cell starts gets a later one. The same reading tells whether the cell
//! started any process at all, so a cell that started none is counted without a walk.

use crate::locking::lock;
use crate::process_tree::{self, last_pid::LastPid, CellStart, ProcStat};
use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The write end of the SIGTERM pipe, for the signal handler.
static SIGTERM_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Children the engine waits for itself (the Python interpreter): never reaped by the warden
/// and spared when a cancelled cell's processes are ended.
static SPARED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Requests to end or count a cell's processes, served by a thread started with the warden:
/// a sandboxed engine thread may not read the `/proc` entries of its process tree, the
/// warden's threads (started before the confinement) may.
static CELL_ENDER: OnceLock<Mutex<mpsc::Sender<CellRequest>>> = OnceLock::new();

/// What the cell-ender thread is asked about a cell (by its start), or about the worker's
/// whole tree.
enum CellRequest {
    /// End a cancelled cell's processes; answer what was ended.
    End(CellStart, mpsc::Sender<process_tree::Ended>),
    /// Count the cell's processes under the worker now, the dead not yet reaped included.
    Count(CellStart, mpsc::Sender<usize>),
    /// End every process under the worker but these; answer how many were ended.
    EndAll(Vec<u32>, mpsc::Sender<usize>),
}

/// The pid counter, opened before the confinement.
static LAST_PID: OnceLock<LastPid> = OnceLock::new();
/// The counter's reading when the last cell ended (or the worker started);
/// [`NO_MARK`] when unread.
static MARK: AtomicU64 = AtomicU64::new(NO_MARK);
const NO_MARK: u64 = u64::MAX;
/// The clock tick [`MARK`] was read in.
static MARK_TICKS: AtomicU64 = AtomicU64::new(0);
/// The running cell's start, for the warden to count the cell's orphans it reaps.
static RUNNING: Mutex<Option<CellStart>> = Mutex::new(None);
/// Orphans of the running cell the warden reaped.
static REAPED: AtomicUsize = AtomicUsize::new(0);

/// How long the warden waits between looks for adopted zombies.
const REAP_INTERVAL: Duration = Duration::from_secs(1);
/// A zombie seen once is looked at again this soon.
const REAP_RECHECK: Duration = Duration::from_millis(100);

/// Makes this worker a subreaper and starts the warden; first thing in a worker, so a
/// SIGTERM at any time ends the worker's whole tree.
pub fn start() -> std::io::Result<()> {
    process_tree::become_subreaper()?;
    let (read, write) = cloexec_pipe()?;
    SIGTERM_PIPE.store(write.as_raw_fd(), Ordering::SeqCst);
    // The handler writes to it for the rest of the process's life.
    std::mem::forget(write);
    install_sigterm_handler();
    std::thread::Builder::new()
        .name("warden".into())
        .spawn(move || watch(&read))?;
    if let Some(counter) = LastPid::open() {
        let _ = LAST_PID.set(counter);
        process_tree::last_pid::pid_max();
    }
    let (requests, received) = mpsc::channel::<CellRequest>();
    std::thread::Builder::new()
        .name("cell-ender".into())
        .spawn(move || {
            for request in received {
                match request {
                    CellRequest::End(start, answer) => {
                        let _ = answer.send(end_cell_processes_here(&start));
                    }
                    CellRequest::Count(start, answer) => {
                        let _ = answer.send(count_cell_processes_here(&start));
                    }
                    CellRequest::EndAll(spare, answer) => {
                        let _ = answer.send(end_descendants_here(&spare));
                    }
                }
            }
        })?;
    let _ = CELL_ENDER.set(Mutex::new(requests));
    Ok(())
}

/// Declares the children the engine reaps itself.
pub fn spare(children: Vec<u32>) {
    *lock(&SPARED) = children;
}

fn spared() -> Vec<u32> {
    lock(&SPARED).clone()
}

/// The pid counter now, if it can be read.
fn last_pid_now() -> Option<u32> {
    LAST_PID.get().and_then(LastPid::read)
}

/// Marks where the cells start from: call once before the first cell (after the startup
/// modules, whose processes are no cell's).
pub fn mark_before_cells() {
    leave_mark(last_pid_now());
}

/// Records the pid counter's reading `now` (taken after everything before it was done) and
/// the tick it was read in.
fn leave_mark(now: Option<u32>) {
    MARK_TICKS.store(process_tree::ticks_since_boot(), Ordering::SeqCst);
    MARK.store(now.map_or(NO_MARK, u64::from), Ordering::SeqCst);
}

/// A cell begins: its start, to end or count its processes by. No system call: a clock read
/// (vDSO) and the mark left by the previous cell. The mark tells the cell's processes from
/// the earlier cells' only when the cell begins in the tick the mark was read in: in a later
/// tick no earlier cell's process can share the cell's first tick, and a mark that old could
/// have been overtaken by pids wrapping around.
pub fn cell_begins() -> CellStart {
    let ticks = process_tree::ticks_since_boot();
    let same_tick = MARK_TICKS.load(Ordering::SeqCst) == ticks;
    let start = CellStart {
        ticks,
        last_pid: same_tick
            .then(|| u32::try_from(MARK.load(Ordering::SeqCst)).ok())
            .flatten(),
    };
    REAPED.store(0, Ordering::SeqCst);
    *lock(&RUNNING) = Some(start);
    start
}

/// What a cell's processes came to when it ended.
#[derive(Debug, Default)]
pub struct CellProcesses {
    /// What was ended (a cancelled cell's processes).
    pub ended: process_tree::Ended,
    /// The cell's processes seen: alive (or dead, not yet reaped) at its end or ended with
    /// it, plus its orphans the warden reaped while it ran.
    pub seen: usize,
}

/// Whether the running cell, whose code is over, left no process to count: no pid was
/// handed out (anywhere in the pid namespace) since the mark. If so the reading is left as
/// the mark for the next cell, as [`cell_ends`] would. One read of the pid counter.
pub fn cell_ended_without_processes() -> bool {
    let Some(now) = last_pid_now() else {
        return false;
    };
    if u64::from(now) != MARK.load(Ordering::SeqCst) {
        return false;
    }
    *lock(&RUNNING) = None;
    leave_mark(Some(now));
    true
}

/// The cell begun at `start` ended: ends its processes if it was `cancelled`, counts them
/// either way, and leaves the mark for the next cell. One read of the pid counter; the tree
/// is walked only when a pid was handed out (anywhere in the pid namespace) during the cell
/// or it was cancelled. A cell whose `Done` was sent early by
/// [`cell_ended_without_processes`] has nothing left to count, and its mark is left.
pub fn cell_ends(start: &CellStart, cancelled: bool, done_sent: bool) -> CellProcesses {
    // From here on the warden counts no orphan as the cell's: the look below sees it.
    *lock(&RUNNING) = None;
    if done_sent && !cancelled {
        return CellProcesses::default();
    }
    let mut result = CellProcesses {
        seen: REAPED.swap(0, Ordering::SeqCst),
        ..CellProcesses::default()
    };
    let now = if cancelled {
        result.ended = end_cell_processes(start);
        result.seen += result.ended.found;
        // After the ending: nothing it did is the next cell's.
        last_pid_now()
    } else {
        let now = last_pid_now();
        let mark = u32::try_from(MARK.load(Ordering::SeqCst)).ok();
        if now.is_none() || now != mark {
            result.seen += count_cell_processes(start);
        }
        now
    };
    leave_mark(now);
    result
}

/// Ends the processes a cancelled cell started (see `process_tree::ownership`: started
/// after the cell began, through parents that are the cell's), never the engine's own
/// children: the interpreter keeps its state, and what earlier cells started keeps running,
/// children they start meanwhile included. The tree is frozen before it is killed, so a
/// fork bomb cannot outgrow its ending, and every process is gone (a zombie at most, reaped
/// here when it is the worker's) when this returns, unless [`process_tree`]'s bound of time
/// ran out.
fn end_cell_processes(start: &CellStart) -> process_tree::Ended {
    let (answer, answered) = mpsc::channel();
    ask(CellRequest::End(*start, answer))
        .and_then(|()| answered.recv().ok())
        .unwrap_or_else(|| end_cell_processes_here(start))
}

/// How many of the cell's processes are under the worker now (the dead not yet reaped
/// included).
fn count_cell_processes(start: &CellStart) -> usize {
    let (answer, answered) = mpsc::channel();
    ask(CellRequest::Count(*start, answer))
        .and_then(|()| answered.recv().ok())
        .unwrap_or_else(|| count_cell_processes_here(start))
}

/// Sends `request` to the cell-ender thread; `None` if there is none.
fn ask(request: CellRequest) -> Option<()> {
    let ender = CELL_ENDER.get()?;
    let sent = lock(ender).send(request);
    sent.ok()
}

/// The cell's processes in one look at the worker's tree.
fn cell_processes(start: &CellStart, seen: &[ProcStat]) -> HashSet<u32> {
    let mut roots = spared();
    roots.push(std::process::id());
    process_tree::cell_processes(seen, &roots, start, process_tree::last_pid::pid_max())
}

/// [`end_cell_processes`] on the calling thread.
fn end_cell_processes_here(start: &CellStart) -> process_tree::Ended {
    process_tree::end_descendants_chosen(std::process::id(), |seen| cell_processes(start, seen))
}

/// [`count_cell_processes`] on the calling thread.
fn count_cell_processes_here(start: &CellStart) -> usize {
    let me = std::process::id();
    let seen = process_tree::trees(&[me]).remove(&me).unwrap_or_default();
    cell_processes(start, &seen).len()
}

/// Counts a reaped orphan as the running cell's when it is.
fn count_if_the_cells(orphan: Option<ProcStat>) {
    let running = *lock(&RUNNING);
    if let (Some(start), Some(orphan)) = (running, orphan) {
        if start.precedes(&orphan, process_tree::last_pid::pid_max()) {
            REAPED.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Ends every process under this worker, then the worker's group (this process included)
/// and the process itself.
pub fn leave(code: i32) -> ! {
    end_descendants(&[]);
    kill_own_group();
    std::process::exit(code);
}

/// Kills every process in this worker's process group, this one included. Only when the
/// worker leads its own group (as the supervisor starts it): a worker run by hand inside
/// someone else's group must not take that group down.
fn kill_own_group() {
    let group = nix::unistd::getpgrp();
    if group == nix::unistd::getpid() {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Ends every process under this worker except `spare` (whose children still end).
///
/// Asked of the cell-ender thread: the worker stops from threads that started after its
/// confinement (the frame reader on `Shutdown`), and a confined thread cannot read the `/proc`
/// entries of the tree, so a sandboxed cell's `setsid` child would outlive its worker.
pub fn end_descendants(spare: &[u32]) -> usize {
    let (answer, answered) = mpsc::channel();
    ask(CellRequest::EndAll(spare.to_vec(), answer))
        .and_then(|()| answered.recv().ok())
        .unwrap_or_else(|| end_descendants_here(spare))
}

/// [`end_descendants`] on the calling thread.
fn end_descendants_here(spare: &[u32]) -> usize {
    process_tree::end_descendants(std::process::id(), spare)
}

fn watch(sigterm: &OwnedFd) {
    let mut suspect: Option<u32> = None;
    loop {
        let wait = if suspect.is_some() {
            REAP_RECHECK
        } else {
            REAP_INTERVAL
        };
        if readable_within(sigterm, wait) {
            leave(0);
        }
        suspect = match process_tree::peek_zombie_child() {
            Some(pid) if spared().contains(&pid) => None,
            Some(pid) if suspect == Some(pid) => {
                let orphan = process_tree::stat(pid);
                process_tree::reap(pid);
                count_if_the_cells(orphan);
                None
            }
            other => other,
        };
    }
}

fn readable_within(fd: &OwnedFd, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, millis) };
    ready > 0 && poll.revents & libc::POLLIN != 0
}

extern "C" fn on_sigterm(_: libc::c_int) {
    let fd = SIGTERM_PIPE.load(Ordering::SeqCst);
    // SAFETY: write and kill are async-signal-safe.
    unsafe {
        if fd < 0 || libc::write(fd, b"t".as_ptr().cast(), 1) != 1 {
            // No warden to tell: take the group down at once, as before there was one.
            libc::kill(0, libc::SIGKILL);
        }
    }
}

/// Only when the worker leads its own group (as the supervisor starts it): a worker run by
/// hand keeps the default SIGTERM.
fn install_sigterm_handler() {
    if nix::unistd::getpgrp() != nix::unistd::getpid() {
        return;
    }
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_sigterm),
        nix::sys::signal::SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler only calls async-signal-safe functions.
    let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGTERM, &action) };
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds, which we own from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just returned by pipe2 and are not owned elsewhere.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
