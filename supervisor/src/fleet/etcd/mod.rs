//! Leases in etcd, and the fenced pointers to sessions' snapshots (docs/fleet.md, etcd mode).
//!
//! ```text
//! cellvisor/lease/<session>          the node's name, attached to an etcd lease of `lease-ttl`
//! cellvisor/pointer/<session>/<lang> the current snapshot blob (see `pointer`)
//! cellvisor/pointer/<session>/<lang>/progress  how far a request got (with that pointer)
//! ```
//!
//! A session's lease key is created by a transaction that requires it absent
//! (`create_revision == 0`); the revision that created it is the holder's **fencing token**.
//! Every pointer commit is a transaction comparing the lease key's `create_revision` with the
//! token, so once the key expired or another node created it anew, a commit fails whatever
//! the committing node believes. Each held lease has a task of its own on this backend's
//! runtime that sends keep-alives every third of the granted time to live and runs the
//! session's commits, in the order they were asked. Whether the lease is still provable is
//! decided by [`proof`](super::proof) from the keep-alives etcd acknowledged.
//!
//! - `members`: etcd's members, one client each; a request that gets no answer within its
//!   deadline (well under the lease's time to live) moves to the next member.
//! - `requests`: connecting, taking a lease, a fenced commit (read back when its answer was
//!   lost), and waiting for them from any thread.
//! - `outcome`: what a commit whose answer was lost did, from its read back (plain data).
//! - `task`: a held lease's own tasks (keep-alives; commits in order; release).

mod members;
mod outcome;
mod requests;
mod task;

pub use super::etcd_settings::EtcdSettings;
use super::pointer::{Pointer, RequestsPointer};
use super::proof::{self, Acknowledged, BootInstant};
use super::LeaseError;
use crate::once::progress::Progress;
use cellvisor_ipc::Language;
use members::{Members, Retry};
use requests::{block_on, connect_options, take};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use task::run_lease;
use tokio::sync::{mpsc, oneshot};

const LEASE_PREFIX: &str = "cellvisor/lease/";
const POINTER_PREFIX: &str = "cellvisor/pointer/";

/// Why a pointer was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The lease key is gone or was created anew: another node may hold the session.
    #[error("the lease of token {token} is no longer this node's: the commit was refused")]
    Fenced {
        /// The token the commit carried.
        token: i64,
    },
    /// This node holds no lease on the session.
    #[error("this node holds no lease on the session")]
    NotHeld,
    /// The session's state in that language was forgotten (a close or a reset) after this
    /// blob was begun: it must not come back.
    #[error("the session's state was forgotten after this snapshot was begun")]
    Forgotten,
    /// etcd did not answer.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The commit's answer was lost and reading it back did not show it in place: it may
    /// still land, so this node gave the lease up (the next holder reads what is there).
    #[error("etcd: {0}; this node gave the session's lease up")]
    Unknown(String),
}

/// A session lease this node holds in etcd.
#[derive(Debug)]
struct Held {
    lease_id: i64,
    token: i64,
    /// The last acknowledgement; `None` once the lease is lost.
    ack: Mutex<Option<Acknowledged>>,
    /// Why it was lost.
    lost: Mutex<Option<String>>,
    /// The session's current pointers, by language: read when the lease was taken, then
    /// changed only by this node's own commits (no other node can commit meanwhile).
    pointers: Mutex<HashMap<Language, Pointer>>,
    /// The next blob's sequence number under this token.
    seq: AtomicU64,
    /// By language, the first blob sequence number begun after the state was forgotten:
    /// older blobs are never committed.
    forgotten: Mutex<HashMap<Language, u64>>,
    /// The session's remembered requests, as committed (read with the lease, then changed
    /// only by this node's commits).
    requests: Mutex<Option<RequestsPointer>>,
    /// By language, how far the request that language's state last carried got, as
    /// committed.
    progress: Mutex<HashMap<Language, Progress>>,
    /// The session's named checkpoints, by language and name, as committed.
    checkpoints: Mutex<HashMap<(Language, String), Pointer>>,
    ops: mpsc::UnboundedSender<Op>,
}

enum Op {
    Commit {
        language: Language,
        pointer: Pointer,
        /// Put in the same transaction: the request whose cell this state follows.
        progress: Option<Progress>,
        reply: oneshot::Sender<Result<(), CommitError>>,
    },
    Forget {
        language: Language,
    },
    CommitCheckpoint {
        language: Language,
        name: String,
        pointer: Pointer,
        reply: oneshot::Sender<Result<(), CommitError>>,
    },
    CommitRequests {
        pointer: RequestsPointer,
        reply: oneshot::Sender<Result<(), CommitError>>,
    },
    ForgetRequests,
    Release,
}

/// This node's leases in etcd, and the fenced pointers of the sessions it holds.
pub struct EtcdLeases {
    node: String,
    ttl: Duration,
    members: Arc<Members>,
    runtime: tokio::runtime::Handle,
    _stop: std::sync::mpsc::Sender<()>,
    held: Mutex<HashMap<String, Arc<Held>>>,
    /// The tasks of held leases, by session: a released one runs the commits asked before
    /// its release, then revokes the lease.
    tasks: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// Released leases' tasks still finishing.
    finishing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Held while a lease is taken: two requests for one session arriving at once must not
    /// both take it (the second would find this node's key and replace it).
    acquiring: Mutex<()>,
}

impl std::fmt::Debug for EtcdLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLeases")
            .field("node", &self.node)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn etcd_error(err: impl std::fmt::Display) -> LeaseError {
    LeaseError::Io {
        path: PathBuf::from("etcd"),
        why: err.to_string(),
    }
}

fn lease_key(session: &str) -> String {
    format!("{LEASE_PREFIX}{}", crate::names::encode_component(session))
}

fn pointer_prefix(session: &str) -> String {
    format!(
        "{POINTER_PREFIX}{}/",
        crate::names::encode_component(session)
    )
}

fn pointer_key(session: &str, language: Language) -> String {
    format!("{}{}", pointer_prefix(session), language.short_name())
}

/// The last segment of the key of a session's remembered requests, beside its languages'.
const REQUESTS_SEGMENT: &str = "requests";

fn requests_key(session: &str) -> String {
    format!("{}{REQUESTS_SEGMENT}", pointer_prefix(session))
}

/// The last segment of the key of a session's request progress in a language, after the
/// language's pointer key.
const PROGRESS_SEGMENT: &str = "progress";

fn progress_key(session: &str, language: Language) -> String {
    format!("{}/{PROGRESS_SEGMENT}", pointer_key(session, language))
}

/// The segment between a language and a checkpoint's name in a checkpoint's key.
const CHECKPOINT_SEGMENT: &str = "checkpoint";

fn checkpoint_key(session: &str, language: Language, name: &str) -> String {
    format!(
        "{}/{CHECKPOINT_SEGMENT}/{name}",
        pointer_key(session, language)
    )
}

impl EtcdLeases {
    /// Connects to etcd (on a runtime of its own, in a thread of its own) and checks that a
    /// member answers within `timeout`: an unreachable cluster is an error at start, naming
    /// the endpoints, not a surprise at the first session.
    pub fn connect(
        settings: &EtcdSettings,
        node: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<EtcdLeases, LeaseError> {
        let options = connect_options(settings, timeout)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(etcd_error)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("etcd-leases".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // Runs until the backend is dropped (its sender with it).
                    let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
                });
            })
            .map_err(etcd_error)?;
        let listed = settings.endpoints.join(", ");
        let members = Arc::new(Members::new(
            &settings.endpoints,
            options,
            request_deadline(ttl, timeout),
        ));
        let asked = members.clone();
        block_on(&handle, timeout + Duration::from_secs(1), async move {
            asked
                .call_within(timeout, Retry::Idempotent, |mut client| async move {
                    client.status().await
                })
                .await
        })
        .and_then(|r| r.map_err(etcd_error))
        .map_err(|err| LeaseError::Io {
            path: PathBuf::from("fleet.etcd-endpoints"),
            why: format!("no etcd member answered at {listed}: {err}"),
        })?;
        Ok(EtcdLeases {
            node: node.to_string(),
            ttl,
            members,
            runtime: handle,
            _stop: stop,
            held: Mutex::new(HashMap::new()),
            tasks: Mutex::new(HashMap::new()),
            finishing: Mutex::new(Vec::new()),
            acquiring: Mutex::new(()),
        })
    }

    /// How long a lease lasts unless renewed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn held(&self, session: &str) -> Option<Arc<Held>> {
        crate::locking::lock(&self.held).get(session).cloned()
    }

    /// Takes `session`'s lease: a new etcd lease, and the session's key created under it only
    /// if absent. Its creating revision is the fencing token. The session's pointers are read
    /// in the same transaction.
    pub fn acquire(&self, session: &str) -> Result<i64, LeaseError> {
        let _one_at_a_time = crate::locking::lock(&self.acquiring);
        if let Some(held) = self.held(session) {
            return Ok(held.token);
        }
        let members = self.members.clone();
        let node = self.node.clone();
        let name = session.to_string();
        let ttl = self.ttl;
        // Each request moves through the members within its deadline: several may be tried.
        let within = ttl.max(Duration::from_secs(2)) + self.members.deadline() * 4;
        let taken = block_on(&self.runtime, within, async move {
            take(&members, &name, &node, ttl).await
        })
        .and_then(|r| r)?;
        let (lease_id, token, ack, found) = taken;
        let (ops, queue) = mpsc::unbounded_channel();
        let held = Arc::new(Held {
            lease_id,
            token,
            ack: Mutex::new(Some(ack)),
            lost: Mutex::new(None),
            pointers: Mutex::new(found.states),
            seq: AtomicU64::new(1),
            forgotten: Mutex::new(HashMap::new()),
            requests: Mutex::new(found.requests),
            progress: Mutex::new(found.progress),
            checkpoints: Mutex::new(found.checkpoints),
            ops,
        });
        let task = self.runtime.spawn(run_lease(
            self.members.clone(),
            session.to_string(),
            held.clone(),
            queue,
        ));
        crate::locking::lock(&self.tasks).insert(session.to_string(), task);
        crate::locking::lock(&self.held).insert(session.to_string(), held);
        Ok(token)
    }

    /// Whether this node can prove it still holds `session`'s lease now.
    pub fn provable(&self, session: &str) -> bool {
        self.held(session).is_some_and(|held| {
            crate::locking::lock(&held.ack)
                .is_some_and(|ack| proof::provably_held(ack, BootInstant::now()))
        })
    }

    /// Checks `session`'s lease: `Err(Lost)` (and the lease forgotten here) once it is not
    /// provable.
    pub fn check(&self, session: &str) -> Result<(), LeaseError> {
        if self.provable(session) {
            return Ok(());
        }
        let why = self
            .held(session)
            .and_then(|h| crate::locking::lock(&h.lost).clone())
            .unwrap_or_else(|| {
                "no keep-alive was acknowledged within its time to live (was this node paused?)"
                    .into()
            });
        self.release(session);
        Err(LeaseError::Lost {
            session: session.to_string(),
            why,
        })
    }

    /// Gives `session`'s lease up (its key goes with it), after the commits asked before.
    pub fn release(&self, session: &str) {
        if let Some(held) = crate::locking::lock(&self.held).remove(session) {
            let _ = held.ops.send(Op::Release);
        }
        if let Some(task) = crate::locking::lock(&self.tasks).remove(session) {
            let mut finishing = crate::locking::lock(&self.finishing);
            finishing.retain(|t| !t.is_finished());
            finishing.push(task);
        }
    }

    /// Waits (at most `within`) for released leases' last commits and revocations: the
    /// daemon's stop, so the state its sessions saved on the way out is current in etcd.
    pub fn settle(&self, within: Duration) {
        let tasks: Vec<_> = crate::locking::lock(&self.finishing).drain(..).collect();
        let _ = block_on(&self.runtime, within, async move {
            for task in tasks {
                let _ = task.await;
            }
        });
    }

    /// The node holding `session`'s lease and how long its lease has yet, if any holds it.
    pub fn holder(&self, session: &str) -> Option<(String, Duration)> {
        let members = self.members.clone();
        let key = lease_key(session);
        let within = Duration::from_secs(2).max(self.members.deadline() * 2);
        block_on(&self.runtime, within, async move {
            let found = members
                .call(Retry::Idempotent, |mut client| {
                    let key = key.clone();
                    async move { client.get(key, None).await }
                })
                .await
                .ok()?;
            let kv = found.kvs().first()?;
            let node = String::from_utf8_lossy(kv.value()).into_owned();
            let lease = kv.lease();
            let left = members
                .call(Retry::Idempotent, |mut client| async move {
                    client.lease_time_to_live(lease, None).await
                })
                .await
                .ok()?
                .ttl();
            Some((node, Duration::from_secs(u64::try_from(left).ok()?)))
        })
        .ok()
        .flatten()
    }

    /// The pointer to `session`'s current snapshot in `language`, while this node holds the
    /// session (no other node can change it meanwhile).
    pub fn pointer(&self, session: &str, language: Language) -> Option<Pointer> {
        let held = self.held(session)?;
        let pointers = crate::locking::lock(&held.pointers);
        pointers.get(&language).cloned()
    }

    /// A new blob name for `session` under its token, and the token; `None` when no lease is
    /// held here.
    pub fn next_blob(&self, session: &str) -> Option<(String, i64)> {
        let held = self.held(session)?;
        let seq = held.seq.fetch_add(1, Ordering::Relaxed);
        Some((super::pointer::blob_name(held.token, seq), held.token))
    }

    /// Commits `pointer` as `session`'s current state in `language` (fenced by the token the
    /// lease was taken at), putting `progress` (how far the request whose cell this state
    /// follows got) in the same transaction: the state and what it includes are committed
    /// together or not at all.
    pub fn commit_with_progress(
        &self,
        session: &str,
        language: Language,
        pointer: Pointer,
        progress: Option<Progress>,
    ) -> oneshot::Receiver<Result<(), CommitError>> {
        let (reply, answer) = oneshot::channel();
        match self.held(session) {
            Some(held) if begun_before_forget(&held, language, &pointer.blob) => {
                let _ = reply.send(Err(CommitError::Forgotten));
            }
            Some(held) if held.token == pointer.token => {
                let _ = held.ops.send(Op::Commit {
                    language,
                    pointer,
                    progress,
                    reply,
                });
            }
            Some(held) => {
                let _ = reply.send(Err(CommitError::Fenced { token: held.token }));
            }
            None => {
                let _ = reply.send(Err(CommitError::NotHeld));
            }
        }
        answer
    }

    /// Deletes `session`'s pointer in `language` (a reset), fenced like a commit.
    pub fn forget(&self, session: &str, language: Language) {
        if let Some(held) = self.held(session) {
            let next = held.seq.load(Ordering::Relaxed);
            crate::locking::lock(&held.forgotten).insert(language, next);
            crate::locking::lock(&held.pointers).remove(&language);
            crate::locking::lock(&held.progress).remove(&language);
            let _ = held.ops.send(Op::Forget { language });
        }
    }

    /// The pointer to `session`'s checkpoint `name` in `language`, as committed, while this
    /// node holds the session.
    pub fn checkpoint(&self, session: &str, language: Language, name: &str) -> Option<Pointer> {
        let held = self.held(session)?;
        let checkpoints = crate::locking::lock(&held.checkpoints);
        checkpoints.get(&(language, name.to_string())).cloned()
    }

    /// Commits `pointer` as `session`'s checkpoint `name` in `language`, fenced by the
    /// lease's token. The answer comes once etcd has decided.
    pub fn commit_checkpoint(
        &self,
        session: &str,
        language: Language,
        name: &str,
        pointer: Pointer,
    ) -> oneshot::Receiver<Result<(), CommitError>> {
        let (reply, answer) = oneshot::channel();
        match self.held(session) {
            Some(held) if held.token == pointer.token => {
                let _ = held.ops.send(Op::CommitCheckpoint {
                    language,
                    name: name.to_string(),
                    pointer,
                    reply,
                });
            }
            Some(held) => {
                let _ = reply.send(Err(CommitError::Fenced { token: held.token }));
            }
            None => {
                let _ = reply.send(Err(CommitError::NotHeld));
            }
        }
        answer
    }

    /// The committed pointer to `session`'s remembered requests (`Ok(None)`: none yet);
    /// `Err` when this node holds no lease on the session.
    pub fn requests(&self, session: &str) -> Result<Option<RequestsPointer>, CommitError> {
        let held = self.held(session).ok_or(CommitError::NotHeld)?;
        let requests = crate::locking::lock(&held.requests);
        Ok(requests.clone())
    }

    /// How far the requests that `session`'s committed states (one per language) last
    /// carried got, while this node holds the session.
    pub fn progress(&self, session: &str) -> Vec<Progress> {
        let Some(held) = self.held(session) else {
            return Vec::new();
        };
        let progress = crate::locking::lock(&held.progress);
        progress.values().cloned().collect()
    }

    /// The fencing token of `session`'s lease, while this node holds it.
    pub fn token(&self, session: &str) -> Option<i64> {
        self.held(session).map(|held| held.token)
    }

    /// A new sequence number under `session`'s token, and the token (for a file of the
    /// session's own that no other writer names alike); `None` when no lease is held here.
    pub fn next_seq(&self, session: &str) -> Option<(i64, u64)> {
        let held = self.held(session)?;
        Some((held.token, held.seq.fetch_add(1, Ordering::Relaxed)))
    }

    /// Commits `pointer` as `session`'s remembered requests, fenced by the lease's token,
    /// after the commits asked before it (a request's cells' states); waits for etcd's
    /// answer (at most `within`), so call it off an event loop.
    pub fn commit_requests(
        &self,
        session: &str,
        pointer: RequestsPointer,
        within: Duration,
    ) -> Result<(), CommitError> {
        let held = self.held(session).ok_or(CommitError::NotHeld)?;
        if held.token != pointer.token {
            return Err(CommitError::Fenced { token: held.token });
        }
        let (reply, answer) = oneshot::channel();
        let _ = held.ops.send(Op::CommitRequests { pointer, reply });
        block_on(&self.runtime, within, answer)
            .map_err(|e| CommitError::Etcd(e.to_string()))?
            .map_err(|_| CommitError::NotHeld)?
    }

    /// Deletes `session`'s remembered requests' pointer and its request progress (a close or
    /// reset), fenced.
    pub fn forget_requests(&self, session: &str) {
        if let Some(held) = self.held(session) {
            *crate::locking::lock(&held.requests) = None;
            crate::locking::lock(&held.progress).clear();
            let _ = held.ops.send(Op::ForgetRequests);
        }
    }
}

/// How long one request waits for one member's answer: half the lease's time to live, at
/// least 300 ms and at most the connect timeout (a keep-alive waits half of that, so every
/// member can be tried before the lease is unprovable).
fn request_deadline(ttl: Duration, timeout: Duration) -> Duration {
    (ttl / 2).clamp(
        Duration::from_millis(300),
        timeout.max(Duration::from_millis(300)),
    )
}

/// Whether the blob `name` was begun before `language`'s state was forgotten here.
fn begun_before_forget(held: &Held, language: Language, name: &str) -> bool {
    let forgotten = crate::locking::lock(&held.forgotten);
    match (forgotten.get(&language), super::pointer::blob_order(name)) {
        (Some(&at), Some((_, seq))) => seq < at,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests;
