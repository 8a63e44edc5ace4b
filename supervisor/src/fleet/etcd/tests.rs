//! The etcd backend against a real etcd (Debian's `etcd-server`), started by each test on
//! free ports in a directory of its own and stopped at its end.

use super::requests::block_on;
use super::*;
use crate::fleet::pointer::Pointer;
use std::time::Instant;

/// A single-member etcd of the test's own: the end-to-end tests' server, included by path.
#[path = "../../../../tests/common/etcd_server.rs"]
mod server;
use server::free_port;
pub(crate) use server::EtcdServer as TestEtcd;

pub(crate) fn node(etcd: &TestEtcd, name: &str, ttl: Duration) -> EtcdLeases {
    let settings = EtcdSettings {
        endpoints: vec![etcd.url.clone()],
        ..EtcdSettings::default()
    };
    EtcdLeases::connect(&settings, name, ttl, Duration::from_secs(10)).expect("connect")
}

fn pointer(blob: &str, token: i64) -> Pointer {
    Pointer {
        blob: blob.into(),
        sha256: "00".into(),
        bytes: 1,
        cells: 1,
        node: "n".into(),
        token,
    }
}

/// Revokes `holder`'s lease on `session` behind its back (through `other`'s client), as etcd
/// does to a node paused past its lease: `holder` learns it only at its next keep-alive.
pub(crate) fn revoke_behind_its_back(holder: &EtcdLeases, other: &EtcdLeases, session: &str) {
    let lease_id = holder.held(session).expect("held").lease_id;
    let mut client = other.any_client();
    block_on(&other.runtime, Duration::from_secs(5), async move {
        client.lease_revoke(lease_id).await.map(|_| ())
    })
    .expect("answered")
    .expect("revoked");
}

pub(crate) fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = f() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_node_holds_a_session_and_a_stale_tokens_commit_is_refused() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (a, b) = (node(&etcd, "node-a", ttl), node(&etcd, "node-b", ttl));
    let py = Language::Python;

    let token_a = a.acquire("team/s 1").expect("a takes it");
    assert!(a.provable("team/s 1"));
    match b.acquire("team/s 1") {
        Err(LeaseError::HeldBy {
            node, expires_in, ..
        }) => {
            assert_eq!(node, "node-a");
            assert!(expires_in <= Duration::from_secs(2), "{expires_in:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.holder("team/s 1").map(|h| h.0).as_deref(), Some("node-a"));
    let (blob, token) = a.next_blob("team/s 1").expect("held");
    assert_eq!(token, token_a);
    let first = pointer(&blob, token_a);
    let committed = a.commit("team/s 1", py, first.clone()).blocking_recv();
    assert_eq!(committed, Ok(Ok(())));

    // a keeps it past its time to live by keep-alives alone.
    std::thread::sleep(ttl * 2);
    assert!(a.provable("team/s 1"), "kept alive");
    assert!(b.acquire("team/s 1").is_err());

    a.release("team/s 1");
    let token_b = wait_for("b takes the released lease", Duration::from_secs(5), || {
        b.acquire("team/s 1").ok()
    });
    assert!(
        token_b > token_a,
        "tokens only grow: {token_a} then {token_b}"
    );
    assert_eq!(
        b.pointer("team/s 1", py),
        Some(first),
        "b reads what a committed"
    );

    // a, woken from a pause, still has its old token: etcd refuses its commit.
    let stale = pointer("1-9.snap", token_a);
    assert_eq!(
        a.commit_with_token("team/s 1", py, &stale, token_a),
        Err(CommitError::Fenced { token: token_a })
    );
    let mine = pointer(&b.next_blob("team/s 1").expect("held").0, token_b);
    assert_eq!(b.commit("team/s 1", py, mine).blocking_recv(), Ok(Ok(())));
    assert_eq!(
        a.commit("team/s 1", py, stale).blocking_recv(),
        Ok(Err(CommitError::NotHeld)),
        "a holds nothing now"
    );
}

#[test]
fn a_lease_whose_keep_alives_go_unanswered_is_lost_and_stays_lost() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let a = node(&etcd, "node-a", ttl);
    a.acquire("s").expect("take");
    assert!(a.provable("s"));
    // etcd stops answering: no acknowledgement, so within the time to live the lease is no
    // longer provable, whatever the local clock of the last renewal says.
    etcd.signal(nix::sys::signal::Signal::SIGSTOP);
    // Every acknowledgement was sent before the stop, so one time to live later none proves
    // the lease (however late this thread wakes: a lost lease stays lost).
    std::thread::sleep(ttl);
    assert!(
        !a.provable("s"),
        "provable a time to live after etcd stopped"
    );
    etcd.signal(nix::sys::signal::Signal::SIGCONT);
    match a.check("s") {
        Err(LeaseError::Lost { why, .. }) => assert!(why.contains("keep-alive"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(
        a.next_blob("s").is_none(),
        "nothing held, nothing to write under"
    );
}

#[test]
fn an_unreachable_etcd_is_a_clear_error_naming_it() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let settings = EtcdSettings {
        endpoints: vec![url.clone()],
        ..EtcdSettings::default()
    };
    let err = EtcdLeases::connect(
        &settings,
        "n",
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .expect_err("nothing listens");
    let text = err.to_string();
    assert!(
        text.contains(&format!("no etcd member answered at {url}")),
        "{text}"
    );
}

#[test]
fn a_lease_etcd_no_longer_has_is_lost_at_the_next_keep_alive() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let (a, b) = (node(&etcd, "node-a", ttl), node(&etcd, "node-b", ttl));
    let token = a.acquire("s").expect("take");
    // The lease revoked behind a's back (an operator, or etcd's own expiry): its key goes,
    // and the next keep-alive's answer (no time to live) is what tells a.
    let lease_id = a.held("s").expect("held").lease_id;
    let mut client = b.any_client();
    block_on(&b.runtime, Duration::from_secs(5), async move {
        client.lease_revoke(lease_id).await.map(|_| ())
    })
    .expect("answered")
    .expect("revoked");
    let taken = wait_for("b takes the session", Duration::from_secs(5), || {
        b.acquire("s").ok()
    });
    assert!(taken > token);
    wait_for("a learns it lost the lease", ttl, || {
        (!a.provable("s")).then_some(())
    });
    match a.check("s") {
        Err(LeaseError::Lost { why, .. }) => assert!(why.contains("expired"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_save_begun_before_its_state_was_forgotten_is_never_committed() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let a = node(&etcd, "node-a", Duration::from_secs(5));
    let token = a.acquire("s").expect("take");
    let py = Language::Python;
    let (before, _) = a.next_blob("s").expect("held");
    // A close (or reset) forgets the state while that save is still being written.
    a.forget("s", py);
    assert_eq!(
        a.commit("s", py, pointer(&before, token)).blocking_recv(),
        Ok(Err(CommitError::Forgotten))
    );
    assert_eq!(a.pointer("s", py), None);
    // What the session saves afterwards is committed as usual.
    let (after, _) = a.next_blob("s").expect("held");
    assert_eq!(
        a.commit("s", py, pointer(&after, token)).blocking_recv(),
        Ok(Ok(()))
    );
    assert_eq!(a.pointer("s", py).map(|p| p.blob), Some(after));
}

#[test]
fn credentials_others_can_read_and_half_a_client_certificate_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let password = dir.path().join("password");
    std::fs::write(&password, "secret\n").expect("write");
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let refused = |settings: EtcdSettings| {
        EtcdLeases::connect(
            &settings,
            "n",
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
        .expect_err("refused")
        .to_string()
    };
    let with_user = EtcdSettings {
        endpoints: vec!["http://127.0.0.1:1".into()],
        user: Some("cellvisor".into()),
        password_file: Some(password.clone()),
        ..EtcdSettings::default()
    };
    let text = refused(with_user.clone());
    assert!(text.contains("mode 644") && text.contains("0400"), "{text}");
    let text = refused(EtcdSettings {
        password_file: None,
        ..with_user
    });
    assert!(text.contains("needs fleet.etcd-password-file"), "{text}");
    let text = refused(EtcdSettings {
        endpoints: vec!["https://127.0.0.1:1".into()],
        cert_file: Some(password),
        ..EtcdSettings::default()
    });
    assert!(text.contains("go together"), "{text}");
}

fn progress(id: &str, cells: usize) -> Progress {
    let spec = crate::cell::CellSpec::new(Language::Python, "x");
    Progress {
        id: id.into(),
        fingerprint: "f".into(),
        cells: (0..cells)
            .map(|i| crate::cell::CellReport::error(String::new()).into_result(i, 1, &spec))
            .collect(),
    }
}

#[test]
fn a_requests_progress_is_committed_with_its_state_and_never_under_a_stale_token() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (a, b) = (node(&etcd, "node-a", ttl), node(&etcd, "node-b", ttl));
    let py = Language::Python;
    let token_a = a.acquire("s").expect("a takes it");
    let (blob, _) = a.next_blob("s").expect("held");
    let committed = a
        .commit_with_progress("s", py, pointer(&blob, token_a), Some(progress("R", 1)))
        .blocking_recv();
    assert_eq!(committed, Ok(Ok(())));
    assert_eq!(a.progress("s"), [progress("R", 1)]);
    a.release("s");
    wait_for("b takes the released lease", Duration::from_secs(5), || {
        b.acquire("s").ok()
    });
    assert_eq!(
        b.progress("s"),
        [progress("R", 1)],
        "b reads what a committed"
    );

    // a, woken from a pause, sends its state and a further progress under its old token:
    // refused whole, so what b and any later holder read is unchanged.
    let stale = progress("R", 2);
    let (members, key) = (a.members.clone(), lease_key("s"));
    let puts = vec![
        (
            pointer_key("s", py),
            pointer("1-9.snap", token_a).to_bytes(),
        ),
        (progress_key("s", py), stale.to_bytes()),
    ];
    let refused = block_on(&a.runtime, Duration::from_secs(5), async move {
        requests::fenced_puts(&members, &key, token_a, puts).await
    });
    assert_eq!(refused, Ok(Err(CommitError::Fenced { token: token_a })));
    b.release("s");
    let c = node(&etcd, "node-c", ttl);
    wait_for("c takes it", Duration::from_secs(5), || c.acquire("s").ok());
    assert_eq!(c.progress("s"), [progress("R", 1)]);
    assert_eq!(c.pointer("s", py).map(|p| p.blob), Some(blob));

    // A reset of the language forgets its progress with its pointer.
    c.forget("s", py);
    assert!(c.progress("s").is_empty());
    c.release("s");
    let d = node(&etcd, "node-d", ttl);
    wait_for("d takes it", Duration::from_secs(5), || d.acquire("s").ok());
    assert!(d.progress("s").is_empty(), "the forget reached etcd");
}

/// Test-only ways in: a commit without progress, one under any token, a member's client.
impl EtcdLeases {
    /// A client of the first member (connected now).
    pub fn any_client(&self) -> etcd_client::Client {
        let members = self.members.clone();
        block_on(&self.runtime, Duration::from_secs(5), async move {
            members.client(0).await
        })
        .expect("answered")
        .expect("connected")
    }

    /// Commits `pointer` as `session`'s current state in `language`, fenced by the token
    /// the lease was taken at. The answer comes once etcd has decided.
    pub fn commit(
        &self,
        session: &str,
        language: Language,
        pointer: Pointer,
    ) -> oneshot::Receiver<Result<(), CommitError>> {
        self.commit_with_progress(session, language, pointer, None)
    }

    /// Commits `pointer` for `session` under `token` directly (no lease held here needed, a
    /// test's stand-in for a node that woke from a pause):
    /// what a node that lost its lease would send; etcd refuses it unless `token` is the
    /// live lease's.
    pub fn commit_with_token(
        &self,
        session: &str,
        language: Language,
        pointer: &Pointer,
        token: i64,
    ) -> Result<(), CommitError> {
        let members = self.members.clone();
        let (key, ptr_key, value) = (
            lease_key(session),
            pointer_key(session, language),
            pointer.to_bytes(),
        );
        block_on(&self.runtime, Duration::from_secs(5), async move {
            requests::fenced_put(&members, &key, token, &ptr_key, value).await
        })
        .map_err(|e| CommitError::Etcd(e.to_string()))?
    }
}

#[test]
fn a_stalled_member_is_passed_over_and_a_commit_whose_answer_is_lost_gives_the_lease_up() {
    let Some(etcd) = TestEtcd::start_if_installed() else {
        return;
    };
    // A member that accepts connections and never answers: a stopped etcd's socket.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let stalled_url = format!("http://{}", stalled.local_addr().expect("address"));
    let ttl = Duration::from_secs(2);
    let settings = EtcdSettings {
        endpoints: vec![stalled_url, etcd.url.clone()],
        ..EtcdSettings::default()
    };
    let a = EtcdLeases::connect(&settings, "node-a", ttl, Duration::from_secs(10))
        .expect("the other member answers");
    let py = Language::Python;
    let token = a.acquire("s").expect("taken through the other member");
    // Its keep-alives go to the member that answers: held through three times its time to
    // live.
    std::thread::sleep(ttl * 3);
    assert!(a.provable("s"), "the lease is still provable");
    let (blob, _) = a.next_blob("s").expect("held");
    let committed = a.commit("s", py, pointer(&blob, token)).blocking_recv();
    assert_eq!(committed, Ok(Ok(())));

    // A commit sent to the stalled member gets no answer within its deadline. Read back
    // from the other member it is not in place while the token lives (it could still land):
    // never sent again, answered as unknown, and the lease given up at once (revoked), so
    // no late copy can land and the next holder reads the state before it.
    a.members.prefer(0);
    let (lost_blob, _) = a.next_blob("s").expect("held");
    let lost = a
        .commit("s", py, pointer(&lost_blob, token))
        .blocking_recv();
    assert!(
        matches!(&lost, Ok(Err(CommitError::Unknown(_)))),
        "{lost:?}"
    );
    assert!(!a.provable("s"), "the lease was given up");
    let b = node(&etcd, "node-b", ttl);
    let taken = wait_for("b takes it at once", Duration::from_secs(5), || {
        b.acquire("s").ok()
    });
    assert!(taken > token);
    assert_eq!(b.pointer("s", py).map(|p| p.blob), Some(blob));
    drop(stalled);
}
