//! The snapshot file: the engine's payload, then a trailer the worker's runtime writes and
//! checks, the same for every language:
//!
//! ```text
//! payload (P bytes, the engine's own format)
//! meta    (M bytes, SnapshotMeta as JSON)
//! P       (u64, little-endian)
//! M       (u32, little-endian)
//! tag     (32 bytes: HMAC-SHA256 under the session's key of a domain label, payload,
//!          meta, P and M)
//! magic   (8 bytes, `CVSNAP01`)
//! ```
//!
//! The payload comes first so an engine can write it straight into the file (a 100 MB
//! array is never copied), and an engine reads it back by position. A file is trusted only
//! once its whole content matches its tag: one byte changed, cut or added, or a file made
//! for another session (another key), and it is refused before any of it is read as data.

use cellvisor_ipc::state::{SnapshotMeta, StateRefusal};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

type Tagger = Hmac<Sha256>;

/// The file's last eight bytes.
const MAGIC: &[u8; 8] = b"CVSNAP01";
/// Fed to the tag first, so a tag made for anything else never passes for a snapshot's.
const DOMAIN: &[u8] = b"cellvisor snapshot v1\0";
const TAG_BYTES: usize = 32;
/// Everything after the meta: P, M, tag, magic.
const FIXED_TRAILER: usize = 8 + 4 + TAG_BYTES + MAGIC.len();
/// A meta bigger than this is not a meta this code wrote.
const MAX_META_BYTES: u32 = 64 << 20;
const CHUNK: usize = 1 << 20;

/// Appends the trailer to `file`, which holds the payload (and nothing else) from its start.
/// Returns the file's whole size.
pub fn seal(file: &mut File, meta: &SnapshotMeta, key: &[u8]) -> std::io::Result<u64> {
    let payload = file.metadata()?.len();
    let meta_json = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let meta_len = u32::try_from(meta_json.len())
        .ok()
        .filter(|n| *n <= MAX_META_BYTES)
        .ok_or_else(|| std::io::Error::other("the snapshot's list of names is too long"))?;
    let mut tagger = tagger(key)?;
    file.seek(SeekFrom::Start(0))?;
    hash_exactly(file, payload, &mut tagger)?;
    tagger.update(&meta_json);
    tagger.update(&payload.to_le_bytes());
    tagger.update(&meta_len.to_le_bytes());
    let tag = tagger.finalize().into_bytes();
    file.seek(SeekFrom::End(0))?;
    let mut trailer = meta_json;
    trailer.extend_from_slice(&payload.to_le_bytes());
    trailer.extend_from_slice(&meta_len.to_le_bytes());
    trailer.extend_from_slice(&tag);
    trailer.extend_from_slice(MAGIC);
    file.write_all(&trailer)?;
    file.flush()?;
    Ok(payload + trailer.len() as u64)
}

/// Checks the file at `path` against `key`; its meta and the payload's length if it is
/// whole and ours.
pub fn open_verified(path: &Path, key: &[u8]) -> Result<(SnapshotMeta, u64), StateRefusal> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(StateRefusal::Missing)
        }
        Err(err) => return Err(failed(path, &err)),
    };
    let size = file.metadata().map_err(|e| failed(path, &e))?.len();
    let tampered = |why: &str| StateRefusal::Tampered { why: why.into() };
    if size < FIXED_TRAILER as u64 {
        return Err(tampered("shorter than a snapshot's trailer"));
    }
    let mut fixed = [0u8; FIXED_TRAILER];
    file.seek(SeekFrom::Start(size - FIXED_TRAILER as u64))
        .and_then(|_| file.read_exact(&mut fixed))
        .map_err(|e| failed(path, &e))?;
    let (lengths, rest) = fixed.split_at(12);
    let (tag, magic) = rest.split_at(TAG_BYTES);
    if magic != MAGIC {
        return Err(match magic.strip_prefix(&MAGIC[..6]) {
            Some(version) if version.iter().all(u8::is_ascii_alphanumeric) => tampered(&format!(
                "a snapshot of format {}, which this cellvisor does not read (it reads {})",
                String::from_utf8_lossy(version),
                String::from_utf8_lossy(&MAGIC[6..])
            )),
            _ => tampered("not a cellvisor snapshot, or its end was cut off"),
        });
    }
    let payload = u64::from_le_bytes(lengths[..8].try_into().unwrap_or_default());
    let meta_len = u32::from_le_bytes(lengths[8..].try_into().unwrap_or_default());
    let expected = payload
        .checked_add(u64::from(meta_len))
        .and_then(|n| n.checked_add(FIXED_TRAILER as u64));
    if meta_len > MAX_META_BYTES || expected != Some(size) {
        return Err(tampered("its length does not match what its trailer says"));
    }
    let mut tagger = tagger(key).map_err(|e| failed(path, &e))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| failed(path, &e))?;
    hash_exactly(&mut file, payload, &mut tagger).map_err(|e| failed(path, &e))?;
    let mut meta_json = vec![0u8; meta_len as usize];
    file.read_exact(&mut meta_json)
        .map_err(|e| failed(path, &e))?;
    tagger.update(&meta_json);
    tagger.update(&payload.to_le_bytes());
    tagger.update(&meta_len.to_le_bytes());
    if tagger.verify_slice(tag).is_err() {
        return Err(tampered(
            "its content does not match its tag: it was altered, or made for another session",
        ));
    }
    let meta: SnapshotMeta =
        serde_json::from_slice(&meta_json).map_err(|err| StateRefusal::Failed {
            why: format!("the snapshot's description cannot be read: {err}"),
        })?;
    if meta.payload_bytes != payload {
        return Err(tampered(
            "its payload length disagrees with its description",
        ));
    }
    Ok((meta, payload))
}

fn tagger(key: &[u8]) -> std::io::Result<Tagger> {
    let mut tagger = <Tagger as KeyInit>::new_from_slice(key)
        .map_err(|_| std::io::Error::other("the snapshot key is unusable"))?;
    tagger.update(DOMAIN);
    Ok(tagger)
}

/// Feeds the next `len` bytes of `file` to `tagger`.
fn hash_exactly(file: &mut File, len: u64, tagger: &mut Tagger) -> std::io::Result<()> {
    let mut left = len;
    let mut buf = vec![0u8; CHUNK.min(usize::try_from(len).unwrap_or(CHUNK)).max(1)];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(buf.len()));
        file.read_exact(&mut buf[..want])?;
        tagger.update(&buf[..want]);
        left -= want as u64;
    }
    Ok(())
}

fn failed(path: &Path, err: &std::io::Error) -> StateRefusal {
    StateRefusal::Failed {
        why: format!("cannot read the snapshot {}: {err}", path.display()),
    }
}

#[cfg(test)]
#[path = "file_properties.rs"]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::Language;

    fn meta(payload_bytes: u64) -> SnapshotMeta {
        SnapshotMeta {
            language: Language::Lua,
            taken_at: "2026-12-02T07:00:00Z".into(),
            reason: "test".into(),
            node: "node-a".into(),
            saved: vec!["x".into()],
            skipped: Vec::new(),
            payload_bytes,
            engine: "Lua 5.4".into(),
        }
    }

    fn sealed(dir: &Path, payload: &[u8], key: &[u8]) -> std::path::PathBuf {
        let path = dir.join("s.snap");
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        file.write_all(payload).expect("payload");
        seal(&mut file, &meta(payload.len() as u64), key).expect("seal");
        path
    }

    #[test]
    fn a_sealed_file_verifies_with_its_key_and_gives_its_payload_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = sealed(dir.path(), b"payload bytes", b"key");
        let (read, len) = open_verified(&path, b"key").expect("verifies");
        assert_eq!((read, len), (meta(13), 13));
    }

    #[test]
    fn every_changed_byte_cut_or_addition_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = sealed(dir.path(), b"payload bytes", b"key");
        let whole = std::fs::read(&path).expect("read");
        for at in 0..whole.len() {
            let mut bytes = whole.clone();
            bytes[at] ^= 0x01;
            std::fs::write(&path, &bytes).expect("write");
            assert!(
                matches!(
                    open_verified(&path, b"key"),
                    Err(StateRefusal::Tampered { .. })
                ),
                "byte {at} changed and accepted"
            );
        }
        for cut in [1, 10, whole.len() - 1] {
            std::fs::write(&path, &whole[..whole.len() - cut]).expect("write");
            assert!(matches!(
                open_verified(&path, b"key"),
                Err(StateRefusal::Tampered { .. })
            ));
        }
        let mut longer = whole.clone();
        longer.insert(0, b'!');
        std::fs::write(&path, &longer).expect("write");
        assert!(matches!(
            open_verified(&path, b"key"),
            Err(StateRefusal::Tampered { .. })
        ));
    }

    #[test]
    fn another_key_and_a_missing_file_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = sealed(dir.path(), b"p", b"key of session a");
        assert!(matches!(
            open_verified(&path, b"key of session b"),
            Err(StateRefusal::Tampered { .. })
        ));
        assert_eq!(
            open_verified(&dir.path().join("none"), b"k"),
            Err(StateRefusal::Missing)
        );
    }

    #[test]
    fn an_empty_payload_seals_and_verifies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = sealed(dir.path(), b"", b"key");
        assert_eq!(open_verified(&path, b"key").map(|(_, n)| n), Ok(0));
    }
}
