//! A held lease's own task: keep-alives every third of its time to live, and the session's
//! commits, forgets and release in the order they were asked.

use super::requests::{fenced_put, fenced_puts};
use super::{
    checkpoint_key, lease_key, pointer_key, progress_key, requests_key, CommitError, Held, Op,
};
use crate::fleet::proof::{self, BootInstant, KeepAlive};
use cellvisor_ipc::Language;
use etcd_client::{Client, Compare, CompareOp, TxnOp};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// One held lease's life: keep-alives every third of its time to live, and its commits in
/// order, until it is released or lost.
pub(super) async fn run_lease(
    client: Client,
    session: String,
    held: Arc<Held>,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    let key = lease_key(&session);
    let mut stream: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    let every = |held: &Held| {
        crate::locking::lock(&held.ack)
            .map_or(Duration::from_millis(300), |a| a.ttl / 3)
            .max(Duration::from_millis(100))
    };
    let mut next = tokio::time::Instant::now() + every(&held);
    loop {
        tokio::select! {
            op = ops.recv() => match op {
                Some(Op::Commit { language, pointer, progress, reply }) => {
                    let mut puts = vec![(pointer_key(&session, language), pointer.to_bytes())];
                    if let Some(progress) = &progress {
                        puts.push((progress_key(&session, language), progress.to_bytes()));
                    }
                    let result = fenced_puts(client.clone(), &key, held.token, puts).await;
                    if result.is_ok() {
                        crate::locking::lock(&held.pointers).insert(language, pointer);
                        if let Some(progress) = progress {
                            crate::locking::lock(&held.progress).insert(language, progress);
                        }
                    } else if let Err(CommitError::Fenced { .. }) = &result {
                        lose(&held, "etcd refused a commit under its token: another node holds it");
                    }
                    let _ = reply.send(result);
                }
                Some(Op::Forget { language }) => {
                    let txn = etcd_client::Txn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, held.token)])
                        .and_then([
                            TxnOp::delete(pointer_key(&session, language), None),
                            TxnOp::delete(progress_key(&session, language), None),
                        ]);
                    let _ = client.clone().txn(txn).await;
                }
                Some(Op::CommitCheckpoint { language, name, pointer, reply }) => {
                    let result = fenced_put(
                        client.clone(),
                        &key,
                        held.token,
                        &checkpoint_key(&session, language, &name),
                        pointer.to_bytes(),
                    )
                    .await;
                    if result.is_ok() {
                        crate::locking::lock(&held.checkpoints).insert((language, name), pointer);
                    } else if let Err(CommitError::Fenced { .. }) = &result {
                        lose(&held, "etcd refused a commit under its token: another node holds it");
                    }
                    let _ = reply.send(result);
                }
                Some(Op::CommitRequests { pointer, reply }) => {
                    let result = fenced_put(
                        client.clone(),
                        &key,
                        held.token,
                        &requests_key(&session),
                        pointer.to_bytes(),
                    )
                    .await;
                    if result.is_ok() {
                        *crate::locking::lock(&held.requests) = Some(pointer);
                    } else if let Err(CommitError::Fenced { .. }) = &result {
                        lose(&held, "etcd refused a commit under its token: another node holds it");
                    }
                    let _ = reply.send(result);
                }
                Some(Op::ForgetRequests) => {
                    let txn = etcd_client::Txn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, held.token)])
                        .and_then(
                            std::iter::once(TxnOp::delete(requests_key(&session), None))
                                .chain(Language::ALL.map(|l| TxnOp::delete(progress_key(&session, l), None)))
                                .collect::<Vec<_>>(),
                        );
                    let _ = client.clone().txn(txn).await;
                }
                Some(Op::Release) | None => {
                    let _ = client.clone().lease_revoke(held.lease_id).await;
                    return;
                }
            },
            () = tokio::time::sleep_until(next) => {
                let Some(last) = *crate::locking::lock(&held.ack) else {
                    let _ = client.clone().lease_revoke(held.lease_id).await;
                    return;
                };
                let sent = BootInstant::now();
                let answer = keep_alive(&client, held.lease_id, &mut stream, last.ttl).await;
                let now = BootInstant::now();
                match proof::after_keep_alive(last, sent, answer, now) {
                    Some(ack) => *crate::locking::lock(&held.ack) = Some(ack),
                    None => {
                        let why = match answer {
                            KeepAlive::NoAnswer => "etcd acknowledged no keep-alive within its time to live",
                            _ => "etcd says it expired (was this node paused?)",
                        };
                        lose(&held, why);
                        tracing::warn!(%session, "lease lost: {why}");
                    }
                }
                next = tokio::time::Instant::now() + every(&held);
            }
        }
    }
}

fn lose(held: &Held, why: &str) {
    *crate::locking::lock(&held.ack) = None;
    *crate::locking::lock(&held.lost) = Some(why.to_string());
}

/// One keep-alive and its answer, within `wait`. A stream that failed is opened again,
/// which itself sends a keep-alive and reads its answer (refusing a lease etcd no longer
/// has); `ttl` is then the time to live the lease was granted with.
async fn keep_alive(
    client: &Client,
    lease_id: i64,
    stream: &mut Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
    ttl: Duration,
) -> KeepAlive {
    let exchange = async {
        let Some((keeper, answers)) = stream else {
            return match client.clone().lease_keep_alive(lease_id).await {
                Ok(opened) => {
                    *stream = Some(opened);
                    KeepAlive::Extended(ttl)
                }
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => KeepAlive::Gone,
                Err(_) => KeepAlive::NoAnswer,
            };
        };
        if keeper.keep_alive().await.is_err() {
            return KeepAlive::NoAnswer;
        }
        match answers.message().await {
            Ok(Some(answer)) if answer.ttl() > 0 => KeepAlive::Extended(Duration::from_secs(
                u64::try_from(answer.ttl()).unwrap_or(0),
            )),
            Ok(Some(_)) => KeepAlive::Gone,
            _ => KeepAlive::NoAnswer,
        }
    };
    let wait = (ttl / 3).max(Duration::from_millis(100));
    let answer = tokio::time::timeout(wait, exchange)
        .await
        .unwrap_or(KeepAlive::NoAnswer);
    if answer == KeepAlive::NoAnswer {
        *stream = None;
    }
    answer
}
