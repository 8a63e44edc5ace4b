//! A session's current state in etcd mode: immutable snapshot blobs, and the pointer that
//! says which one is current. Plain data: what a pointer holds, how a blob is named, and
//! whether a blob on disk is the one a pointer names.
//!
//! ```text
//! <snapshots.dir>/<session>/<lang>/blobs/<token>-<seq>.snap   written once, never over
//! etcd: cellvisor/pointer/<session>/<lang>                     {"blob", "sha256", ...}
//! ```
//!
//! A blob's name carries the fencing token it was written under and a sequence number
//! within that token, so no two writers ever share a name. The pointer is committed only by
//! a transaction that finds the session's lease key created at that same token: a node that
//! lost its lease may still write a blob, but nothing ever points at it.
// Plain data the `etcd` feature uses whole; a build without it uses a part.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// The directory of a session's blobs, under its language's snapshot directory.
pub const BLOBS_DIR: &str = "blobs";
const SUFFIX: &str = ".snap";

/// Which blob is a session's current state in one language, as committed in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pointer {
    /// The blob's file name in the language's `blobs` directory.
    pub blob: String,
    /// The blob's SHA-256, hex: a restore refuses any other content under that name.
    pub sha256: String,
    /// The blob's size in bytes.
    pub bytes: u64,
    /// Cells the session had run on the committing node when it was taken.
    pub cells: u64,
    /// The node that committed it.
    pub node: String,
    /// The fencing token of the lease it was committed under.
    pub token: i64,
}

impl Pointer {
    /// The pointer as stored in etcd.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored pointer; `None` for a value no node wrote.
    pub fn from_bytes(bytes: &[u8]) -> Option<Pointer> {
        serde_json::from_slice::<Pointer>(bytes)
            .ok()
            .filter(|p| is_blob_name(&p.blob))
    }
}

/// Which file holds a session's remembered requests (`request_id`s, docs/protocol.md) and
/// how much of it is current, as committed in etcd beside its state's pointers: the first
/// `bytes` of the file, whose signed chain ends with `tag`. What a node that lost its lease
/// appends after that, or writes elsewhere, is never read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestsPointer {
    /// The file's name in the session's `requests.d` directory.
    pub file: String,
    /// How many of its bytes are current.
    pub bytes: u64,
    /// The chain's last tag (hex) at that length.
    pub tag: String,
    /// The node that committed it.
    pub node: String,
    /// The fencing token of the lease it was committed under.
    pub token: i64,
}

impl RequestsPointer {
    /// The pointer as stored in etcd.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored pointer; `None` for a value no node wrote.
    pub fn from_bytes(bytes: &[u8]) -> Option<RequestsPointer> {
        serde_json::from_slice::<RequestsPointer>(bytes)
            .ok()
            .filter(|p| order_of(&p.file, LOG_SUFFIX).is_some())
    }
}

const LOG_SUFFIX: &str = ".log";

/// The name of the `seq`-th file of remembered requests written under token `token`.
pub fn requests_file_name(token: i64, seq: u64) -> String {
    format!("{token}-{seq}{LOG_SUFFIX}")
}

/// The token and sequence number a requests file's name carries.
pub fn requests_file_order(name: &str) -> Option<(i64, u64)> {
    order_of(name, LOG_SUFFIX)
}

fn order_of(name: &str, suffix: &str) -> Option<(i64, u64)> {
    let stem = name.strip_suffix(suffix)?;
    let (token, seq) = stem.split_once('-')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(token) || !digits(seq) {
        return None;
    }
    Some((token.parse().ok()?, seq.parse().ok()?))
}

/// The files of remembered requests in `dir` older than `current` (collected once `current`
/// is committed).
pub fn unreferenced_requests(dir: &Path, current: &str) -> Vec<std::path::PathBuf> {
    older_than(dir, current, requests_file_order)
}

/// The files in `dir` whose (token, sequence) by `order` is below `current`'s: a name that
/// `order` does not read is never one of them.
fn older_than(
    dir: &Path,
    current: &str,
    order: fn(&str) -> Option<(i64, u64)>,
) -> Vec<std::path::PathBuf> {
    let Some(current) = order(current) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| order(&e.file_name().to_string_lossy()).is_some_and(|o| o < current))
        .map(|e| e.path())
        .collect()
}

/// The name of the `seq`-th blob written under fencing token `token`.
pub fn blob_name(token: i64, seq: u64) -> String {
    format!("{token}-{seq}{SUFFIX}")
}

/// Whether `name` is a name [`blob_name`] makes (no path separators, nothing hidden).
pub fn is_blob_name(name: &str) -> bool {
    blob_order(name).is_some()
}

/// The SHA-256 of the file at `path`, hex, and its size.
pub fn file_digest(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        hasher.update(&buffer[..n]);
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, bytes))
}

/// Why a pointer's blob cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobRefusal {
    /// The blob is not there (collected, or its directory lost).
    #[error("the snapshot {blob} that etcd names as current is missing: {why}")]
    Missing {
        /// Its name.
        blob: String,
        /// The error reading it.
        why: String,
    },
    /// Something else is under the blob's name (an older snapshot copied over it).
    #[error("the snapshot {blob} is not the one etcd names as current (its SHA-256 is {found}, the pointer's {expected}): refused, never restored")]
    NotCurrent {
        /// Its name.
        blob: String,
        /// The hash the pointer holds.
        expected: String,
        /// The hash of what is there.
        found: String,
    },
}

/// Whether the blob at `path` is the one `pointer` names: its SHA-256 must match.
pub fn check_blob(pointer: &Pointer, path: &Path) -> Result<(), BlobRefusal> {
    let (found, _) = file_digest(path).map_err(|e| BlobRefusal::Missing {
        blob: pointer.blob.clone(),
        why: e.to_string(),
    })?;
    if found != pointer.sha256 {
        return Err(BlobRefusal::NotCurrent {
            blob: pointer.blob.clone(),
            expected: pointer.sha256.clone(),
            found,
        });
    }
    Ok(())
}

/// The token and sequence number a blob's name carries (`None`: not a blob's name).
pub(crate) fn blob_order(name: &str) -> Option<(i64, u64)> {
    order_of(name, SUFFIX)
}

/// The blobs in `dir` older than `current` (a lower token, or the same token and a lower
/// sequence number): what a holder may collect once its commit of `current` went through.
/// Newer ones are left alone: a save under way after that commit, or a newer holder's.
pub fn unreferenced(dir: &Path, current: &str) -> Vec<std::path::PathBuf> {
    older_than(dir, current, blob_order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(blob: &str, sha256: &str) -> Pointer {
        Pointer {
            blob: blob.into(),
            sha256: sha256.into(),
            bytes: 3,
            cells: 7,
            node: "node-0".into(),
            token: 42,
        }
    }

    #[test]
    fn blob_names_carry_token_and_sequence_and_nothing_else() {
        assert_eq!(blob_name(42, 3), "42-3.snap");
        assert!(is_blob_name("42-3.snap"));
        for bad in [
            "latest.snap",
            "../1-2.snap",
            "1-2",
            "-1-2.snap",
            "1-.snap",
            "a-1.snap",
            "1-2-3.snap",
        ] {
            assert!(!is_blob_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_pointer_round_trips_and_a_foreign_value_is_none() {
        let p = pointer("42-3.snap", "ab");
        assert_eq!(Pointer::from_bytes(&p.to_bytes()), Some(p));
        assert_eq!(Pointer::from_bytes(b"not json"), None);
        assert_eq!(
            Pointer::from_bytes(&pointer("../../etc/passwd", "ab").to_bytes()),
            None,
            "a pointer naming a path outside the blobs is no pointer"
        );
    }

    #[test]
    fn only_the_blob_with_the_pointers_hash_is_current() {
        let dir = tempfile::tempdir().expect("tempdir");
        let current = dir.path().join("42-2.snap");
        let older = dir.path().join("42-1.snap");
        std::fs::write(&current, b"new").expect("write");
        std::fs::write(&older, b"old").expect("write");
        let (sha, bytes) = file_digest(&current).expect("digest");
        assert_eq!(bytes, 3);
        let p = pointer("42-2.snap", &sha);
        assert_eq!(check_blob(&p, &current), Ok(()));
        // An older blob copied over the current one is refused.
        std::fs::copy(&older, &current).expect("copy");
        assert!(matches!(
            check_blob(&p, &current),
            Err(BlobRefusal::NotCurrent { .. })
        ));
        std::fs::remove_file(&current).expect("rm");
        assert!(matches!(
            check_blob(&p, &current),
            Err(BlobRefusal::Missing { .. })
        ));
    }

    #[test]
    fn requests_files_are_named_like_blobs_and_their_pointers_name_nothing_else() {
        assert_eq!(requests_file_name(42, 3), "42-3.log");
        assert_eq!(requests_file_order("42-3.log"), Some((42, 3)));
        for bad in ["42-3.snap", "../1-2.log", "1-.log", "a-1.log", "1-2-3.log"] {
            assert_eq!(requests_file_order(bad), None, "{bad}");
        }
        let p = RequestsPointer {
            file: "7-1.log".into(),
            bytes: 9,
            tag: "ab".into(),
            node: "n".into(),
            token: 7,
        };
        assert_eq!(RequestsPointer::from_bytes(&p.to_bytes()), Some(p.clone()));
        let outside = RequestsPointer {
            file: "../../x.log".into(),
            ..p
        };
        assert_eq!(RequestsPointer::from_bytes(&outside.to_bytes()), None);
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["1-1.log", "7-1.log", "7-2.log", "9-1.log", "7-0.snap"] {
            std::fs::write(dir.path().join(name), b"x").expect("write");
        }
        let gone = unreferenced_requests(dir.path(), "7-2.log");
        let mut gone: Vec<_> = gone
            .iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        gone.sort();
        assert_eq!(gone, ["1-1.log", "7-1.log"]);
    }

    #[test]
    fn only_blobs_older_than_the_committed_one_are_collected() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "1-1.snap",
            "1-2.snap",
            "7-1.snap",
            "7-2.snap",
            "9-1.snap",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(name), b"x").expect("write");
        }
        let mut gone: Vec<String> = unreferenced(dir.path(), "7-1.snap")
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        gone.sort();
        assert_eq!(
            gone,
            ["1-1.snap", "1-2.snap"],
            "a save after the commit (7-2) and a newer holder's (9-1) stay"
        );
    }
}
