//! The requests a node sends etcd: connecting, taking a lease, a fenced commit (read back
//! when its answer was lost); and how a caller on any thread waits for them.

use super::members::{Failure, Members, Retry};
use super::outcome;
use super::{
    etcd_error, lease_key, pointer_prefix, CommitError, EtcdSettings, CHECKPOINT_SEGMENT,
    PROGRESS_SEGMENT, REQUESTS_SEGMENT,
};
use crate::fleet::pointer::{Pointer, RequestsPointer};
use crate::fleet::proof::{self, Acknowledged, BootInstant};
use crate::fleet::LeaseError;
use crate::once::progress::Progress;
use cellvisor_ipc::Language;
use etcd_client::{Compare, CompareOp, ConnectOptions, GetOptions, TxnOp, TxnOpResponse};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// Runs `future` on `runtime` and waits for it here (any thread, inside a runtime or not),
/// at most `timeout`.
pub(super) fn block_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    timeout: Duration,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, LeaseError> {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = tx.send(tokio::time::timeout(timeout, future).await);
    });
    match rx.recv_timeout(timeout + Duration::from_millis(500)) {
        Ok(Ok(value)) => Ok(value),
        _ => Err(etcd_error(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        ))),
    }
}

pub(super) fn connect_options(
    settings: &EtcdSettings,
    timeout: Duration,
) -> Result<ConnectOptions, LeaseError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| LeaseError::Io {
            path: path.clone(),
            why: e.to_string(),
        })
    };
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    if let Some(user) = &settings.user {
        let Some(file) = &settings.password_file else {
            return Err(LeaseError::Io {
                path: PathBuf::from("fleet.etcd-password-file"),
                why: "fleet.etcd-user needs fleet.etcd-password-file".into(),
            });
        };
        let mode = std::fs::metadata(file).map_or(0, |m| {
            std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777
        });
        if mode & 0o007 != 0 {
            return Err(LeaseError::Io {
                path: file.clone(),
                why: format!(
                    "fleet.etcd-password-file has mode {mode:03o}: other users can read the \
                     password; make it 0400 or 0440"
                ),
            });
        }
        let password = String::from_utf8_lossy(&read(file)?)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        options = options.with_user(user.clone(), password);
    }
    if settings.ca_file.is_some() || settings.cert_file.is_some() {
        let mut tls = etcd_client::TlsOptions::new();
        if let Some(ca) = &settings.ca_file {
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
        }
        match (&settings.cert_file, &settings.key_file) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(LeaseError::Io {
                    path: PathBuf::from("fleet.etcd-cert-file"),
                    why: "fleet.etcd-cert-file and fleet.etcd-key-file go together".into(),
                })
            }
        }
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// What a session's key prefix holds.
#[derive(Debug, Default)]
pub(super) struct Pointers {
    /// Its states' pointers, by language.
    pub states: HashMap<Language, Pointer>,
    /// Its remembered requests' pointer.
    pub requests: Option<RequestsPointer>,
    /// By language, how far the request that language's state last carried got.
    pub progress: HashMap<Language, Progress>,
    /// Its named checkpoints' pointers, by language and name.
    pub checkpoints: HashMap<(Language, String), Pointer>,
}

impl Pointers {
    /// Files the pointer stored at `rest` (the key after the session's prefix).
    fn add(&mut self, rest: &str, value: &[u8]) {
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [REQUESTS_SEGMENT] => self.requests = RequestsPointer::from_bytes(value),
            [language] => {
                if let (Ok(language), Some(pointer)) =
                    (language.parse::<Language>(), Pointer::from_bytes(value))
                {
                    self.states.insert(language, pointer);
                }
            }
            [language, PROGRESS_SEGMENT] => {
                if let (Ok(language), Some(progress)) =
                    (language.parse::<Language>(), Progress::from_bytes(value))
                {
                    self.progress.insert(language, progress);
                }
            }
            [language, CHECKPOINT_SEGMENT, name] => {
                if let (Ok(language), Ok(pointer)) = (
                    language.parse::<Language>(),
                    serde_json::from_slice::<Pointer>(value),
                ) {
                    self.checkpoints
                        .insert((language, (*name).to_string()), pointer);
                }
            }
            _ => {}
        }
    }
}

pub(super) type Taken = (i64, i64, Acknowledged, Pointers);

/// Grants a lease and creates `session`'s key under it if absent; a key this node left in
/// an earlier life (a restart) is deleted first, fenced by its own creating revision.
pub(super) async fn take(
    members: &Members,
    session: &str,
    node: &str,
    ttl: Duration,
) -> Result<Taken, LeaseError> {
    let key = lease_key(session);
    for _ in 0..2 {
        let sent = BootInstant::now();
        // A lease granted twice (an answer lost) is never used and runs out by itself.
        let grant = members
            .call(Retry::Idempotent, |mut client| async move {
                client.lease_grant(proof::ttl_seconds(ttl), None).await
            })
            .await
            .map_err(etcd_error)?;
        let granted = Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(0));
        let txn = etcd_client::Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.as_str(),
                    node,
                    Some(etcd_client::PutOptions::new().with_lease(grant.id())),
                ),
                TxnOp::get(
                    pointer_prefix(session),
                    Some(GetOptions::new().with_prefix()),
                ),
            ])
            .or_else([TxnOp::get(key.as_str(), None)]);
        // Sent again after a lost answer too: the key it created then is this node's own
        // with another lease, found below and taken again.
        let answer = members
            .call(Retry::Idempotent, |mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .await
            .map_err(etcd_error)?;
        if answer.succeeded() {
            let token = answer.header().map_or(0, |h| h.revision());
            let prefix = pointer_prefix(session);
            let mut found = Pointers::default();
            for response in answer.op_responses() {
                let TxnOpResponse::Get(listed) = response else {
                    continue;
                };
                for kv in listed.kvs() {
                    let name = String::from_utf8_lossy(kv.key());
                    if let Some(rest) = name.strip_prefix(prefix.as_str()) {
                        found.add(rest, kv.value());
                    }
                }
            }
            let ack = Acknowledged { sent, ttl: granted };
            return Ok((grant.id(), token, ack, found));
        }
        let id = grant.id();
        let _ = members
            .call(Retry::Idempotent, |mut client| async move {
                client.lease_revoke(id).await
            })
            .await;
        let holder = answer.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(found) => found.kvs().first().map(|kv| {
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.create_revision(),
                    kv.lease(),
                )
            }),
            _ => None,
        });
        let Some((holder, created, lease)) = holder else {
            continue; // released in between
        };
        if holder == node {
            // This node's own key from before a restart (or a lost answer): no process here
            // holds it now.
            let txn = etcd_client::Txn::new()
                .when([Compare::create_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    created,
                )])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            members
                .call(Retry::Idempotent, |mut client| {
                    let txn = txn.clone();
                    async move { client.txn(txn).await }
                })
                .await
                .map_err(etcd_error)?;
            continue;
        }
        let left = members
            .call(Retry::Idempotent, |mut client| async move {
                client.lease_time_to_live(lease, None).await
            })
            .await
            .map(|r| r.ttl())
            .unwrap_or(1);
        return Err(LeaseError::HeldBy {
            session: session.to_string(),
            node: holder,
            expires_in: Duration::from_secs(u64::try_from(left.max(1)).unwrap_or(1)),
        });
    }
    Err(etcd_error(format!(
        "the lease on session {session} is still contended; retry"
    )))
}

/// Puts `value` at `ptr_key` only if the lease key `key` was created at `token`.
pub(super) async fn fenced_put(
    members: &Members,
    key: &str,
    token: i64,
    ptr_key: &str,
    value: Vec<u8>,
) -> Result<(), CommitError> {
    fenced_puts(members, key, token, vec![(ptr_key.to_string(), value)]).await
}

/// Puts every `(key, value)` of `puts` in one transaction, only if the lease key `key` was
/// created at `token`: all of them or none. A transaction whose answer was lost (its member
/// went away or stalled after it was sent) is read back from another member before anything
/// is answered: committed if every key holds what it put under the live token, and never
/// sent again (a late copy could land after a later commit). One read back as not applied
/// is [`CommitError::Unknown`]: it may still land, so the caller gives the lease up.
pub(super) async fn fenced_puts(
    members: &Members,
    key: &str,
    token: i64,
    puts: Vec<(String, Vec<u8>)>,
) -> Result<(), CommitError> {
    let txn = etcd_client::Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, token)])
        .and_then(
            puts.iter()
                .map(|(at, value)| TxnOp::put(at.as_str(), value.clone(), None))
                .collect::<Vec<_>>(),
        );
    let sent = members
        .call(Retry::IfUnsent, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await;
    match sent {
        Ok(answer) if answer.succeeded() => Ok(()),
        Ok(_) => Err(CommitError::Fenced { token }),
        Err(Failure::Unknown(why)) => {
            let found = read_back(members, key, &puts).await;
            match outcome::after_read_back(token, found) {
                outcome::ReadBack::Committed => Ok(()),
                outcome::ReadBack::Fenced => Err(CommitError::Fenced { token }),
                outcome::ReadBack::NotApplied => Err(CommitError::Unknown(format!(
                    "{why}; read back from another member: not applied yet"
                ))),
                outcome::ReadBack::Unread(more) => Err(CommitError::Unknown(format!(
                    "{why}; not read back: {more}"
                ))),
            }
        }
        Err(err) => Err(CommitError::Etcd(err.to_string())),
    }
}

/// Reads the lease key and the keys of `puts` in one linearizable request, from whichever
/// member answers: the lease key's creating revision (0: absent) and whether each key
/// holds the value put.
async fn read_back(
    members: &Members,
    key: &str,
    puts: &[(String, Vec<u8>)],
) -> Result<outcome::Found, String> {
    let reads: Vec<TxnOp> = std::iter::once(key)
        .chain(puts.iter().map(|(at, _)| at.as_str()))
        .map(|at| TxnOp::get(at, None))
        .collect();
    let txn = etcd_client::Txn::new().and_then(reads);
    let answer = members
        .call(Retry::Idempotent, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(|e| e.to_string())?;
    let values: Vec<Option<(i64, Vec<u8>)>> = answer
        .op_responses()
        .into_iter()
        .map(|r| match r {
            TxnOpResponse::Get(got) => got
                .kvs()
                .first()
                .map(|kv| (kv.create_revision(), kv.value().to_vec())),
            _ => None,
        })
        .collect();
    let lease_created = values.first().cloned().flatten().map_or(0, |(rev, _)| rev);
    let all_put = puts.iter().enumerate().all(|(i, (_, value))| {
        values
            .get(i + 1)
            .cloned()
            .flatten()
            .is_some_and(|(_, found)| &found == value)
    });
    Ok(outcome::Found {
        lease_created,
        all_put,
    })
}
