//! Property tests of the store's key files: whatever bytes and mode a `.key` or a
//! `snapshots.key-file` holds, opening the store never panics; it opens with a key of the
//! right size and is refused with a typed [`StoreError`] otherwise, and snapshots sealed
//! under one key never pass for another's.
//!
//! Fixed seed; 64 cases per property (`PROPTEST_CASES` sets more for a manual run).

use super::{SnapshotStore, StoreError, KEY_BYTES, KEY_FILE, MIN_KEY_FILE_BYTES};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(27),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_stored_key_of_any_content_opens_only_at_its_size(
        bytes in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("snapshots");
        fs::create_dir_all(&root).expect("root");
        fs::write(root.join(KEY_FILE), &bytes).expect("key");
        match SnapshotStore::open(&root, None, "node") {
            Ok(store) => prop_assert_eq!(&store.key, &bytes),
            Err(StoreError::BadKey(path)) => {
                prop_assert_ne!(bytes.len(), KEY_BYTES);
                prop_assert_eq!(path, root.join(KEY_FILE));
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }

    #[test]
    fn a_key_file_of_any_content_and_mode_is_used_or_refused_saying_why(
        bytes in proptest::collection::vec(any::<u8>(), 0..80),
        mode in 0o400u32..0o777,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("fleet.key");
        fs::write(&key_file, &bytes).expect("key");
        fs::set_permissions(&key_file, fs::Permissions::from_mode(mode)).expect("mode");
        let opened = SnapshotStore::open(&dir.path().join("snapshots"), Some(&key_file), "node");
        let open_to_others = mode & 0o007 != 0;
        match opened {
            Ok(store) => {
                prop_assert!(!open_to_others && bytes.len() >= MIN_KEY_FILE_BYTES);
                prop_assert_eq!(&store.key, &bytes);
            }
            Err(StoreError::KeyFile { why, .. }) => {
                prop_assert!(open_to_others || bytes.len() < MIN_KEY_FILE_BYTES, "{why}");
                prop_assert!(why.contains("mode") || why.contains("bytes"), "{why}");
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}
