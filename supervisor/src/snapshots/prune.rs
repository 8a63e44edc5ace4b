//! The sweep of the snapshot directory: snapshots unused for `snapshots.ttl` go, then the
//! oldest until the directory fits `snapshots.max-total`; temporary files a crashed write
//! left behind go after an hour. Which files go is [`to_delete`], plain data.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A temporary file older than this is a write that never finished.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// One file of the snapshot directory.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// Written or last restored.
    pub used: SystemTime,
    /// A write in progress (or one that died).
    pub temporary: bool,
}

/// The files to delete, oldest first: past `ttl`, stale temporaries, then the oldest until
/// the rest fit `max_total`.
pub fn to_delete(
    mut files: Vec<SnapshotFile>,
    now: SystemTime,
    ttl: Duration,
    max_total: u64,
) -> Vec<PathBuf> {
    files.sort_by_key(|f| f.used);
    let age = |f: &SnapshotFile| now.duration_since(f.used).unwrap_or_default();
    let mut deleted = Vec::new();
    let mut kept = Vec::new();
    for file in files {
        let expired = if file.temporary {
            age(&file) > STALE_TEMP
        } else {
            age(&file) > ttl
        };
        if expired {
            deleted.push(file.path);
        } else {
            kept.push(file);
        }
    }
    let mut total: u64 = kept.iter().map(|f| f.bytes).sum();
    for file in kept {
        if total <= max_total {
            break;
        }
        if file.temporary {
            continue;
        }
        total -= file.bytes;
        deleted.push(file.path);
    }
    deleted
}

/// Every snapshot file under `root` (`<session>/<lang>/latest.snap`,
/// `<session>/<lang>/checkpoints/*.snap`, etcd mode's `<session>/<lang>/blobs/*.snap`, and
/// temporaries beside them).
pub fn list(root: &Path) -> Vec<SnapshotFile> {
    let mut files = Vec::new();
    let dirs = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    for session in dirs(root) {
        for language in dirs(&session) {
            collect(&language, &mut files);
            collect(&language.join("checkpoints"), &mut files);
            collect(&language.join(crate::fleet::pointer::BLOBS_DIR), &mut files);
        }
    }
    files
}

fn collect(dir: &Path, files: &mut Vec<SnapshotFile>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let temporary = name.starts_with(".snapshot-") && name.ends_with(".tmp");
        if !temporary && !name.ends_with(".snap") {
            continue;
        }
        // symlink_metadata: a link planted here is not followed (nor counted as ours).
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        files.push(SnapshotFile {
            path: entry.path(),
            bytes: meta.len(),
            used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            temporary,
        });
    }
}

/// Deletes what [`to_delete`] picks under `root`; how many files went.
pub fn prune(root: &Path, ttl: Duration, max_total: u64) -> usize {
    let doomed = to_delete(list(root), SystemTime::now(), ttl, max_total);
    doomed
        .iter()
        .filter_map(|path| path.strip_prefix(root).ok())
        .filter(|relative| remove_beneath(root, relative).is_ok())
        .count()
}

/// Removes the file `relative` (a path under `root`) without following any link on the
/// way: each directory is opened `O_NOFOLLOW` relative to its parent's descriptor and the
/// file unlinked relative to its own. A session's directories belong to its uid at the
/// `uid` isolation level, so a cell may swap one for a link between the listing and the
/// removal; the removal then fails instead of deleting what the link points at.
fn remove_beneath(root: &Path, relative: &Path) -> std::io::Result<()> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Component;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let open = |parent: Option<&OwnedFd>, name: &std::ffi::OsStr| -> std::io::Result<OwnedFd> {
        let fd = openat(parent.map(AsRawFd::as_raw_fd), name, flags, Mode::empty())?;
        // SAFETY: `openat` returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            _ => return Err(std::io::ErrorKind::InvalidInput.into()),
        }
    }
    let Some((file, dirs)) = names.split_last() else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    let mut dir = open(None, root.as_os_str())?;
    for name in dirs {
        dir = open(Some(&dir), name)?;
    }
    nix::unistd::unlinkat(
        Some(dir.as_raw_fd()),
        *file,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn file(name: &str, bytes: u64, hours_old: u64, temporary: bool) -> SnapshotFile {
        SnapshotFile {
            path: name.into(),
            bytes,
            used: SystemTime::UNIX_EPOCH + HOUR * 1000 - HOUR * hours_old as u32,
            temporary,
        }
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + HOUR * 1000
    }

    #[test]
    fn snapshots_past_their_ttl_go_and_younger_ones_stay() {
        let files = vec![file("old", 1, 200, false), file("new", 1, 1, false)];
        assert_eq!(
            to_delete(files, now(), HOUR * 168, u64::MAX),
            [PathBuf::from("old")]
        );
    }

    #[test]
    fn over_the_total_the_oldest_go_first_until_the_rest_fit() {
        let files = vec![
            file("newest", 40, 1, false),
            file("oldest", 40, 3, false),
            file("middle", 40, 2, false),
        ];
        assert_eq!(
            to_delete(files, now(), HOUR * 168, 80),
            [PathBuf::from("oldest")]
        );
    }

    #[test]
    fn a_temporary_goes_only_once_stale_and_never_for_room() {
        let files = vec![file("writing", 500, 0, true), file("dead", 5, 2, true)];
        assert_eq!(
            to_delete(files, now(), HOUR * 168, 10),
            [PathBuf::from("dead")]
        );
    }

    #[test]
    fn the_listing_finds_latest_checkpoints_and_temporaries_and_skips_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lang = dir.path().join("s/py");
        std::fs::create_dir_all(lang.join("checkpoints")).expect("mkdir");
        std::fs::write(dir.path().join(".key"), b"k").expect("key");
        std::fs::write(lang.join("latest.snap"), b"1").expect("latest");
        std::fs::write(lang.join("checkpoints/a.snap"), b"12").expect("checkpoint");
        std::fs::write(lang.join(".snapshot-x.tmp"), b"123").expect("temp");
        std::fs::write(lang.join("notes.txt"), b"1234").expect("other");
        let mut sizes: Vec<u64> = list(dir.path()).iter().map(|f| f.bytes).collect();
        sizes.sort();
        assert_eq!(sizes, [1, 2, 3]);
        assert_eq!(prune(dir.path(), Duration::ZERO, u64::MAX), 2);
        assert!(dir.path().join(".key").exists());
    }

    #[test]
    fn a_directory_swapped_for_a_link_is_not_followed_by_the_removal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("snapshots");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(root.join("s")).expect("mkdir");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        std::fs::write(elsewhere.join("a.snap"), b"precious").expect("file");
        // `s/py` is a link to a directory outside the snapshot root.
        std::os::unix::fs::symlink(&elsewhere, root.join("s/py")).expect("symlink");
        let relative = Path::new("s/py/a.snap");
        assert!(remove_beneath(&root, relative).is_err());
        assert!(elsewhere.join("a.snap").exists(), "the link was followed");
        // A real directory's file goes; a link in the last place goes itself, not its target.
        std::fs::remove_file(root.join("s/py")).expect("unlink");
        std::fs::create_dir(root.join("s/py")).expect("mkdir");
        std::fs::write(root.join("s/py/b.snap"), b"1").expect("file");
        std::os::unix::fs::symlink(elsewhere.join("a.snap"), root.join("s/py/a.snap"))
            .expect("symlink");
        remove_beneath(&root, Path::new("s/py/b.snap")).expect("removed");
        remove_beneath(&root, relative).expect("the link itself removed");
        assert!(!root.join("s/py/b.snap").exists() && !root.join("s/py/a.snap").exists());
        assert!(elsewhere.join("a.snap").exists());
    }
}
