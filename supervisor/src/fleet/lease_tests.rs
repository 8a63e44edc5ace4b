use super::*;

const TTL: Duration = Duration::from_secs(30);

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn node(dir: &Path, name: &str) -> LeaseDir {
    LeaseDir::open(dir, name, TTL).expect("open")
}

#[test]
fn one_node_holds_a_session_and_the_other_is_told_which_and_for_how_long() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (node(dir.path(), "a"), node(dir.path(), "b"));
    let lease = a.acquire("s", t(0)).expect("a takes it");
    assert_eq!(lease.expires, t(30));
    assert_eq!(
        b.acquire("s", t(10)),
        Err(LeaseError::HeldBy {
            session: "s".into(),
            node: "a".into(),
            expires_in: Duration::from_secs(20),
        })
    );
    assert_eq!(
        b.holder("s", t(10)),
        Some(("a".into(), Duration::from_secs(20)))
    );
    assert!(b.acquire("other", t(10)).is_ok(), "leases are per session");
}

#[test]
fn a_renewed_lease_holds_past_its_first_term_and_a_released_one_is_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (node(dir.path(), "a"), node(dir.path(), "b"));
    let mut lease = a.acquire("s", t(0)).expect("take");
    a.renew(&mut lease, t(20)).expect("renew");
    assert_eq!(lease.expires, t(50));
    assert!(matches!(
        b.acquire("s", t(40)),
        Err(LeaseError::HeldBy { .. })
    ));
    a.release(&lease).expect("release");
    assert_eq!(b.holder("s", t(40)), None);
    assert!(b.acquire("s", t(40)).is_ok());
}

#[test]
fn a_dead_nodes_lease_expires_and_is_taken_over_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (
        node(dir.path(), "a"),
        node(dir.path(), "b"),
        node(dir.path(), "c"),
    );
    let mut dead = a.acquire("s", t(0)).expect("take");
    let taken = b.acquire("s", t(31)).expect("expired: b takes over");
    assert!(
        matches!(c.acquire("s", t(32)), Err(LeaseError::HeldBy { ref node, .. }) if node == "b"),
        "the takeover is b's alone"
    );
    // The old holder, back from a pause, must not renew what it lost.
    assert!(matches!(
        a.renew(&mut dead, t(33)),
        Err(LeaseError::Lost { .. })
    ));
    // Nor may its release remove b's lease.
    a.release(&dead).expect("release is a no-op");
    assert_eq!(
        c.holder("s", t(33)),
        Some(("b".into(), Duration::from_secs(28)))
    );
    let mut taken = taken;
    b.renew(&mut taken, t(40)).expect("b renews");
}

#[test]
fn a_lease_renewed_by_its_holder_after_another_node_took_it_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (node(dir.path(), "a"), node(dir.path(), "b"));
    let mut lease = a.acquire("s", t(0)).expect("take");
    // a's clock says its lease is still good, but b (past its expiry) took it over.
    let _ = b.acquire("s", t(31)).expect("take over");
    assert_eq!(
        a.renew(&mut lease, t(29)),
        Err(LeaseError::Lost {
            session: "s".into(),
            why: "node b holds it now".into(),
        })
    );
}

#[test]
fn a_restarted_node_takes_back_its_own_lease_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = node(dir.path(), "a");
    let _ = before.acquire("s", t(0)).expect("take");
    let after = node(dir.path(), "a");
    assert!(after.acquire("s", t(1)).is_ok(), "same name, same node");
}

#[test]
fn a_moved_aside_lease_that_was_replaced_meanwhile_is_put_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (
        node(dir.path(), "a"),
        node(dir.path(), "b"),
        node(dir.path(), "c"),
    );
    let _ = a.acquire("s", t(0)).expect("take");
    let judged = read_record(&a.path("s")).expect("read").expect("there");
    // b takes the expired lease over before c moves aside what it judged expired.
    let taken = b.acquire("s", t(31)).expect("b takes over");
    c.remove_expired(&c.path("s"), &judged, "c-nonce")
        .expect("remove");
    assert_eq!(
        c.holder("s", t(32)),
        Some(("b".into(), Duration::from_secs(29))),
        "b's fresh lease is back in place"
    );
    assert_eq!(
        read_record(&c.path("s"))
            .expect("read")
            .expect("there")
            .nonce,
        taken.nonce
    );
}

#[test]
fn a_tampered_or_foreign_lease_file_delays_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = node(dir.path(), "a");
    fs::write(a.path("s"), b"{\"node\": \"evil\", not json").expect("write");
    assert_eq!(a.holder("s", t(0)), None);
    let lease = a.acquire("s", t(0)).expect("replaced");
    assert_eq!(a.holder("s", t(1)).map(|(n, _)| n), Some("a".into()));
    assert_eq!(lease.session, "s");
}

#[test]
fn session_names_cannot_reach_outside_the_lease_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = node(&dir.path().join("snapshots"), "a");
    for name in ["../../escape", "/etc/passwd", "a/b", ".."] {
        let lease = a.acquire(name, t(0)).expect("take");
        let path = a.path(name);
        assert_eq!(path.parent(), Some(a.dir.as_path()), "{name}");
        assert!(path.is_file(), "{name}");
        a.release(&lease).expect("release");
    }
    let left: Vec<_> = fs::read_dir(dir.path()).expect("ls").collect();
    assert_eq!(left.len(), 1, "only the snapshots directory: {left:?}");
}

#[test]
fn no_temporary_files_are_left_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (node(dir.path(), "a"), node(dir.path(), "b"));
    let mut lease = a.acquire("s", t(0)).expect("take");
    let _ = b.acquire("s", t(1));
    a.renew(&mut lease, t(2)).expect("renew");
    let _ = b.acquire("s", t(100)).expect("take over");
    let names: Vec<String> = fs::read_dir(&a.dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["s.lease"]);
}
