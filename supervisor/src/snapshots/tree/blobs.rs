//! The blob directory of one session's trees: each blob written once under the SHA-256 of
//! its content (`blobs/<2 hex>/<62 hex>`, 0600), checked against its name whenever it is
//! read back, and deleted once no manifest names it.

use super::{hex, Hash, TreeError};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A temporary file older than this is a write that died.
const STALE_TEMP: Duration = Duration::from_secs(3600);
const TEMP_PREFIX: &str = ".blob-";
const COPY_BUFFER: usize = 256 * 1024;

/// A blob directory.
#[derive(Debug, Clone)]
pub struct Blobs {
    dir: PathBuf,
}

/// What writing one file's content cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The blob's name.
    pub hash: Hash,
    /// The bytes read.
    pub size: u64,
    /// Whether a new blob was written (else one with the same content was there).
    pub new: bool,
}

/// What a collection deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Blobs deleted.
    pub blobs: usize,
    /// Their bytes.
    pub bytes: u64,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TreeError {
    let path = path.to_path_buf();
    move |source| TreeError::Io { what, path, source }
}

impl Blobs {
    /// The blob directory at `dir` (made, 0700, on the first write).
    pub fn new(dir: PathBuf) -> Blobs {
        Blobs { dir }
    }

    /// Where blob `hash` lives.
    pub fn path(&self, hash: &Hash) -> PathBuf {
        let name = hex(hash);
        self.dir.join(&name[..2]).join(&name[2..])
    }

    /// Whether blob `hash` is there.
    pub fn has(&self, hash: &Hash) -> bool {
        self.path(hash)
            .symlink_metadata()
            .is_ok_and(|m| m.is_file())
    }

    /// Copies everything `source` reads into a blob, hashing as it goes; a blob of the same
    /// content already there is kept and the copy dropped.
    pub fn put(&self, source: &mut impl Read) -> Result<Stored, TreeError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io("create", &self.dir))?;
        let mut temp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(io("create a blob in", &self.dir))?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; COPY_BUFFER];
        let mut size = 0u64;
        loop {
            let n = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(io("read", temp.path())(err)),
            };
            hasher.update(&buffer[..n]);
            temp.write_all(&buffer[..n])
                .map_err(io("write", temp.path()))?;
            size += n as u64;
        }
        let hash: Hash = hasher.finalize().into();
        let path = self.path(&hash);
        if self.has(&hash) {
            return Ok(Stored {
                hash,
                size,
                new: false,
            });
        }
        if let Some(parent) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io("create", parent))?;
        }
        temp.persist(&path)
            .map_err(|err| io("write", &path)(err.error))?;
        Ok(Stored {
            hash,
            size,
            new: true,
        })
    }

    /// Opens blob `hash` (no link followed) for the restore of `for_path`.
    fn open(&self, hash: &Hash, for_path: &str) -> Result<fs::File, TreeError> {
        let path = self.path(hash);
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::NotFound => TreeError::MissingBlob {
                    path: for_path.to_string(),
                    hash: hex(hash),
                },
                _ => io("open", &path)(err),
            })
    }

    /// Reads blob `hash` through and checks that it hashes to its name.
    pub fn verify(&self, hash: &Hash, for_path: &str) -> Result<(), TreeError> {
        self.copy_to(hash, for_path, &mut std::io::sink())
    }

    /// Writes blob `hash` into `out`, failing with [`TreeError::Tampered`] (after the write)
    /// when its content does not hash to its name; the caller discards `out` then.
    pub fn copy_to(
        &self,
        hash: &Hash,
        for_path: &str,
        out: &mut impl Write,
    ) -> Result<(), TreeError> {
        let mut file = self.open(hash, for_path)?;
        let path = self.path(hash);
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; COPY_BUFFER];
        loop {
            let n = match file.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(io("read", &path)(err)),
            };
            hasher.update(&buffer[..n]);
            out.write_all(&buffer[..n])
                .map_err(io("write the content of", Path::new(for_path)))?;
        }
        let got: Hash = hasher.finalize().into();
        if &got != hash {
            return Err(TreeError::Tampered {
                path: for_path.to_string(),
                hash: hex(hash),
            });
        }
        Ok(())
    }

    /// Deletes every blob not in `live`, and temporaries of writes that died.
    pub fn collect(&self, live: &HashSet<Hash>) -> Collected {
        let mut collected = Collected::default();
        let Ok(fans) = fs::read_dir(&self.dir) else {
            return collected;
        };
        let now = SystemTime::now();
        for fan in fans.flatten() {
            let fan_path = fan.path();
            let fan_name = fan.file_name().to_string_lossy().into_owned();
            if fan_name.starts_with(TEMP_PREFIX) {
                let stale = fan
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .is_some_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMP);
                if stale && fs::remove_file(&fan_path).is_ok() {
                    collected.blobs += 1;
                }
                continue;
            }
            if fan_name.len() != 2 || !fan.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(blobs) = fs::read_dir(&fan_path) else {
                continue;
            };
            for blob in blobs.flatten() {
                let name = format!("{fan_name}{}", blob.file_name().to_string_lossy());
                let keep = parse_hex(&name).is_some_and(|hash| live.contains(&hash));
                if keep {
                    continue;
                }
                let bytes = blob.metadata().map(|m| m.len()).unwrap_or(0);
                if fs::remove_file(blob.path()).is_ok() {
                    collected.blobs += 1;
                    collected.bytes += bytes;
                }
            }
            // Empty fan directories go too (fails harmlessly when one is not empty).
            let _ = fs::remove_dir(&fan_path);
        }
        collected
    }

    /// The bytes all blobs hold.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        walkdir_bytes(&self.dir)
    }
}

#[cfg(test)]
fn walkdir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => walkdir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// A blob name (64 lowercase hex digits) back to its hash.
pub fn parse_hex(text: &str) -> Option<Hash> {
    if text.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_content_is_one_blob_and_reads_back_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let first = blobs.put(&mut &b"hello"[..]).expect("put");
        let again = blobs.put(&mut &b"hello"[..]).expect("put again");
        assert!(first.new && !again.new);
        assert_eq!(first.hash, again.hash);
        assert_eq!(parse_hex(&hex(&first.hash)), Some(first.hash));
        let mut out = Vec::new();
        blobs.copy_to(&first.hash, "a.txt", &mut out).expect("copy");
        assert_eq!(out, b"hello");
    }

    #[test]
    fn a_tampered_blob_is_refused_and_a_missing_one_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let stored = blobs.put(&mut &b"the real content"[..]).expect("put");
        fs::write(blobs.path(&stored.hash), b"the forged content").expect("tamper");
        let err = blobs.verify(&stored.hash, "data.csv").expect_err("refused");
        assert!(matches!(err, TreeError::Tampered { .. }), "{err}");
        assert!(err.to_string().contains("data.csv"), "{err}");
        let err = blobs.verify(&[7; 32], "gone.txt").expect_err("missing");
        assert!(matches!(err, TreeError::MissingBlob { .. }), "{err}");
    }

    #[test]
    fn collection_keeps_the_live_and_deletes_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let live = blobs.put(&mut &b"kept"[..]).expect("put");
        let dead = blobs.put(&mut &b"dropped!"[..]).expect("put");
        let collected = blobs.collect(&HashSet::from([live.hash]));
        assert_eq!(collected, Collected { blobs: 1, bytes: 8 });
        assert!(blobs.has(&live.hash));
        assert!(!blobs.has(&dead.hash));
        assert_eq!(blobs.bytes(), 4);
    }
}
