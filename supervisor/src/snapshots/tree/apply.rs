//! Restoring a manifest into a workspace, by descriptors: each step opens its parent
//! directory component by component with `O_NOFOLLOW`, so no link (planted by a cell, or
//! swapped in meanwhile) takes a write out of the root. Every blob the restore needs is
//! checked against its hash before the workspace is touched.

use super::blobs::Blobs;
use super::diff::{plan, FileChanges, Step};
use super::walk::{io, open_file, open_parent, open_root, scan};
use super::{display, Entry, Hash, Kind, Manifest, TreeError};
use rustix::fs::Timespec;
use rustix::fs::{
    fchmod, futimens, mkdirat, openat, renameat, statat, symlinkat, unlinkat, AtFlags, Dir,
    FileType, Mode, OFlags, Timestamps,
};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const TEMP_PREFIX: &str = ".cellvisor-restore-";

/// Turns the workspace at `root` into `target`, and says what changed.
pub fn restore(root: &Path, target: &Manifest, blobs: &Blobs) -> Result<FileChanges, TreeError> {
    let root_fd = open_root(root)?;
    let (found, _skipped) = scan(root_fd.as_fd())?;
    let plan = plan(target, &found, |path, _, hash| {
        content_hash(root_fd.as_fd(), path).is_some_and(|got| &got == hash)
    });
    let mut checked = HashSet::new();
    for (hash, path) in plan.blobs() {
        if checked.insert(*hash) {
            blobs.verify(hash, &display(path))?;
        }
    }
    let owner = owner_of(root_fd.as_fd());
    for step in &plan.steps {
        match step {
            Step::Remove(path) => remove(root_fd.as_fd(), path)?,
            Step::Write(path, entry) => write(root_fd.as_fd(), path, entry, blobs, owner)?,
        }
    }
    Ok(plan.changes)
}

/// The SHA-256 of the file at `path`, if it can be read.
fn content_hash(root: BorrowedFd<'_>, path: &[u8]) -> Option<Hash> {
    let (file, _) = open_file(root, path).ok()?;
    let mut file = std::fs::File::from(file);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    Some(hasher.finalize().into())
}

/// Whom restored entries belong to: the workspace's owner when it is not this process's
/// user (a session's own uid, given its workspace by a daemon running as root).
fn owner_of(root: BorrowedFd<'_>) -> Option<(u32, u32)> {
    let stat = rustix::fs::fstat(root).ok()?;
    let me = nix::unistd::geteuid().as_raw();
    (me == 0 && stat.st_uid != me).then_some((stat.st_uid, stat.st_gid))
}

fn chown(fd: BorrowedFd<'_>, owner: Option<(u32, u32)>, path: &[u8]) -> Result<(), TreeError> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    nix::unistd::fchown(
        fd.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(|errno| TreeError::Io {
        what: "chown",
        path: display(path).into(),
        source: errno.into(),
    })
}

/// Deletes what is at `path`, whatever it is, following no link.
fn remove(root: BorrowedFd<'_>, path: &[u8]) -> Result<(), TreeError> {
    let (parent, name) = match open_parent(root, path) {
        Ok(found) => found,
        // Its directory is gone already.
        Err(TreeError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
            return Ok(())
        }
        Err(err) => return Err(err),
    };
    remove_at(&parent, OsStr::from_bytes(name), 0).map_err(io("remove", display(path)))
}

fn remove_at(parent: &OwnedFd, name: &OsStr, depth: usize) -> Result<(), Errno> {
    let stat = match statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(()),
        Err(errno) => return Err(errno),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return match unlinkat(parent, name, AtFlags::empty()) {
            Err(Errno::NOENT) => Ok(()),
            other => other,
        };
    }
    match unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::NOTEMPTY | Errno::EXIST) if depth < super::MAX_DEPTH => {}
        Err(errno) => return Err(errno),
    }
    // What the scan left out (a fifo, a socket) keeps the directory full: empty it here.
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let dir = openat(parent, name, flags, Mode::empty())?;
    let names: Vec<Vec<u8>> = Dir::new(dir.try_clone().map_err(|_| Errno::MFILE)?)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect();
    for child in names {
        remove_at(&dir, OsStr::from_bytes(&child), depth + 1)?;
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR)
}

fn write(
    root: BorrowedFd<'_>,
    path: &[u8],
    entry: &Entry,
    blobs: &Blobs,
    owner: Option<(u32, u32)>,
) -> Result<(), TreeError> {
    let (parent, name) = open_parent(root, path)?;
    let name = OsStr::from_bytes(name);
    let mode = Mode::from_raw_mode(entry.mode & 0o7777);
    let err = |what| io(what, display(path));
    match &entry.kind {
        Kind::Dir => {
            match mkdirat(&parent, name, mode) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(err("create")(errno)),
            }
            let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
            let dir = openat(&parent, name, flags, Mode::empty()).map_err(err("open"))?;
            fchmod(&dir, mode).map_err(err("chmod"))?;
            chown(dir.as_fd(), owner, path)
        }
        Kind::Symlink { target } => {
            symlinkat(OsStr::from_bytes(target), &parent, name).map_err(err("link"))?;
            let Some((uid, gid)) = owner else {
                return Ok(());
            };
            nix::unistd::fchownat(
                Some(parent.as_raw_fd()),
                name,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|errno| TreeError::Io {
                what: "chown",
                path: display(path).into(),
                source: errno.into(),
            })
        }
        Kind::File { hash, .. } => {
            let temp = temp_name();
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = openat(
                &parent,
                OsStr::new(&temp),
                flags,
                Mode::from_raw_mode(0o600),
            )
            .map_err(err("create"))?;
            let written = (|| {
                let mut file = std::fs::File::from(fd.try_clone().map_err(|e| TreeError::Io {
                    what: "write",
                    path: display(path).into(),
                    source: e,
                })?);
                blobs.copy_to(hash, &display(path), &mut file)?;
                fchmod(&fd, mode).map_err(err("chmod"))?;
                let when = Timespec {
                    tv_sec: entry.stamp.mtime.0,
                    tv_nsec: entry.stamp.mtime.1.try_into().unwrap_or(0),
                };
                futimens(
                    &fd,
                    &Timestamps {
                        last_access: when,
                        last_modification: when,
                    },
                )
                .map_err(err("set the time of"))?;
                chown(fd.as_fd(), owner, path)?;
                renameat(&parent, OsStr::new(&temp), &parent, name).map_err(err("rename"))
            })();
            if written.is_err() {
                let _ = unlinkat(&parent, OsStr::new(&temp), AtFlags::empty());
            }
            written
        }
    }
}

fn temp_name() -> String {
    let mut bytes = [0u8; 8];
    // A name that collides fails O_EXCL and the restore says so; it is never overwritten.
    let _ = getrandom::fill(&mut bytes);
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{TEMP_PREFIX}{suffix}.tmp")
}

#[cfg(test)]
mod tests {
    use super::super::walk::record;
    use super::*;
    use std::fs;

    struct Setup {
        _dir: tempfile::TempDir,
        root: std::path::PathBuf,
        outside: std::path::PathBuf,
        blobs: Blobs,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("data")).expect("mkdir");
        fs::create_dir_all(&outside).expect("mkdir");
        let blobs = Blobs::new(dir.path().join("blobs"));
        Setup {
            root,
            outside,
            blobs,
            _dir: dir,
        }
    }

    #[test]
    fn a_restore_brings_back_changed_and_deleted_files_and_removes_new_ones() {
        let s = setup();
        fs::write(s.root.join("data/a.csv"), b"x,y\n1,2\n").expect("write");
        fs::write(s.root.join("data/b.csv"), b"b").expect("write");
        fs::write(s.root.join("same.txt"), b"same").expect("write");
        let taken = record(&s.root, None, &s.blobs).expect("record");
        fs::write(s.root.join("data/a.csv"), b"x,y\n9,9\n").expect("change");
        fs::remove_file(s.root.join("data/b.csv")).expect("delete");
        fs::create_dir_all(s.root.join("new/deep")).expect("mkdir");
        fs::write(s.root.join("new/deep/out.bin"), b"out").expect("new");
        let changes = restore(&s.root, &taken.manifest, &s.blobs).expect("restore");
        assert_eq!(changes.restored, ["data/a.csv"]);
        assert_eq!(changes.added, ["data/b.csv"]);
        assert_eq!(changes.removed, ["new/deep/out.bin"]);
        assert_eq!(
            fs::read(s.root.join("data/a.csv")).expect("a"),
            b"x,y\n1,2\n"
        );
        assert_eq!(fs::read(s.root.join("data/b.csv")).expect("b"), b"b");
        assert!(!s.root.join("new").exists());
        let again = restore(&s.root, &taken.manifest, &s.blobs).expect("again");
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn a_planted_link_is_replaced_and_never_written_through() {
        let s = setup();
        fs::write(s.root.join("data/a.csv"), b"mine").expect("write");
        let taken = record(&s.root, None, &s.blobs).expect("record");
        // A cell swaps the directory for a link out of the workspace.
        fs::remove_dir_all(s.root.join("data")).expect("rm");
        std::os::unix::fs::symlink(&s.outside, s.root.join("data")).expect("link");
        let changes = restore(&s.root, &taken.manifest, &s.blobs).expect("restore");
        assert_eq!(changes.restored, ["data"]);
        assert_eq!(changes.added, ["data/a.csv"]);
        assert!(fs::symlink_metadata(s.root.join("data"))
            .expect("data")
            .is_dir());
        assert_eq!(
            fs::read_dir(&s.outside).expect("outside").count(),
            0,
            "nothing written outside"
        );
        // A recorded link comes back as a link and is not followed either.
        std::os::unix::fs::symlink(&s.outside, s.root.join("out")).expect("link");
        let with_link = record(&s.root, None, &s.blobs).expect("record");
        fs::remove_file(s.root.join("out")).expect("rm");
        restore(&s.root, &with_link.manifest, &s.blobs).expect("restore");
        assert_eq!(fs::read_link(s.root.join("out")).expect("link"), s.outside);
    }

    #[test]
    fn a_tampered_blob_is_refused_before_anything_changes() {
        let s = setup();
        fs::write(s.root.join("data/a.csv"), b"original").expect("write");
        let taken = record(&s.root, None, &s.blobs).expect("record");
        let Kind::File { hash, .. } = taken.manifest.entries[&b"data/a.csv".to_vec()].kind else {
            panic!("a file");
        };
        fs::write(s.blobs.path(&hash), b"forged!!").expect("tamper");
        fs::write(s.root.join("data/a.csv"), b"now").expect("change");
        fs::write(s.root.join("extra"), b"x").expect("extra");
        let err = restore(&s.root, &taken.manifest, &s.blobs).expect_err("refused");
        assert!(matches!(err, TreeError::Tampered { .. }), "{err}");
        assert_eq!(fs::read(s.root.join("data/a.csv")).expect("a"), b"now");
        assert!(s.root.join("extra").exists(), "nothing was removed");
    }
}
