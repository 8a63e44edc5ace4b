use super::super::memory::Entry;
use super::*;

fn log(dir: &std::path::Path, capacity: usize) -> FileRequestLog {
    let store = SnapshotStore::open(&dir.join("snapshots"), None, "n").expect("store");
    FileRequestLog::new(Arc::new(store), capacity)
}

fn entry(id: &str) -> Entry {
    Entry {
        id: id.into(),
        fingerprint: "f".into(),
        result: Some(crate::cell::EvalResult::from_cells(Vec::new())),
        bytes: 10,
    }
}

/// Remembers `ids` one by one in `memory` and the log, as the book does.
fn remember(log: &FileRequestLog, session: &SessionName, memory: &mut RequestMemory, ids: &[&str]) {
    for id in ids {
        memory.remember(entry(id), log.max_lines / 2, 1 << 20);
        log.append(session, &entry(id), memory).expect("append");
    }
}

fn ids(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.id.clone()).collect()
}

#[test]
fn appended_entries_come_back_in_order_and_each_write_changes_the_stamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = log(dir.path(), 8);
    let session = SessionName::from("s");
    assert!(log.load(&session).expect("load").is_none());
    let mut memory = RequestMemory::default();
    remember(&log, &session, &mut memory, &["a"]);
    let first = log.stamp(&session).expect("written");
    remember(&log, &session, &mut memory, &["b", "c"]);
    assert_ne!(log.stamp(&session), Some(first));
    let (entries, stamp) = log.load(&session).expect("load").expect("kept");
    assert_eq!(ids(&entries), ["a", "b", "c"]);
    assert_eq!(Some(stamp), log.stamp(&session));
    // Another host (a fresh log on the same directory) reads the same, and appends after it.
    let other = self::log(dir.path(), 8);
    let (theirs, _) = other.load(&session).expect("load").expect("kept");
    assert_eq!(ids(&theirs), ["a", "b", "c"]);
    remember(&other, &session, &mut memory, &["d"]);
    let (entries, _) = log.load(&session).expect("load").expect("kept");
    assert_eq!(ids(&entries), ["a", "b", "c", "d"]);
    log.forget(&session).expect("forget");
    assert!(log.load(&session).expect("load").is_none());
}

#[test]
fn past_twice_the_capacity_the_file_is_written_again_with_what_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = log(dir.path(), 2);
    let session = SessionName::from("s");
    let mut memory = RequestMemory::default();
    remember(&log, &session, &mut memory, &["a", "b", "c", "d"]);
    let (entries, _) = log.load(&session).expect("load").expect("kept");
    assert_eq!(
        ids(&entries),
        ["a", "b", "c", "d"],
        "4 lines: not yet past 4"
    );
    remember(&log, &session, &mut memory, &["e"]);
    let (entries, _) = log.load(&session).expect("load").expect("kept");
    assert_eq!(ids(&entries), ["d", "e"], "rewritten with the two kept");
    assert_eq!(
        RequestMemory::replay(entries, 2, 1 << 20),
        memory,
        "what is read back is what the host remembers"
    );
}

#[test]
fn an_altered_moved_dropped_or_foreign_line_is_refused_and_a_torn_last_line_left_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = log(dir.path(), 8);
    let (mine, other) = (SessionName::from("mine"), SessionName::from("other"));
    remember(&log, &mine, &mut RequestMemory::default(), &["a", "b", "c"]);
    remember(&log, &other, &mut RequestMemory::default(), &["x"]);
    let (path, _) = log.store.requests(&mine);
    let (other_path, _) = log.store.requests(&other);
    let good = std::fs::read(&path).expect("read");
    let lines: Vec<&[u8]> = good[MAGIC.len()..]
        .split_inclusive(|&b| b == b'\n')
        .collect();
    let write = |parts: &[&[u8]]| {
        let mut bytes = MAGIC.to_vec();
        for part in parts {
            bytes.extend_from_slice(part);
        }
        std::fs::write(&path, bytes).expect("write");
    };
    let refused = |why: &str| {
        let err = log.load(&mine).expect_err(why).to_string();
        assert!(err.contains("refused"), "{why}: {err}");
    };
    // Another session's file, copied over this one's.
    std::fs::copy(&other_path, &path).expect("copy");
    refused("another session's");
    // A line dropped from the middle, lines swapped.
    write(&[lines[0], lines[2]]);
    refused("dropped");
    write(&[lines[1], lines[0], lines[2]]);
    refused("moved");
    // One byte of a line's JSON changed.
    let mut altered = lines[1].to_vec();
    let at = altered.len() - 3;
    altered[at] ^= 1;
    write(&[lines[0], &altered, lines[2]]);
    refused("altered");
    // A last line a crash cut short: the rest stands.
    write(&[lines[0], lines[1], &lines[2][..20]]);
    let (entries, _) = log.load(&mine).expect("load").expect("kept");
    assert_eq!(ids(&entries), ["a", "b"]);
    // A file another daemon's key signed.
    let stranger = self::log(&dir.path().join("elsewhere"), 8);
    remember(&stranger, &mine, &mut RequestMemory::default(), &["a"]);
    let (theirs, _) = stranger.store.requests(&mine);
    std::fs::copy(theirs, &path).expect("copy");
    refused("another key's");
}
