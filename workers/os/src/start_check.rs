//! Why a Python interpreter cannot run cellvisor's runner, always named with its path: a
//! configured program that is missing, not a file or not executable is refused before the
//! spawn; one that exits before saying `ready` is asked its version (too old for the runner)
//! or shown with what it printed (the runner failing to import, say).

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The oldest Python the runner runs on: top-level `await` needs 3.8's
/// `PyCF_ALLOW_TOP_LEVEL_AWAIT` (the launcher refuses older ones at once).
pub const MIN_VERSION: (u32, u32) = (3, 8);

/// How long asking a failed interpreter its version may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Python-2-compatible, so that an old interpreter still answers.
const VERSION_PROBE: &str =
    "import sys; sys.stdout.write('%d.%d.%d' % tuple(sys.version_info[:3]))";

/// Checks that the configured interpreter `program` is an executable file; the error says
/// which of those it is not.
pub fn check_configured(program: &Path) -> Result<(), String> {
    let name = format!("the configured Python interpreter {}", program.display());
    let meta = match fs::metadata(program) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{name} does not exist"));
        }
        Err(err) => return Err(format!("{name} cannot be read: {err}")),
    };
    if meta.is_dir() {
        return Err(format!("{name} is a directory, not an executable file"));
    }
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!(
            "{name} is not executable (mode {:o}; `chmod +x` allows it)",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// What a failed spawn of `program` means, in words that name the cause.
pub fn spawn_failure(program: &Path, err: &std::io::Error) -> String {
    let path = program.display();
    match err.raw_os_error() {
        Some(libc::ENOENT) if program.exists() => format!(
            "cannot start python ({path}): the interpreter its `#!` line names does not exist"
        ),
        Some(libc::ENOENT) => format!("cannot start python ({path}): it does not exist"),
        Some(libc::EACCES) => {
            format!("cannot start python ({path}): it is not executable (permission denied)")
        }
        Some(libc::ENOEXEC) => format!(
            "cannot start python ({path}): it is not an executable file (neither a program nor a `#!` script)"
        ),
        _ => format!("cannot start python ({path}): {err}"),
    }
}

/// The error for an interpreter that ended (`how`) before saying `ready`, after printing
/// `printed`: too old for the runner when it says so, else the runner's failure with its
/// output.
pub fn exited_early(program: &Path, how: &str, printed: &str) -> String {
    let path = program.display();
    let version = probe_version(program);
    match version {
        Some(v) if (v.0, v.1) < MIN_VERSION => format!(
            "python ({path}) is Python {}.{}.{}, too old: cellvisor's runner needs Python {}.{} or later",
            v.0, v.1, v.2, MIN_VERSION.0, MIN_VERSION.1
        ),
        _ => {
            let which = match version {
                Some(v) => format!("python ({path}, Python {}.{}.{})", v.0, v.1, v.2),
                None => format!("python ({path})"),
            };
            if printed.is_empty() {
                format!("{which} failed to start cellvisor's runner: {how}, printing nothing")
            } else {
                format!("{which} failed to start cellvisor's runner: {how}; it printed:\n{printed}")
            }
        }
    }
}

/// `program`'s Python version, or `None` when it does not answer as a Python would.
fn probe_version(program: &Path) -> Option<(u32, u32, u32)> {
    let mut child = Command::new(program)
        .args(["-c", VERSION_PROBE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let mut answer = String::new();
    child.stdout.take()?.read_to_string(&mut answer).ok()?;
    if !status.success() {
        return None;
    }
    parse_version(&answer)
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().splitn(3, '.').map(|part| part.parse().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_programs_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("python");
        let refused = |path: &Path| check_configured(path).unwrap_err();
        assert!(refused(&missing).ends_with("python does not exist"));
        assert!(refused(dir.path()).ends_with("is a directory, not an executable file"));
        fs::write(&missing, "#!/bin/sh\n").expect("write");
        fs::set_permissions(&missing, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(refused(&missing).contains("is not executable (mode 644;"));
        fs::set_permissions(&missing, fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(check_configured(&missing), Ok(()));
    }

    #[test]
    fn versions_parse_and_bad_answers_do_not() {
        assert_eq!(parse_version("3.11.7"), Some((3, 11, 7)));
        assert_eq!(parse_version("2.7.18\n"), Some((2, 7, 18)));
        assert_eq!(parse_version("Python 3"), None);
        assert_eq!(parse_version("3.11"), None);
    }
}
