//! The MCP server's tools as the client lists them: their descriptions, their annotations,
//! and their input schemas (derived from the types their arguments are parsed into, with
//! what the configuration in force decides patched in: the languages, the timeout range, the
//! longest wait).

use super::args::{EvalArgs, NoArgs, ResetArgs, TerminateArgs, WaitArgs};
use super::languages::Offered;
use cellvisor::MAX_WAIT_MS;
use cellvisor_config::schema::CellsConfig;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::{generate::SchemaSettings, JsonSchema};
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

/// A tool's input schema derived from the type its arguments are parsed into: draft 7, every
/// type inline (no `$ref`, which some MCP clients do not follow), and tidied for agents (see
/// [`tidy`]). The callers patch in what the
/// configuration decides (the languages offered, the timeout range, the longest wait).
pub(super) fn derived<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .for_deserialize()
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
        map.remove("description");
    }
    tidy(&mut value);
    if value.get("properties").is_none() {
        value["properties"] = json!({});
    }
    value
}

/// A derived schema as an agent reads it: no `format` (a Rust integer width), no `null`
/// default or type (an argument is left out, not sent as null), descriptions on one line.
fn tidy(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("format");
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            if let Some(Value::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    map.insert("type".into(), only);
                }
            }
            if let Some(Value::String(text)) = map.get_mut("description") {
                *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            map.values_mut().for_each(tidy);
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

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
    let mut eval_schema = derived::<EvalArgs>();
    eval_schema["properties"]["cells"]["minItems"] = json!(1);
    let cell = &mut eval_schema["properties"]["cells"]["items"]["properties"];
    cell["language"] = languages;
    cell["title"] =
        json!({"type": "string", "description": "Short label shown with the cell's result."});
    cell["timeout"] = json!({
        "type": "number",
        "minimum": min,
        "maximum": max,
        "description": format!("Seconds before the cell is interrupted ({min}..{max}, default {default}; a shorter timeout is raised to {min}, a longer one cut to {max})."),
    });
    cell["yield_time_ms"]["description"] = json!("Milliseconds to watch the cell: if it still runs then, the call returns its output so far and it goes on in the background (collect the rest with `wait`). Not a timeout.");
    let request_id = &mut eval_schema["properties"]["request_id"];
    request_id["minLength"] = json!(1);
    request_id["maxLength"] = json!(cellvisor_client::once::MAX_REQUEST_ID);
    request_id["pattern"] = json!("^[!-~]+$");
    let mut reset_schema = derived::<ResetArgs>();
    let description = reset_schema["properties"]["language"]["description"].take();
    reset_schema["properties"]["language"] =
        json!({"type": "string", "enum": codes, "description": description});
    let sessions_schema = derived::<NoArgs>();
    let mut wait_schema = derived::<WaitArgs>();
    wait_schema["properties"]["cell_id"]["minimum"] = json!(1);
    wait_schema["properties"]["yield_time_ms"]["maximum"] = json!(MAX_WAIT_MS);
    wait_schema["properties"]["max_tokens"]["minimum"] = json!(1);
    let mut terminate_schema = derived::<TerminateArgs>();
    terminate_schema["properties"]["cell_id"]["minimum"] = json!(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> Vec<Offered> {
        [("py", "Python"), ("js", "JavaScript"), ("lua", "Lua")]
            .into_iter()
            .map(|(code, name)| Offered { code, name })
            .collect()
    }

    fn input(tools: &[Tool], name: &str) -> Value {
        let tool = tools.iter().find(|t| t.name == name).expect("tool listed");
        Value::Object((*tool.input_schema).clone())
    }

    /// The schemas are the argument types' with the configuration's ranges patched in: what
    /// the parser takes and what the client is told agree, field for field.
    #[test]
    fn input_schemas_are_the_argument_types_with_the_configured_ranges() {
        let cells = CellsConfig {
            min_timeout: std::time::Duration::from_secs(2),
            max_timeout: std::time::Duration::from_secs(90),
            ..CellsConfig::default()
        };
        let tools = tools(&cells, &offered());
        let eval = input(&tools, "eval");
        let item = &eval["properties"]["cells"]["items"];
        assert_eq!(eval["properties"]["cells"]["minItems"], 1);
        assert_eq!(item["properties"]["timeout"]["minimum"], 2.0);
        assert_eq!(item["properties"]["timeout"]["maximum"], 90.0);
        assert_eq!(
            item["properties"]["language"]["enum"],
            json!(["py", "js", "lua"])
        );
        assert_eq!(item["additionalProperties"], false);
        assert_eq!(eval["additionalProperties"], false);
        assert_eq!(eval["required"], json!(["cells"]));
        assert_eq!(item["required"], json!(["language", "code"]));
        // Every field the parser takes is in the schema, and no other.
        let fields = |v: &Value| {
            let mut keys: Vec<String> = v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            keys.sort();
            keys
        };
        assert_eq!(
            fields(item),
            [
                "code",
                "language",
                "reset",
                "timeout",
                "title",
                "yield_time_ms"
            ]
        );
        assert_eq!(fields(&eval), ["cells", "cwd", "request_id"]);
        let wait = input(&tools, "wait");
        assert_eq!(wait["properties"]["yield_time_ms"]["maximum"], MAX_WAIT_MS);
        assert_eq!(wait["properties"]["cell_id"]["minimum"], 1);
        assert_eq!(wait["required"], json!(["cell_id"]));
        let text =
            serde_json::to_string(&tools.iter().map(|t| &t.input_schema).collect::<Vec<_>>())
                .unwrap();
        assert!(
            !text.contains("$ref") && !text.contains("\"format\""),
            "{text}"
        );
        assert!(!text.contains("null") && !text.contains("\\n"), "{text}");
        let reset = input(&tools, "reset");
        assert_eq!(
            reset["properties"]["language"]["enum"],
            json!(["py", "js", "lua"])
        );
        assert!(reset.get("required").is_none_or(|r| r == &json!([])));
        let checkpoint = input(&tools, "checkpoint");
        assert_eq!(checkpoint["required"], json!(["name"]));
        assert_eq!(input(&tools, "sessions")["additionalProperties"], false);
    }
}
