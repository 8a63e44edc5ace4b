//! Requests that run once: a session remembers the answers of its recent `request_id`s and
//! answers a retry with the first run's result, never running the cells twice.
//!
//! - [`memory`]: what one session remembers (plain data, bounded).
//! - [`file`]: where it is kept between runs, behind the [`file::RequestLog`] seam (a signed
//!   file beside the session's snapshots).
//! - [`fenced`]: in etcd mode, that log current only as far as a pointer committed under
//!   the session's fencing token says, so it moves with the session's committed state.
//! - [`progress`]: in etcd mode, how far a request got, committed with each of its cells'
//!   states, so a retry after its node died partway runs only the cells not in the state.
//!
//! [`RequestBook`] joins them: one turn per (session, id) at a time, so a retry that arrives
//! while the first run goes on waits for it and gets its answer.

pub mod fenced;
pub mod file;
pub mod memory;
pub mod progress;

use crate::cell::{CellSpec, EvalResult};
use crate::locking::lock;
use crate::names::SessionName;
use file::{RequestLog, Stamp};
use memory::{Entry, Recall, RequestMemory};
use progress::{Resume, Step};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Answers of one session kept together past this many bytes let the oldest go.
pub const MAX_RESULT_BYTES: u64 = 1 << 20;

/// Why a request's id cannot be run or answered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OnceError {
    /// The id ran before with other cells.
    #[error(
        "request_id {id:?} was already used in session {session} for other cells; a retry \
         must send the same cells; give a new request a new request_id"
    )]
    Conflict {
        /// The id.
        id: String,
        /// The session.
        session: String,
    },
    /// The session's remembered requests and committed progress cannot be read here now:
    /// its lease is not provably this node's (etcd mode), so nothing may be decided.
    #[error(
        "request_id {id:?} of session {session} cannot be looked up: this node does not hold \
         the session's lease now; send it again"
    )]
    NotHeld {
        /// The id.
        id: String,
        /// The session.
        session: String,
    },
    /// The id ran, but its answer is no longer kept.
    #[error(
        "request_id {id:?} already ran in session {session} and was not run again; its answer \
         ({bytes} bytes) is no longer kept: a session keeps answers of at most {MAX_RESULT_BYTES} \
         bytes together, the oldest let go first"
    )]
    LetGo {
        /// The id.
        id: String,
        /// The session.
        session: String,
        /// The answer's size.
        bytes: u64,
    },
}

/// What [`RequestBook::begin`] found.
pub enum Begun {
    /// The id ran already: this is its answer (marked `replayed`).
    Replay(EvalResult),
    /// Run the request, then [`Once::remember`] its answer.
    Run(Once),
}

/// The turn of one (session, id), before anything was looked up: take it first, then the
/// session's lease, then [`Turn::look`], so what is decided is decided on the committed
/// state this node holds the lease over, whichever order a retry, a lease take and a
/// restore arrive in.
pub struct Turn {
    book: Arc<RequestBook>,
    session: SessionName,
    id: String,
    turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Turn {
    /// What the id finds: its earlier answer, a refusal, or the turn to run it (with the
    /// cells an earlier run left in the committed state). Refused with
    /// [`OnceError::NotHeld`] when the session's memory is current only under a lease this
    /// node cannot prove now.
    pub fn look(self, cells: &[CellSpec]) -> Result<Begun, OnceError> {
        let Turn {
            book,
            session,
            id,
            turn,
        } = self;
        if !book.log.as_ref().is_none_or(|log| log.current(&session)) {
            return Err(OnceError::NotHeld {
                id,
                session: session.to_string(),
            });
        }
        let fingerprint = fingerprint(cells);
        let committed = book
            .log
            .as_ref()
            .map(|log| log.progress(&session))
            .unwrap_or_default();
        match decide(
            book.recall(&session, &id, &fingerprint),
            &committed,
            &id,
            &fingerprint,
            cells.len(),
        ) {
            Decision::Replay(mut result) => {
                result.replayed = true;
                Ok(Begun::Replay(result))
            }
            Decision::Run { resumed, done } => Ok(Begun::Run(Once {
                book,
                session,
                id,
                fingerprint,
                resumed,
                done,
                _turn: turn,
            })),
            Decision::Conflict => Err(OnceError::Conflict {
                id,
                session: session.to_string(),
            }),
            Decision::LetGo(bytes) => Err(OnceError::LetGo {
                id,
                session: session.to_string(),
                bytes,
            }),
        }
    }
}

/// What a request id finds, from the session's remembered answers and its committed
/// progress.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Replay(EvalResult),
    Run {
        resumed: Vec<crate::cell::CellResult>,
        done: Option<EvalResult>,
    },
    Conflict,
    LetGo(u64),
}

/// Plain data: what request `id` (cells of `fingerprint`, `cells` of them) finds, given what
/// the memory `recalled` and the `committed` progress. A remembered answer wins; an id the
/// memory does not know is answered from the committed progress as far as it goes.
fn decide(
    recalled: Recall,
    committed: &[progress::Progress],
    id: &str,
    fingerprint: &str,
    cells: usize,
) -> Decision {
    match recalled {
        Recall::Answer(result) => Decision::Replay(result),
        Recall::Conflict => Decision::Conflict,
        Recall::LetGo(bytes) => Decision::LetGo(bytes),
        Recall::Unknown => match progress::resume(committed, id, fingerprint, cells) {
            Resume::Fresh => Decision::Run {
                resumed: Vec::new(),
                done: None,
            },
            Resume::From(resumed) => Decision::Run {
                resumed,
                done: None,
            },
            Resume::Done(answer) => Decision::Run {
                resumed: Vec::new(),
                done: Some(answer),
            },
            Resume::Conflict => Decision::Conflict,
        },
    }
}

/// The turn of one (session, id): held while the request runs, so a retry waits for it.
pub struct Once {
    book: Arc<RequestBook>,
    session: SessionName,
    id: String,
    fingerprint: String,
    /// The results of the first cells, already in the session's committed state from an
    /// earlier run whose node stopped partway: answered, not run again.
    resumed: Vec<crate::cell::CellResult>,
    /// The whole answer, when every cell of the request is in the committed state.
    done: Option<EvalResult>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Once {
    /// The results of the request's first cells that an earlier run left in the session's
    /// committed state (answer them, run the rest).
    pub fn resumed(&self) -> &[crate::cell::CellResult] {
        &self.resumed
    }

    /// The request's answer when every cell of it is in the committed state already:
    /// remember it and answer it, running nothing.
    pub fn done(&self) -> Option<&EvalResult> {
        self.done.as_ref()
    }

    /// What the cell after `earlier` carries to its session, so the commit of its state
    /// says how far the request got.
    pub fn step(&self, earlier: &[crate::cell::CellResult]) -> Step {
        Step {
            id: self.id.clone(),
            fingerprint: self.fingerprint.clone(),
            earlier: earlier.to_vec(),
        }
    }

    /// Remembers `result` as the answer of this id (and keeps it where the session's saved
    /// state is). `Err` says why it could not be kept across a restart.
    pub fn remember(self, result: &EvalResult) -> Result<(), String> {
        let bytes = serde_json::to_vec(result).map_or(0, |json| json.len() as u64);
        let entry = Entry {
            id: self.id.clone(),
            fingerprint: self.fingerprint.clone(),
            result: Some(result.clone()),
            bytes,
        };
        self.book.remember(&self.session, entry)
    }
}

/// The remembered requests of every session this host served.
#[derive(Debug)]
pub struct RequestBook {
    /// The ids kept per session (`daemon.request-memory`).
    capacity: usize,
    /// Where they are kept between runs (none: in memory only).
    log: Option<Arc<dyn RequestLog>>,
    sessions: Mutex<HashMap<SessionName, Kept>>,
    turns: Mutex<HashMap<(SessionName, String), TurnLock>>,
}

/// The lock of one (session, id): whoever holds it runs or answers that id.
type TurnLock = Arc<tokio::sync::Mutex<()>>;

/// One session's memory as this host last read or wrote it.
#[derive(Debug, Default)]
struct Kept {
    memory: RequestMemory,
    stamp: Option<Stamp>,
}

impl RequestBook {
    /// A book keeping `capacity` ids per session, in `log` when given.
    pub fn new(capacity: usize, log: Option<Arc<dyn RequestLog>>) -> RequestBook {
        RequestBook {
            capacity,
            log,
            sessions: Mutex::new(HashMap::new()),
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a session's remembered requests become current only under its lease (etcd
    /// mode): a per-call request with an id must then hold its named session's lease.
    pub fn under_lease(&self) -> bool {
        self.log.as_ref().is_some_and(|log| log.under_lease())
    }

    /// Waits for the turn of (`session`, `id`), then answers what the id finds: its earlier
    /// answer, a refusal, or the turn to run it. (A host holding leases takes the turn with
    /// [`RequestBook::turn`], then the lease, then looks.)
    #[cfg(test)]
    pub async fn begin(
        self: &Arc<Self>,
        session: &SessionName,
        id: &str,
        cells: &[CellSpec],
    ) -> Result<Begun, OnceError> {
        self.turn(session, id).await.look(cells)
    }

    /// Waits for the turn of (`session`, `id`): a retry that arrives while the first run
    /// goes on waits here for it.
    pub async fn turn(self: &Arc<Self>, session: &SessionName, id: &str) -> Turn {
        let turn = {
            let mut turns = lock(&self.turns);
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
            Arc::clone(turns.entry((session.clone(), id.to_string())).or_default())
        };
        Turn {
            book: Arc::clone(self),
            session: session.clone(),
            id: id.to_string(),
            turn: turn.lock_owned().await,
        }
    }

    /// What `id` finds in `session`'s memory, read again from the log when another node (or
    /// an earlier run of this daemon) wrote it since this host last looked.
    fn recall(&self, session: &SessionName, id: &str, fingerprint: &str) -> Recall {
        let mut sessions = lock(&self.sessions);
        let kept = sessions.entry(session.clone()).or_default();
        if let Some(log) = &self.log {
            let now = log.stamp(session);
            if now != kept.stamp {
                *kept = match log.load(session) {
                    Ok(Some((entries, stamp))) => Kept {
                        memory: RequestMemory::replay(entries, self.capacity, MAX_RESULT_BYTES),
                        stamp: Some(stamp),
                    },
                    Ok(None) => Kept::default(),
                    Err(err) => {
                        // Refused once is refused for good: not read again at every request.
                        tracing::warn!(session = %session, "remembered requests not read: {err}");
                        if let Err(err) = log.forget(session) {
                            tracing::warn!(session = %session, "{err}");
                        }
                        Kept::default()
                    }
                };
            }
        }
        kept.memory.recall(id, fingerprint)
    }

    fn remember(&self, session: &SessionName, entry: Entry) -> Result<(), String> {
        let mut sessions = lock(&self.sessions);
        let kept = sessions.entry(session.clone()).or_default();
        kept.memory
            .remember(entry.clone(), self.capacity, MAX_RESULT_BYTES);
        let Some(log) = &self.log else {
            return Ok(());
        };
        match log.append(session, &entry, &kept.memory) {
            Ok(stamp) => {
                kept.stamp = Some(stamp);
                Ok(())
            }
            Err(err) => {
                kept.stamp = None;
                tracing::warn!(session = %session, "remembered requests not written: {err}");
                Err(err.to_string())
            }
        }
    }

    /// Forgets `session`'s requests (`close`, `reset`): a retry of an id from before runs
    /// as a new request.
    pub fn forget(&self, session: &SessionName) {
        lock(&self.sessions).remove(session);
        if let Some(log) = &self.log {
            if let Err(err) = log.forget(session) {
                tracing::warn!(session = %session, "remembered requests not forgotten: {err}");
            }
        }
    }
}

/// SHA-256 (hex) of the cells as sent: a retry sends the same ones.
fn fingerprint(cells: &[CellSpec]) -> String {
    let json = serde_json::to_vec(cells).unwrap_or_default();
    Sha256::digest(&json)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::Language;

    fn cells(code: &str) -> Vec<CellSpec> {
        vec![CellSpec::new(Language::Python, code)]
    }

    #[tokio::test]
    async fn a_retry_waits_for_the_first_run_and_gets_its_answer() {
        let book = Arc::new(RequestBook::new(8, None));
        let session = SessionName::from("s");
        let Ok(Begun::Run(first)) = book.begin(&session, "r1", &cells("x")).await else {
            panic!("the first run runs");
        };
        let retry = {
            let (book, session) = (Arc::clone(&book), session.clone());
            tokio::spawn(async move {
                match book.begin(&session, "r1", &cells("x")).await {
                    Ok(Begun::Replay(result)) => result,
                    _ => panic!("a retry replays"),
                }
            })
        };
        tokio::task::yield_now().await;
        assert!(!retry.is_finished(), "the retry waits for the first run");
        let mut answer = EvalResult::from_cells(Vec::new());
        answer.node = "n1".into();
        first.remember(&answer).expect("kept");
        let replayed = retry.await.expect("retry");
        assert!(replayed.replayed);
        assert_eq!(replayed.node, "n1");
        assert!(matches!(
            book.begin(&session, "r1", &cells("y")).await,
            Err(OnceError::Conflict { .. })
        ));
        book.forget(&session);
        assert!(matches!(
            book.begin(&session, "r1", &cells("y")).await,
            Ok(Begun::Run(_))
        ));
    }

    #[tokio::test]
    async fn a_run_that_ends_without_an_answer_leaves_the_id_free() {
        let book = Arc::new(RequestBook::new(8, None));
        let session = SessionName::from("s");
        let Ok(Begun::Run(first)) = book.begin(&session, "r1", &cells("x")).await else {
            panic!("runs");
        };
        drop(first);
        assert!(matches!(
            book.begin(&session, "r1", &cells("x")).await,
            Ok(Begun::Run(_))
        ));
    }

    /// A log whose session's lease comes and goes, with a committed progress.
    #[derive(Debug, Default)]
    struct Leased {
        held: std::sync::atomic::AtomicBool,
        progress: Vec<progress::Progress>,
    }

    impl RequestLog for Leased {
        fn stamp(&self, _: &SessionName) -> Option<Stamp> {
            None
        }
        fn load(&self, _: &SessionName) -> Result<Option<(Vec<Entry>, Stamp)>, file::LogError> {
            Ok(None)
        }
        fn append(
            &self,
            _: &SessionName,
            _: &Entry,
            _: &RequestMemory,
        ) -> Result<Stamp, file::LogError> {
            Ok(Stamp::committed(1, 1, 1))
        }
        fn forget(&self, _: &SessionName) -> Result<(), file::LogError> {
            Ok(())
        }
        fn progress(&self, _: &SessionName) -> Vec<progress::Progress> {
            if self.held.load(std::sync::atomic::Ordering::SeqCst) {
                self.progress.clone()
            } else {
                Vec::new()
            }
        }
        fn current(&self, _: &SessionName) -> bool {
            self.held.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn under_lease(&self) -> bool {
            true
        }
    }

    fn complete(index: usize) -> crate::cell::CellResult {
        let spec = CellSpec::new(Language::Python, "x");
        let mut report = crate::cell::CellReport::error(String::new());
        report.status = crate::cell::CellStatus::Complete;
        let mut result = report.into_result(index, 1, &spec);
        result.exit_code = 0;
        result
    }

    #[tokio::test]
    async fn a_retry_looked_up_without_the_lease_is_refused_and_with_it_finds_the_committed_cells()
    {
        let sent = cells("x");
        let log = Arc::new(Leased {
            held: std::sync::atomic::AtomicBool::new(false),
            progress: vec![progress::Progress {
                id: "r1".into(),
                fingerprint: fingerprint(&sent),
                cells: vec![complete(0)],
            }],
        });
        let book = Arc::new(RequestBook::new(
            8,
            Some(log.clone() as Arc<dyn RequestLog>),
        ));
        let session = SessionName::from("s");
        // The turn first, the lease after: looked up before the lease is held, nothing is
        // decided (before, this ran the cell again).
        let turn = book.turn(&session, "r1").await;
        assert!(matches!(turn.look(&sent), Err(OnceError::NotHeld { .. })));
        log.held.store(true, std::sync::atomic::Ordering::SeqCst);
        let turn = book.turn(&session, "r1").await;
        let Ok(Begun::Run(once)) = turn.look(&sent) else {
            panic!("answered from the committed state");
        };
        let done = once.done().expect("every cell is committed: nothing runs");
        assert!(done.replayed);
        assert_eq!(done.replayed_cells, 1);
    }

    #[test]
    fn a_remembered_answer_wins_and_an_unknown_id_goes_as_far_as_its_committed_progress() {
        let answer = EvalResult::from_cells(vec![complete(0)]);
        let committed = [progress::Progress {
            id: "r".into(),
            fingerprint: "f".into(),
            cells: vec![complete(0)],
        }];
        assert_eq!(
            decide(Recall::Answer(answer.clone()), &committed, "r", "f", 2),
            Decision::Replay(answer)
        );
        assert_eq!(
            decide(Recall::Unknown, &committed, "r", "f", 2),
            Decision::Run {
                resumed: vec![complete(0)],
                done: None
            }
        );
        assert!(matches!(
            decide(Recall::Unknown, &committed, "r", "f", 1),
            Decision::Run { done: Some(_), .. }
        ));
        assert_eq!(
            decide(Recall::Unknown, &committed, "r", "g", 1),
            Decision::Conflict
        );
        assert_eq!(
            decide(Recall::Unknown, &[], "r", "f", 1),
            Decision::Run {
                resumed: Vec::new(),
                done: None
            }
        );
    }
}
