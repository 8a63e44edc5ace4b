//! `output(id...)`: the full text of spilled outputs (the `artifact_path` of a truncated
//! cell result), read from the directory the supervisor names in `CELLVISOR_ARTIFACT_DIR`.

use super::HelperError;
use std::ffi::OsStr;
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The artifact directory the worker's environment names (empty counts as unset).
pub fn dir_from_env() -> Option<PathBuf> {
    cellvisor_ipc::env::directory(cellvisor_ipc::env::ARTIFACT_DIR)
}

/// The outputs `ids` name in `dir`, joined with newlines, and their total size in bytes
/// (the separators not counted). An id is a file name without `.txt` and without a path, bare
/// or as the reference `artifact://<id>`.
pub fn read_outputs<Id: AsRef<[u8]>>(
    dir: Option<&Path>,
    ids: &[Id],
) -> Result<(Vec<u8>, usize), HelperError> {
    if ids.is_empty() {
        return Err(HelperError::Refused(
            "output: give at least one output id".into(),
        ));
    }
    let mut files = Vec::with_capacity(ids.len());
    for id in ids {
        let given = id.as_ref();
        let shown = String::from_utf8_lossy(given);
        let id = given
            .strip_prefix(cellvisor_ipc::env::ARTIFACT_SCHEME.as_bytes())
            .unwrap_or(given);
        if id.is_empty()
            || id.contains(&b'/')
            || id.contains(&b'\\')
            || id.windows(2).any(|w| w == b"..")
        {
            return Err(HelperError::Refused(format!(
                "output: invalid output id '{shown}'"
            )));
        }
        let unknown = || HelperError::Refused(format!("output: unknown output id '{shown}'"));
        let dir = dir.ok_or_else(unknown)?;
        let mut name = id.to_vec();
        name.extend_from_slice(b".txt");
        let file = dir.join(OsStr::from_bytes(&name));
        match read_artifact(&file) {
            Ok(data) => files.push(data),
            Err(err) if err.kind() == ErrorKind::NotFound => return Err(unknown()),
            Err(err) => {
                return Err(HelperError::io(
                    "output",
                    Path::new(OsStr::from_bytes(id)),
                    err,
                ))
            }
        }
    }
    let total = files.iter().map(Vec::len).sum();
    Ok((files.join(&b'\n'), total))
}

/// A spilled output: a regular file, never through a link a cell planted in the artifact
/// directory (nor a FIFO that would block the worker).
fn read_artifact(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|err| match err.raw_os_error() {
            Some(libc::ELOOP) => not_an_artifact(),
            _ => err,
        })?;
    if !file.metadata()?.is_file() {
        return Err(not_an_artifact());
    }
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

fn not_an_artifact() -> std::io::Error {
    std::io::Error::other("it is a link or not a regular file, and outputs are plain files")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_joined_and_bad_ids_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("abc.txt"), "first\n").expect("write");
        std::fs::write(dir.path().join("def.txt"), "second").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link.txt")).expect("link");
        let dir = Some(dir.path());
        assert_eq!(
            read_outputs(dir, &["abc", "def"]).expect("read"),
            (b"first\n\nsecond".to_vec(), 12)
        );
        assert_eq!(
            read_outputs(dir, &["artifact://abc", "def"]).expect("read"),
            (b"first\n\nsecond".to_vec(), 12)
        );
        let refused = |ids: &[&str]| read_outputs(dir, ids).unwrap_err().to_string();
        assert_eq!(refused(&[]), "output: give at least one output id");
        assert_eq!(refused(&["zzz"]), "output: unknown output id 'zzz'");
        assert_eq!(refused(&["../abc"]), "output: invalid output id '../abc'");
        assert_eq!(refused(&["a\\b"]), "output: invalid output id 'a\\b'");
        assert_eq!(
            refused(&["artifact://"]),
            "output: invalid output id 'artifact://'"
        );
        assert_eq!(
            refused(&["artifact://../abc"]),
            "output: invalid output id 'artifact://../abc'"
        );
        assert!(refused(&["link"]).contains("outputs are plain files"));
        assert_eq!(
            read_outputs(None, &["abc"]).unwrap_err().to_string(),
            "output: unknown output id 'abc'"
        );
    }
}
