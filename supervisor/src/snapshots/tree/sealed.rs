//! A manifest's file, authenticated like a snapshot: an HMAC-SHA256 under the session's
//! workspace key covers the manifest and the name it was written under, so a manifest that
//! was altered, swapped for another session's, or moved to another checkpoint's name is
//! refused. The blobs it names are covered through their hashes.
//!
//! Layout: `bincode(body) ‖ tag (32 bytes) ‖ "CVTREE01"`.

use super::{Manifest, TreeError};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::path::Path;

const MAGIC: &[u8; 8] = b"CVTREE01";
const TAG: usize = 32;
const CONTEXT: &[u8] = b"cellvisor workspace tree\0";

/// What a manifest file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Body {
    /// `latest` or the checkpoint's name: the file's own name, checked on reading.
    pub label: String,
    /// When it was taken (RFC 3339).
    pub taken_at: String,
    /// Why (the ledger's `from.reason`: `idle eviction`, `checkpoint`, ...).
    pub reason: String,
    /// The node that took it.
    pub node: String,
    /// The tree.
    pub manifest: Manifest,
}

fn mac(key: &[u8], label: &str, body: &[u8], file: &Path) -> Result<Hmac<Sha256>, TreeError> {
    // HMAC takes keys of any length; the error is kept only because the type has one.
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).map_err(|err| TreeError::Manifest {
            file: file.to_path_buf(),
            why: format!("no key: {err}"),
        })?;
    mac.update(CONTEXT);
    mac.update(label.as_bytes());
    mac.update(b"\0");
    mac.update(body);
    Ok(mac)
}

/// The file's bytes for `body`, under `key`.
pub fn seal(key: &[u8], body: &Body) -> Result<Vec<u8>, TreeError> {
    let mut bytes =
        bincode::serde::encode_to_vec(body, bincode::config::standard()).map_err(|err| {
            TreeError::Manifest {
                file: body.label.clone().into(),
                why: format!("cannot be encoded: {err}"),
            }
        })?;
    let tag = mac(key, &body.label, &bytes, Path::new(&body.label))?
        .finalize()
        .into_bytes();
    bytes.extend_from_slice(&tag);
    bytes.extend_from_slice(MAGIC);
    Ok(bytes)
}

/// The body of the file `bytes` read from `file`, which must be `label`'s and pass its
/// tag under `key`; checked before any of it is decoded.
pub fn open(key: &[u8], label: &str, bytes: &[u8], file: &Path) -> Result<Body, TreeError> {
    let refuse = |why: &str| TreeError::Manifest {
        file: file.to_path_buf(),
        why: why.to_string(),
    };
    let Some(rest) = bytes.strip_suffix(MAGIC) else {
        return Err(refuse(
            "it is not a workspace manifest (no CVTREE01 trailer), or it was cut",
        ));
    };
    if rest.len() < TAG {
        return Err(refuse("it is cut short"));
    }
    let (body, tag) = rest.split_at(rest.len() - TAG);
    mac(key, label, body, file)?
        .verify_slice(tag)
        .map_err(|_| {
            refuse(
                "its integrity check failed: it was altered, cut or extended, or written for \
             another session or checkpoint; nothing was restored",
            )
        })?;
    let (decoded, _): (Body, usize) =
        bincode::serde::decode_from_slice(body, bincode::config::standard())
            .map_err(|err| refuse(&format!("it cannot be decoded: {err}")))?;
    if decoded.label != label {
        return Err(refuse("it was written under another name"));
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(label: &str) -> Body {
        Body {
            label: label.into(),
            taken_at: "2026-12-07T05:00:00Z".into(),
            reason: "checkpoint".into(),
            node: "a".into(),
            manifest: Manifest::default(),
        }
    }

    #[test]
    fn a_sealed_manifest_opens_only_under_its_key_and_name_and_unaltered() {
        let file = Path::new("m.tree");
        let sealed = seal(&[1; 32], &body("before")).expect("seal");
        assert_eq!(
            open(&[1; 32], "before", &sealed, file).expect("open"),
            body("before")
        );
        for (key, label) in [(&[2u8; 32], "before"), (&[1; 32], "after")] {
            let err = open(key, label, &sealed, file).expect_err("refused");
            assert!(err.to_string().contains("integrity check failed"), "{err}");
        }
        let mut altered = sealed.clone();
        altered[3] ^= 1;
        assert!(open(&[1; 32], "before", &altered, file).is_err());
        assert!(open(&[1; 32], "before", &sealed[..sealed.len() - 1], file).is_err());
        assert!(open(&[1; 32], "before", b"short", file).is_err());
    }
}
