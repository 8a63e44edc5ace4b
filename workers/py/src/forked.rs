//! The python child's process: started by this shim, or forked by a zygote in this shim's
//! process just before it exec'd the shim (see `zygote.py`). Either way python is this
//! process's own child, with its pipes on the same numbers as a spawned one's, so the
//! engine treats both alike; only the handle differs ([`PythonProcess`]).

use super::child::Spawned;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::Duration;

/// Names the forked runner and the shim's ends of its pipes, set by the zygote:
/// `pid,output,errors,commands,events,confine,token,program`, where `confine` is `-` or,
/// for a sandboxed session, the socket on which the runner waits for its Landlock ruleset
/// ([`give_ruleset`]) before it runs anything of the session.
pub use cellvisor_ipc::env::FORKED_PYTHON as FORKED_PYTHON_VAR;

/// Python, spawned or adopted.
pub(crate) enum PythonProcess {
    Spawned(Child),
    /// Forked before this program was exec'd; `status` once reaped. A confined runner is
    /// signalled through its [`Signaller`].
    Adopted {
        pid: u32,
        status: Option<ExitStatus>,
        signaller: Option<Signaller>,
    },
}

/// Sends signals to a confined adopted runner from a thread started before this worker
/// confined itself. The runner restricts itself (its own Landlock domain) and so does this
/// worker's engine thread (another domain, with the same rules): Landlock lets a scoped
/// domain signal only its own processes and those of domains nested in it, so the engine
/// thread could not interrupt or kill its runner itself. Like the warden, this thread stays
/// outside the confinement; it signals only its runner, and only when the engine asks.
#[derive(Clone)]
pub(crate) struct Signaller(mpsc::Sender<(i32, mpsc::Sender<io::Result<()>>)>);

impl Signaller {
    /// Starts the thread for runner `pid`; call it before the confinement.
    pub fn start(pid: u32) -> io::Result<Signaller> {
        let raw = i32::try_from(pid).map_err(|_| io::ErrorKind::InvalidInput)?;
        let (requests, received) = mpsc::channel::<(i32, mpsc::Sender<io::Result<()>>)>();
        std::thread::Builder::new()
            .name("runner-signaller".into())
            .spawn(move || {
                for (signal, answer) in received {
                    // SAFETY: kill on our child's pid; the engine asks only while it is
                    // not reaped (see `PythonProcess::kill` and the engine's signal target).
                    let sent = if unsafe { libc::kill(raw, signal) } == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    };
                    let _ = answer.send(sent);
                }
            })?;
        Ok(Signaller(requests))
    }

    /// Sends `signal` to the runner and says whether it went.
    pub fn send(&self, signal: i32) -> io::Result<()> {
        let (answer, answered) = mpsc::channel();
        self.0
            .send((signal, answer))
            .map_err(|_| io::Error::other("the runner's signaller has stopped"))?;
        answered
            .recv()
            .map_err(|_| io::Error::other("the runner's signaller has stopped"))?
    }
}

impl PythonProcess {
    /// Where signals for the runner go when the engine thread may not send them itself.
    pub fn signaller(&self) -> Option<Signaller> {
        match self {
            PythonProcess::Adopted { signaller, .. } => signaller.clone(),
            PythonProcess::Spawned(_) => None,
        }
    }

    pub fn id(&self) -> u32 {
        match self {
            PythonProcess::Spawned(child) => child.id(),
            PythonProcess::Adopted { pid, .. } => *pid,
        }
    }

    /// Whether it has exited (reaping it if so), without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            PythonProcess::Spawned(child) => child.try_wait(),
            PythonProcess::Adopted { pid, status, .. } => {
                if status.is_none() {
                    *status = waitpid(*pid, libc::WNOHANG)?;
                }
                Ok(*status)
            }
        }
    }

    pub fn kill(&mut self) -> io::Result<()> {
        match self {
            PythonProcess::Spawned(child) => child.kill(),
            PythonProcess::Adopted {
                status: Some(_), ..
            } => Ok(()),
            PythonProcess::Adopted {
                signaller: Some(signaller),
                ..
            } => signaller.send(libc::SIGKILL),
            PythonProcess::Adopted { pid, .. } => {
                let raw = i32::try_from(*pid).map_err(|_| io::ErrorKind::InvalidInput)?;
                // SAFETY: kill on a child of ours that is not reaped yet (its pid is ours).
                if unsafe { libc::kill(raw, libc::SIGKILL) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
        }
    }

    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            PythonProcess::Spawned(child) => child.wait(),
            PythonProcess::Adopted { pid, status, .. } => {
                if let Some(done) = status {
                    return Ok(*done);
                }
                let done = waitpid(*pid, 0)?.ok_or(io::ErrorKind::WouldBlock)?;
                *status = Some(done);
                Ok(done)
            }
        }
    }
}

fn waitpid(pid: u32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let raw = i32::try_from(pid).map_err(|_| io::ErrorKind::InvalidInput)?;
    let mut status = 0;
    loop {
        // SAFETY: waitpid on a pid of ours, filling a local.
        let got = unsafe { libc::waitpid(raw, &mut status, flags) };
        match got {
            0 => return Ok(None),
            n if n == raw => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

/// A runner a zygote forked for this shim.
pub(crate) struct Forked {
    pub spawned: Spawned,
    pub token: String,
    /// The interpreter the zygote runs, to check against the one this shim would start.
    pub program: PathBuf,
    /// Where the runner waits for its confinement, when the zygote was asked to confine it.
    pub confinement: Option<UnixStream>,
}

/// The runner the zygote left for this process, if it did; `Err` says why what it left
/// cannot be used (the runner, if any, is then killed).
pub(crate) fn take() -> Option<Result<Forked, String>> {
    let value = std::env::var_os(FORKED_PYTHON_VAR)?;
    Some(parse(&value.to_string_lossy()))
}

fn parse(value: &str) -> Result<Forked, String> {
    let mut fields = value.splitn(8, ',');
    let mut number = |what: &str| -> Result<i32, String> {
        fields
            .next()
            .and_then(|f| f.parse::<i32>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{FORKED_PYTHON_VAR} lacks the {what}"))
    };
    let pid = number("runner's pid")?;
    let fds = [
        number("output pipe")?,
        number("error pipe")?,
        number("command pipe")?,
        number("event pipe")?,
    ];
    let confine = match fields.next() {
        Some("-") => None,
        Some(text) => Some(
            text.parse::<i32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{FORKED_PYTHON_VAR} names no valid confinement socket"))?,
        ),
        None => return Err(format!("{FORKED_PYTHON_VAR} lacks the confinement field")),
    };
    let token = fields.next().unwrap_or_default().to_string();
    let program = PathBuf::from(fields.next().unwrap_or_default());
    if token.is_empty() || program.as_os_str().is_empty() {
        return Err(format!(
            "{FORKED_PYTHON_VAR} lacks the token or the program"
        ));
    }
    let parent = crate::process_tree::stat(pid as u32).map(|stat| stat.ppid);
    if parent != Some(std::process::id()) {
        return Err(format!(
            "the forked runner {pid} is not a child of this worker"
        ));
    }
    let process = PythonProcess::Adopted {
        pid: pid as u32,
        status: None,
        signaller: None,
    };
    let [output, errors, commands, events] = fds.map(pipe_end);
    let confinement = confine.map(socket_end).transpose();
    let (output, errors, commands, events, confinement) =
        match (output, errors, commands, events, confinement) {
            (Ok(output), Ok(errors), Ok(commands), Ok(events), Ok(confinement)) => {
                (output, errors, commands, events, confinement)
            }
            _ => {
                let mut process = process;
                let _ = process.kill();
                let _ = process.wait();
                return Err(format!(
                    "{FORKED_PYTHON_VAR} names descriptors that are not pipes or a socket"
                ));
            }
        };
    // The output thread drains the error pipe without blocking, as a spawned child's.
    // SAFETY: fcntl on a descriptor we own.
    let nonblocking = unsafe {
        let flags = libc::fcntl(errors.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(errors.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0
    };
    if !nonblocking {
        let mut process = process;
        let _ = process.kill();
        let _ = process.wait();
        return Err(format!(
            "cannot make the forked runner's error pipe non-blocking: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(Forked {
        spawned: Spawned {
            child: process,
            commands,
            events,
            output,
            errors,
        },
        token,
        program,
        confinement,
    })
}

/// Takes descriptor `fd` as ours, close-on-exec, if it is an open Unix socket.
fn socket_end(fd: RawFd) -> Result<UnixStream, ()> {
    // SAFETY: fcntl on a descriptor number; failure just means it is not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(());
    }
    // SAFETY: as for `pipe_end`: left open by the zygote for us alone, read once.
    let file = unsafe { File::from_raw_fd(fd) };
    match file.metadata() {
        Ok(meta) if meta.file_type().is_socket() => Ok(UnixStream::from(OwnedFd::from(file))),
        _ => {
            std::mem::forget(file);
            Err(())
        }
    }
}

/// How long a forked runner may take to confine itself once it has its ruleset.
const CONFINE_TIMEOUT: Duration = Duration::from_secs(10);

/// Hands the waiting runner its Landlock ruleset (`None`: a kernel without Landlock, the
/// sandbox not required) and waits for it to say it restricted itself; any other answer,
/// or none, is an error and the runner is then killed by the caller.
pub(crate) fn give_ruleset(socket: &UnixStream, ruleset: Option<OwnedFd>) -> Result<(), String> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds: Vec<RawFd> = ruleset.iter().map(|fd| fd.as_raw_fd()).collect();
    let (payload, control): (&[u8], Vec<ControlMessage>) = if fds.is_empty() {
        (b"none", Vec::new())
    } else {
        (b"landlock", vec![ControlMessage::ScmRights(&fds)])
    };
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[io::IoSlice::new(payload)],
        &control,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| format!("cannot hand the forked runner its sandbox: {e}"))?;
    drop(ruleset);
    socket
        .set_read_timeout(Some(CONFINE_TIMEOUT))
        .map_err(|e| format!("cannot wait for the forked runner's sandbox: {e}"))?;
    // One packet (a SOCK_SEQPACKET pair): read whole, in a buffer that holds any answer.
    let mut buffer = [0u8; 4096];
    let read = (&*socket).read(&mut buffer);
    let answer = String::from_utf8_lossy(&buffer[..*read.as_ref().unwrap_or(&0)]);
    match (read, answer.trim()) {
        (Ok(_), "confined") => Ok(()),
        (Ok(_), "") => Err("the forked runner ended before it confined itself".into()),
        (Ok(_), said) => Err(format!(
            "the forked runner could not confine itself: {said}"
        )),
        (Err(e), _) => Err(format!("the forked runner did not confine itself: {e}")),
    }
}

/// Takes descriptor `fd` as ours, close-on-exec, if it is an open pipe.
fn pipe_end(fd: RawFd) -> Result<File, ()> {
    // SAFETY: fcntl on a descriptor number; failure just means it is not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(());
    }
    // SAFETY: the zygote left this descriptor open for us alone, and nothing else in this
    // process has taken it (it is read once, at the engine's start).
    let file = unsafe { File::from_raw_fd(fd) };
    match file.metadata() {
        Ok(meta) if meta.file_type().is_fifo() => Ok(file),
        _ => {
            std::mem::forget(file);
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_values_are_refused_with_what_is_missing() {
        for (value, wanted) in [
            ("", "runner's pid"),
            ("x,1,2,3,4,-,t,/p", "runner's pid"),
            ("12,1,2", "command pipe"),
            ("12,1,2,3,-4,-,t,/p", "event pipe"),
            ("12,1,2,3,4", "confinement field"),
            ("12,1,2,3,4,x,t,/p", "no valid confinement socket"),
            ("12,1,2,3,4,0,t,/p", "no valid confinement socket"),
            ("12,1,2,3,4,-,,/p", "token or the program"),
            ("12,1,2,3,4,-,tok", "token or the program"),
        ] {
            let error = parse(value).err().unwrap_or_default();
            assert!(error.contains(wanted), "{value:?}: {error}");
        }
    }

    #[test]
    fn a_runner_that_is_not_our_child_is_refused() {
        // Our parent is certainly not our child.
        let parent = std::os::unix::process::parent_id();
        let error = parse(&format!("{parent},1,2,3,4,-,tok,/usr/bin/python3"))
            .err()
            .unwrap_or_default();
        assert!(error.contains("not a child of this worker"), "{error}");
    }
}
