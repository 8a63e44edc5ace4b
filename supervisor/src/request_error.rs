//! Why the supervisor refuses a request as a whole, before running anything: one variant per
//! reason, each message saying what was wrong and what is allowed, with the bounds those
//! messages name. A leaf: the actors answer with it without reaching up into `host`.

/// Largest cell source accepted: well inside the frame limit.
pub const MAX_CODE_BYTES: usize = 8 * 1024 * 1024;

/// Longest host tool name accepted (MCP servers name tools like `github.search_issues`).
pub const MAX_TOOL_NAME: usize = 128;

/// Longest `yield_time_ms` a `wait` accepts (an hour).
pub const MAX_WAIT_MS: u64 = 3_600_000;

use cellvisor_ipc::Language;
use std::path::PathBuf;

/// A request the supervisor refuses as a whole, before running anything.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RequestError {
    /// The session name is not one a file name and a log line can hold safely.
    #[error("{0}")]
    SessionName(#[from] crate::names::SessionNameError),
    /// A request without cells is a host's mistake, not a no-op.
    #[error("a request needs at least one cell")]
    NoCells,
    /// More cells than `cells.max-cells-per-request`: one request must not hold a session forever.
    #[error(
        "the request has {count} cells; at most {max} cells per request \
         (cells.max-cells-per-request): split it into several requests"
    )]
    TooManyCells {
        /// Cells in the request.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A cell's timeout is not a positive number of seconds.
    #[error(
        "cell {index}: timeout must be a positive number of seconds, got {value}; \
         {min} to {max} seconds are kept as given, a shorter timeout is raised to {min} and a \
         longer one cut to {max} (cells.min-timeout, cells.max-timeout); omit it for the \
         default of {default} seconds"
    )]
    Timeout {
        /// The cell's place in its request.
        index: usize,
        /// The timeout given.
        value: f64,
        /// `cells.min-timeout`, in seconds.
        min: f64,
        /// `cells.max-timeout`, in seconds.
        max: f64,
        /// `cells.default-timeout`, in seconds.
        default: f64,
    },
    /// The request's `timeout` (for the cells without one) is not a positive number of seconds.
    #[error(
        "the request's timeout must be a positive number of seconds, got {value}; it applies \
         to every cell that sets none, {min} to {max} seconds are kept as given, a shorter \
         timeout is raised to {min} and a longer one cut to {max}; omit it for the default \
         of {default} seconds"
    )]
    RequestTimeout {
        /// The timeout given.
        value: f64,
        /// `cells.min-timeout`, in seconds.
        min: f64,
        /// `cells.max-timeout`, in seconds.
        max: f64,
        /// `cells.default-timeout`, in seconds.
        default: f64,
    },
    /// A cell's code is larger than a worker frame may carry.
    #[error("cell {index}: code is {len} bytes; at most {max} bytes per cell", max = MAX_CODE_BYTES)]
    CodeTooLarge {
        /// The cell's place in its request.
        index: usize,
        /// The code's size in bytes.
        len: usize,
    },
    /// The working directory is not a directory: the cells would run somewhere unexpected.
    #[error("working directory {0} does not exist or is not a directory")]
    Cwd(PathBuf),
    /// Under `sessions.key = "session+cwd"` an `eval` without `cwd` names no session's state.
    #[error(
        "session {0}: sessions.key = \"session+cwd\" keys a session's state by its directory, \
         so eval needs `cwd` (the caller's absolute directory); send it, or run on \
         throw-away workers (`fresh`)"
    )]
    CwdRequired(String),
    /// Under `session+cwd`, a method that needs one session named a name with several pairs.
    #[error(
        "session {session} has state in {} directories (sessions.key = \"session+cwd\"): {}; \
         pass `cwd` to name one",
        cwds.len(),
        cwds.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    AmbiguousSession {
        /// The session name.
        session: String,
        /// The directories it has state in, sorted.
        cwds: Vec<PathBuf>,
    },
    /// Under `session+cwd`, a method without `cwd` named a name with no pair here.
    #[error(
        "session {0} has no state in any directory on this node (sessions.key = \
         \"session+cwd\"); pass `cwd` to name the directory whose state you mean"
    )]
    NoPair(String),
    /// A tool name that cells could not call as `tool.<name>`.
    #[error("invalid tool name {0:?}: use 1 to {max} characters from A-Z a-z 0-9 _ - .", max = MAX_TOOL_NAME)]
    ToolName(String),
    /// Two tools with one name: a call would be ambiguous.
    #[error("tool {0:?} is declared twice")]
    DuplicateTool(String),
    /// The request's sandbox fields would loosen the operator's, or cannot be enforced.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// `wait` or `terminate` named a cell that is not in the background (or was collected).
    #[error(
        "session {session} has no background cell {cell_id} (ids come from results with status \
         \"running\"; a finished cell's result is handed out once)"
    )]
    UnknownCell {
        /// The session named.
        session: String,
        /// The cell id named.
        cell_id: u64,
    },
    /// `wait` named a cell whose result was dropped uncollected, to keep the session's cap.
    #[error(
        "session {session}: the result of background cell {cell_id} was dropped uncollected: \
         the session keeps at most {cap} results of background cells nobody waited on \
         (cells.max-uncollected); wait for cells sooner, or raise cells.max-uncollected"
    )]
    DroppedCell {
        /// The session named.
        session: String,
        /// The cell id named.
        cell_id: u64,
        /// The `cells.max-uncollected` that dropped it.
        cap: usize,
    },
    /// `wait` named a cell whose own request still waits for it.
    #[error(
        "cell {0} has not gone to the background: the request that started it still waits for \
         it (use interrupt to stop it)"
    )]
    NotYielded(u64),
    /// Another `wait` is already collecting this cell's output.
    #[error(
        "cell {0} is already being waited on: one wait at a time per cell; try again when that \
         wait returns"
    )]
    AlreadyObserved(u64),
    /// `yield_time_ms` is longer than [`MAX_WAIT_MS`].
    #[error("yield_time_ms must be at most {max} ms (an hour), got {0}", max = MAX_WAIT_MS)]
    WaitTime(u64),
    /// `max_tokens` of 0 would return nothing.
    #[error("max_tokens must be at least 1")]
    MaxTokens,
    /// The supervisor has shut down; no more requests are taken.
    #[error("the supervisor has stopped")]
    Stopped,
    /// A checkpoint name a file cannot safely be named by.
    #[error(
        "invalid checkpoint name {0:?}: use 1 to 64 characters from A-Z a-z 0-9 . _ -, not \
         starting with a dot"
    )]
    CheckpointName(String),
    /// `restore` named a checkpoint the session does not have.
    #[error(
        "session {session} has no checkpoint named {name:?}{in_language}; `checkpoints` lists \
         the ones it has",
        in_language = language.map(|l| format!(" in {l}")).unwrap_or_default()
    )]
    NoSuchCheckpoint {
        /// The session named.
        session: String,
        /// The language named, if one was.
        language: Option<Language>,
        /// The checkpoint named.
        name: String,
    },
    /// A checkpoint without a language found nothing to save: no live worker and no snapshot.
    #[error(
        "session {0} has no state to checkpoint: it has no live worker and no snapshot; run a \
         cell first, or name a language"
    )]
    NothingToCheckpoint(String),
    /// Saving, restoring or listing a namespace did not succeed; the text says why.
    #[error("{0}")]
    State(String),
    /// The node (named) is draining and does not hold the session: a router sends the
    /// request elsewhere.
    #[error(
        "node {0} is draining: it starts no new session; send the request to another node, or \
         retry after `cellvisor undrain`"
    )]
    Draining(String),
    /// Another node of the fleet runs the session (it holds its lease): a router sends the
    /// request there, or retries after `retry_after` once that node has died.
    #[error(
        "session {session} runs on node {node}: send the request there (its lease ends in {} \
         unless that node renews it)",
        humantime::format_duration(*retry_after)
    )]
    LeasedElsewhere {
        /// The session.
        session: String,
        /// The node holding it.
        node: String,
        /// When its lease runs out unless renewed, to the millisecond.
        retry_after: std::time::Duration,
    },
    /// `resume` was asked and the session is neither live here nor saved.
    #[error(
        "session {0} is unknown: it is not live on this node and has no snapshot; send the \
         request without `resume` to start it afresh"
    )]
    SessionUnknown(String),
    /// The session's lease could not be read or written.
    #[error("{0}")]
    Lease(String),
    /// The session's workspace could not be made or used; the text says which and why.
    #[error("{0}")]
    Workspace(String),
    /// The request's `request_id` is not of the allowed form.
    #[error("{0}")]
    RequestId(#[from] cellvisor_client::once::RequestIdError),
    /// The request's `request_id` ran before and cannot be answered again.
    #[error("{0}")]
    Once(#[from] crate::once::OnceError),
}

impl RequestError {
    /// `LEASED_ELSEWHERE` for a session whose lease this node let go while no other node
    /// holds it yet (`node` is `none`): the router sends the request again shortly, and the
    /// session's next holder serves it from its committed state.
    pub(crate) fn lease_let_go(session: impl Into<String>) -> RequestError {
        RequestError::LeasedElsewhere {
            session: session.into(),
            node: "none".into(),
            retry_after: std::time::Duration::from_millis(100),
        }
    }
}

/// The answer to a request whose session's lease could not be taken: `LEASED_ELSEWHERE`
/// when another node holds it, else the lease store's error.
pub(crate) fn lease_refusal(err: crate::fleet::LeaseError) -> RequestError {
    match err {
        crate::fleet::LeaseError::HeldBy {
            session,
            node,
            expires_in,
        } => RequestError::LeasedElsewhere {
            session,
            node,
            retry_after: expires_in,
        },
        other => RequestError::Lease(other.to_string()),
    }
}
