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

use crate::process_tree;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The write end of the SIGTERM pipe, for the signal handler.
static SIGTERM_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Children the engine waits for itself (the Python interpreter): never reaped by the warden
/// and spared when a cancelled cell's processes are ended.
static SPARED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Requests to end a cancelled cell's processes (its start, and where to answer how many),
/// served by a thread started with the warden: a sandboxed engine thread may not read the
/// `/proc` entries of its process tree, the warden's threads (started before the
/// confinement) may.
static CELL_ENDER: OnceLock<Mutex<mpsc::Sender<EndCellRequest>>> = OnceLock::new();

/// A cancelled cell's start (in clock ticks), and where to answer what was ended.
type EndCellRequest = (u64, mpsc::Sender<process_tree::Ended>);

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
    let (requests, received) = mpsc::channel::<EndCellRequest>();
    std::thread::Builder::new()
        .name("cell-ender".into())
        .spawn(move || {
            for (since, answer) in received {
                let _ = answer.send(end_cell_processes_here(since));
            }
        })?;
    let _ = CELL_ENDER.set(Mutex::new(requests));
    Ok(())
}

/// Declares the children the engine reaps itself.
pub fn spare(children: Vec<u32>) {
    *SPARED.lock().unwrap_or_else(|e| e.into_inner()) = children;
}

fn spared() -> Vec<u32> {
    SPARED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Ends the processes a cancelled cell started (those under the worker that started at
/// `since`, in [`process_tree::ticks_since_boot`] ticks, or later), except the engine's own
/// children: the interpreter keeps its state, and what earlier cells started keeps running.
/// Start times count in clock ticks: what started in the cell's first tick counts as the
/// cell's, so containment errs on the side of ending too much, not too little. The tree is
/// frozen before it is killed, so a fork bomb cannot outgrow its ending, and every process
/// is gone (a zombie at most, reaped here when it is the worker's) when this returns, unless
/// [`process_tree`]'s bound of time ran out.
pub fn end_cell_processes(since: u64) -> process_tree::Ended {
    let asked = CELL_ENDER.get().and_then(|ender| {
        let (answer, answered) = mpsc::channel();
        let sent = ender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((since, answer));
        sent.ok().and_then(|()| answered.recv().ok())
    });
    asked.unwrap_or_else(|| end_cell_processes_here(since))
}

/// [`end_cell_processes`] on the calling thread.
fn end_cell_processes_here(since: u64) -> process_tree::Ended {
    let spared = spared();
    process_tree::end_descendants_where(std::process::id(), |p| {
        p.start_ticks >= since && !spared.contains(&p.pid)
    })
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
pub fn end_descendants(spare: &[u32]) -> usize {
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
                process_tree::reap(pid);
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
