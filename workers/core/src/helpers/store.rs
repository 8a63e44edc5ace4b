//! `store(key, value)` / `load(key)` of code mode: JSON values kept per session on disk, one
//! file per key (`<dir>/<key>.json`), written atomically so a crash, a kill or a reset leaves
//! the old value or the new one, never half of one. The supervisor names the session's
//! directory in `CELLVISOR_STORE_DIR`; every language reads and writes the same files, so a
//! value stored from Python is loadable from JavaScript in the same session.
//!
//! The Python runner has its own copy of these rules in `prelude.py` (it runs in its own
//! process, with no Rust in it); the key rule and the file layout must stay the same in both,
//! and `every_language_applies_the_same_store_key_rule_to_the_same_files` in
//! `tests/code_mode.rs` holds both to one table of keys and loads across languages.

use super::fs::{write_atomically, Durability};
use super::HelperError;
use std::io::ErrorKind;
use std::path::Path;

use cellvisor_ipc::env::STORE_DIR as STORE_DIR_VAR;

/// The longest key `store` accepts.
const MAX_KEY: usize = 128;

/// Checks a key: a file name we can use as is.
pub fn check_key(helper: &str, key: &str) -> Result<(), HelperError> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY
        && !key.starts_with('.')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(HelperError::Refused(format!(
            "{helper}: invalid key {key:?}: use 1 to {MAX_KEY} characters from \
             A-Z a-z 0-9 _ - . (not starting with a dot)"
        )))
    }
}

/// `store(key, value)`: writes `json` (already checked to be JSON) to `<dir>/<key>.json`
/// atomically and durably; answers the bytes written.
pub fn save(dir: Option<&Path>, key: &str, json: &str) -> Result<usize, HelperError> {
    check_key("store", key)?;
    let dir = dir.ok_or_else(|| {
        HelperError::Refused(format!(
            "store: this worker has no store directory ({STORE_DIR_VAR} is not set)"
        ))
    })?;
    let written = (|| {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let file = dir.join(format!("{key}.json"));
        write_atomically(&file, json.as_bytes(), Durability::Synced)
    })();
    written.map_err(|err| {
        HelperError::Refused(format!(
            "store: cannot write key `{key}` in {}: {err}",
            dir.display()
        ))
    })?;
    Ok(json.len())
}

/// `load(key)`: the stored JSON text, or `None` when the key was never stored.
pub fn load(dir: Option<&Path>, key: &str) -> Result<Option<String>, HelperError> {
    check_key("load", key)?;
    let Some(dir) = dir else {
        return Ok(None);
    };
    let file = dir.join(format!("{key}.json"));
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(HelperError::Refused(format!(
            "load: cannot read {}: {err}",
            file.display()
        ))),
    }
}

/// The store directory the worker's environment names (empty counts as unset).
pub fn dir_from_env() -> Option<std::path::PathBuf> {
    cellvisor_ipc::env::directory(STORE_DIR_VAR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_writes_are_atomic() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = dir.path().join("store");
        let store = Some(store.as_path());
        save(store, "k-1.v2", "{\"a\":1}").expect("store");
        assert_eq!(
            load(store, "k-1.v2").expect("load").as_deref(),
            Some("{\"a\":1}")
        );
        assert_eq!(load(store, "never").expect("load"), None);
        for bad in ["", "../x", "a/b", ".hidden", "sp ace"] {
            assert!(save(store, bad, "1").is_err(), "{bad}");
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("store"))
            .expect("listing")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("k-1.v2.json")]);
        assert!(save(None, "k", "1")
            .unwrap_err()
            .to_string()
            .contains(STORE_DIR_VAR));
        assert_eq!(load(None, "k").expect("no directory"), None);
    }
}
