//! The python child process: spawning it with its pipes (commands on its fd 3, events on
//! fd 4, stdout and stderr on pipes of their own). The threads that drain them are in
//! `output_relay` and `events`.

use super::forked::PythonProcess;
use super::interpreter::Interpreter;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The running child and our ends of its pipes.
pub(crate) struct Spawned {
    pub child: PythonProcess,
    /// Write end of the command pipe (the runner's fd 3).
    pub commands: File,
    /// Read end of the event pipe (the runner's fd 4).
    pub events: File,
    /// Read end of the output pipe (the runner's fd 1, where the sync markers go too).
    pub output: File,
    /// Read end of the error pipe (the runner's fd 2), non-blocking: the output thread drains
    /// it before each marker it passes on.
    pub errors: File,
}

/// Starts `python -u runner` with stdin on /dev/null, stdout and stderr on a pipe each, the
/// command pipe on fd 3 and the event pipe on fd 4.
pub(crate) fn spawn(
    interpreter: &Interpreter,
    runner: &Path,
    sync_token: &str,
) -> Result<Spawned, String> {
    let (output_read, output_write) = cloexec_pipe()?;
    let (errors_read, errors_write) = cloexec_pipe()?;
    set_nonblocking(&errors_read)?;
    let (commands_read, commands_write) = cloexec_pipe()?;
    let (events_read, events_write) = cloexec_pipe()?;

    let mut command = Command::new(&interpreter.program);
    command.arg("-u").arg(runner).stdin(Stdio::null());
    let (set, unset) = runner_env(interpreter, std::env::var_os("PATH").as_deref());
    command
        .envs(set)
        .env(cellvisor_ipc::env::SYNC_TOKEN, sync_token);
    // The engine's unit tests drive the built-in emulation (a worker always gets the
    // setting from the supervisor); IPython's shell is tested end to end.
    #[cfg(test)]
    if std::env::var_os(cellvisor_ipc::env::PYTHON_SHELL).is_none() {
        command.env(cellvisor_ipc::env::PYTHON_SHELL, "builtin");
    }
    for name in unset {
        command.env_remove(name);
    }

    // Our ends stay in the parent; the child's ends are dup'ed onto 1-4 in the child.
    let targets: [(RawFd, RawFd); 4] = [
        (output_write.as_raw_fd(), 1),
        (errors_write.as_raw_fd(), 2),
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
        .map_err(|e| super::start_check::spawn_failure(&interpreter.program, &e))?;
    // The child's ends close here, so EOF on ours means the child (and anything it let
    // inherit them) is gone.
    drop((output_write, errors_write, commands_read, events_write));
    Ok(Spawned {
        child: PythonProcess::Spawned(child),
        commands: File::from(commands_write),
        events: File::from(events_read),
        output: File::from(output_read),
        errors: File::from(errors_read),
    })
}

/// What the runner's environment changes from the worker's: unbuffered UTF-8 streams, and
/// for a virtualenv its `bin` first on `PATH` (`path` is the worker's), `VIRTUAL_ENV` set and
/// `PYTHONHOME` removed. Returns the variables to set and those to remove. A zygote's forked
/// runners get the same.
pub fn runner_env(
    interpreter: &Interpreter,
    path: Option<&OsStr>,
) -> (Vec<(OsString, OsString)>, Vec<OsString>) {
    let mut set = vec![
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("PYTHONIOENCODING".into(), "utf-8".into()),
    ];
    let mut unset = Vec::new();
    if let Some(venv) = &interpreter.venv {
        let mut joined = OsString::from(venv.join("bin"));
        if let Some(rest) = path.filter(|p| !p.is_empty()) {
            joined.push(":");
            joined.push(rest);
        }
        set.push(("PATH".into(), joined));
        set.push(("VIRTUAL_ENV".into(), venv.into()));
        unset.push("PYTHONHOME".into());
    }
    (set, unset)
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

fn set_nonblocking(fd: &OwnedFd) -> Result<(), String> {
    // SAFETY: fcntl on an fd we own.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
    {
        return Err(format!(
            "cannot make a pipe non-blocking: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
