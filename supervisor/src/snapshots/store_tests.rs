use super::*;
use std::os::unix::fs::MetadataExt;

fn key(session: &str, language: Language) -> SessionKey {
    SessionKey {
        session: session.into(),
        language,
    }
}

#[test]
fn the_key_is_made_once_private_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("snapshots");
    let first = SnapshotStore::open(&root, None, "node-a").expect("open");
    let again = SnapshotStore::open(&root, None, "node-a").expect("reopen");
    assert_eq!(first.key, again.key);
    assert_eq!(
        fs::metadata(root.join(KEY_FILE)).expect("key").mode() & 0o777,
        0o600
    );
    assert_eq!(fs::metadata(&root).expect("root").mode() & 0o777, 0o700);
    fs::write(root.join(KEY_FILE), b"short").expect("write");
    assert!(matches!(
        SnapshotStore::open(&root, None, "node-a"),
        Err(StoreError::BadKey(_))
    ));
}

#[test]
fn nodes_sharing_a_key_file_verify_each_others_snapshots_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write_key = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.path().join(name);
        fs::write(&path, bytes).expect("write key");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    };
    let fleet = write_key("fleet.key", &[7; 32], 0o440);
    let other = write_key("other.key", &[8; 40], 0o400);
    let a = SnapshotStore::open(&dir.path().join("a"), Some(&fleet), "a").expect("a");
    let b = SnapshotStore::open(&dir.path().join("b"), Some(&fleet), "b").expect("b");
    let c = SnapshotStore::open(&dir.path().join("c"), Some(&other), "c").expect("c");
    let s = key("s", Language::Python);
    assert_eq!(a.session_key(&s), b.session_key(&s));
    assert_ne!(a.session_key(&s), c.session_key(&s));
    assert_eq!((a.node(), b.node()), ("a", "b"));
    assert!(
        !dir.path().join("a").join(KEY_FILE).exists(),
        "a key file replaces the node's own key"
    );

    let refused = |path: &Path| match SnapshotStore::open(&dir.path().join("x"), Some(path), "x") {
        Err(StoreError::KeyFile { why, .. }) => why,
        other => panic!("{other:?}"),
    };
    let readable = write_key("readable.key", &[7; 32], 0o644);
    assert!(
        refused(&readable).contains("mode 644"),
        "{}",
        refused(&readable)
    );
    let short = write_key("short.key", b"secret\n", 0o400);
    assert!(
        refused(&short).contains("at least 32"),
        "{}",
        refused(&short)
    );
    assert!(refused(dir.path()).contains("not a regular file"));
    assert!(!refused(&dir.path().join("missing.key")).is_empty());
}

#[test]
fn each_session_and_language_has_its_own_key_and_private_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SnapshotStore::open(dir.path(), None, "node-a").expect("open");
    let a = key("a", Language::Python);
    assert_ne!(
        store.session_key(&a),
        store.session_key(&key("b", Language::Python))
    );
    assert_ne!(
        store.session_key(&a),
        store.session_key(&key("a", Language::Lua))
    );
    assert_eq!(store.session_key(&a), store.session_key(&a.clone()));
    let made = store.prepare(&a).expect("prepare");
    assert_eq!(fs::metadata(&made).expect("dir").mode() & 0o777, 0o700);
    assert_ne!(store.dir(&a), store.dir(&key("a", Language::Lua)));
}

#[test]
fn checkpoints_are_listed_and_forgotten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SnapshotStore::open(dir.path(), None, "node-a").expect("open");
    let a = key("a", Language::JavaScript);
    store.prepare(&a).expect("prepare");
    fs::write(store.checkpoint(&a, "before-risk"), b"12345").expect("write");
    fs::write(store.latest(&a), b"1").expect("write");
    let listed = store.checkpoints(&"a".into());
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].bytes),
        ("before-risk", 5)
    );
    assert_eq!(
        store.languages_with_checkpoint(&"a".into(), "before-risk"),
        [Language::JavaScript]
    );
    assert_eq!(
        store.languages_with_latest(&"a".into()),
        [Language::JavaScript]
    );
    store.forget(&"a".into(), None).expect("forget");
    assert!(store.checkpoints(&"a".into()).is_empty());
    assert!(!store.has_latest(&a));
    store
        .forget(&"never-seen".into(), Some(Language::Lua))
        .expect("nothing to forget");
}

#[test]
fn a_session_directory_name_decodes_to_its_session() {
    for name in ["a", "team.alpha", "t/x y", "%", "", "é:@"] {
        assert_eq!(
            decode_component(&crate::names::encode_component(name)).as_deref(),
            Some(name)
        );
    }
    assert_eq!(decode_component("%2"), None);
    assert_eq!(decode_component("%61"), None, "not what encoding makes");
}

#[test]
fn checkpoint_names_are_plain_file_names() {
    for good in ["a", "before-risk", "v1.2_x", &"n".repeat(64)] {
        assert!(check_checkpoint_name(good).is_ok(), "{good}");
    }
    for bad in [
        "",
        ".hidden",
        "..",
        "a/b",
        "../x",
        "a b",
        &"n".repeat(65),
        "é",
    ] {
        assert!(check_checkpoint_name(bad).is_err(), "{bad}");
    }
}
