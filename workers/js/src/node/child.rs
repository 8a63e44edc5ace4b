//! `node:child_process`'s synchronous half (`spawnSync`, and `execSync`/`execFileSync` on it
//! in `node.js`): runs a program to its end, collecting its output, while the cell stays
//! interruptible. The child leads its own process group so an interrupt or a timeout ends
//! what it started too (`sh -c` and its pipeline).

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often a waiting `spawnSync` looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(10);

/// How long the output of a killed child may take to drain.
const KILLED_OUTPUT_GRACE: Duration = Duration::from_millis(200);

pub(super) struct SpawnRequest {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<String>,
    /// The whole environment of the child; `None` inherits the worker's.
    pub env: Option<Vec<(String, String)>>,
    pub input: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

pub(super) struct SpawnResult {
    pub pid: u32,
    /// The exit code, or `None` when a signal ended the child.
    pub status: Option<i32>,
    pub signal: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Why it did not run to its end: `ETIMEDOUT`, or the code of a failed spawn (`ENOENT`).
    pub error: Option<String>,
}

/// Runs the request; `stop` says the cell was interrupted (the child is killed then).
pub(super) fn spawn_sync(request: SpawnRequest, stop: &dyn Fn() -> bool) -> SpawnResult {
    let mut child = match command_for(&request).spawn() {
        Ok(child) => child,
        Err(err) => return spawn_failed(&err),
    };
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        let done = done_tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = done.send(());
            bytes
        })
    };
    let stdout = collect(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = collect(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    drop(done_tx);
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), request.input) {
        // A child that does not read its input must not block us: write on a thread.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let (mut closed, error) = wait_for_output(&done_rx, pid, request.timeout, stop);
    let status = child.wait().ok();
    // After a kill, a process that left the group may still hold a pipe: give the readers a
    // moment, then leave them rather than hang the cell.
    let give_up = Instant::now() + KILLED_OUTPUT_GRACE;
    while closed < 2 && Instant::now() < give_up {
        if done_rx.recv_timeout(POLL).is_ok() {
            closed += 1;
        }
    }
    let finished = |reader: std::thread::JoinHandle<Vec<u8>>| {
        // Both readers said they are done (they return right after), or this one ended.
        if closed == 2 || reader.is_finished() {
            reader.join().unwrap_or_default()
        } else {
            Vec::new()
        }
    };
    let stdout = finished(stdout);
    let stderr = finished(stderr);
    SpawnResult {
        pid,
        status: status.and_then(|s| s.code()),
        signal: status
            .and_then(|s| s.signal())
            .and_then(|n| Signal::try_from(n).ok())
            .map(|s| s.as_str().to_string()),
        stdout,
        stderr,
        error,
    }
}

/// The command `request` asks for, in its own process group (so a kill reaches what it
/// starts), with its output piped and its input piped only when there is some.
fn command_for(request: &SpawnRequest) -> Command {
    let mut command = Command::new(&request.program);
    command
        .args(&request.args)
        .stdin(if request.input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &request.cwd {
        command.current_dir(cwd);
    }
    if let Some(env) = &request.env {
        command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    command
}

/// What `spawnSync` reports for a program that could not start: Node's errno name.
fn spawn_failed(err: &std::io::Error) -> SpawnResult {
    let errno = err.raw_os_error().unwrap_or(libc::EIO);
    SpawnResult {
        pid: 0,
        status: None,
        signal: None,
        stdout: Vec::new(),
        stderr: Vec::new(),
        error: Some(format!("{:?}", nix::errno::Errno::from_raw(errno))),
    }
}

/// Waits until both output pipes closed (each reader says so on `done`), or the cell is
/// stopped (the group is killed), or `timeout` passed (the group is asked to end:
/// `ETIMEDOUT`). Returns how many pipes closed, and the error to report.
fn wait_for_output(
    done: &mpsc::Receiver<()>,
    pid: u32,
    timeout: Option<Duration>,
    stop: &dyn Fn() -> bool,
) -> (usize, Option<String>) {
    let started = Instant::now();
    let mut error = None;
    let mut closed = 0;
    while closed < 2 {
        match done.recv_timeout(POLL) {
            Ok(()) => closed += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop() {
                    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    break;
                }
                if timeout.is_some_and(|limit| started.elapsed() >= limit) {
                    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGTERM);
                    error = Some("ETIMEDOUT".to_string());
                    break;
                }
            }
        }
    }
    (closed, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> SpawnRequest {
        SpawnRequest {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: None,
            env: None,
            input: None,
            timeout: None,
        }
    }

    #[test]
    fn collects_output_and_status() {
        let result = spawn_sync(sh("echo out; echo err >&2; exit 3"), &|| false);
        assert_eq!(result.stdout, b"out\n");
        assert_eq!(result.stderr, b"err\n");
        assert_eq!(result.status, Some(3));
        let mut cat = sh("cat");
        cat.input = Some(b"piped".to_vec());
        assert_eq!(spawn_sync(cat, &|| false).stdout, b"piped");
    }

    #[test]
    fn timeouts_and_stops_end_the_child() {
        let mut slow = sh("sleep 30");
        slow.timeout = Some(Duration::from_millis(50));
        let result = spawn_sync(slow, &|| false);
        assert_eq!(result.error.as_deref(), Some("ETIMEDOUT"));
        assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
        let result = spawn_sync(sh("sleep 30"), &|| true);
        assert_eq!(result.signal.as_deref(), Some("SIGKILL"));
        let missing = SpawnRequest {
            program: "/nonexistent/program".into(),
            ..sh("")
        };
        assert_eq!(
            spawn_sync(missing, &|| false).error.as_deref(),
            Some("ENOENT")
        );
    }
}
