//! Golden JSON-RPC lines: one checked-in example of every method's request and result, every
//! `eval/event`, the daemon's `tool/call` and its answers, and every error code.
//!
//! The examples are built here with the daemon's own types and constructors and compared
//! with `supervisor/tests/golden/jsonrpc.jsonl`; each checked-in line is then decoded into its
//! type (where it has one) and encoded again, so an accidental change to the wire fails a
//! test. After a deliberate change, bump `protocol::PROTOCOL_VERSION` and regenerate:
//!
//!     CELLVISOR_BLESS=1 cargo test -p cellvisor --lib golden

use super::protocol::{
    self, code, method, params, DrainParams, DrainResult, Events, Incoming, InitializeResult,
    RpcError, SessionParams, TerminateParams, WaitParams, PROTOCOL_VERSION,
};
use crate::cell::{
    CellEvent, CellReport, CellResult, CellSpec, CellStatus, EvalRequest, EvalResult, ToolSpec,
    Truncation,
};
use crate::sandbox::{Feature, SandboxRequest, SandboxStatus};
use crate::session::{SessionState, SessionStatus};
use cellvisor_client::usage::{CellUsage, MemoryLimit, OutOfMemory};
use cellvisor_ipc::Language;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Every method a client may call (the daemon's own `tool/call` and `eval/event` aside).
const CLIENT_METHODS: &[&str] = &[
    method::INITIALIZE,
    method::EVAL,
    method::INTERRUPT,
    method::RESET,
    method::CLOSE,
    method::STATUS,
    method::WAIT,
    method::TERMINATE,
    method::SHUTDOWN,
    method::CONFIG_RELOAD,
    method::DRAIN,
    method::UNDRAIN,
    method::OWN,
];

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn eval_request() -> EvalRequest {
    EvalRequest {
        session: "notes".into(),
        cwd: Some(PathBuf::from("/tmp/work")),
        cells: vec![CellSpec {
            language: Language::Python,
            code: "print(1)".into(),
            title: Some("first".into()),
            timeout: Some(5.0),
            reset: true,
            yield_time_ms: Some(300),
        }],
        tools: vec![ToolSpec {
            name: "search".into(),
            description: "finds things".into(),
            input_schema: json!({"type": "object"}),
        }],
        virtual_env: Some(PathBuf::from("/tmp/work/.venv")),
        env: Some([("MYAPP_MODE".to_string(), "dev".to_string())].into()),
        fresh: true,
        resume: false,
        request_id: Some("req-7f3a".into()),
        timeout: Some(30.0),
        reset: true,
        events: Events::Output,
        sandbox: Some(SandboxRequest {
            enabled: Some(true),
            network: Some("none".into()),
            ..SandboxRequest::default()
        }),
    }
}

fn session_params() -> SessionParams {
    SessionParams {
        session: "notes".into(),
        cwd: Some("/home/me/project".into()),
        language: Some(Language::JavaScript),
        keep_workspace: false,
    }
}

fn wait_params() -> WaitParams {
    WaitParams {
        session: "notes".into(),
        cwd: Some("/home/me/project".into()),
        cell_id: 7,
        yield_time_ms: Some(500),
        max_tokens: Some(100),
        events: Events::None,
    }
}

fn terminate_params() -> TerminateParams {
    TerminateParams {
        session: "notes".into(),
        cwd: None,
        cell_id: 7,
    }
}

/// A cell `terminate` cancelled, with the processes it had started ended with it (an
/// optional field: older clients ignore it).
fn terminated_cell() -> CellResult {
    let mut cell = cell_result(CellStatus::Cancelled, "b\n(terminated)\n")
        .cells
        .remove(0);
    cell.report.processes_ended = Some(2);
    cell
}

/// A one-cell result with `status` (a cell in the background is `running`).
fn cell_result(status: CellStatus, output: &str) -> EvalResult {
    let mut cell = eval_result().cells.remove(0);
    cell.report.status = status;
    cell.exit_code = i32::from(status.failed());
    cell.report.output = output.into();
    cell.report.displays.clear();
    cell.report.status_events.clear();
    // Only a cell that completed under `every-cell` says whether its save was written.
    cell.report.saved = cell.report.saved.filter(|_| status == CellStatus::Complete);
    cell.report.truncation.total_bytes = output.len() as u64;
    // A cell still running has no usage yet; a finished one counts what it wrote.
    cell.report.usage = cell.report.usage.filter(|_| status != CellStatus::Running);
    if let Some(usage) = cell.report.usage.as_mut() {
        usage.output_bytes = output.len() as u64;
    }
    EvalResult::from_cells(vec![cell])
}

fn eval_result() -> EvalResult {
    EvalResult::from_cells(vec![CellResult {
        index: 0,
        cell_id: 7,
        title: Some("first".into()),
        language: Language::Python,
        exit_code: 0,
        report: CellReport {
            status: CellStatus::Complete,
            output: "1\n".into(),
            duration_ms: 12.5,
            displays: vec![json!({"text/html": "<b>1</b>"})],
            status_events: vec![json!({"kind": "progress", "done": 1})],
            truncation: Truncation {
                truncated: false,
                total_bytes: 2,
                total_lines: 1,
                artifact_path: None,
                artifact_error: None,
            },
            notice: None,
            state: None,
            saved: Some(cellvisor_client::once::Saved {
                saved: true,
                why: None,
            }),
            processes_ended: None,
            usage: Some(CellUsage {
                cpu_ms: 10.0,
                peak_rss_bytes: 31_457_280,
                wall_ms: 12.5,
                output_bytes: 2,
                processes_seen: Some(1),
            }),
            out_of_memory: None,
        },
        node: "node-a".into(),
    }])
}

fn status_result() -> Vec<SessionStatus> {
    vec![SessionStatus {
        session: "notes".into(),
        cwd: None,
        language: Language::Lua,
        pid: Some(4242),
        engine: Some("Lua 5.4".into()),
        state: SessionState::Idle,
        cells_run: 3,
        restarts: 0,
        idle_ms: 1500,
        queued: 0,
        rss_bytes: Some(1 << 20),
        cpu_percent: Some(0.5),
        cell_id: Some(7),
        background: true,
        observed: false,
        reason: None,
        sandbox: Some(SandboxStatus {
            landlock_abi: 7,
            enforced: vec![Feature::Files, Feature::Tcp, Feature::Scopes],
            network: "none".into(),
            warning: None,
        }),
        node: "node-a".into(),
        uid: None,
    }]
}

fn initialize_result() -> InitializeResult {
    InitializeResult {
        isolation: None,
        protocol_version: PROTOCOL_VERSION,
        server_version: "0.0.0".into(),
        languages: Language::ALL.to_vec(),
        pid: 4242,
        node: "node-a".into(),
        draining: false,
    }
}

fn events() -> Vec<(&'static str, CellEvent)> {
    vec![
        (
            "cell_started",
            CellEvent::CellStarted {
                index: 0,
                language: Language::Python,
                title: Some("first".into()),
            },
        ),
        (
            "output",
            CellEvent::Output {
                index: 0,
                stream: "stdout",
                text: "1\n".into(),
            },
        ),
        (
            "display",
            CellEvent::Display {
                index: 0,
                bundle: json!({"text/plain": "1"}),
            },
        ),
        (
            "status",
            CellEvent::Status {
                index: 0,
                status: json!({"kind": "progress", "done": 1}),
            },
        ),
        (
            "clear_output",
            CellEvent::ClearOutput {
                index: 0,
                wait: true,
            },
        ),
        (
            "cell_done",
            CellEvent::CellDone {
                index: 0,
                status: CellStatus::Complete,
            },
        ),
    ]
}

/// The error line the daemon answers `line` with (a request it cannot take).
fn refusal_of(line: &str) -> Value {
    match protocol::parse_line(line.as_bytes()) {
        Incoming::Invalid { id, error } => protocol::response(id, Err(error)),
        other => panic!("{line} was taken: {other:?}"),
    }
}

/// Every example line, named, in the file's order.
fn examples() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut push = |name: &str, line: Value| out.push((name.to_string(), line));
    // Requests, one per method.
    for (id, name) in (1..).zip(CLIENT_METHODS) {
        let params = match *name {
            method::EVAL => to_value(&eval_request()),
            method::INTERRUPT | method::RESET | method::CLOSE | method::OWN => {
                to_value(&session_params())
            }
            method::WAIT => to_value(&wait_params()),
            method::TERMINATE => to_value(&terminate_params()),
            method::DRAIN => to_value(&DrainParams {
                wait: true,
                timeout_ms: Some(30_000),
            }),
            _ => json!({}),
        };
        push(&format!("request {name}"), request(id, name, params));
    }
    // Results, one per method, answering the request of the same id.
    let results = [
        to_value(&initialize_result()),
        to_value(&eval_result()),
        json!({"sessions": 1}),
        json!({"sessions": 1}),
        json!({"sessions": 0}),
        to_value(&status_result()),
        to_value(&cell_result(CellStatus::Running, "a\n").cells[0]),
        to_value(&terminated_cell()),
        json!({"stopping": true}),
        json!({"reloaded": true, "changes": ["sessions.max-sessions: 4 -> 8"]}),
        to_value(&DrainResult {
            draining: true,
            live: 0,
            node: "node-a".into(),
        }),
        to_value(&DrainResult {
            draining: false,
            live: 2,
            node: "node-a".into(),
        }),
        json!({"owned": 1}),
    ];
    for ((id, name), result) in (1u64..).zip(CLIENT_METHODS).zip(results) {
        push(
            &format!("result {name}"),
            protocol::response(json!(id), Ok(result)),
        );
    }
    // A request whose second cell failed: the third was skipped, and the result names the
    // failed cell.
    let mut failed = eval_result().cells.remove(0);
    failed.index = 1;
    failed.title = Some("load".into());
    failed.report.status = CellStatus::Error;
    failed.exit_code = 1;
    failed.report.output = "ValueError: no data\n".into();
    failed.report.saved = None;
    let spec = CellSpec::new(Language::Lua, "print(rows)");
    let skipped = CellResult::skipped(2, 9, &spec);
    let result = EvalResult::from_cells(vec![eval_result().cells.remove(0), failed, skipped]);
    push(
        "result eval (a cell failed)",
        protocol::response(json!(2), Ok(to_value(&result))),
    );
    // A cell that memory ended: the typed verdict beside the status.
    let mut oom = cell_result(CellStatus::Error, "InternalError: out of memory\n");
    oom.cells[0].language = Language::JavaScript;
    oom.cells[0].report.out_of_memory = Some(OutOfMemory {
        limit: MemoryLimit::JsHeap,
        limit_bytes: 64 << 20,
        used_bytes: 67_108_000,
    });
    push(
        "result eval (out of memory)",
        protocol::response(json!(2), Ok(to_value(&oom))),
    );
    // A cell whose `every-cell` save failed: told on its result, with a notice.
    let mut unsaved = eval_result();
    let why = "the snapshot would be over snapshots.max-size (64.0 KiB; 65.0 KiB were written \
               before it stopped)";
    unsaved.cells[0].report.saved = Some(cellvisor_client::once::Saved {
        saved: false,
        why: Some(why.into()),
    });
    unsaved.cells[0].report.notice = Some(format!(
        "this cell's state was not saved: {why}; the session goes on, but a crash, a restart \
         or a move to another node before the next save loses this cell's effects"
    ));
    push(
        "result eval (a save failed)",
        protocol::response(json!(2), Ok(to_value(&unsaved))),
    );
    // A retry of a request_id that ran: its first answer, nothing run again.
    let mut replayed = eval_result();
    replayed.replayed = true;
    push(
        "result eval (replayed)",
        protocol::response(json!(2), Ok(to_value(&replayed))),
    );
    // Notifications while an eval runs.
    for (name, event) in events() {
        let params = to_value(&protocol::EvalEvent {
            request_id: &json!(2),
            event: &event,
        });
        push(
            &format!("event {name}"),
            to_value(&protocol::TypedNotification::new(
                method::EVAL_EVENT,
                params,
            )),
        );
    }
    // The daemon asks the client to run a tool; the client answers.
    push(
        "request tool/call",
        protocol::tool_call("tool-1", &json!(2), "search", &json!({"q": "a"})),
    );
    push(
        "answer tool/call ok",
        json!({"jsonrpc": "2.0", "id": "tool-1", "result": {"hits": 2}}),
    );
    push(
        "answer tool/call error",
        json!({"jsonrpc": "2.0", "id": "tool-1", "error": {"code": -32000, "message": "no such tool"}}),
    );
    // Errors, one per code.
    push("error parse", refusal_of("{not json"));
    push(
        "error invalid-request",
        refusal_of(r#"{"jsonrpc":"1.0","id":9,"method":"status"}"#),
    );
    push(
        "error invalid-params",
        refusal_of(r#"{"jsonrpc":"2.0","id":9,"method":"eval","params":[1]}"#),
    );
    let Err(bad_events) = params::<EvalRequest>(Some(json!({"cells": [], "events": "loud"})))
    else {
        panic!("an events value outside the three is refused");
    };
    push(
        "error invalid-params (events)",
        protocol::response(json!(9), Err(bad_events)),
    );
    let error =
        |code: i64, message: &str| protocol::response(json!(9), Err(RpcError::new(code, message)));
    push(
        "error method-not-found",
        error(code::METHOD_NOT_FOUND, "method not found: nope"),
    );
    push(
        "error internal",
        error(code::INTERNAL_ERROR, "cannot serialize the result"),
    );
    push(
        "error refused",
        error(code::REQUEST_REFUSED, "no such session `x`"),
    );
    push(
        "error shutting-down",
        error(code::SHUTTING_DOWN, "the daemon is shutting down"),
    );
    push(
        "error draining",
        error(
            code::DRAINING,
            "node node-a is draining: it starts no new session; send the request to another \
             node, or retry after `cellvisor undrain`",
        ),
    );
    out
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/jsonrpc.jsonl")
}

fn render() -> String {
    let mut out = format!(
        "# One JSON-RPC line per method, result, event and error of the daemon; see\n\
         # supervisor/src/daemon/golden_tests.rs. Regenerate: CELLVISOR_BLESS=1 cargo test -p cellvisor --lib golden\n\
         protocol-version {PROTOCOL_VERSION}\n"
    );
    for (name, line) in examples() {
        out.push_str(&format!("{name}\t{line}\n"));
    }
    out
}

/// Decodes `line` into the type it carries, where it has one, and encodes it again.
fn reencode(name: &str, line: &Value) -> Value {
    let text = line.to_string();
    let mut again = line.clone();
    if let Some(method) = name.strip_prefix("request ") {
        if method == method::TOOL_CALL {
            return again;
        }
        let Incoming::Request(request) = protocol::parse_line(text.as_bytes()) else {
            panic!("{name}: not taken as a request");
        };
        assert_eq!(request.method, method);
        again["params"] = match method {
            method::EVAL => to_value(&params::<EvalRequest>(request.params).expect("eval params")),
            method::INTERRUPT | method::RESET | method::CLOSE | method::OWN => {
                to_value(&params::<SessionParams>(request.params).expect("session params"))
            }
            method::WAIT => to_value(&params::<WaitParams>(request.params).expect("wait params")),
            method::TERMINATE => {
                to_value(&params::<TerminateParams>(request.params).expect("terminate params"))
            }
            method::DRAIN => {
                to_value(&params::<DrainParams>(request.params).expect("drain params"))
            }
            _ => Value::Object(params(request.params).expect("no params")),
        };
    } else if let Some(method) = name.strip_prefix("result ") {
        let method = method.split(' ').next().unwrap_or(method);
        let result = line["result"].clone();
        again["result"] = match method {
            method::INITIALIZE => to_value(
                &serde_json::from_value::<InitializeResult>(result).expect("initialize result"),
            ),
            method::EVAL => {
                to_value(&serde_json::from_value::<EvalResult>(result).expect("eval result"))
            }
            method::STATUS => to_value(
                &serde_json::from_value::<Vec<SessionStatus>>(result).expect("status result"),
            ),
            method::WAIT | method::TERMINATE => {
                to_value(&serde_json::from_value::<CellResult>(result).expect("a cell result"))
            }
            method::DRAIN | method::UNDRAIN => {
                to_value(&serde_json::from_value::<DrainResult>(result).expect("a drain result"))
            }
            _ => result,
        };
    } else if name.starts_with("error ") {
        let error: RpcError = serde_json::from_value(line["error"].clone()).expect("an error");
        again["error"] = to_value(&error);
        assert!(
            matches!(protocol::parse_line(text.as_bytes()), Incoming::Answer(_)),
            "{name}: a client would not read this as an answer"
        );
    }
    again
}

#[test]
fn every_client_method_has_a_request_and_a_result() {
    let names: Vec<String> = examples().into_iter().map(|(name, _)| name).collect();
    for method in CLIENT_METHODS {
        assert!(names.contains(&format!("request {method}")), "{method}");
        assert!(names.contains(&format!("result {method}")), "{method}");
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn jsonrpc_lines_match_the_golden_file() {
    if std::env::var_os("CELLVISOR_BLESS").is_some() {
        std::fs::write(golden_path(), render()).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(golden_path()).expect("tests/golden/jsonrpc.jsonl");
    let mut lines = golden.lines().filter(|line| !line.starts_with('#'));
    assert_eq!(
        lines.next(),
        Some(format!("protocol-version {PROTOCOL_VERSION}").as_str()),
        "PROTOCOL_VERSION changed: regenerate with CELLVISOR_BLESS=1"
    );
    let checked_in: Vec<(String, Value)> = lines
        .map(|line| {
            let (name, json) = line.split_once('\t').expect("`name<TAB>json` lines");
            (name.to_string(), serde_json::from_str(json).expect("JSON"))
        })
        .collect();
    let ours = examples();
    let names = |lines: &[(String, Value)]| -> Vec<String> {
        lines.iter().map(|(name, _)| name.clone()).collect()
    };
    assert_eq!(names(&checked_in), names(&ours), "the set of lines changed");
    for ((name, golden), (_, line)) in checked_in.iter().zip(&ours) {
        assert_eq!(
            line, golden,
            "{name}: the wire changed without a PROTOCOL_VERSION bump (bump it, then bless)"
        );
        assert_eq!(
            &reencode(name, golden),
            golden,
            "{name} does not survive a round trip"
        );
    }
}
