//! A session's directories under the uid level: its own (owner the session's uid, 0700),
//! reached through the daemon's directories, which are opened to traversal only (0711:
//! nothing in them can be listed, and each entry keeps its own mode).

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, Mode};
use nix::unistd::{fchown, fchownat, Gid, Uid};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Makes `dir` (and any missing parent) the session's: created if missing, owned by
/// `uid:uid`, mode 0700, with everything already in it (a store or snapshot of an earlier
/// lease of the session) given to it too. A link is never followed.
pub fn own(dir: &Path, uid: u32) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => return Err(err),
        _ => {}
    }
    give_tree(dir, uid, Some(Mode::from_bits_truncate(0o700)))
}

/// Gives `dir` and everything under it back to the daemon's own user (a released uid's
/// directories, before the uid is leased to another session).
pub fn reclaim(dir: &Path) -> io::Result<()> {
    match give_tree(dir, nix::unistd::geteuid().as_raw(), None) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives the directory `dir` and everything under it to `uid` (and sets `dir`'s `mode`).
/// The walk goes by descriptors, each directory opened with `O_NOFOLLOW` relative to its
/// parent's descriptor and each entry changed with `AT_SYMLINK_NOFOLLOW`, so a process of the
/// uid that swaps an entry for a link while the walk runs gets the link changed, never what
/// it points at.
fn give_tree(dir: &Path, uid: u32, mode: Option<Mode>) -> io::Result<()> {
    let fd = openat(None, dir, dir_flags(), Mode::empty()).map_err(refused_link(dir))?;
    // SAFETY: `openat` returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    fchown(
        fd.as_raw_fd(),
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(uid)),
    )?;
    if let Some(mode) = mode {
        fchmod(fd.as_raw_fd(), mode)?;
    }
    give_children(&fd, uid, 0)
}

/// How deep [`give_tree`] goes: a session's directories are shallow; a deeper tree is a
/// cell's doing, and its depth must not exhaust the daemon's stack or descriptors.
const MAX_DEPTH: usize = 64;

fn give_children(dir: &OwnedFd, uid: u32, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "a session's directory is deeper than {MAX_DEPTH} levels"
        )));
    }
    let (owner, group) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid)));
    // The entries of exactly the directory `dir` is open on (its descriptor's link in /proc
    // names that directory, whatever happened to its path since).
    for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let name = entry?.file_name();
        let raw = dir.as_raw_fd();
        match openat(Some(raw), name.as_os_str(), dir_flags(), Mode::empty()) {
            Ok(child) => {
                // SAFETY: `openat` returned a new descriptor that nothing else owns.
                let child = unsafe { OwnedFd::from_raw_fd(child) };
                fchown(child.as_raw_fd(), owner, group)?;
                give_children(&child, uid, depth + 1)?;
            }
            // Not a directory, or a link: the entry itself changes hands.
            Err(Errno::ENOTDIR | Errno::ELOOP) => {
                match fchownat(
                    Some(raw),
                    name.as_os_str(),
                    owner,
                    group,
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                ) {
                    Err(Errno::ENOENT) => {}
                    other => other?,
                }
            }
            Err(Errno::ENOENT) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// The error of a session directory that is a link (or not a directory).
fn refused_link(dir: &Path) -> impl FnOnce(Errno) -> io::Error + '_ {
    move |errno| match errno {
        Errno::ELOOP | Errno::ENOTDIR => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a link or not a directory; a session's directory must be a directory",
                dir.display()
            ),
        ),
        other => other.into(),
    }
}

/// Opens the daemon's own directory `dir` to traversal (0711) so a session's uid reaches its
/// directory inside by name; nothing in it can be listed, and every other entry keeps its
/// own mode (files 0600, other sessions' directories 0700).
pub fn traversable(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", dir.display()),
        ));
    }
    if meta.mode() & 0o111 != 0o111 || meta.mode() & 0o066 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(())
}

/// Takes every permission of group and others from the regular files directly in `dir`.
pub fn private_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_file() && meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(
                entry.path(),
                std::fs::Permissions::from_mode(meta.mode() & 0o700),
            )?;
        }
    }
    Ok(())
}

/// The owner of `dir` when it is a real directory (not a link) owned by another uid than
/// this process's: a session directory made for a leased uid.
pub fn foreign_owner(dir: &Path) -> Option<(u32, u32)> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let me = nix::unistd::geteuid().as_raw();
    (meta.is_dir() && meta.uid() != me).then(|| (meta.uid(), meta.gid()))
}

/// Whether uid `uid` may enter every directory on the way to `dir` (the execute bit for
/// others, or for the owner when it owns it): said at start-up when a directory would
/// stop sessions from reaching their own.
pub fn reachable_by_others(dir: &Path) -> Result<(), String> {
    for ancestor in dir.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        if meta.mode() & 0o001 == 0 {
            return Err(format!(
                "{} (mode {:o}) cannot be entered by other users, so sessions' uids cannot \
                 reach {}: let others enter it (chmod o+x) or move the directory",
                ancestor.display(),
                meta.mode() & 0o7777,
                dir.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_never_given_away() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let err = own(&link, me).unwrap_err();
        assert!(err.to_string().contains("is a link"), "{err}");
    }

    #[test]
    fn an_owned_directory_is_private_and_a_traversable_one_lists_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let session = dir.path().join("a/b");
        own(&session, me).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&session), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o711);
        let log = dir.path().join("daemon.log");
        std::fs::write(&log, "x").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
        traversable(dir.path()).unwrap();
        private_files(dir.path()).unwrap();
        assert_eq!(mode(dir.path()), 0o711);
        assert_eq!(
            mode(&log),
            0o600,
            "a file in a traversable directory is private"
        );
        assert_eq!(foreign_owner(&session), None, "our own directory");
    }
}
