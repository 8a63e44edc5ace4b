//! `crypto.getRandomValues`/`randomUUID`/`subtle.digest` and Node's `createHash`/`randomBytes`:
//! the system's random source and the RustCrypto digests.

use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};

/// The largest `getRandomValues` request the Web Crypto standard allows.
pub(super) const MAX_RANDOM_VALUES: usize = 65536;

/// `len` random bytes from the operating system.
pub(super) fn random_bytes(len: usize) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0; len];
    getrandom::fill(&mut bytes).map_err(|err| format!("no random bytes from the system: {err}"))?;
    Ok(bytes)
}

/// A version 4 UUID in its lowercase hyphenated form.
pub(super) fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The digest of `bytes`. `algorithm` is a Web Crypto name (`SHA-256`) or a Node one
/// (`sha256`), in any case.
pub(super) fn digest(algorithm: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let normalized: String = algorithm
        .chars()
        .filter(|c| *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    Ok(match normalized.as_str() {
        "sha1" => Sha1::digest(bytes).to_vec(),
        "sha256" => Sha256::digest(bytes).to_vec(),
        "sha384" => Sha384::digest(bytes).to_vec(),
        "sha512" => Sha512::digest(bytes).to_vec(),
        _ => {
            return Err(format!(
                "Unsupported digest algorithm {algorithm:?} (supported: SHA-1, SHA-256, SHA-384, \
                 SHA-512)"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_known_values() {
        let hex = |bytes: Vec<u8>| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(digest("SHA-256", b"abc").unwrap()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(digest("sha1", b"abc").unwrap()),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert!(digest("md5", b"").unwrap_err().contains("SHA-256"));
    }

    #[test]
    fn uuids_are_version_4() {
        let id = random_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(random_bytes(16).unwrap(), random_bytes(16).unwrap());
    }
}
