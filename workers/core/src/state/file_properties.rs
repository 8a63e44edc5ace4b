//! Property tests of the snapshot file reader: arbitrary bytes, and sealed files that were
//! changed, cut, lengthened, re-versioned or sealed under another key, never panic
//! [`open_verified`] and are refused with a typed [`StateRefusal`] (a file that is not whole
//! and ours is never read as data).
//!
//! Fixed seed; 128 cases per property (`PROPTEST_CASES` sets more for a manual run).

use super::{open_verified, seal, FIXED_TRAILER, MAGIC};
use cellvisor_ipc::state::{SnapshotMeta, StateRefusal};
use cellvisor_ipc::Language;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

const KEY: &[u8] = b"the session's key";

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(128);
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(27),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn meta(payload_bytes: u64, saved: Vec<String>) -> SnapshotMeta {
    SnapshotMeta {
        language: Language::JavaScript,
        taken_at: "2026-12-04T12:00:00Z".into(),
        reason: "property".into(),
        node: "node".into(),
        saved,
        skipped: Vec::new(),
        payload_bytes,
        engine: "QuickJS".into(),
    }
}

/// A sealed snapshot of `payload` in `dir`, as bytes.
fn sealed_bytes(dir: &Path, payload: &[u8], saved: Vec<String>) -> Vec<u8> {
    let path = dir.join("sealed.snap");
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("create");
    file.write_all(payload).expect("payload");
    seal(&mut file, &meta(payload.len() as u64, saved), KEY).expect("seal");
    std::fs::read(&path).expect("read back")
}

fn written(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("tested.snap");
    std::fs::write(&path, bytes).expect("write");
    path
}

fn is_tampered(outcome: &Result<(SnapshotMeta, u64), StateRefusal>) -> bool {
    matches!(outcome, Err(StateRefusal::Tampered { .. }))
}

/// What the tests mutate a sealed file with.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte (at a position taken modulo the length) with a nonzero mask.
    Flip { at: usize, mask: u8 },
    /// Keep only the first `keep` bytes (modulo the length).
    Truncate { keep: usize },
    /// Add bytes at the end.
    Append(Vec<u8>),
    /// Add bytes at a position (modulo the length).
    Insert { at: usize, bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Append),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
    let len = bytes.len();
    match mutation {
        Mutation::Flip { at, mask } => bytes[at % len] ^= mask,
        Mutation::Truncate { keep } => bytes.truncate(keep % len),
        Mutation::Append(more) => bytes.extend_from_slice(more),
        Mutation::Insert { at, bytes: more } => {
            let at = at % (len + 1);
            bytes.splice(at..at, more.iter().copied());
        }
    }
    bytes
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_are_refused_never_read(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let outcome = open_verified(&written(dir.path(), &bytes), KEY);
        prop_assert!(is_tampered(&outcome), "{outcome:?}");
    }

    #[test]
    fn arbitrary_bytes_with_a_snapshot_ending_are_refused(
        body in proptest::collection::vec(any::<u8>(), 0..256),
        lengths in proptest::collection::vec(any::<u8>(), 12),
        tag in proptest::collection::vec(any::<u8>(), 32),
    ) {
        // The right magic, so the reader goes on to the lengths and the tag.
        let mut bytes = body;
        bytes.extend_from_slice(&lengths);
        bytes.extend_from_slice(&tag);
        bytes.extend_from_slice(MAGIC);
        let dir = tempfile::tempdir().expect("tempdir");
        let outcome = open_verified(&written(dir.path(), &bytes), KEY);
        prop_assert!(is_tampered(&outcome), "{outcome:?}");
    }

    #[test]
    fn a_mutated_snapshot_is_refused_as_tampered(
        payload in proptest::collection::vec(any::<u8>(), 0..256),
        names in proptest::collection::vec("[a-z_]{1,8}", 0..4),
        mutation in mutation(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let whole = sealed_bytes(dir.path(), &payload, names);
        let bytes = mutate(whole.clone(), &mutation);
        prop_assume!(bytes != whole);
        let outcome = open_verified(&written(dir.path(), &bytes), KEY);
        prop_assert!(is_tampered(&outcome), "{mutation:?}: {outcome:?}");
    }

    #[test]
    fn a_snapshot_under_another_key_or_of_another_version_is_refused(
        payload in proptest::collection::vec(any::<u8>(), 0..128),
        other_key in proptest::collection::vec(any::<u8>(), 1..48),
        version in "[0-9A-Z]{2}",
    ) {
        prop_assume!(other_key != KEY);
        let dir = tempfile::tempdir().expect("tempdir");
        let whole = sealed_bytes(dir.path(), &payload, Vec::new());
        let path = written(dir.path(), &whole);
        prop_assert!(open_verified(&path, KEY).is_ok());
        let outcome = open_verified(&path, &other_key);
        prop_assert!(is_tampered(&outcome), "{outcome:?}");

        prop_assume!(version.as_bytes() != &MAGIC[6..]);
        let mut other_version = whole;
        let at = other_version.len() - 2;
        other_version[at..].copy_from_slice(version.as_bytes());
        match open_verified(&written(dir.path(), &other_version), KEY) {
            Err(StateRefusal::Tampered { why }) => {
                prop_assert!(why.contains(&format!("format {version}")), "{why}");
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn a_well_sealed_unreadable_description_is_a_typed_failure(
        meta_json in proptest::collection::vec(any::<u8>(), 0..200),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        // Sealed by hand with the right key: only the description is wrong.
        use hmac::{Hmac, KeyInit, Mac};
        let mut tagger = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(KEY).expect("key");
        tagger.update(super::DOMAIN);
        tagger.update(&payload);
        tagger.update(&meta_json);
        let payload_len = payload.len() as u64;
        let meta_len = meta_json.len() as u32;
        tagger.update(&payload_len.to_le_bytes());
        tagger.update(&meta_len.to_le_bytes());
        let mut bytes = payload.clone();
        bytes.extend_from_slice(&meta_json);
        bytes.extend_from_slice(&payload_len.to_le_bytes());
        bytes.extend_from_slice(&meta_len.to_le_bytes());
        bytes.extend_from_slice(&tagger.finalize().into_bytes());
        bytes.extend_from_slice(MAGIC);
        prop_assert_eq!(bytes.len(), payload.len() + meta_json.len() + FIXED_TRAILER);
        let dir = tempfile::tempdir().expect("tempdir");
        let outcome = open_verified(&written(dir.path(), &bytes), KEY);
        prop_assert!(
            matches!(outcome, Err(StateRefusal::Failed { .. })),
            "{outcome:?}"
        );
    }
}
