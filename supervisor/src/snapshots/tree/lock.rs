//! The lock a session's recorded workspaces change under (`<dir>/.lock`), taken with a
//! bounded wait. The directory is shared by a fleet's nodes, so the lock's holder may be a
//! node that was paused (SIGSTOP, a frozen VM) while it recorded: it holds the lock until
//! it runs again, perhaps never. An unbounded wait left the request of the node that took
//! the session over unanswered for as long as that pause lasted. A holder in this process
//! is another matter: it is running (a recording still walking the workspace in the blocking
//! pool after the cell that asked for it gave up waiting), it will let go, and a restore that
//! went around it would write files under its walk. So a holder here is waited for to the end.

use super::TreeError;
use crate::locking::lock;
use rustix::fs::{flock, FlockOperation};
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// The lock files this process holds now (by their path as the store names them).
static HELD_HERE: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Mutex::default);

/// A recording's lock, held until dropped.
#[derive(Debug)]
pub(super) struct TreeLock {
    file: Option<fs::File>,
    path: PathBuf,
}

impl Drop for TreeLock {
    fn drop(&mut self) {
        // The file first: a taker here that sees the lock still held also still sees it
        // held here, and waits for it.
        drop(self.file.take());
        lock(&HELD_HERE).remove(&self.path);
    }
}

fn held_here(path: &Path) -> bool {
    lock(&HELD_HERE).contains(path)
}

/// The longest pause between two tries: a free lock is seen within it.
const MOST_BETWEEN_TRIES: Duration = Duration::from_millis(100);

/// The lock file at `path`, locked exclusively, or [`TreeError::Locked`] once a holder in
/// another process kept it for `wait` (a holder in this one is waited for until it lets go).
pub(super) fn take(path: &Path, wait: Duration) -> Result<TreeLock, TreeError> {
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
            Ok(()) => {
                lock(&HELD_HERE).insert(path.to_path_buf());
                return Ok(TreeLock {
                    file: Some(file),
                    path: path.to_path_buf(),
                });
            }
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
        if waited >= wait && !held_here(path) {
            return Err(TreeError::Locked {
                path: path.to_path_buf(),
                waited: wait,
            });
        }
        // Within the bound, the last try falls on it; past it (a holder here), every
        // `between`.
        std::thread::sleep(match wait.checked_sub(waited) {
            Some(left) if !left.is_zero() => between.min(left),
            _ => between,
        });
        between = (between * 2).min(MOST_BETWEEN_TRIES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock as another process (a paused node) holds it: a lock of its own file
    /// description, not taken through [`take`].
    fn held_elsewhere(path: &Path) -> fs::File {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .expect("open the lock file");
        flock(&file, FlockOperation::NonBlockingLockExclusive).expect("locked");
        file
    }

    #[test]
    fn a_lock_held_elsewhere_is_waited_for_at_most_the_bound_and_a_freed_one_is_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".lock");
        let held = held_elsewhere(&path);
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

    #[test]
    fn a_lock_held_in_this_process_is_waited_for_past_the_bound_until_let_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".lock");
        let held = take(&path, Duration::ZERO).expect("free at first");
        let let_go = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let freeing = std::thread::spawn({
            let let_go = std::sync::Arc::clone(&let_go);
            move || {
                // Well past the taker's bound.
                std::thread::sleep(Duration::from_millis(400));
                let_go.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(held);
            }
        });
        let taken = take(&path, Duration::from_millis(50));
        assert!(taken.is_ok(), "waited for the holder here: {taken:?}");
        assert!(
            let_go.load(std::sync::atomic::Ordering::SeqCst),
            "taken only once the holder let go"
        );
        freeing.join().expect("join");
        drop(taken);
        // Once let go, it is not held here any more: a holder elsewhere is gone around.
        let _elsewhere = held_elsewhere(&path);
        let err = take(&path, Duration::from_millis(50)).expect_err("held elsewhere");
        assert!(matches!(err, TreeError::Locked { .. }), "{err}");
    }
}
