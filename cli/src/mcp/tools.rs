//! The MCP server's tools as the client lists them: their descriptions, their annotations,
//! and their input schemas (built from the configuration in force: the timeout range, the
//! longest wait).

use super::languages::Offered;
use cellvisor::MAX_WAIT_MS;
use cellvisor_config::schema::CellsConfig;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};
use std::sync::Arc;

/// The eval tool's description after its first sentence (which names the offered
/// languages) and before the Python-only sentence.
const EVAL_DESCRIPTION: &str = "State persists per language across cells and across calls on \
this connection (languages never share state; resetting one language leaves the others alone). \
Cells run in order; the first cell that fails (error or timeout) stops the call and the rest \
are reported as skipped, while state from earlier cells stays. Output is what the code \
prints plus the value of a trailing expression; errors come back as tracebacks. Rich output: display(value) shows dicts/lists as JSON. \
Each cell has a timeout (seconds); on timeout it is interrupted and reported cancelled. \
Reading stdin is not supported. Helpers available in every language: read, write, append, \
sort, uniq, counter, diff, tree, env, output, display (they are async in js: await them). \
Code-mode helpers, synchronous in every language: text(value), image(dataUrl, detail?), \
audio(dataUrl), notify(message), store(key, value) / load(key) (JSON kept per session across \
calls, restarts and languages), exit() (ends the cell successfully), yield_control() (the call \
returns now with the output so far; the cell goes on). A cell with `yield_time_ms` (or a first \
line `// @exec: {\"yield_time_ms\": N}` in js) returns after that long if it is still \
running, with its output so far and `still running ... cell N`: it keeps running in the \
background (holding its runtime: later cells wait for it, and later cells of the same call are \
skipped), and `wait` with that cell_id returns the rest.";

const WAIT_DESCRIPTION: &str = "Watch a cell that is still running in the background (an eval \
result said `still running in the background after ... as cell N`): returns what it printed since the \
last look once `yield_time_ms` passes (default 10000), or its final result as soon as it ends. \
A finished cell's result is kept until one wait collects it. One wait per cell at a time.";

const TERMINATE_DESCRIPTION: &str = "Stop a cell that is still running in the background \
(interrupt, then kill if it does not stop) and return its final result. The runtime's state \
from earlier cells is kept when the interrupt works.";

const RESET_DESCRIPTION: &str = "Discard the state of this connection's runtimes by replacing \
their worker processes: one language or, with no language, all of them. Use \
it when a runtime is wedged or you want a clean slate; the next eval cell starts fresh.";

const SESSIONS_DESCRIPTION: &str = "List the live worker processes of this MCP server: \
session, language, pid, state (starting/idle/busy/failed), memory, CPU, idle time, cells run \
and restarts.";

pub(super) fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// Said only when Python is offered, as the anchor omits a missing backend's instructions.
const PYTHON_DESCRIPTION: &str = " In Python, objects with _repr_png_/_repr_markdown_ etc. \
show as images or text, and matplotlib figures are captured as PNG.";

/// The eval tool's description for the `offered` languages.
fn eval_description(offered: &[Offered]) -> String {
    let named: Vec<String> = offered
        .iter()
        .map(|l| format!("{} ({})", l.name, l.code))
        .collect();
    let list = match named.as_slice() {
        [] => "no".to_string(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    let runtimes = if offered.len() == 1 {
        "runtime"
    } else {
        "runtimes"
    };
    let python = if offered.iter().any(|l| l.code == "py") {
        PYTHON_DESCRIPTION
    } else {
        ""
    };
    format!("Run code cells in persistent {list} {runtimes}. {EVAL_DESCRIPTION}{python}")
}

/// The tools `cellvisor mcp` offers under `cells`, for the `offered` languages.
pub(super) fn tools(cells: &CellsConfig, offered: &[Offered]) -> Vec<Tool> {
    let (min, max) = timeout_range(cells);
    let default = cells.default_timeout.as_secs_f64();
    let codes: Vec<&str> = offered.iter().map(|l| l.code).collect();
    let names: Vec<String> = offered
        .iter()
        .map(|l| format!("{} = {}", l.code, l.name))
        .collect();
    let languages = json!({
        "type": "string",
        "enum": codes,
        "description": names.join(", "),
    });
    let eval_schema = json!({
        "type": "object",
        "properties": {
            "cells": {
                "type": "array",
                "minItems": 1,
                "description": "Cells to run in order, at least one.",
                "items": {
                    "type": "object",
                    "properties": {
                        "language": languages,
                        "code": {"type": "string", "description": "Source code of the cell."},
                        "title": {"type": "string", "description": "Short label shown with the cell's result."},
                        "timeout": {
                            "type": "number",
                            "minimum": min,
                            "maximum": max,
                            "description": format!("Seconds before the cell is interrupted ({min}..{max}, default {default}; a shorter timeout is raised to {min}, a longer one cut to {max})."),
                        },
                        "reset": {
                            "type": "boolean",
                            "description": "Restart this language's runtime (losing its state) before running the cell.",
                        },
                        "yield_time_ms": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Milliseconds to watch the cell: if it still runs then, the call returns its output so far and it goes on in the background (collect the rest with `wait`). Not a timeout.",
                        },
                    },
                    "required": ["language", "code"],
                    "additionalProperties": false,
                },
            },
            "cwd": {
                "type": "string",
                "description": "Directory the cells run in, e.g. the project's (default: the server's own); helpers like read() resolve paths against it.",
            },
            "request_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": cellvisor_client::once::MAX_REQUEST_ID,
                "pattern": "^[!-~]+$",
                "description": "Your name for this call (1-128 printable ASCII characters, no spaces). Retrying with the same id and cells returns the first run's result instead of running the cells again.",
            },
        },
        "required": ["cells"],
        "additionalProperties": false,
    });
    let reset_schema = json!({
        "type": "object",
        "properties": {
            "language": {
                "type": "string",
                "enum": codes,
                "description": "The runtime to reset; omit to reset all of them.",
            },
        },
        "additionalProperties": false,
    });
    let sessions_schema =
        json!({"type": "object", "properties": {}, "additionalProperties": false});
    let cell_id = json!({
        "type": "integer",
        "minimum": 1,
        "description": "The id from the eval result that said the cell is still running.",
    });
    let wait_schema = json!({
        "type": "object",
        "properties": {
            "cell_id": cell_id,
            "yield_time_ms": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_WAIT_MS,
                "description": "How long to watch before returning the output so far (default 10000).",
            },
            "max_tokens": {
                "type": "integer",
                "minimum": 1,
                "description": "Cap on the returned output, in tokens (head and tail are kept).",
            },
        },
        "required": ["cell_id"],
        "additionalProperties": false,
    });
    let terminate_schema = json!({
        "type": "object",
        "properties": {"cell_id": cell_id},
        "required": ["cell_id"],
        "additionalProperties": false,
    });
    vec![
        Tool::new("eval", eval_description(offered), schema(eval_schema))
            .with_title("Run code cells")
            .with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(false)
                    .open_world(true),
            ),
        Tool::new("wait", WAIT_DESCRIPTION, schema(wait_schema))
            .with_title("Wait for a background cell")
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new("terminate", TERMINATE_DESCRIPTION, schema(terminate_schema))
            .with_title("Stop a background cell")
            .with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(false),
            ),
        Tool::new("reset", RESET_DESCRIPTION, schema(reset_schema))
            .with_title("Reset runtimes")
            .with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(false),
            ),
        Tool::new("sessions", SESSIONS_DESCRIPTION, schema(sessions_schema))
            .with_title("List live workers")
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
    ]
    .into_iter()
    .chain(super::state_tools::state_tools())
    .collect()
}

/// The allowed timeout range in seconds, as the config sets it.
fn timeout_range(cells: &CellsConfig) -> (f64, f64) {
    let min = cells.min_timeout.as_secs_f64();
    (min, cells.max_timeout.as_secs_f64().max(min))
}
