//! One way to replace a file: through a temporary file beside it and a rename, so a reader
//! (or a crash) never sees half of it. The worker's stored values and caches, and the
//! interpreter cache, all write this way.

use std::io::Write;
use std::path::Path;

/// Whether [`write_atomically`] waits for the disk before the rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync first: the new content survives a crash of the machine (stored values).
    Synced,
    /// Rename at once: readers never see half a file, and nobody waits for the disk
    /// (caches rebuilt at the next start anyway).
    Unsynced,
}

/// Replaces `path` with `data` through a temporary file in the same directory and a rename,
/// so a reader (or a crash) sees the old content or the new one, never half of one. The
/// temporary file is removed when anything fails.
pub fn write_atomically(path: &Path, data: &[u8], durability: Durability) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".cellvisor-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(data)?;
    if durability == Durability::Synced {
        temp.as_file().sync_all()?;
    }
    temp.persist(path).map_err(|err| err.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn atomic_writes_replace_the_file_and_leave_no_temporary_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cache");
        for (data, durability) in [(b"old", Durability::Synced), (b"new", Durability::Unsynced)] {
            write_atomically(&file, data, durability).expect("write");
        }
        assert_eq!(fs::read(&file).expect("read"), b"new");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("listing")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("cache")]);
        let error = write_atomically(&dir.path().join("no/such/dir/f"), b"x", Durability::Synced);
        assert!(error.is_err());
    }
}
