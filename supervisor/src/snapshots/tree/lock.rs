//! The lock a session's recorded workspaces change under (`<dir>/.lock`), taken with a
//! bounded wait. The directory is shared by a fleet's nodes, so the lock's holder may be a
//! node that was paused (SIGSTOP, a frozen VM) while it recorded: it holds the lock until
//! it runs again, perhaps never. An unbounded wait left the request of the node that took
//! the session over unanswered for as long as that pause lasted.

use super::TreeError;
use rustix::fs::{flock, FlockOperation};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest pause between two tries: a free lock is seen within it.
const MOST_BETWEEN_TRIES: Duration = Duration::from_millis(100);

/// The lock file at `path`, locked exclusively, or [`TreeError::Locked`] once another
/// holder kept it for `wait`.
pub(super) fn take(path: &Path, wait: Duration) -> Result<fs::File, TreeError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| TreeError::Io {
            what: "open",
            path: path.to_path_buf(),
            source,
        })?;
    let started = Instant::now();
    let mut between = Duration::from_millis(5);
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(errno) if errno == rustix::io::Errno::WOULDBLOCK => {}
            Err(errno) if errno == rustix::io::Errno::INTR => continue,
            Err(errno) => {
                return Err(TreeError::Io {
                    what: "lock",
                    path: path.to_path_buf(),
                    source: errno.into(),
                })
            }
        }
        let waited = started.elapsed();
        if waited >= wait {
            return Err(TreeError::Locked {
                path: path.to_path_buf(),
                waited: wait,
            });
        }
        std::thread::sleep(between.min(wait - waited));
        between = (between * 2).min(MOST_BETWEEN_TRIES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_waited_for_at_most_the_bound_and_a_freed_one_is_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".lock");
        let held = take(&path, Duration::ZERO).expect("free at first");
        let started = Instant::now();
        let err = take(&path, Duration::from_millis(200)).expect_err("held elsewhere");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(matches!(err, TreeError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("paused"), "{err}");
        // Freed while a taker waits: the taker gets it.
        let freeing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        take(&path, Duration::from_secs(30)).expect("taken once freed");
        freeing.join().expect("join");
    }
}
