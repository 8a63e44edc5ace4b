//! Jupyter's kernel protocol ⇄ cellvisor's cells, as plain data: the kernelspec and
//! `language_info` of each language, a cell's events as iopub messages, its result as an
//! `execute_reply` (and an `error`), `is_complete` and the stable kernel id of a session.
//! The gateway's channels and a ZMQ kernel both speak through it.

use cellvisor::cell::{CellEvent, CellResult, CellStatus};
use cellvisor::Language;
use serde_json::{json, Value};

/// The kernelspec name of `language`: `python3` is the name Jupyter hosts ask for when
/// they name none of their own.
pub fn kernel_name(language: Language) -> &'static str {
    match language {
        Language::Python => "python3",
        Language::JavaScript => "javascript",
        Language::Lua => "lua",
    }
}

/// The language a kernelspec name (or one of cellvisor's names for it) stands for.
pub fn language_of(name: &str) -> Option<Language> {
    match name {
        "python3" | "python" | "py" | "cellvisor-python" => Some(Language::Python),
        "javascript" | "js" | "cellvisor-javascript" => Some(Language::JavaScript),
        "lua" | "cellvisor-lua" => Some(Language::Lua),
        _ => None,
    }
}

/// `language_info` of `kernel_info_reply` and of the kernelspec's metadata.
pub fn language_info(language: Language) -> Value {
    match language {
        Language::Python => json!({
            "name": "python", "version": "3", "mimetype": "text/x-python",
            "file_extension": ".py", "pygments_lexer": "ipython3",
            "codemirror_mode": {"name": "ipython", "version": 3},
            "nbconvert_exporter": "python",
        }),
        Language::JavaScript => json!({
            "name": "javascript", "version": "ES2023", "mimetype": "text/javascript",
            "file_extension": ".js", "pygments_lexer": "javascript",
            "codemirror_mode": "javascript", "nbconvert_exporter": "script",
        }),
        Language::Lua => json!({
            "name": "lua", "version": "5.4", "mimetype": "text/x-lua",
            "file_extension": ".lua", "pygments_lexer": "lua",
            "codemirror_mode": "lua", "nbconvert_exporter": "script",
        }),
    }
}

/// What people read as the language's name.
pub fn display_language(language: Language) -> &'static str {
    match language {
        Language::Python => "Python",
        Language::JavaScript => "JavaScript",
        Language::Lua => "Lua",
    }
}

/// The kernelspec model `GET /api/kernelspecs` lists (`resources` holds no files: the
/// kernels are cellvisor's sessions, with no logo to serve).
pub fn kernelspec(language: Language) -> Value {
    let name = kernel_name(language);
    json!({
        "name": name,
        "spec": {
            "argv": ["cellvisor", "kernel", "--language", language.short_name(), "-f", "{connection_file}"],
            "display_name": format!("{} (cellvisor)", display_language(language)),
            "language": language_info(language)["name"],
            "interrupt_mode": "message",
            "env": {},
            "metadata": {"cellvisor": {"language": language.short_name()}, "language_info": language_info(language)},
        },
        "resources": {},
    })
}

/// The content of `kernel_info_reply`.
pub fn kernel_info(language: Language) -> Value {
    json!({
        "status": "ok",
        "protocol_version": super::message::PROTOCOL_VERSION,
        "implementation": "cellvisor",
        "implementation_version": env!("CARGO_PKG_VERSION"),
        "language_info": language_info(language),
        "banner": format!("cellvisor {} session ({} {})", display_language(language),
            env!("CARGO_PKG_VERSION"), "kernel"),
        "help_links": [],
        "debugger": false,
    })
}

/// The stable kernel id of `session` in `language` for `tenant`: a UUIDv5 of the three, so
/// every client (and every daemon restart) names a live session's kernel the same way, and
/// no tenant's id is another's.
pub fn kernel_id(tenant: &str, session: &str, language: Language) -> String {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6a3c_1f0e_9d1b_4c55_8e1f_2b7d_0c9a_4e11);
    let name = format!("{tenant}\u{0}{session}\u{0}{}", language.short_name());
    uuid::Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string()
}

/// The iopub message (type and content) of a cell's event; `None` for the events iopub has
/// no message for (a cell's start and end: `execute_input` and the replies say those; its
/// value: [`CellOutputs`](super::outputs::CellOutputs) makes that the `execute_result`).
pub fn iopub_of(event: &CellEvent) -> Option<(&'static str, Value)> {
    match event {
        CellEvent::Output { stream, text, .. } => {
            Some(("stream", json!({"name": stream, "text": text})))
        }
        CellEvent::Display { bundle, .. } => Some(display_message(bundle)),
        CellEvent::Status { status, .. } => Some((
            "display_data",
            json!({"data": {"application/x-cellvisor-status": status}, "metadata": {}, "transient": {}}),
        )),
        CellEvent::ClearOutput { wait, .. } => Some(("clear_output", json!({"wait": wait}))),
        CellEvent::CellStarted { .. } | CellEvent::CellDone { .. } | CellEvent::Value { .. } => {
            None
        }
    }
}

/// The bundle key under which a Python display names itself (IPython's `display_id`) and
/// says whether it updates that display.
pub const DISPLAY_MIME: &str = "application/x-cellvisor-display";

/// A display's iopub message: `display_data`, or `update_display_data` for an update, with
/// its `display_id` moved from the bundle to `transient` as Jupyter carries it.
fn display_message(bundle: &Value) -> (&'static str, Value) {
    let named = bundle
        .get(DISPLAY_MIME)
        .and_then(|display| Some((display.get("display_id")?.as_str()?, display)));
    let Some((id, display)) = named else {
        return (
            "display_data",
            json!({"data": bundle, "metadata": {}, "transient": {}}),
        );
    };
    let mut data = bundle.clone();
    if let Some(data) = data.as_object_mut() {
        data.remove(DISPLAY_MIME);
    }
    let kind = match display.get("update").and_then(Value::as_bool) {
        Some(true) => "update_display_data",
        _ => "display_data",
    };
    (
        kind,
        json!({"data": data, "metadata": {}, "transient": {"display_id": id}}),
    )
}

/// The `execute_input` content of a cell.
pub fn execute_input(code: &str, execution_count: u64) -> Value {
    json!({"code": code, "execution_count": execution_count})
}

/// What went wrong in a failed cell, as `error` and `execute_reply` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub ename: String,
    pub evalue: String,
}

impl Failure {
    /// The content of the iopub `error` message when no report of the cell's was held
    /// (`traceback::Outputs` sends the report otherwise): the one line naming the error.
    pub fn error_content(&self) -> Value {
        json!({"ename": self.ename, "evalue": self.evalue, "traceback": [self.line()]})
    }

    fn line(&self) -> String {
        match self.evalue.is_empty() {
            true => self.ename.clone(),
            false => format!("{}: {}", self.ename, self.evalue),
        }
    }
}

/// How a cell's result reads as a Jupyter execution: `None` when it succeeded.
pub fn failure_of(result: &CellResult) -> Option<Failure> {
    let status = result.report.status;
    if !status.failed() {
        return None;
    }
    let output = &result.report.output;
    let last = output
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if status == CellStatus::Cancelled {
        let ename = if last.starts_with("Command timed out") {
            "TimeoutError"
        } else {
            "KeyboardInterrupt"
        };
        return Some(Failure {
            ename: ename.into(),
            evalue: last
                .trim_start_matches("KeyboardInterrupt")
                .trim_start_matches(':')
                .trim()
                .into(),
        });
    }
    Some(named_error(result.language, output, last))
}

/// The exception's name and value from a failed cell's output: Python's last line
/// (`NameError: name 'x' is not defined`), JavaScript's first line of the stack
/// (`ReferenceError: x is not defined`), Lua's message (`LuaError`, the message).
fn named_error(language: Language, output: &str, last: &str) -> Failure {
    let split = |line: &str| -> Option<Failure> {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let identifier = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        identifier.then(|| Failure {
            ename: name.rsplit('.').next().unwrap_or(name).to_string(),
            evalue: value.trim().to_string(),
        })
    };
    let found = match language {
        Language::Python => split(last),
        Language::JavaScript => output
            .lines()
            .map(str::trim)
            .find(|l| l.contains("Error") || l.starts_with("Uncaught"))
            .and_then(|l| split(l.trim_start_matches("Uncaught ").trim())),
        Language::Lua => None,
    };
    found.unwrap_or_else(|| {
        let first = output.lines().map(str::trim).find(|l| !l.is_empty());
        Failure {
            ename: match language {
                Language::Lua => "LuaError",
                Language::JavaScript => "Error",
                Language::Python => "Error",
            }
            .into(),
            evalue: first.unwrap_or(last).to_string(),
        }
    })
}

/// The content of the `execute_reply` to a cell that ran (or failed) as `result` says.
pub fn execute_reply(result: Option<&CellResult>, execution_count: u64) -> Value {
    match result.and_then(failure_of) {
        None => json!({
            "status": "ok", "execution_count": execution_count,
            "user_expressions": {}, "payload": [],
        }),
        Some(failure) => json!({
            "status": "error", "execution_count": execution_count,
            "ename": failure.ename, "evalue": failure.evalue,
            "traceback": [failure.line()],
        }),
    }
}

/// The content of the reply to a request dropped because an earlier cell failed
/// (`stop_on_error`), as ipykernel aborts its queue.
pub fn aborted_reply() -> Value {
    json!({"status": "aborted"})
}

/// The reply to a request no kernel of cellvisor answers: an error naming the ones it does.
pub fn unsupported_reply(msg_type: &str) -> Value {
    json!({
        "status": "error", "ename": "UnsupportedRequest",
        "evalue": format!("{msg_type} is not answered by cellvisor's kernels; the shell \
            requests are execute, kernel_info, complete, inspect, is_complete, history \
            and comm_info"),
        "traceback": [],
    })
}

/// The type of the reply to `msg_type` (`execute_request` → `execute_reply`).
pub fn reply_type(msg_type: &str) -> String {
    format!("{}_reply", msg_type.trim_end_matches("_request"))
}

/// `is_complete_reply`'s content: `incomplete` (with the indent to continue at) while
/// brackets or strings are open, a Python block or line continuation is left open, or a Lua
/// block lacks its `end`; else `complete`.
pub fn is_complete(language: Language, code: &str) -> Value {
    if code.trim().is_empty() {
        return json!({"status": "complete"});
    }
    let mut depth: i64 = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut triple_open = false;
    if language == Language::Python {
        triple_open =
            code.matches("\"\"\"").count() % 2 == 1 || code.matches("'''").count() % 2 == 1;
    }
    for c in code.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q || c == '\n' {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' if !triple_open => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    if depth < 0 {
        return json!({"status": "invalid"});
    }
    let trimmed = code.trim_end();
    let open_block = match language {
        Language::Python => trimmed.ends_with(':') || trimmed.ends_with('\\') || triple_open,
        Language::JavaScript => trimmed.ends_with('\\'),
        Language::Lua => lua_blocks_open(code),
    };
    if depth > 0 || open_block || (!code.ends_with("\n\n") && python_body_open(language, code)) {
        let indent = if language == Language::Python {
            "    "
        } else {
            "  "
        };
        return json!({"status": "incomplete", "indent": indent});
    }
    json!({"status": "complete"})
}

/// A Python block whose last line is indented is still open until a blank line ends it, as
/// IPython's console reads it.
fn python_body_open(language: Language, code: &str) -> bool {
    language == Language::Python
        && code.lines().count() > 1
        && code
            .lines()
            .last()
            .is_some_and(|l| l.starts_with(' ') || l.starts_with('\t'))
}

/// Whether Lua's block words (`function`, `do`, `then`, `repeat`) outnumber their ends.
fn lua_blocks_open(code: &str) -> bool {
    let mut open: i64 = 0;
    for word in code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        match word {
            "function" | "do" | "then" | "repeat" => open += 1,
            "end" | "until" => open -= 1,
            // `while ... do` and `for ... do` count once, by their `do`; `elseif ... then`
            // continues the `if`'s block.
            "elseif" => open -= 1,
            _ => {}
        }
    }
    open > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor::cell::{CellReport, CellSpec};

    fn result(language: Language, status: CellStatus, output: &str) -> CellResult {
        let mut report = CellReport::error(output.to_string());
        report.status = status;
        report.into_result(0, 1, &CellSpec::new(language, "x"))
    }

    #[test]
    fn names_and_specs_round_trip() {
        for (name, language) in [
            ("python3", Language::Python),
            ("javascript", Language::JavaScript),
            ("lua", Language::Lua),
        ] {
            assert_eq!(kernel_name(language), name);
            assert_eq!(language_of(name), Some(language));
            assert_eq!(
                language_of(&format!(
                    "cellvisor-{}",
                    display_language(language).to_lowercase()
                )),
                Some(language)
            );
            let spec = kernelspec(language);
            assert_eq!(spec["name"], name);
            assert!(spec["resources"].is_object() && spec["spec"]["display_name"].is_string());
            assert_eq!(
                kernel_info(language)["language_info"]["name"],
                spec["spec"]["language"]
            );
        }
        assert_eq!(language_of("ruby"), None);
    }

    #[test]
    fn a_kernel_id_is_stable_and_separates_tenants_sessions_and_languages() {
        let a = kernel_id("default", "s1", Language::Python);
        assert_eq!(a, kernel_id("default", "s1", Language::Python));
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 5);
        for other in [
            kernel_id("alpha", "s1", Language::Python),
            kernel_id("default", "s2", Language::Python),
            kernel_id("default", "s1", Language::Lua),
            kernel_id("default", "s", Language::Python),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn a_named_display_carries_its_id_in_transient_and_an_update_is_update_display_data() {
        let named = |update: Value| CellEvent::Display {
            index: 0,
            bundle: json!({"text/plain": "1", DISPLAY_MIME: {"display_id": "d1", "update": update}}),
        };
        for (update, kind) in [
            (json!(false), "display_data"),
            (json!(true), "update_display_data"),
            (json!("yes"), "display_data"),
        ] {
            let (got, content) = iopub_of(&named(update)).unwrap();
            assert_eq!(got, kind);
            assert_eq!(content["data"], json!({"text/plain": "1"}));
            assert_eq!(content["transient"], json!({"display_id": "d1"}));
        }
        // Without a string id the key is only data: shown as given, never an update.
        for odd in [
            json!({"update": true}),
            json!({"display_id": 7, "update": true}),
            json!(1),
        ] {
            let event = CellEvent::Display {
                index: 0,
                bundle: json!({"text/plain": "1", DISPLAY_MIME: odd}),
            };
            let (got, content) = iopub_of(&event).unwrap();
            assert_eq!(got, "display_data");
            assert_eq!(content["data"][DISPLAY_MIME], odd);
            assert_eq!(content["transient"], json!({}));
        }
    }

    #[test]
    fn events_become_iopub_messages() {
        let out = CellEvent::Output {
            index: 0,
            stream: "stderr",
            text: "oops\n".into(),
        };
        assert_eq!(
            iopub_of(&out),
            Some(("stream", json!({"name": "stderr", "text": "oops\n"})))
        );
        let display = CellEvent::Display {
            index: 0,
            bundle: json!({"text/html": "<b>x</b>"}),
        };
        let (kind, content) = iopub_of(&display).unwrap();
        assert_eq!(kind, "display_data");
        assert_eq!(content["data"]["text/html"], "<b>x</b>");
        assert_eq!(content["transient"], json!({}));
        let status = CellEvent::Status {
            index: 0,
            status: json!({"op": "read"}),
        };
        assert_eq!(
            iopub_of(&status).unwrap().1["data"]["application/x-cellvisor-status"]["op"],
            "read"
        );
        assert_eq!(
            iopub_of(&CellEvent::ClearOutput {
                index: 0,
                wait: true
            }),
            Some(("clear_output", json!({"wait": true})))
        );
        assert_eq!(
            iopub_of(&CellEvent::CellDone {
                index: 0,
                status: CellStatus::Complete
            }),
            None
        );
        assert_eq!(
            execute_input("x", 3),
            json!({"code": "x", "execution_count": 3})
        );
    }

    #[test]
    fn failures_are_named_as_each_language_writes_them() {
        let py = result(
            Language::Python,
            CellStatus::Error,
            "Traceback (most recent call last):\n  File \"<cell>\", line 1\nZeroDivisionError: division by zero\n",
        );
        let failure = failure_of(&py).unwrap();
        assert_eq!(
            (failure.ename.as_str(), failure.evalue.as_str()),
            ("ZeroDivisionError", "division by zero")
        );
        let reply = execute_reply(Some(&py), 4);
        assert_eq!(reply["status"], "error");
        assert_eq!(reply["execution_count"], 4);
        assert_eq!(
            failure.error_content()["traceback"],
            json!(["ZeroDivisionError: division by zero"])
        );
        let js = result(
            Language::JavaScript,
            CellStatus::Error,
            "ReferenceError: y is not defined\n    at <eval>:1\n",
        );
        assert_eq!(failure_of(&js).unwrap().ename, "ReferenceError");
        let lua = result(
            Language::Lua,
            CellStatus::Error,
            "[string \"cell\"]:1: attempt to call a nil value\n",
        );
        let failure = failure_of(&lua).unwrap();
        assert_eq!(failure.ename, "LuaError");
        assert!(failure.evalue.contains("attempt to call"));
        let timeout = result(
            Language::Python,
            CellStatus::Cancelled,
            "a\nCommand timed out after 1 seconds\n",
        );
        assert_eq!(failure_of(&timeout).unwrap().ename, "TimeoutError");
        let interrupted = result(
            Language::Python,
            CellStatus::Cancelled,
            "KeyboardInterrupt\n",
        );
        assert_eq!(failure_of(&interrupted).unwrap().ename, "KeyboardInterrupt");
        let ok = result(Language::Python, CellStatus::Complete, "42\n");
        assert_eq!(failure_of(&ok), None);
        assert_eq!(execute_reply(Some(&ok), 1)["status"], "ok");
        assert_eq!(aborted_reply()["status"], "aborted");
    }

    #[test]
    fn is_complete_reads_open_blocks_and_brackets() {
        let status = |l, c| is_complete(l, c)["status"].as_str().unwrap().to_string();
        assert_eq!(status(Language::Python, "x = 1"), "complete");
        assert_eq!(status(Language::Python, "def f():"), "incomplete");
        assert_eq!(
            status(Language::Python, "def f():\n    return 1"),
            "incomplete"
        );
        assert_eq!(
            status(Language::Python, "def f():\n    return 1\n\n"),
            "complete"
        );
        assert_eq!(status(Language::Python, "print((1,"), "incomplete");
        assert_eq!(status(Language::Python, "x = ')'"), "complete");
        assert_eq!(status(Language::Python, "x = )"), "invalid");
        assert_eq!(status(Language::JavaScript, "function f() {"), "incomplete");
        assert_eq!(
            status(Language::JavaScript, "function f() { return 1 }"),
            "complete"
        );
        assert_eq!(status(Language::Lua, "for i = 1, 3 do"), "incomplete");
        assert_eq!(
            status(Language::Lua, "if x then y() elseif z then w() end"),
            "complete"
        );
        assert_eq!(
            status(Language::Lua, "function f() return 1 end"),
            "complete"
        );
        assert_eq!(is_complete(Language::Python, "if x:")["indent"], "    ");
    }
}
