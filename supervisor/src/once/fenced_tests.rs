//! The fenced log against a real etcd: a stale holder's memory never becomes current, and
//! a copied older file is refused.

use super::*;
use crate::fleet::etcd::tests::{node, revoke_behind_its_back, wait_for, TestEtcd};

fn entry(id: &str) -> Entry {
    Entry {
        id: id.into(),
        fingerprint: "f".into(),
        result: Some(crate::cell::EvalResult::from_cells(Vec::new())),
        bytes: 10,
    }
}

fn remember(
    log: &FencedRequestLog,
    session: &SessionName,
    memory: &mut RequestMemory,
    id: &str,
) -> Result<Stamp, LogError> {
    memory.remember(entry(id), 8, 1 << 20);
    log.append(session, &entry(id), memory)
}

fn ids(log: &FencedRequestLog, session: &SessionName) -> Vec<String> {
    let (entries, _) = log.load(session).expect("load").expect("kept");
    entries.into_iter().map(|e| e.id).collect()
}

#[test]
fn a_stale_holders_memory_never_becomes_current_and_a_copied_file_is_refused() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let ttl = Duration::from_secs(3);
    let (a, b) = (
        Arc::new(node(&etcd, "node-a", ttl)),
        Arc::new(node(&etcd, "node-b", ttl)),
    );
    let store = |name: &str| {
        Arc::new(SnapshotStore::open(&dir.path().join("snapshots"), None, name).expect("store"))
    };
    let log_a = FencedRequestLog::new(store("node-a"), Arc::clone(&a), 8);
    let log_b = FencedRequestLog::new(store("node-b"), Arc::clone(&b), 8);
    let session = SessionName::from("s");
    let mut memory_a = RequestMemory::default();

    assert!(
        remember(&log_a, &session, &mut memory_a, "R1").is_err(),
        "no lease, no memory"
    );
    a.acquire("s").expect("a takes it");
    remember(&log_a, &session, &mut memory_a, "R1").expect("a remembers R1");
    assert_eq!(ids(&log_a, &session), ["R1"]);
    let a_file = a.requests("s").expect("held").expect("committed").file;
    let a_bytes = std::fs::read(log_a.dir(&session).join(&a_file)).expect("a's file");

    // a is paused past its lease: etcd lets it go, b takes the session and what a committed.
    revoke_behind_its_back(&a, &b, "s");
    wait_for("b takes the session", Duration::from_secs(5), || {
        b.acquire("s").ok()
    });
    assert_eq!(ids(&log_b, &session), ["R1"]);
    let before = log_b.stamp(&session);

    // a, awake and still believing it holds the lease, remembers R2: refused by etcd.
    let stale = remember(&log_a, &session, &mut memory_a, "R2").expect_err("fenced");
    assert!(stale.to_string().contains("not committed"), "{stale}");
    assert_eq!(log_b.stamp(&session), before, "b's memory is unchanged");
    assert_eq!(ids(&log_b, &session), ["R1"]);

    let mut memory_b = RequestMemory::default();
    memory_b.remember(entry("R1"), 8, 1 << 20);
    remember(&log_b, &session, &mut memory_b, "R3").expect("b remembers R3");
    assert_eq!(ids(&log_b, &session), ["R1", "R3"]);
    assert!(
        !log_a.dir(&session).join(&a_file).exists(),
        "the older file was collected"
    );

    // a's older file copied over b's current one is refused, never read.
    let b_file = b.requests("s").expect("held").expect("committed").file;
    std::fs::write(log_b.dir(&session).join(&b_file), &a_bytes).expect("copy over");
    let fresh = FencedRequestLog::new(store("node-b"), Arc::clone(&b), 8);
    match fresh.load(&session) {
        Err(LogError::Refused { why, .. }) => {
            assert!(why.contains("etcd names as current"), "{why}")
        }
        other => panic!("a copied file was read: {other:?}"),
    }
}
