//! Reading a workspace by descriptors: every directory is opened relative to its parent
//! with `O_NOFOLLOW`, so a link (or a directory swapped for one while we walk) is recorded
//! as a link and never followed out of the root.

use super::blobs::Blobs;
use super::{display, Entry, Kind, Manifest, RelPath, Skipped, Stamp, TreeError, MAX_DEPTH};
use rustix::fs::{openat, readlinkat, statat, AtFlags, Dir, FileType, Mode, OFlags, Stat, CWD};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One entry as found on disk (a file's content not yet read).
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// What it is.
    pub kind: SeenKind,
    /// Its permission bits.
    pub mode: u32,
    /// Its identity, to compare with a manifest's.
    pub stamp: Stamp,
}

/// The kinds [`Seen`] keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeenKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A link, with its target text.
    Symlink(Vec<u8>),
}

/// A tree as found on disk.
pub type Found = BTreeMap<RelPath, Seen>;

/// What a recording wrote and read.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The tree.
    pub manifest: Manifest,
    /// Files left out, with why.
    pub skipped: Vec<Skipped>,
    /// Regular files in the tree, and their bytes.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files read and hashed (the rest matched the previous manifest).
    pub hashed_files: u64,
    /// Their bytes.
    pub hashed_bytes: u64,
    /// Blobs written (content no manifest had), and their bytes.
    pub new_blobs: u64,
    /// Their bytes.
    pub new_bytes: u64,
}

pub(super) fn io(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(rustix::io::Errno) -> TreeError {
    let path = path.into();
    move |errno| TreeError::Io {
        what,
        path,
        source: errno.into(),
    }
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

/// Opens the workspace's root (a directory, not a link to one).
pub fn open_root(path: &Path) -> Result<OwnedFd, TreeError> {
    openat(CWD, path, DIR_FLAGS, Mode::empty()).map_err(|errno| match errno {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            TreeError::NotADirectory(path.to_path_buf())
        }
        errno => io("open", path)(errno),
    })
}

/// The stamp of a `stat`.
pub fn stamp(stat: &Stat) -> Stamp {
    let nanos = |n: i64| u64::try_from(n).unwrap_or(0);
    Stamp {
        ino: stat.st_ino,
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mtime: (stat.st_mtime, nanos(stat.st_mtime_nsec as i64)),
        ctime: (stat.st_ctime, nanos(stat.st_ctime_nsec as i64)),
    }
}

/// Everything under `root`: directories, regular files and links; other kinds are
/// `skipped`.
pub fn scan(root: BorrowedFd<'_>) -> Result<(Found, Vec<Skipped>), TreeError> {
    let mut found = Found::new();
    let mut skipped = Vec::new();
    let dir = openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(io("open", "."))?;
    scan_dir(dir, &[], 0, &mut found, &mut skipped)?;
    Ok((found, skipped))
}

fn scan_dir(
    dir: OwnedFd,
    prefix: &[u8],
    depth: usize,
    found: &mut Found,
    skipped: &mut Vec<Skipped>,
) -> Result<(), TreeError> {
    if depth >= MAX_DEPTH {
        return Err(TreeError::TooDeep(display(prefix)));
    }
    let here = || PathBuf::from(OsStr::from_bytes(prefix));
    let handle = dir.try_clone().map_err(|e| TreeError::Io {
        what: "read",
        path: here(),
        source: e,
    })?;
    let entries = Dir::new(handle).map_err(io("read", here()))?;
    for entry in entries {
        let entry = entry.map_err(io("read", here()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let path = join(prefix, name);
        let stat = match statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Deleted while we read: it is not part of the tree.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(errno) => return Err(io("stat", display(&path))(errno)),
        };
        let mode = stat.st_mode & 0o7777;
        let seen = |kind| Seen {
            kind,
            mode,
            stamp: stamp(&stat),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                found.insert(path.clone(), seen(SeenKind::Dir));
                let child = match openat(&dir, entry.file_name(), DIR_FLAGS, Mode::empty()) {
                    Ok(child) => child,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(errno) => return Err(io("open", display(&path))(errno)),
                };
                scan_dir(child, &path, depth + 1, found, skipped)?;
            }
            FileType::RegularFile => {
                found.insert(path, seen(SeenKind::File));
            }
            FileType::Symlink => {
                let target = match readlinkat(&dir, entry.file_name(), Vec::new()) {
                    Ok(target) => target.into_bytes(),
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(errno) => return Err(io("read the link", display(&path))(errno)),
                };
                found.insert(path, seen(SeenKind::Symlink(target)));
            }
            other => skipped.push(Skipped {
                path: display(&path),
                why: format!(
                    "a {} is not kept in a snapshot (only files, directories and links)",
                    kind_name(other)
                ),
            }),
        }
    }
    Ok(())
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

/// `prefix/name`.
pub fn join(prefix: &[u8], name: &[u8]) -> RelPath {
    let mut path = Vec::with_capacity(prefix.len() + 1 + name.len());
    if !prefix.is_empty() {
        path.extend_from_slice(prefix);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// The directory holding `path` (opened component by component, no link followed) and the
/// last component's name.
pub fn open_parent<'p>(
    root: BorrowedFd<'_>,
    path: &'p [u8],
) -> Result<(OwnedFd, &'p [u8]), TreeError> {
    let (dirs, name) = match path.iter().rposition(|&b| b == b'/') {
        Some(at) => (&path[..at], &path[at + 1..]),
        None => (&path[..0], path),
    };
    let mut dir = openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(io("open", "."))?;
    for component in dirs.split(|&b| b == b'/') {
        if component.is_empty() {
            continue;
        }
        dir = openat(&dir, OsStr::from_bytes(component), DIR_FLAGS, Mode::empty())
            .map_err(io("open", display(dirs)))?;
    }
    Ok((dir, name))
}

/// Opens the regular file at `path` for reading, no link followed, and its stat.
pub fn open_file(root: BorrowedFd<'_>, path: &[u8]) -> Result<(OwnedFd, Stat), TreeError> {
    let (dir, name) = open_parent(root, path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = openat(&dir, OsStr::from_bytes(name), flags, Mode::empty())
        .map_err(io("open", display(path)))?;
    let stat = rustix::fs::fstat(&file).map_err(io("stat", display(path)))?;
    Ok((file, stat))
}

/// Records the tree under `root` into `blobs`: a file whose stamp matches `previous`'s
/// entry (and whose blob is still there) is not read again.
pub fn record(
    root: &Path,
    previous: Option<&Manifest>,
    blobs: &Blobs,
) -> Result<Recorded, TreeError> {
    let root_fd = open_root(root)?;
    let (found, skipped) = scan(root_fd.as_fd())?;
    let mut recorded = Recorded {
        skipped,
        ..Recorded::default()
    };
    for (path, seen) in found {
        let kind = match seen.kind {
            SeenKind::Dir => Kind::Dir,
            SeenKind::Symlink(target) => Kind::Symlink { target },
            SeenKind::File => {
                let reused = previous
                    .and_then(|m| m.entries.get(&path))
                    .and_then(|entry| match entry.kind {
                        Kind::File { hash, size } if entry.stamp == seen.stamp => {
                            Some((hash, size))
                        }
                        _ => None,
                    })
                    .filter(|(hash, _)| blobs.has(hash));
                let (hash, size, stamp) = match reused {
                    Some((hash, size)) => (hash, size, seen.stamp),
                    None => {
                        let (file, stat) = match open_file(root_fd.as_fd(), &path) {
                            Ok(opened) => opened,
                            // Gone (or turned into a link) since the scan: not in the tree.
                            Err(TreeError::Io { source, .. })
                                if matches!(
                                    source.raw_os_error(),
                                    Some(libc::ENOENT | libc::ELOOP)
                                ) =>
                            {
                                continue
                            }
                            Err(err) => return Err(err),
                        };
                        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                            continue;
                        }
                        let stored = blobs.put(&mut std::fs::File::from(file))?;
                        recorded.hashed_files += 1;
                        recorded.hashed_bytes += stored.size;
                        if stored.new {
                            recorded.new_blobs += 1;
                            recorded.new_bytes += stored.size;
                        }
                        (stored.hash, stored.size, stamp(&stat))
                    }
                };
                recorded.files += 1;
                recorded.bytes += size;
                recorded.manifest.entries.insert(
                    path,
                    Entry {
                        kind: Kind::File { hash, size },
                        mode: seen.mode,
                        stamp,
                    },
                );
                continue;
            }
        };
        recorded.manifest.entries.insert(
            path,
            Entry {
                kind,
                mode: seen.mode,
                stamp: seen.stamp,
            },
        );
    }
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn recorded(root: &Path, previous: Option<&Manifest>, blobs: &Blobs) -> Recorded {
        record(root, previous, blobs).expect("record")
    }

    #[test]
    fn a_tree_records_files_dirs_links_and_modes_and_skips_a_fifo() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(root.join("sub")).expect("mkdir");
        fs::write(root.join("sub/a.txt"), b"alpha").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", root.join("out")).expect("link");
        nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        fs::set_permissions(
            root.join("sub/a.txt"),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .expect("chmod");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let got = recorded(&root, None, &blobs);
        let kinds: Vec<(String, &Kind)> = got
            .manifest
            .entries
            .iter()
            .map(|(p, e)| (display(p), &e.kind))
            .collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        assert_eq!(
            got.manifest.entries[&b"out".to_vec()].kind,
            Kind::Symlink {
                target: b"/etc/passwd".to_vec()
            }
        );
        assert_eq!(got.manifest.entries[&b"sub".to_vec()].kind, Kind::Dir);
        let file = &got.manifest.entries[&b"sub/a.txt".to_vec()];
        assert_eq!(file.mode, 0o640);
        assert!(matches!(file.kind, Kind::File { size: 5, .. }));
        assert_eq!(got.skipped.len(), 1);
        assert_eq!(got.skipped[0].path, "pipe");
        assert!(got.skipped[0].why.contains("fifo"), "{:?}", got.skipped);
    }

    #[test]
    fn an_unchanged_file_is_not_read_again_and_a_changed_one_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(&root).expect("mkdir");
        for i in 0..10 {
            fs::write(root.join(format!("f{i}")), format!("content {i}")).expect("write");
        }
        let blobs = Blobs::new(dir.path().join("blobs"));
        let first = recorded(&root, None, &blobs);
        assert_eq!((first.hashed_files, first.new_blobs), (10, 10));
        fs::write(root.join("f3"), b"changed").expect("change");
        let second = recorded(&root, Some(&first.manifest), &blobs);
        assert_eq!(
            (second.files, second.hashed_files, second.new_blobs),
            (10, 1, 1)
        );
        assert_eq!(second.hashed_bytes, 7);
        // Without a previous manifest everything is read, and nothing new is stored.
        let third = recorded(&root, None, &blobs);
        assert_eq!((third.hashed_files, third.new_blobs), (10, 0));
        assert_eq!(third.manifest.entries.len(), 10);
    }

    #[test]
    fn a_linked_root_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("real")).expect("mkdir");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("ws")).expect("link");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let err = record(&dir.path().join("ws"), None, &blobs).expect_err("refused");
        assert!(matches!(err, TreeError::NotADirectory(_)), "{err}");
    }
}
