//! The requests a node sends etcd outside a lease's own task: connecting, taking a lease,
//! a fenced commit; and how a caller on any thread waits for them.

use super::{
    etcd_error, lease_key, pointer_prefix, CommitError, EtcdSettings, CHECKPOINT_SEGMENT,
    PROGRESS_SEGMENT, REQUESTS_SEGMENT,
};
use crate::fleet::pointer::{Pointer, RequestsPointer};
use crate::fleet::proof::{self, Acknowledged, BootInstant};
use crate::fleet::LeaseError;
use crate::once::progress::Progress;
use cellvisor_ipc::Language;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, TxnOp, TxnOpResponse};
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

/// How often a request that never reached etcd is sent again, and how long apart.
const UNSENT_ATTEMPTS: u32 = 4;
const UNSENT_PAUSE: Duration = Duration::from_millis(100);

/// Whether `err` says the request was never sent: the member it was for refused the
/// connection (a member restarting). Sending it again, which the client balances to the
/// other members, cannot apply it twice.
fn never_sent(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() as i32 == 14 /* Unavailable */ && status.message().contains("connect")
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// `request()` and, while etcd's answer says it was never sent, again (a few times, a
/// short pause apart): a member's restart must not refuse a session outright.
async fn unsent_again<T, F, Fut>(mut request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut attempt = 1;
    loop {
        match request().await {
            Err(err) if attempt < UNSENT_ATTEMPTS && never_sent(&err) => {
                attempt += 1;
                tokio::time::sleep(UNSENT_PAUSE).await;
            }
            other => return other,
        }
    }
}

/// Grants a lease and creates `session`'s key under it if absent; a key this node left in
/// an earlier life (a restart) is deleted first, fenced by its own creating revision.
pub(super) async fn take(
    mut client: Client,
    session: &str,
    node: &str,
    ttl: Duration,
) -> Result<Taken, LeaseError> {
    let key = lease_key(session);
    for _ in 0..2 {
        let sent = BootInstant::now();
        let grant = unsent_again(|| {
            let mut client = client.clone();
            async move { client.lease_grant(proof::ttl_seconds(ttl), None).await }
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
        let answer = unsent_again(|| {
            let mut client = client.clone();
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
        let _ = client.lease_revoke(grant.id()).await;
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
            // This node's own key from before a restart: no process here holds it now.
            let txn = etcd_client::Txn::new()
                .when([Compare::create_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    created,
                )])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            client.txn(txn).await.map_err(etcd_error)?;
            continue;
        }
        let left = client
            .lease_time_to_live(lease, None)
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
    client: Client,
    key: &str,
    token: i64,
    ptr_key: &str,
    value: Vec<u8>,
) -> Result<(), CommitError> {
    fenced_puts(client, key, token, vec![(ptr_key.to_string(), value)]).await
}

/// Puts every `(key, value)` of `puts` in one transaction, only if the lease key `key` was
/// created at `token`: all of them or none.
pub(super) async fn fenced_puts(
    client: Client,
    key: &str,
    token: i64,
    puts: Vec<(String, Vec<u8>)>,
) -> Result<(), CommitError> {
    let txn = etcd_client::Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, token)])
        .and_then(
            puts.into_iter()
                .map(|(at, value)| TxnOp::put(at, value, None))
                .collect::<Vec<_>>(),
        );
    let sent = unsent_again(|| {
        let mut client = client.clone();
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await;
    match sent {
        Ok(answer) if answer.succeeded() => Ok(()),
        Ok(_) => Err(CommitError::Fenced { token }),
        Err(err) => Err(CommitError::Etcd(err.to_string())),
    }
}
