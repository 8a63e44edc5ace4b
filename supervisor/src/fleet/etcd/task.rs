//! A held lease's own tasks: keep-alives every third of its time to live (on a task of
//! their own, moving to the next member when theirs stalls), and the session's commits,
//! forgets and release in the order they were asked.

use super::members::{Members, Retry};
use super::requests::{fenced_put, fenced_puts};
use super::{
    checkpoint_key, lease_key, pointer_key, progress_key, requests_key, CommitError, Held, Op,
};
use crate::fleet::proof::{self, BootInstant, KeepAlive};
use cellvisor_ipc::Language;
use etcd_client::{Compare, CompareOp, TxnOp};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// One held lease's life: its keep-alives on a task of their own (a commit waiting on a
/// member never holds them up), and its commits in order, until it is released or lost.
pub(super) async fn run_lease(
    members: Arc<Members>,
    session: String,
    held: Arc<Held>,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    let key = lease_key(&session);
    let alive = tokio::spawn(keep_alive_loop(
        members.clone(),
        session.clone(),
        held.clone(),
    ));
    while let Some(op) = ops.recv().await {
        let lost = crate::locking::lock(&held.ack).is_none();
        match op {
            Op::Commit { reply, .. }
            | Op::CommitCheckpoint { reply, .. }
            | Op::CommitRequests { reply, .. }
                if lost =>
            {
                // Never sent once the lease is lost: a commit of this node's could then land
                // after a later one's read back found it missing.
                let _ = reply.send(Err(CommitError::NotHeld));
            }
            Op::Commit {
                language,
                pointer,
                progress,
                reply,
            } => {
                let mut puts = vec![(pointer_key(&session, language), pointer.to_bytes())];
                if let Some(progress) = &progress {
                    puts.push((progress_key(&session, language), progress.to_bytes()));
                }
                let result = fenced_puts(&members, &key, held.token, puts).await;
                if result.is_ok() {
                    crate::locking::lock(&held.pointers).insert(language, pointer);
                    if let Some(progress) = progress {
                        crate::locking::lock(&held.progress).insert(language, progress);
                    }
                }
                after_commit(&members, &session, &held, &result).await;
                let _ = reply.send(result);
            }
            Op::Forget { language } => {
                let txn = etcd_client::Txn::new()
                    .when([Compare::create_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        held.token,
                    )])
                    .and_then([
                        TxnOp::delete(pointer_key(&session, language), None),
                        TxnOp::delete(progress_key(&session, language), None),
                    ]);
                send_txn(&members, txn).await;
            }
            Op::CommitCheckpoint {
                language,
                name,
                pointer,
                reply,
            } => {
                let at = checkpoint_key(&session, language, &name);
                let result = fenced_put(&members, &key, held.token, &at, pointer.to_bytes()).await;
                if result.is_ok() {
                    crate::locking::lock(&held.checkpoints).insert((language, name), pointer);
                }
                after_commit(&members, &session, &held, &result).await;
                let _ = reply.send(result);
            }
            Op::CommitRequests { pointer, reply } => {
                let at = requests_key(&session);
                let result = fenced_put(&members, &key, held.token, &at, pointer.to_bytes()).await;
                if result.is_ok() {
                    *crate::locking::lock(&held.requests) = Some(pointer);
                }
                after_commit(&members, &session, &held, &result).await;
                let _ = reply.send(result);
            }
            Op::ForgetRequests => {
                let txn = etcd_client::Txn::new()
                    .when([Compare::create_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        held.token,
                    )])
                    .and_then(
                        std::iter::once(TxnOp::delete(requests_key(&session), None))
                            .chain(
                                Language::ALL
                                    .map(|l| TxnOp::delete(progress_key(&session, l), None)),
                            )
                            .collect::<Vec<_>>(),
                    );
                send_txn(&members, txn).await;
            }
            Op::Release => break,
        }
    }
    alive.abort();
    revoke(&members, held.lease_id).await;
}

/// A forget's transaction: a delete fenced by the token, harmless to send twice.
async fn send_txn(members: &Members, txn: etcd_client::Txn) {
    let _ = members
        .call(Retry::Idempotent, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await;
}

/// Revokes the lease (its key goes with it), from whichever member answers.
async fn revoke(members: &Members, lease_id: i64) {
    let _ = members
        .call(Retry::Idempotent, |mut client| async move {
            client.lease_revoke(lease_id).await
        })
        .await;
}

/// After a commit: one etcd refused under the token loses the lease; one whose outcome is
/// unknown (it may still land) loses it and revokes it, so no late copy can land.
async fn after_commit(
    members: &Members,
    session: &str,
    held: &Held,
    result: &Result<(), CommitError>,
) {
    match result {
        Err(CommitError::Fenced { .. }) => {
            lose(
                held,
                "etcd refused a commit under its token: another node holds it",
            );
        }
        Err(CommitError::Unknown(why)) => {
            tracing::warn!(%session, "a commit's outcome is unknown, the lease is given up: {why}");
            lose(
                held,
                "a commit's answer was lost and it was not found in place: the lease was given up",
            );
            revoke(members, held.lease_id).await;
        }
        _ => {}
    }
}

/// Keep-alives every third of the lease's time to live, each moving to the next member when
/// its own does not answer within the deadline, until the lease is lost (then revoked).
async fn keep_alive_loop(members: Arc<Members>, session: String, held: Arc<Held>) {
    let every = |held: &Held| {
        crate::locking::lock(&held.ack)
            .map_or(Duration::from_millis(300), |a| a.ttl / 3)
            .max(Duration::from_millis(100))
    };
    let mut stream = None;
    loop {
        tokio::time::sleep(every(&held)).await;
        let Some(last) = *crate::locking::lock(&held.ack) else {
            revoke(&members, held.lease_id).await;
            return;
        };
        let sent = BootInstant::now();
        let answer = keep_alive(&members, held.lease_id, &mut stream, last.ttl).await;
        let now = BootInstant::now();
        match proof::after_keep_alive(last, sent, answer, now) {
            Some(ack) => {
                let mut current = crate::locking::lock(&held.ack);
                // A commit may have lost the lease meanwhile: it stays lost.
                if current.is_some() {
                    *current = Some(ack);
                }
            }
            None => {
                let why = match answer {
                    KeepAlive::NoAnswer => {
                        "etcd acknowledged no keep-alive within its time to live"
                    }
                    _ => "etcd says it expired (was this node paused?)",
                };
                lose(&held, why);
                tracing::warn!(%session, "lease lost: {why}");
            }
        }
    }
}

fn lose(held: &Held, why: &str) {
    *crate::locking::lock(&held.ack) = None;
    *crate::locking::lock(&held.lost) = Some(why.to_string());
}

/// A keep-alive stream, and the member it goes to.
type Stream = (
    usize,
    etcd_client::LeaseKeeper,
    etcd_client::LeaseKeepAliveStream,
);

/// One keep-alive and its answer: on the open stream's member, then (no answer within the
/// members' deadline) on each next member in turn, opening a stream there, which itself
/// sends a keep-alive and reads its answer (refusing a lease etcd no longer has); `ttl` is
/// then the time to live the lease was granted with.
async fn keep_alive(
    members: &Members,
    lease_id: i64,
    stream: &mut Option<Stream>,
    ttl: Duration,
) -> KeepAlive {
    // A third of a request's deadline (a sixth of the time to live): every member can be
    // tried before the lease is unprovable.
    let wait = (members.deadline() / 3).max(Duration::from_millis(100));
    for _ in 0..members.len().max(1) {
        let answer = match stream {
            Some((_, keeper, answers)) => {
                let exchange = async {
                    if keeper.keep_alive().await.is_err() {
                        return KeepAlive::NoAnswer;
                    }
                    match answers.message().await {
                        Ok(Some(answer)) if answer.ttl() > 0 => KeepAlive::Extended(
                            Duration::from_secs(u64::try_from(answer.ttl()).unwrap_or(0)),
                        ),
                        Ok(Some(_)) => KeepAlive::Gone,
                        _ => KeepAlive::NoAnswer,
                    }
                };
                tokio::time::timeout(wait, exchange)
                    .await
                    .unwrap_or(KeepAlive::NoAnswer)
            }
            None => {
                let index = members.preferred();
                let opened = async {
                    let mut client = members.client(index).await.ok()?;
                    Some(client.lease_keep_alive(lease_id).await)
                };
                match tokio::time::timeout(wait, opened).await {
                    Ok(Some(Ok((keeper, answers)))) => {
                        *stream = Some((index, keeper, answers));
                        KeepAlive::Extended(ttl)
                    }
                    Ok(Some(Err(etcd_client::Error::LeaseKeepAliveError(_)))) => KeepAlive::Gone,
                    _ => KeepAlive::NoAnswer,
                }
            }
        };
        if answer != KeepAlive::NoAnswer {
            if let Some((index, _, _)) = stream {
                members.prefer(*index);
            }
            return answer;
        }
        // The next attempt opens a stream on the next member.
        let failed = stream
            .take()
            .map_or(members.preferred(), |(index, _, _)| index);
        members.prefer(failed + 1);
    }
    KeepAlive::NoAnswer
}
