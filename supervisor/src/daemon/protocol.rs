//! JSON-RPC 2.0 over newline-delimited JSON: the messages, the methods and their parameters.

use crate::cell::CellEvent;
use cellvisor_ipc::Language;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Bumped when a method or notification changes incompatibly.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line the daemon reads; a longer one is refused and its connection closed.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Method names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const EVAL: &str = "eval";
    pub const INTERRUPT: &str = "interrupt";
    pub const RESET: &str = "reset";
    pub const CLOSE: &str = "close";
    pub const STATUS: &str = "status";
    pub const SHUTDOWN: &str = "shutdown";
    pub const CONFIG_RELOAD: &str = "config/reload";
    /// Notification sent while an `eval` runs.
    pub const EVAL_EVENT: &str = "eval/event";
    /// Request from the daemon to the client: run one of the tools its `eval` declared.
    pub const TOOL_CALL: &str = "tool/call";
}

/// Standard and cellvisor error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The request was understood but refused (bad session name, missing cwd, ...).
    pub const REQUEST_REFUSED: i64 = -32001;
    /// The daemon is shutting down.
    pub const SHUTTING_DOWN: i64 = -32002;
}

/// An incoming request (or notification, without `id`).
#[derive(Debug, Clone, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    #[serde(default)]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Option<Value>,
}

/// An error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// A success or error response line.
pub fn response(id: Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// A notification line.
pub fn notification(method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// `eval/event` parameters: which request the event belongs to, and the event.
#[derive(Debug, Clone, Serialize)]
pub struct EvalEvent<'a> {
    pub request_id: &'a Value,
    #[serde(flatten)]
    pub event: &'a CellEvent,
}

/// `interrupt`, `reset`, `close` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    pub session: String,
    #[serde(default)]
    pub language: Option<Language>,
}

/// `initialize` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitializeResult {
    pub protocol_version: u32,
    pub server_version: String,
    pub languages: Vec<Language>,
    pub pid: u32,
}
