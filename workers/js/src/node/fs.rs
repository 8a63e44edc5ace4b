//! `node:fs`: the synchronous file operations (`fs.promises` and the callback forms are built
//! on them in `node.js`), failing with Node's error shape: `ENOENT: no such file or
//! directory, open 'x'` with `code`, `errno`, `syscall` and `path`.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// A failed file operation, as Node reports it.
#[derive(Debug)]
pub(super) struct FsError {
    /// `ENOENT`.
    pub code: String,
    /// Negative, like Node's (`-2`).
    pub errno: i32,
    /// `open`, `mkdir`...
    pub syscall: &'static str,
    pub path: String,
    pub dest: Option<String>,
    /// `ENOENT: no such file or directory, open 'x'`.
    pub message: String,
}

impl FsError {
    /// An I/O error of `syscall` on `path`.
    pub(super) fn from_io(err: &std::io::Error, syscall: &'static str, path: &str) -> Self {
        Self::new(err, syscall, path, None)
    }

    fn new(err: &std::io::Error, syscall: &'static str, path: &str, dest: Option<&str>) -> Self {
        let errno = err.raw_os_error().unwrap_or(libc::EIO);
        let code = format!("{:?}", nix::errno::Errno::from_raw(errno));
        let description = describe(errno, err);
        let mut message = format!("{code}: {description}, {syscall} '{path}'");
        if let Some(dest) = dest {
            message.push_str(&format!(" -> '{dest}'"));
        }
        FsError {
            code,
            errno: -errno,
            syscall,
            path: path.to_string(),
            dest: dest.map(str::to_string),
            message,
        }
    }
}

/// libuv's wording where it differs from the C library's.
fn describe(errno: i32, err: &std::io::Error) -> String {
    match errno {
        libc::EISDIR => "illegal operation on a directory".into(),
        libc::EEXIST => "file already exists".into(),
        libc::ENOTEMPTY => "directory not empty".into(),
        _ => {
            let text = nix::errno::Errno::from_raw(errno).desc();
            if text.is_empty() {
                err.to_string()
            } else {
                text.to_lowercase()
            }
        }
    }
}

type FsResult<T> = Result<T, FsError>;

fn fail<'a>(syscall: &'static str, path: &'a str) -> impl Fn(std::io::Error) -> FsError + 'a {
    move |err| FsError::new(&err, syscall, path, None)
}

pub(super) fn read(path: &str) -> FsResult<Vec<u8>> {
    fs::read(path).map_err(fail("open", path))
}

pub(super) fn read_text(path: &str) -> FsResult<String> {
    let bytes = read(path)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    })
}

pub(super) fn write(path: &str, data: &[u8], append: bool, exclusive: bool) -> FsResult<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true);
    if exclusive {
        options.create_new(true);
    } else {
        options.create(true);
    }
    if append {
        options.append(true);
    } else {
        options.truncate(true);
    }
    let mut file = options.open(path).map_err(fail("open", path))?;
    file.write_all(data).map_err(fail("write", path))
}

/// What `fs.statSync` reports, in the order `node.js` reads it.
pub(super) struct Stat {
    pub kind: &'static str,
    /// dev, ino, mode, nlink, uid, gid, rdev, size, blksize, blocks, atimeMs, mtimeMs,
    /// ctimeMs, birthtimeMs.
    pub numbers: [f64; 14],
}

pub(super) fn stat(path: &str, follow: bool) -> FsResult<Stat> {
    let (syscall, meta) = if follow {
        ("stat", fs::metadata(path))
    } else {
        ("lstat", fs::symlink_metadata(path))
    };
    let meta = meta.map_err(fail(syscall, path))?;
    let ms = |secs: i64, nanos: i64| secs as f64 * 1000.0 + nanos as f64 / 1e6;
    let birth = meta
        .created()
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(ms(meta.ctime(), meta.ctime_nsec()), |d| {
            d.as_secs_f64() * 1000.0
        });
    Ok(Stat {
        kind: kind_of(&meta.file_type()),
        numbers: [
            meta.dev() as f64,
            meta.ino() as f64,
            f64::from(meta.mode()),
            meta.nlink() as f64,
            f64::from(meta.uid()),
            f64::from(meta.gid()),
            meta.rdev() as f64,
            meta.size() as f64,
            meta.blksize() as f64,
            meta.blocks() as f64,
            ms(meta.atime(), meta.atime_nsec()),
            ms(meta.mtime(), meta.mtime_nsec()),
            ms(meta.ctime(), meta.ctime_nsec()),
            birth,
        ],
    })
}

fn kind_of(kind: &fs::FileType) -> &'static str {
    if kind.is_symlink() {
        "symlink"
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_file() {
        "file"
    } else if kind.is_fifo() {
        "fifo"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() {
        "block"
    } else {
        "character"
    }
}

/// The entries of a directory with their kinds, sorted by name like Node's.
pub(super) fn readdir(path: &str) -> FsResult<(Vec<String>, Vec<&'static str>)> {
    let mut entries: Vec<(String, &'static str)> = fs::read_dir(path)
        .map_err(fail("scandir", path))?
        .filter_map(Result::ok)
        .map(|entry| {
            let kind = entry.file_type().map_or("file", |kind| kind_of(&kind));
            (entry.file_name().to_string_lossy().into_owned(), kind)
        })
        .collect();
    entries.sort();
    Ok(entries.into_iter().unzip())
}

/// `mkdirSync`: with `recursive`, the first directory created (none when all existed).
pub(super) fn mkdir(path: &str, recursive: bool, mode: u32) -> FsResult<Option<String>> {
    let mut builder = fs::DirBuilder::new();
    builder.mode(mode);
    if !recursive {
        builder.create(path).map_err(fail("mkdir", path))?;
        return Ok(None);
    }
    let first_missing = Path::new(path)
        .ancestors()
        .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
        .last()
        .map(absolute);
    builder.recursive(true);
    builder.create(path).map_err(fail("mkdir", path))?;
    Ok(first_missing)
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// `rmSync`: a directory needs `recursive`; a missing path is fine with `force`.
pub(super) fn rm(path: &str, recursive: bool, force: bool) -> FsResult<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if force && err.kind() == ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(FsError::new(&err, "lstat", path, None)),
    };
    if meta.is_dir() {
        if !recursive {
            let err = std::io::Error::from_raw_os_error(libc::EISDIR);
            let mut error = FsError::new(&err, "rm", path, None);
            error.code = "ERR_FS_EISDIR".into();
            error.message = format!(
                "Path is a directory: rm returned EISDIR (is a directory) {path} (pass \
                 {{recursive: true}} to remove it with its contents)"
            );
            return Err(error);
        }
        fs::remove_dir_all(path).map_err(fail("rm", path))
    } else {
        fs::remove_file(path).map_err(fail("rm", path))
    }
}

pub(super) fn rmdir(path: &str, recursive: bool) -> FsResult<()> {
    if recursive {
        fs::remove_dir_all(path).map_err(fail("rmdir", path))
    } else {
        fs::remove_dir(path).map_err(fail("rmdir", path))
    }
}

pub(super) fn unlink(path: &str) -> FsResult<()> {
    fs::remove_file(path).map_err(fail("unlink", path))
}

pub(super) fn rename(from: &str, to: &str) -> FsResult<()> {
    fs::rename(from, to).map_err(|err| FsError::new(&err, "rename", from, Some(to)))
}

pub(super) fn copy_file(from: &str, to: &str) -> FsResult<()> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|err| FsError::new(&err, "copyfile", from, Some(to)))
}

pub(super) fn symlink(target: &str, path: &str) -> FsResult<()> {
    std::os::unix::fs::symlink(target, path)
        .map_err(|err| FsError::new(&err, "symlink", target, Some(path)))
}

pub(super) fn readlink(path: &str) -> FsResult<String> {
    fs::read_link(path)
        .map(|target| target.to_string_lossy().into_owned())
        .map_err(fail("readlink", path))
}

pub(super) fn realpath(path: &str) -> FsResult<String> {
    fs::canonicalize(path)
        .map(|real| real.to_string_lossy().into_owned())
        .map_err(fail("realpath", path))
}

pub(super) fn chmod(path: &str, mode: u32) -> FsResult<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(fail("chmod", path))
}

/// `accessSync(path, mode)`: `mode` is a mask of `R_OK` (4), `W_OK` (2) and `X_OK` (1).
pub(super) fn access(path: &str, mode: i32) -> FsResult<()> {
    let flags = nix::unistd::AccessFlags::from_bits_truncate(mode);
    nix::unistd::access(path, flags)
        .map_err(|errno| FsError::new(&std::io::Error::from(errno), "access", path, None))
}

/// `mkdtempSync(prefix)`: a new directory named `prefix` and six random characters.
pub(super) fn mkdtemp(prefix: &str) -> FsResult<String> {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    loop {
        let random = super::crypto::random_bytes(6).map_err(|message| FsError {
            code: "EIO".into(),
            errno: -libc::EIO,
            syscall: "mkdtemp",
            path: prefix.to_string(),
            dest: None,
            message,
        })?;
        let suffix: String = random
            .iter()
            .map(|b| char::from(CHARS[usize::from(*b) % CHARS.len()]))
            .collect();
        let path = format!("{prefix}{suffix}");
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == ErrorKind::AlreadyExists => continue,
            Err(err) => {
                return Err(FsError::new(
                    &err,
                    "mkdtemp",
                    &format!("{prefix}XXXXXX"),
                    None,
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_like_node() {
        let err = read("/nonexistent/x").unwrap_err();
        assert_eq!(err.code, "ENOENT");
        assert_eq!(err.errno, -libc::ENOENT);
        assert_eq!(
            err.message,
            "ENOENT: no such file or directory, open '/nonexistent/x'"
        );
    }

    #[test]
    fn mkdir_rm_and_readdir() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let deep = format!("{root}/a/b");
        assert_eq!(
            mkdir(&deep, true, 0o777).unwrap(),
            Some(format!("{root}/a"))
        );
        assert_eq!(mkdir(&deep, true, 0o777).unwrap(), None);
        write(&format!("{root}/a/f.txt"), b"x", false, false).unwrap();
        let (names, kinds) = readdir(&format!("{root}/a")).unwrap();
        assert_eq!(names, ["b", "f.txt"]);
        assert_eq!(kinds, ["directory", "file"]);
        assert_eq!(
            rm(&format!("{root}/a"), false, false).unwrap_err().code,
            "ERR_FS_EISDIR"
        );
        rm(&format!("{root}/a"), true, false).unwrap();
        rm(&format!("{root}/a"), true, true).unwrap();
        assert_eq!(
            rm(&format!("{root}/a"), true, false).unwrap_err().code,
            "ENOENT"
        );
    }
}
