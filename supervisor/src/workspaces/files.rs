//! A workspace's files as the daemon reaches them for a host (list, read, write, delete),
//! checked the way the sandbox checks a cell's paths: relative to the workspace, no `..`, no
//! absolute path, no link followed out of it, and only regular files and directories.
//!
//! Every path is resolved by the kernel relative to the workspace's open descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: a link a cell planted (even one swapped
//! in while the daemon works, at the uid level where the cell is another user) can never take
//! the daemon outside the workspace. Every call here blocks: hosts run them off the actors'
//! threads (`spawn_blocking`, or tokio's file I/O on a [`std::fs::File`] opened here).

use super::usage::Usage;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// The longest path a host may name in a workspace, in bytes.
pub const MAX_PATH: usize = 4096;

/// How deep a recursive listing or removal goes.
const MAX_DEPTH: usize = 64;

/// What a request for a workspace's file did wrong, or what stopped it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path breaks the rules of a workspace path.
    #[error(
        "invalid workspace path {path:?}: {why}; a path is relative to the session's \
         workspace (like \"data/in.csv\"), at most {MAX_PATH} bytes, without `..`, `.` or empty \
         components"
    )]
    Path {
        /// The path given.
        path: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// Nothing there.
    #[error("{0:?} does not exist in the session's workspace")]
    NotFound(String),
    /// Resolving the path left the workspace (through a link, or an absolute link).
    #[error(
        "{0:?} leads out of the session's workspace through a link; links are followed only \
         within the workspace"
    )]
    Escapes(String),
    /// A device, socket or fifo (or a directory where a file was meant, or the reverse).
    #[error("{path:?} is a {kind}; {allowed}")]
    Kind {
        /// The path given.
        path: String,
        /// What it is.
        kind: &'static str,
        /// What is allowed here.
        allowed: &'static str,
    },
    /// A directory that is not empty, removed without `recursive`.
    #[error(
        "{0:?} is a directory that is not empty; pass recursive to remove it and everything in it"
    )]
    NotEmpty(String),
    /// The write would take the workspace (or its tenant) past a quota.
    #[error("{0}")]
    Quota(#[from] super::usage::Exceeded),
    /// The file system refused.
    #[error("{path:?}: {source}")]
    Io {
        /// The path given.
        path: String,
        /// What the file system said.
        source: std::io::Error,
    },
}

/// Checks `path` by the workspace rules; `""` (or `"."`) names the workspace itself where
/// `root_ok`.
pub fn check_path(path: &str, root_ok: bool) -> Result<&str, FileError> {
    let bad = |why| {
        Err(FileError::Path {
            path: path.to_string(),
            why,
        })
    };
    if path.len() > MAX_PATH {
        return bad("too long");
    }
    if path.contains('\0') {
        return bad("it holds a NUL byte");
    }
    if path.starts_with('/') {
        return bad("it is absolute");
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return if root_ok {
            Ok(".")
        } else {
            bad("it names the workspace itself, not a file in it")
        };
    }
    for part in trimmed.split('/') {
        match part {
            ".." => return bad("it holds `..`"),
            "." => return bad("it holds a `.` component"),
            "" => return bad("it holds an empty component (`//`)"),
            _ => {}
        }
    }
    Ok(trimmed)
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// The path relative to the workspace.
    pub path: String,
    /// `file`, `dir`, `link` or `other` (a device, socket or fifo a cell made).
    pub kind: String,
    /// The size in bytes (of a file; 0 otherwise).
    pub size: u64,
    /// Last modification, in seconds since the epoch.
    pub modified: i64,
}

/// A workspace opened for a host's file operations: every path below resolves beneath it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// Who owns the workspace (the session's uid at the uid level): new files and
    /// directories are given to it, so the session's cells may change what a host put in.
    owner: (u32, u32),
}

fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

fn kind_of(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "link",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice | FileType::BlockDevice => "device",
        FileType::Unknown => "file of unknown type",
    }
}

impl Root {
    /// Opens the workspace `dir` (which must be a real directory, not a link).
    pub fn open(dir: &Path) -> Result<Root, FileError> {
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::NOENT => FileError::NotFound(".".into()),
            other => FileError::Io {
                path: ".".into(),
                source: other.into(),
            },
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(".", e))?;
        Ok(Root {
            fd,
            owner: (stat.st_uid, stat.st_gid),
        })
    }

    /// The workspace's descriptor.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn open_beneath(&self, path: &str, flags: OFlags, mode: Mode) -> Result<OwnedFd, FileError> {
        rustix::fs::openat2(&self.fd, path, flags | OFlags::CLOEXEC, mode, resolve())
            .map_err(|errno| errno_error(path, errno))
    }

    /// The size of the regular file `path`, `None` when nothing is there (a link or
    /// anything else there is refused as [`Root::open_write`] would refuse it).
    pub fn existing_size(&self, path: &str) -> Result<Option<u64>, FileError> {
        let path = check_path(path, false)?;
        let fd = match self.open_beneath(path, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => fd,
            Err(FileError::NotFound(_)) => return Ok(None),
            Err(err) => return Err(err),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(FileError::Kind {
                path: path.to_string(),
                kind: kind_of(stat.st_mode),
                allowed: "only regular files are written",
            });
        }
        Ok(Some(u64::try_from(stat.st_size).unwrap_or(0)))
    }

    /// The directory `path` (`""` for the workspace itself), checked to lie beneath the
    /// workspace and to be a directory: a network client's `cwd`.
    pub fn directory(&self, path: &str) -> Result<(), FileError> {
        let path = check_path(path, true)?;
        self.open_beneath(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map(drop)
    }

    /// The regular file `path`, open for reading (a fifo is never waited on: it is opened
    /// without blocking, then refused).
    pub fn open_read(&self, path: &str) -> Result<(File, u64), FileError> {
        let path = check_path(path, false)?;
        let fd = self.open_beneath(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(FileError::Kind {
                path: path.to_string(),
                kind: kind_of(stat.st_mode),
                allowed: "only regular files are read",
            });
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        Ok((File::from(fd), size))
    }

    /// The regular file `path`, open for writing (made, with its missing directories, if it
    /// is not there; truncated when `truncate`). Answers the file and the size it had.
    pub fn open_write(&self, path: &str, truncate: bool) -> Result<(File, u64), FileError> {
        let path = check_path(path, false)?;
        let (parent, name) = match path.rsplit_once('/') {
            Some((parent, name)) => (Some(parent), name),
            None => (None, path),
        };
        let dir = match parent {
            Some(parent) => self.make_dirs(parent)?,
            None => rustix::io::dup(&self.fd).map_err(|e| io_error(path, e))?,
        };
        // The last component is never a link: a link there is refused, not written through.
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| errno_error(path, errno))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(FileError::Kind {
                path: path.to_string(),
                kind: kind_of(stat.st_mode),
                allowed: "only regular files are written",
            });
        }
        self.give(&fd, stat.st_uid, path)?;
        let had = u64::try_from(stat.st_size).unwrap_or(0);
        if truncate && had > 0 {
            rustix::fs::ftruncate(&fd, 0).map_err(|e| io_error(path, e))?;
        }
        Ok((File::from(fd), had))
    }

    /// Puts the file `from` in the place of `to`, in the same directory, at once (a link or
    /// file at `to` is replaced, never followed): an upload written aside and then moved,
    /// so a broken one leaves the old file as it was.
    pub fn replace(&self, from: &str, to: &str) -> Result<(), FileError> {
        let (from, to) = (check_path(from, false)?, check_path(to, false)?);
        let (from_parent, from_name) = from.rsplit_once('/').unwrap_or(("", from));
        let (to_parent, to_name) = to.rsplit_once('/').unwrap_or(("", to));
        if from_parent != to_parent {
            return Err(FileError::Kind {
                path: to.to_string(),
                kind: "another directory",
                allowed: "a file is replaced from its own directory",
            });
        }
        let dir = if to_parent.is_empty() {
            rustix::io::dup(&self.fd).map_err(|e| io_error(to, e))?
        } else {
            self.make_dirs(to_parent)?
        };
        rustix::fs::renameat(&dir, from_name, &dir, to_name).map_err(|errno| errno_error(to, errno))
    }

    /// Gives a new entry to the workspace's owner (at the uid level, the session's uid).
    fn give(&self, fd: &OwnedFd, uid: u32, path: &str) -> Result<(), FileError> {
        if uid == self.owner.0 {
            return Ok(());
        }
        rustix::fs::fchown(
            fd,
            Some(rustix::fs::Uid::from_raw(self.owner.0)),
            Some(rustix::fs::Gid::from_raw(self.owner.1)),
        )
        .map_err(|e| io_error(path, e))
    }

    /// Opens the directory `path`, making it and its missing parents, one component at a
    /// time, each beneath the one before.
    fn make_dirs(&self, path: &str) -> Result<OwnedFd, FileError> {
        let mut dir = rustix::io::dup(&self.fd).map_err(|e| io_error(path, e))?;
        for part in path.split('/') {
            match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(errno_error(path, errno)),
            }
            let next = rustix::fs::openat2(
                &dir,
                part,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                resolve(),
            )
            .map_err(|errno| match errno {
                Errno::NOTDIR | Errno::LOOP => FileError::Kind {
                    path: path.to_string(),
                    kind: "file or link",
                    allowed: "a file's directories must be directories",
                },
                other => errno_error(path, other),
            })?;
            let stat = rustix::fs::fstat(&next).map_err(|e| io_error(path, e))?;
            self.give(&next, stat.st_uid, path)?;
            dir = next;
        }
        Ok(dir)
    }

    /// The entries of the directory `path` (`""` for the workspace), with those of its
    /// subdirectories when `recursive`, at most `limit` of them, sorted by path; `true`
    /// when the limit cut the listing short. A file path lists that file.
    pub fn list(
        &self,
        path: &str,
        recursive: bool,
        limit: usize,
    ) -> Result<(Vec<Entry>, bool), FileError> {
        let path = check_path(path, true)?;
        let fd = self.open_beneath(path, OFlags::RDONLY | OFlags::NOFOLLOW, Mode::empty())?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            let entry = entry(path, &stat);
            return Ok((vec![entry], false));
        }
        let prefix = if path == "." { "" } else { path };
        let mut out = Vec::new();
        let cut = list_dir(&fd, prefix, recursive, limit, 0, &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((out, cut))
    }

    /// Removes the file (or link, or with `recursive` the directory and everything in it)
    /// `path`, never following a link. Answers what was removed.
    pub fn delete(&self, path: &str, recursive: bool) -> Result<Usage, FileError> {
        let path = check_path(path, false)?;
        let (parent, name) = match path.rsplit_once('/') {
            Some((parent, name)) => (parent, name),
            None => (".", path),
        };
        let dir = self.open_beneath(parent, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
        let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|errno| errno_error(path, errno))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            rustix::fs::unlinkat(&dir, name, AtFlags::empty())
                .map_err(|errno| errno_error(path, errno))?;
            return Ok(Usage {
                bytes: u64::try_from(stat.st_size).unwrap_or(0),
                files: 1,
            });
        }
        let sub = rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| errno_error(path, errno))?;
        let inside = super::usage::measure(&sub).map_err(|e| FileError::Io {
            path: path.to_string(),
            source: e,
        })?;
        if inside.files > 0 && !recursive {
            return Err(FileError::NotEmpty(path.to_string()));
        }
        remove_children(&sub, 0).map_err(|errno| errno_error(path, errno))?;
        rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)
            .map_err(|errno| errno_error(path, errno))?;
        Ok(Usage {
            bytes: inside.bytes,
            files: inside.files + 1,
        })
    }

    /// What the workspace holds now.
    pub fn usage(&self) -> std::io::Result<Usage> {
        super::usage::measure(&self.fd)
    }
}

fn entry(path: &str, stat: &rustix::fs::Stat) -> Entry {
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "link",
        _ => "other",
    };
    Entry {
        path: path.to_string(),
        kind: kind.to_string(),
        size: if kind == "file" {
            u64::try_from(stat.st_size).unwrap_or(0)
        } else {
            0
        },
        modified: stat.st_mtime,
    }
}

/// Lists `dir` into `out`; `true` when `limit` was reached.
fn list_dir(
    dir: &OwnedFd,
    prefix: &str,
    recursive: bool,
    limit: usize,
    depth: usize,
    out: &mut Vec<Entry>,
) -> Result<bool, FileError> {
    let reading = rustix::fs::Dir::read_from(dir).map_err(|e| io_error(prefix, e))?;
    for item in reading {
        let item = item.map_err(|e| io_error(prefix, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if out.len() >= limit {
            return Ok(true);
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let Ok(stat) = rustix::fs::statat(dir, item.file_name(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        out.push(entry(&path, &stat));
        let is_dir = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
        if recursive && is_dir && depth < MAX_DEPTH {
            let Ok(sub) = rustix::fs::openat(
                dir,
                item.file_name(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            if list_dir(&sub, &path, recursive, limit, depth + 1, out)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Removes everything in `dir`, by descriptors, never following a link.
fn remove_children(dir: &OwnedFd, depth: usize) -> Result<(), Errno> {
    if depth > MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    let names: Vec<std::ffi::CString> = rustix::fs::Dir::read_from(dir)?
        .filter_map(Result::ok)
        .map(|item| item.file_name().to_owned())
        .filter(|name| name.as_bytes() != b"." && name.as_bytes() != b"..")
        .collect();
    for name in names {
        match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => continue,
            Err(Errno::ISDIR) => {}
            Err(other) => return Err(other),
        }
        let sub = rustix::fs::openat(
            dir,
            name.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        remove_children(&sub, depth + 1)?;
        rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR)?;
    }
    Ok(())
}

fn io_error(path: &str, errno: Errno) -> FileError {
    FileError::Io {
        path: path.to_string(),
        source: errno.into(),
    }
}

/// The error of an `openat2` (or `*at`) beneath the workspace.
fn errno_error(path: &str, errno: Errno) -> FileError {
    match errno {
        Errno::NOENT => FileError::NotFound(path.to_string()),
        // RESOLVE_BENEATH: the path (or a link on it) would leave the workspace.
        Errno::XDEV => FileError::Escapes(path.to_string()),
        Errno::LOOP => FileError::Kind {
            path: path.to_string(),
            kind: "link",
            allowed: "a link is not written through or opened as a file here",
        },
        Errno::NOTDIR => FileError::Kind {
            path: path.to_string(),
            kind: "file where a directory was expected",
            allowed: "the directories of a path must be directories",
        },
        Errno::ISDIR => FileError::Kind {
            path: path.to_string(),
            kind: "directory",
            allowed: "list it, or name a file in it",
        },
        Errno::NOTEMPTY => FileError::NotEmpty(path.to_string()),
        other => io_error(path, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn root() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn paths_are_checked_by_the_sandbox_rules() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/./b",
            "",
            "a\0b",
        ] {
            let err = check_path(bad, false).unwrap_err();
            assert!(err.to_string().contains("invalid workspace path"), "{bad}");
        }
        assert_eq!(check_path("a/b/", false).unwrap(), "a/b");
        assert_eq!(check_path("", true).unwrap(), ".");
        assert_eq!(check_path("..data", false).unwrap(), "..data");
    }

    #[test]
    fn write_read_list_delete() {
        let (_dir, root) = root();
        let (mut file, had) = root.open_write("d/e/f.txt", true).unwrap();
        assert_eq!(had, 0);
        file.write_all(b"hello").unwrap();
        drop(file);
        let (mut file, size) = root.open_read("d/e/f.txt").unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        assert_eq!((text.as_str(), size), ("hello", 5));
        let (entries, cut) = root.list("", true, 100).unwrap();
        let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["d", "d/e", "d/e/f.txt"]);
        assert!(!cut);
        assert!(root.list("", true, 2).unwrap().1, "cut short");
        assert!(matches!(
            root.delete("d", false),
            Err(FileError::NotEmpty(_))
        ));
        let removed = root.delete("d", true).unwrap();
        assert_eq!(removed, Usage { bytes: 5, files: 3 });
        assert!(matches!(
            root.open_read("d/e/f.txt"),
            Err(FileError::NotFound(_))
        ));
    }

    #[test]
    fn links_out_and_special_files_are_refused() {
        let (dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../", dir.path().join("up")).unwrap();
        for path in ["out/secret", "abs", "up/x"] {
            let err = root.open_read(path).unwrap_err();
            assert!(matches!(err, FileError::Escapes(_)), "{path}: {err}");
        }
        assert!(matches!(
            root.open_write("out/new", true),
            Err(FileError::Escapes(_)) | Err(FileError::Kind { .. })
        ));
        assert!(!outside.path().join("new").exists());
        // A link inside the workspace to a file inside it is read through.
        std::fs::write(dir.path().join("real"), "r").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("alias")).unwrap();
        assert_eq!(root.open_read("alias").unwrap().1, 1);
        // ...but never written through.
        assert!(root.open_write("alias", true).is_err());
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = root.open_read("fifo").unwrap_err();
        assert!(err.to_string().contains("is a fifo"), "{err}");
        assert!(root.open_write("fifo", true).is_err());
        // Removing a link removes the link, not what it points at.
        root.delete("out", false).unwrap();
        assert!(outside.path().join("secret").exists());
    }
}
