//! The python child's process: started by this shim, or forked by a zygote in this shim's
//! process just before it exec'd the shim (see `zygote.py`). Either way python is this
//! process's own child, with its pipes on the same numbers as a spawned one's, so the
//! engine treats both alike; only the handle differs ([`PythonProcess`]).

use super::child::Spawned;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};

/// Names the forked runner and the shim's ends of its pipes, set by the zygote:
/// `pid,output,errors,commands,events,token,program`.
pub const FORKED_PYTHON_VAR: &str = "CELLVISOR_FORKED_PYTHON";

/// Python, spawned or adopted.
pub(crate) enum PythonProcess {
    Spawned(Child),
    /// Forked before this program was exec'd; `status` once reaped.
    Adopted {
        pid: u32,
        status: Option<ExitStatus>,
    },
}

impl PythonProcess {
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
            PythonProcess::Adopted { pid, status } => {
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
            PythonProcess::Adopted { pid, status } => {
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
}

/// The runner the zygote left for this process, if it did; `Err` says why what it left
/// cannot be used (the runner, if any, is then killed).
pub(crate) fn take() -> Option<Result<Forked, String>> {
    let value = std::env::var_os(FORKED_PYTHON_VAR)?;
    Some(parse(&value.to_string_lossy()))
}

fn parse(value: &str) -> Result<Forked, String> {
    let mut fields = value.splitn(7, ',');
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
    };
    let [output, errors, commands, events] = fds.map(pipe_end);
    let (output, errors, commands, events) = match (output, errors, commands, events) {
        (Ok(output), Ok(errors), Ok(commands), Ok(events)) => (output, errors, commands, events),
        _ => {
            let mut process = process;
            let _ = process.kill();
            let _ = process.wait();
            return Err(format!(
                "{FORKED_PYTHON_VAR} names descriptors that are not pipes"
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
    })
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
            ("x,1,2,3,4,t,/p", "runner's pid"),
            ("12,1,2", "command pipe"),
            ("12,1,2,3,-4,t,/p", "event pipe"),
            ("12,1,2,3,4,,/p", "token or the program"),
            ("12,1,2,3,4,tok", "token or the program"),
        ] {
            let error = parse(value).err().unwrap_or_default();
            assert!(error.contains(wanted), "{value:?}: {error}");
        }
    }

    #[test]
    fn a_runner_that_is_not_our_child_is_refused() {
        // Our parent is certainly not our child.
        let parent = std::os::unix::process::parent_id();
        let error = parse(&format!("{parent},1,2,3,4,tok,/usr/bin/python3"))
            .err()
            .unwrap_or_default();
        assert!(error.contains("not a child of this worker"), "{error}");
    }
}
