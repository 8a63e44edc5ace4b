//! Actor tests of a fleet node's leases, with scripted workers: a session runs only under
//! its lease, another node's lease refuses it with that node's name, `resume` refuses a
//! session that does not exist, and a lost lease stops the session here.

use super::tests::Rig;
use super::*;
use crate::cell::CellStatus;
use crate::fleet::LeaseDir;
use crate::request_error::RequestError;
use std::time::{Duration, SystemTime};

fn fleet_rig() -> Rig {
    Rig::start_with(true, |c| {
        c.fleet.leases = cellvisor_config::schema::LeaseStore::File;
        c.fleet.lease_ttl = Duration::from_secs(30);
    })
}

fn other_node(rig: &Rig) -> LeaseDir {
    LeaseDir::open(&rig.snapshots_dir(), "node-b", Duration::from_secs(30)).expect("node-b")
}

#[actix_rt::test]
async fn a_session_runs_under_this_nodes_lease_until_it_stops() {
    let rig = fleet_rig();
    let b = other_node(&rig);
    assert_eq!(rig.run("s", "ok:1", None).await.output, "1\n");
    let (holder, _) = b.holder("s", SystemTime::now()).expect("leased");
    assert_eq!(holder, "node-a");
    assert_eq!(rig.control("s", ControlAction::Close).await, 1);
    rig.until("closed", |rows| rows.is_empty()).await;
    assert_eq!(
        b.holder("s", SystemTime::now()),
        None,
        "released once stopped"
    );
    rig.stop().await;
}

#[actix_rt::test]
async fn a_session_another_node_holds_is_refused_naming_that_node() {
    let rig = fleet_rig();
    let b = other_node(&rig);
    let _held = b.acquire("taken", SystemTime::now()).expect("b takes it");
    let admitted = rig.addr.send(Admit {
        session: "taken".into(),
        resume: false,
    });
    match admitted.await.expect("alive") {
        Err(RequestError::LeasedElsewhere {
            node, retry_after, ..
        }) => {
            assert_eq!(node, "node-b");
            assert!(retry_after <= Duration::from_secs(30) && !retry_after.is_zero());
        }
        other => panic!("{other:?}"),
    }
    let refused = rig.run("taken", "ok:1", None).await;
    assert_eq!(refused.status, CellStatus::Error);
    assert!(refused.output.contains("node-b"), "{}", refused.output);
    assert!(rig.status().await.is_empty(), "no worker started for it");
    assert_eq!(rig.run("free", "ok:2", None).await.output, "2\n");
    rig.stop().await;
}

#[actix_rt::test]
async fn resume_refuses_a_session_neither_live_nor_saved_and_takes_no_lease_for_it() {
    let rig = fleet_rig();
    let b = other_node(&rig);
    let resume = |session: &str| {
        rig.addr.send(Admit {
            session: session.into(),
            resume: true,
        })
    };
    match resume("never").await.expect("alive") {
        Err(RequestError::SessionUnknown(session)) => assert_eq!(session, "never"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.holder("never", SystemTime::now()), None);
    rig.run("live", "ok:1", None).await;
    assert_eq!(resume("live").await.expect("alive"), Ok(()));
    rig.stop().await;
}

#[actix_rt::test]
async fn a_lost_lease_stops_the_session_here_without_saving() {
    let rig = fleet_rig();
    assert_eq!(rig.run("s", "ok:1", None).await.output, "1\n");
    // Another node took the lease over (as if this one had been paused past its expiry).
    let leases = rig.snapshots_dir().join(crate::fleet::lease::LEASES_DIR);
    std::fs::remove_file(leases.join("s.lease")).expect("rm");
    let _taken = other_node(&rig)
        .acquire("s", SystemTime::now())
        .expect("b takes it");
    rig.addr.send(RenewLeases).await.expect("alive");
    rig.until("stopped here", |rows| rows.is_empty()).await;
    assert_eq!(
        rig.latest_snapshot("s"),
        None,
        "nothing saved over node-b's state"
    );
    rig.stop().await;
}
