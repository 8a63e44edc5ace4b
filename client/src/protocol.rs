//! JSON-RPC 2.0 over newline-delimited JSON: the messages, the methods and their parameters.

use crate::cell::CellEvent;
use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod call;
mod files;
mod session_params;
pub use call::{Call, MethodName};
pub use files::{
    Encoding, FileEntry, FilesDeleteParams, FilesDeleteResult, FilesListParams, FilesListResult,
    FilesReadParams, FilesReadResult, FilesWriteParams, FilesWriteResult, MAX_CHUNK_BYTES,
    MAX_LIST_ENTRIES,
};
pub use session_params::{
    CheckpointParams, CheckpointsParams, NamesParams, SessionParams, TerminateParams, WaitParams,
};

/// Bumped when a method or notification changes incompatibly.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line the daemon reads; a longer one is refused and its connection closed.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Method names.
pub mod method {
    /// Opens a connection: the daemon answers its protocol version and languages.
    pub const INITIALIZE: &str = "initialize";
    /// Runs cells in a session ([`EvalRequest`](crate::cell::EvalRequest)).
    pub const EVAL: &str = "eval";
    /// Stops a session's running cell.
    pub const INTERRUPT: &str = "interrupt";
    /// Replaces a session's workers, discarding their state.
    pub const RESET: &str = "reset";
    /// Ends a session and its workers.
    pub const CLOSE: &str = "close";
    /// Ties a session to the calling connection: the daemon closes it when the connection
    /// closes (a process that owns its session, such as a Jupyter kernel, killed or not).
    pub const OWN: &str = "own";
    /// Lists the sessions ([`SessionStatus`](crate::status::SessionStatus) rows).
    pub const STATUS: &str = "status";
    /// The Python zygotes: what each preloaded, how many workers it forked.
    pub const ZYGOTES: &str = "zygotes";
    /// Watch a cell that went to the background: its output since the last look, or its
    /// final result.
    pub const WAIT: &str = "wait";
    /// Stop a cell that went to the background.
    pub const TERMINATE: &str = "terminate";
    /// Stops the daemon after its workers.
    pub const SHUTDOWN: &str = "shutdown";
    /// Saves a session's namespace as a named checkpoint ([`CheckpointParams`]).
    pub const CHECKPOINT: &str = "checkpoint";
    /// Replaces a session's namespace with a named checkpoint ([`CheckpointParams`]).
    pub const RESTORE: &str = "restore";
    /// Lists a session's checkpoints ([`CheckpointsParams`]).
    pub const CHECKPOINTS: &str = "checkpoints";
    /// Lists the user names of a session's namespace in one language ([`NamesParams`]).
    pub const NAMES: &str = "names";
    /// Rereads the daemon's configuration file.
    pub const CONFIG_RELOAD: &str = "config/reload";
    /// Stops taking new sessions (readiness false) and ends the idle ones; live sessions
    /// keep being served.
    pub const DRAIN: &str = "drain";
    /// Takes new sessions again after a `drain`.
    pub const UNDRAIN: &str = "undrain";
    /// Notification sent while an `eval` runs.
    pub const EVAL_EVENT: &str = "eval/event";
    /// Request from the daemon to the client: run one of the tools its `eval` declared.
    pub const TOOL_CALL: &str = "tool/call";
    /// Lists a session's workspace (docs/workspaces.md).
    pub const FILES_LIST: &str = "files/list";
    /// Reads a file of a session's workspace, by offset and length.
    pub const FILES_READ: &str = "files/read";
    /// Writes a file into a session's workspace, whole or at an offset.
    pub const FILES_WRITE: &str = "files/write";
    /// Removes a file or directory of a session's workspace.
    pub const FILES_DELETE: &str = "files/delete";
}

/// Standard and cellvisor error codes.
pub mod code;
mod results;
pub use results::{OwnResult, ReloadResult, SessionsReached, ShutdownResult, ToolCallParams};
#[cfg(feature = "schema")]
pub mod schema;

/// An incoming request (or notification, without `id`).
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The id the answer carries; `None` for a notification.
    #[serde(default)]
    pub id: Option<Value>,
    /// The method called.
    pub method: String,
    /// The method's parameters, read by the method into its own type.
    #[serde(default)]
    pub params: Option<Value>,
}

/// An error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RpcError {
    /// One of [`code`]'s values, so clients can tell refusals apart.
    pub code: i64,
    /// What was wrong and what is allowed.
    pub message: String,
    /// Details a client may show or use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without `data`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// What one line from a client is.
#[derive(Debug)]
pub enum Incoming {
    /// Only whitespace: nothing to answer.
    Blank,
    /// A call the daemon answers.
    Request(Request),
    /// The client's answer to a request of the daemon's (a `tool/call`).
    Answer(Value),
    /// Not a request: answer `error` to `id`.
    Invalid {
        /// The line's id if it had one, else `null`.
        id: Value,
        /// Why the line is not a request.
        error: RpcError,
    },
}

/// Parses one line; never panics, whatever the bytes.
pub fn parse_line(line: &[u8]) -> Incoming {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Blank;
    }
    match serde_json::from_slice::<Value>(line) {
        Err(err) => Incoming::Invalid {
            id: Value::Null,
            error: RpcError::new(code::PARSE_ERROR, format!("parse error: {err}")),
        },
        Ok(value) if value.get("method").is_none() && value.get("id").is_some() => {
            Incoming::Answer(value)
        }
        Ok(value) => match parse_request(value) {
            Ok(request) => Incoming::Request(request),
            Err((id, error)) => Incoming::Invalid { id, error },
        },
    }
}

fn parse_request(value: Value) -> Result<Request, (Value, RpcError)> {
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    // JSON-RPC 2.0: an id is a string, a number or null; it is echoed only when valid.
    if !matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
        return Err((
            Value::Null,
            RpcError::new(
                code::INVALID_REQUEST,
                "invalid request: id must be a string, a number or null",
            ),
        ));
    }
    // Every method takes named parameters; a positional array would bind by field order.
    if value.get("params").is_some_and(|p| !p.is_object()) {
        return Err((
            id,
            RpcError::new(
                code::INVALID_PARAMS,
                "invalid params: params must be an object of named parameters",
            ),
        ));
    }
    let request: Request = serde_json::from_value(value).map_err(|e| {
        (
            id.clone(),
            RpcError::new(code::INVALID_REQUEST, format!("invalid request: {e}")),
        )
    })?;
    if request.jsonrpc != "2.0" {
        return Err((
            id,
            RpcError::new(
                code::INVALID_REQUEST,
                "invalid request: jsonrpc must be \"2.0\"",
            ),
        ));
    }
    Ok(request)
}

/// A method's named parameters (none: an empty object).
pub fn params<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    serde_json::from_value(params.unwrap_or(Value::Object(Default::default())))
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("invalid params: {e}")))
}

/// A success or error response line.
pub fn response(id: Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// `value` as one JSON line, ready for the connection's write buffer: typed values (a cell's
/// events) are encoded once, straight to bytes, with no `Value` tree in between.
pub fn encode_line<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(value).unwrap_or_else(|e| {
        let error = RpcError::new(
            code::INTERNAL_ERROR,
            format!("cannot encode a message: {e}"),
        );
        serde_json::to_vec(&response(Value::Null, Err(error))).unwrap_or_default()
    });
    line.push(b'\n');
    line
}

/// A notification whose parameters are encoded as they are (see [`encode_line`]).
#[derive(Debug, Serialize)]
pub struct TypedNotification<'a, P: Serialize> {
    /// Always `"2.0"`.
    pub jsonrpc: &'static str,
    /// The notification's method.
    pub method: &'a str,
    /// Its parameters, serialized as they are.
    pub params: P,
}

impl<'a, P: Serialize> TypedNotification<'a, P> {
    /// A JSON-RPC 2.0 notification of `method`.
    pub fn new(method: &'a str, params: P) -> Self {
        TypedNotification {
            jsonrpc: "2.0",
            method,
            params,
        }
    }
}

/// A `tool/call` request of the daemon's: run `name` with `arguments` for the `eval` whose
/// id is `request_id`; the client answers `id`.
pub fn tool_call(id: &str, request_id: &Value, name: &str, arguments: &Value) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": method::TOOL_CALL,
        "params": {"request_id": request_id, "name": name, "arguments": arguments},
    })
}

/// `eval/event` parameters: which request the event belongs to, and the event.
#[derive(Debug, Clone, Serialize)]
pub struct EvalEvent<'a> {
    /// The id of the `eval` the event belongs to, so a client can run several at once.
    pub request_id: &'a Value,
    /// The event, flattened into the parameters.
    #[serde(flatten)]
    pub event: &'a CellEvent,
}

/// Which `eval/event` notifications an `eval` or `wait` sends while it runs (its `events`
/// param): a host that shows no progress pays for the answer line alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Events {
    /// Every event: `cell_started`, `output`, `display`, `status` and `cell_done`.
    #[default]
    All,
    /// What the cells show: `output` (stdout and stderr) and `display`; not `cell_started`,
    /// `status` (helper reports) or `cell_done`.
    Output,
    /// No notifications: only the answer.
    None,
    /// Every event, and each cell's trailing value as a `value {index, bundle}` event (its
    /// MIME bundle, sent before its text goes to `output`): what a Jupyter kernel publishes
    /// as `execute_result` (`cellvisor kernel` asks for it).
    Values,
}

impl Events {
    /// The spellings, as an error names them.
    pub const ALLOWED: &'static str = r#""all", "values", "output" or "none""#;

    /// Whether `event` goes out under this choice (a value's bundle never: it is the gateway's).
    pub fn passes(self, event: &CellEvent) -> bool {
        match self {
            Events::All => !matches!(event, CellEvent::Value { .. }),
            Events::Values => true,
            Events::Output => matches!(
                event,
                CellEvent::Output { .. }
                    | CellEvent::Display { .. }
                    | CellEvent::ClearOutput { .. }
            ),
            Events::None => false,
        }
    }

    /// The default (`"all"`): left out of a request that does not change it.
    pub fn is_all(&self) -> bool {
        *self == Events::All
    }
}

impl<'de> Deserialize<'de> for Events {
    /// One of the three strings; anything else is refused with a message naming them.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match value.as_str() {
            Some("all") => Ok(Events::All),
            Some("output") => Ok(Events::Output),
            Some("none") => Ok(Events::None),
            Some("values") => Ok(Events::Values),
            _ => Err(serde::de::Error::custom(format!(
                "events must be {}, not {value}",
                Events::ALLOWED
            ))),
        }
    }
}

/// `initialize` parameters: a client may say which protocol it speaks, and the daemon then
/// refuses a mismatch with [`code::PROTOCOL_MISMATCH`] rather than misreading its requests.
/// Unknown fields are let through, so that later clients can say more to this daemon.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InitializeParams {
    /// The client's [`PROTOCOL_VERSION`]; absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u32>,
    /// The client's program version, for the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

/// A client and a daemon of different protocol versions: both versions, and the message
/// that tells the user what to do. The `data` of a [`code::PROTOCOL_MISMATCH`] error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VersionMismatch {
    /// The daemon's protocol version.
    pub daemon_protocol: u32,
    /// The daemon's program version.
    pub daemon_version: String,
    /// The client's protocol version.
    pub client_protocol: u32,
    /// The client's program version (empty when it did not say).
    #[serde(default)]
    pub client_version: String,
}

impl std::fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let client = if self.client_version.is_empty() {
            String::new()
        } else {
            format!(" (cellvisor {})", self.client_version)
        };
        write!(
            f,
            "the daemon speaks protocol {} (cellvisor {}) and this client protocol {}{client}: \
             a daemon left running across an upgrade; restart it with `cellvisor stop` (the next \
             `cellvisor eval` starts the new one), or use the client of the daemon's release",
            self.daemon_protocol, self.daemon_version, self.client_protocol
        )
    }
}

/// `initialize` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InitializeResult {
    /// The daemon's [`PROTOCOL_VERSION`](crate::protocol::PROTOCOL_VERSION), for clients to check.
    pub protocol_version: u32,
    /// The cellvisor version serving.
    pub server_version: String,
    /// The languages cells may use.
    pub languages: Vec<Language>,
    /// The daemon's process id, for logs and signals.
    pub pid: u32,
    /// The daemon's node name (`daemon.node` or its host name; empty from an older daemon).
    #[serde(default)]
    pub node: String,
    /// The daemon is draining (`drain`): it takes no new session.
    #[serde(default)]
    pub draining: bool,
    /// Who cells run as (`[isolation]`): `{"level": "uid" | "none", "uids": "61000-61999",
    /// "reason": ...}`; absent from a daemon that predates isolation levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<serde_json::Value>,
}

/// How long a `drain` with `wait` waits unless told otherwise.
pub const DEFAULT_DRAIN_WAIT_MS: u64 = 60_000;

/// `drain` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DrainParams {
    /// Answer only once no session is live, or when `timeout_ms` has passed.
    #[serde(default)]
    pub wait: bool,
    /// How long `wait` waits, at most an hour; default [`DEFAULT_DRAIN_WAIT_MS`].
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// The answer of `drain` and `undrain`: where the drain stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DrainResult {
    /// The daemon is draining.
    pub draining: bool,
    /// Sessions still live (0 once a drain is done).
    pub live: usize,
    /// The daemon's node name.
    #[serde(default)]
    pub node: String,
}

/// Property tests of the line parser: whatever a client sends, a typed answer and no panic.
/// Cases per property: proptest's `PROPTEST_CASES` (256 unless set).
#[cfg(test)]
mod properties {
    use super::*;
    use crate::cell::EvalRequest;
    use proptest::prelude::*;

    const CODES: &[i64] = &[
        code::PARSE_ERROR,
        code::INVALID_REQUEST,
        code::INVALID_PARAMS,
    ];

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z0-9.\\-]{0,8}".prop_map(Value::from),
            prop::sample::select(vec!["2.0", "eval", "status", "py", "js", "lua", "s"])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "jsonrpc", "id", "method", "params", "session", "cells", "language",
                        "code", "timeout", "tools", "cwd", "result", "error", "x",
                    ])
                    .prop_map(String::from),
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every way a line can be taken, down to each method's parameters.
    fn check(line: &[u8]) -> Result<(), TestCaseError> {
        match parse_line(line) {
            Incoming::Blank | Incoming::Answer(_) => {}
            Incoming::Invalid { id, error } => {
                prop_assert!(CODES.contains(&error.code), "{error:?}");
                prop_assert!(matches!(
                    id,
                    Value::Null | Value::String(_) | Value::Number(_)
                ));
            }
            Incoming::Request(request) => {
                prop_assert_eq!(request.jsonrpc.as_str(), "2.0");
                let _ = params::<EvalRequest>(request.params.clone());
                let _ = params::<SessionParams>(request.params.clone());
                let _ = params::<WaitParams>(request.params);
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_get_a_typed_answer(line in prop::collection::vec(any::<u8>(), 0..256)) {
            check(&line)?;
        }

        #[test]
        fn arbitrary_json_gets_a_typed_answer(value in json_value()) {
            check(value.to_string().as_bytes())?;
        }

        #[test]
        fn mutated_requests_get_a_typed_answer(
            which in 0usize..3,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        ) {
            let lines = [
                r#"{"jsonrpc":"2.0","id":1,"method":"eval","params":{"session":"s","cells":[{"language":"py","code":"1","timeout":5}]}}"#,
                r#"{"jsonrpc":"2.0","id":"a","method":"close","params":{"session":"s","language":"js"}}"#,
                r#"{"jsonrpc":"2.0","id":"tool-1","result":{"ok":true}}"#,
            ];
            let mut line = lines[which].as_bytes().to_vec();
            for (at, byte) in edits {
                let at = at.index(line.len());
                line[at] = byte;
            }
            check(&line)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellStatus;
    use serde_json::json;

    #[test]
    fn events_choose_which_kinds_go_out_and_name_the_choices_when_refused() {
        let choice = |value: Value| serde_json::from_value::<Events>(value);
        assert_eq!(choice(json!("all")).ok(), Some(Events::All));
        assert_eq!(choice(json!("output")).ok(), Some(Events::Output));
        assert_eq!(choice(json!("none")).ok(), Some(Events::None));
        for bad in [json!("All"), json!(""), json!(0), json!(null)] {
            let err = choice(bad.clone()).expect_err("refused").to_string();
            assert_eq!(
                err,
                format!(r#"events must be "all", "values", "output" or "none", not {bad}"#)
            );
        }
        let started = CellEvent::CellStarted {
            index: 0,
            language: Language::Python,
            title: None,
        };
        let output = CellEvent::Output {
            index: 0,
            stream: "stderr",
            text: "x".into(),
        };
        let display = CellEvent::Display {
            index: 0,
            bundle: json!({"text/plain": "1"}),
        };
        let status = CellEvent::Status {
            index: 0,
            status: json!({"op": "read"}),
        };
        let done = CellEvent::CellDone {
            index: 0,
            status: CellStatus::Complete,
        };
        let value = CellEvent::Value {
            index: 0,
            bundle: json!({}),
        };
        let clear = CellEvent::ClearOutput {
            index: 0,
            wait: true,
        };
        // Seven events, of which a value's bundle (Jupyter's gateway's alone) passes none.
        let all = [&started, &output, &display, &status, &done, &value, &clear];
        let passed = |events: Events| all.iter().filter(|e| events.passes(e)).count();
        assert_eq!(passed(Events::All), 6);
        assert!(Events::Output.passes(&output) && Events::Output.passes(&display));
        // A clear is part of what the cells show.
        assert!(Events::Output.passes(&clear));
        assert_eq!(passed(Events::Output), 3);
        assert_eq!(passed(Events::None), 0);
        // A Jupyter kernel asks for every event and the values' bundles.
        assert_eq!(passed(Events::Values), 7);
        // The default is left out of a request, so older daemons still read it.
        let request = crate::cell::EvalRequest::default();
        assert!(serde_json::to_value(&request)
            .unwrap()
            .get("events")
            .is_none());
    }
}
