//! Unix sockets on file paths inside a private (0700) runtime directory.
//!
//! Sockets live on the file system, never in the abstract namespace, so that directory
//! permissions decide who may connect.

use interprocess::local_socket::{traits::Stream as _, GenericFilePath, ListenerOptions, ToFsName};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use interprocess::local_socket::tokio::{Listener as AsyncListener, Stream as AsyncStream};
pub use interprocess::local_socket::Stream;

/// The per-user runtime directory: `$XDG_RUNTIME_DIR/cellvisor`, else `<tmp>/cellvisor-<uid>`.
pub fn default_runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("cellvisor"),
        _ => std::env::temp_dir().join(format!("cellvisor-{}", current_uid())),
    }
}

fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Creates `dir` (and parents) if needed, with mode 0700, and makes sure nobody else can put
/// things in it: it must belong to the current user. An existing directory others may write
/// to is tightened to 0700, unless it is a shared one with the sticky bit (`/tmp`, where
/// nobody can replace what we create); an existing directory others can only read (a home
/// directory a socket was put in) is left as it is: the files we create in it are private.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", dir.display()),
        ));
    }
    if meta.uid() != current_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to us (uid {}); refusing to use it",
                dir.display(),
                meta.uid(),
                current_uid()
            ),
        ));
    }
    let others_write = meta.mode() & 0o022 != 0;
    let sticky = meta.mode() & 0o1000 != 0;
    if others_write && !sticky {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// [`ensure_private_dir`] for a directory of one session (its temp, artifact, store or
/// snapshot directory): the directory itself must not be a symbolic link, so a link planted
/// where a session's directory goes never sends its files elsewhere.
pub fn ensure_private_dir_nofollow(dir: &Path) -> io::Result<()> {
    ensure_private_dir(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symbolic link, not a session directory; refusing to use it",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Listens on `path` (which must not exist yet), for the supervisor side.
pub fn bind_async(path: &Path) -> io::Result<AsyncListener> {
    let name = path.to_fs_name::<GenericFilePath>()?;
    ListenerOptions::new()
        .name(name)
        .reclaim_name(false)
        .create_tokio()
}

/// Connects to `path`. `&Stream` is both `Read` and `Write`, so one thread may read while
/// another writes through a shared `Arc<Stream>`.
pub fn connect(path: &Path) -> io::Result<Stream> {
    let name = path.to_fs_name::<GenericFilePath>()?;
    Stream::connect(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_is_created_with_mode_0700() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b");
        ensure_private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_directory_others_may_write_is_tightened_but_a_shared_or_readable_one_is_left() {
        let mode = |dir: &Path| fs::metadata(dir).unwrap().mode() & 0o7777;
        let base = tempfile::tempdir().unwrap();
        fs::set_permissions(base.path(), fs::Permissions::from_mode(0o777)).unwrap();
        ensure_private_dir(base.path()).unwrap();
        assert_eq!(mode(base.path()), 0o700);
        // A socket put in /tmp, or in a home directory, must not chmod either.
        for kept in [0o1777, 0o755] {
            fs::set_permissions(base.path(), fs::Permissions::from_mode(kept)).unwrap();
            ensure_private_dir(base.path()).unwrap();
            assert_eq!(mode(base.path()), kept, "{kept:o}");
        }
    }

    #[test]
    fn a_file_in_the_way_is_an_error() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("f");
        fs::write(&file, b"").unwrap();
        assert!(ensure_private_dir(&file).is_err());
    }
}
