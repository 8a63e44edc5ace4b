//! The artifact directory, where outputs too big for a result spill: created private, files
//! created without following links, and its total size capped.
//!
//! Cells run as the same user as the daemon, so a cell can plant a symbolic link where an
//! artifact will be written. Artifacts are therefore created with `O_CREAT | O_EXCL |
//! O_NOFOLLOW` (a planted entry is removed, never followed). The directory's total size stays
//! under `output.artifact-max-total`: when a spill needs room the oldest finished artifacts
//! go first; when there is still none, the spilling cell's partial file is deleted and its
//! result says that the full output could not be kept.

use crate::locking::lock;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The artifact directory of one supervisor and what it holds.
#[derive(Debug)]
pub struct ArtifactStore {
    dir: PathBuf,
    max_total: AtomicU64,
    /// Bytes in the directory's artifacts, as counted by the last scan plus what sinks wrote
    /// since.
    used: AtomicU64,
    /// Artifacts being written, with the bytes accounted for each (some may still sit in a
    /// write buffer): never deleted to make room.
    live: Mutex<HashMap<PathBuf, u64>>,
    /// One scan of the directory at a time.
    scanning: Mutex<()>,
}

impl ArtifactStore {
    /// A store for `dir` (created on first spill), capped at `max_total` bytes.
    pub fn new(dir: PathBuf, max_total: u64) -> Arc<ArtifactStore> {
        let store = ArtifactStore {
            dir,
            max_total: AtomicU64::new(max_total),
            used: AtomicU64::new(0),
            live: Mutex::default(),
            scanning: Mutex::default(),
        };
        let used = store.scan().iter().map(|a| a.size).sum();
        store.used.store(used, Ordering::Relaxed);
        Arc::new(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A reloaded `output.artifact-max-total`, for the next spills.
    pub fn set_max_total(&self, max_total: u64) {
        self.max_total.store(max_total, Ordering::Relaxed);
    }

    pub fn max_total(&self) -> u64 {
        self.max_total.load(Ordering::Relaxed)
    }

    /// Creates the artifact file `name` in the private directory (`name` may start with one
    /// directory: a sandboxed session's own). An entry already there (a stale artifact of a
    /// reused pid, or a link a cell planted) is removed, not followed.
    pub fn create(&self, name: &str) -> io::Result<(PathBuf, File)> {
        let path = self.dir.join(name);
        let parent = path.parent().unwrap_or(&self.dir);
        // A session with a uid of its own (`isolation.level = "uid"`) owns its directory:
        // its artifacts are given to it, so its cells read them back.
        let owner = (parent != self.dir)
            .then(|| crate::isolation::dirs::foreign_owner(parent))
            .flatten();
        if owner.is_none() {
            cellvisor_ipc::socket::ensure_private_dir(parent)?;
        }
        let open = || {
            OpenOptions::new()
                // Read too: a sink replays its own artifact through this handle, never by path.
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        let file = match open() {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&path)?;
                open()?
            }
            other => other?,
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        lock(&self.live).insert(path.clone(), 0);
        Ok((path, file))
    }

    /// Accounts for `bytes` more of the live artifact `path`; `false` when the directory has
    /// no room for them even after deleting the oldest finished artifacts.
    pub fn reserve(&self, path: &Path, bytes: u64) -> bool {
        let reserved = self.try_reserve(bytes) || {
            self.make_room(bytes);
            self.try_reserve(bytes)
        };
        if reserved {
            if let Some(accounted) = lock(&self.live).get_mut(path) {
                *accounted += bytes;
            }
        }
        reserved
    }

    fn try_reserve(&self, bytes: u64) -> bool {
        let max = self.max_total();
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) <= max {
            return true;
        }
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        false
    }

    /// A live artifact is complete: it may now be deleted to make room.
    pub fn finished(&self, path: &Path) {
        lock(&self.live).remove(path);
    }

    /// Deletes a live artifact that could not be completed, so no partial file is left.
    pub fn discard(&self, path: &Path) {
        let _ = std::fs::remove_file(path);
        let written = lock(&self.live).remove(path).unwrap_or(0);
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(written))
            });
    }

    /// Deletes the oldest finished artifacts until `need` more bytes fit, and recounts.
    fn make_room(&self, need: u64) {
        let _scan = lock(&self.scanning);
        let max = self.max_total();
        let live = lock(&self.live).clone();
        let mut found = self.scan();
        found.retain(|a| !live.contains_key(&a.path));
        let mut total: u64 = found.iter().map(|a| a.size).sum::<u64>() + live.values().sum::<u64>();
        if need <= max {
            found.sort_by_key(|a| a.modified);
            for artifact in found {
                if total.saturating_add(need) <= max {
                    break;
                }
                if std::fs::remove_file(&artifact.path).is_ok() {
                    total = total.saturating_sub(artifact.size);
                    tracing::info!(path = %artifact.path.display(), "deleted an old artifact to make room (output.artifact-max-total)");
                }
            }
        }
        self.used.store(total, Ordering::Relaxed);
    }

    /// The artifact files in the directory and in its sessions' own directories (links and
    /// other files are not ours).
    fn scan(&self) -> Vec<Artifact> {
        artifact_entries(&self.dir)
            .into_iter()
            .filter_map(|entry| {
                let meta = entry.metadata().ok().filter(|m| m.is_file())?;
                Some(Artifact {
                    path: entry.path(),
                    size: meta.len(),
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                })
            })
            .collect()
    }
}

struct Artifact {
    path: PathBuf,
    size: u64,
    modified: SystemTime,
}

/// Whether `name` is one of our artifact files: `<session>-<py|js|lua>-<pid>-<cell>.txt`.
/// Only those are ever deleted, so an artifact directory shared with other files is safe.
fn is_artifact_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".txt") else {
        return false;
    };
    let mut parts = stem.rsplitn(4, '-');
    let (Some(cell), Some(pid), Some(language), Some(session)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !session.is_empty()
        && matches!(language, "py" | "js" | "lua")
        && pid.bytes().all(|b| b.is_ascii_digit())
        && cell.bytes().all(|b| b.is_ascii_digit())
}

/// The artifact files in `dir` and in its sessions' own directories (one level down, where
/// sandboxed sessions spill).
fn artifact_entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let (dirs, files): (Vec<_>, Vec<_>) = entries
        .flatten()
        .partition(|entry| entry.file_type().is_ok_and(|t| t.is_dir()));
    let nested = dirs
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir.path()).ok())
        .flat_map(|entries| entries.flatten());
    files
        .into_iter()
        .chain(nested)
        .filter(|entry| entry.file_name().to_str().is_some_and(is_artifact_name))
        .collect()
}

/// Deletes artifact files in `dir` last written more than `max_age` ago; answers how many.
pub fn prune_artifacts(dir: &Path, max_age: Duration) -> usize {
    let now = SystemTime::now();
    artifact_entries(dir)
        .into_iter()
        .filter(|entry| {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
                .is_some_and(|age| age > max_age)
        })
        .filter(|entry| std::fs::remove_file(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_artifact_files_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["s-py-12-3.txt", "notes.txt", "a-b-rb-1-2.txt"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        assert_eq!(prune_artifacts(dir.path(), Duration::from_secs(3600)), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(prune_artifacts(dir.path(), Duration::from_millis(1)), 1);
        assert!(!dir.path().join("s-py-12-3.txt").exists());
        assert!(dir.path().join("notes.txt").exists());
        assert!(dir.path().join("a-b-rb-1-2.txt").exists());
        assert!(is_artifact_name("agent-1_x-lua-9-10.txt"));
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let store = ArtifactStore::new(dir.path().join("artifacts"), 1 << 20);
        std::fs::create_dir_all(store.dir()).unwrap();
        std::os::unix::fs::symlink(&victim, store.dir().join("s-py-1-1.txt")).unwrap();
        let (path, mut file) = store.create("s-py-1-1.txt").unwrap();
        io::Write::write_all(&mut file, b"output").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"output");
    }

    #[test]
    fn the_oldest_finished_artifacts_make_room_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path().to_path_buf(), 100);
        let mut made = Vec::new();
        for name in ["s-py-1-1.txt", "s-py-1-2.txt", "s-py-1-3.txt"] {
            let (path, mut file) = store.create(name).unwrap();
            assert!(store.reserve(&path, 30));
            io::Write::write_all(&mut file, &[b'x'; 30]).unwrap();
            made.push(path);
            std::thread::sleep(Duration::from_millis(20));
        }
        store.finished(&made[0]);
        store.finished(&made[1]);
        // 90 used; 40 more only fit once the oldest finished one is gone.
        assert!(store.reserve(&made[2], 40));
        assert!(!made[0].exists());
        assert!(made[1].exists() && made[2].exists());
        // More than can ever fit: refused, and the live one is kept.
        assert!(!store.reserve(&made[2], 200));
        assert!(made[2].exists());
        store.discard(&made[2]);
        assert!(!made[2].exists());
    }
}
