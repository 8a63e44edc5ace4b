//! The Kernel Gateway API on the daemon's listener, driven as the anchor 003 host drives a
//! gateway: the token in the query string, `execute_request` with `stop_on_error`, an
//! execution done only once both `execute_reply` and `status: idle` arrived, interrupt by
//! REST then on control, reset by `DELETE` and a new `POST`; and a person's connection that
//! sees an agent's JSON-RPC cells on iopub while they run.

mod common;

use common::net::{NetDaemon, TOKEN};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// A generous bound for anything to arrive (a loaded machine starts Python slowly).
const PATIENCE: Duration = Duration::from_secs(30);

/// `method url` with the token in the query (as the anchor's host sends it) or in an
/// `Authorization: token T` header: the status and the JSON body (null when empty).
fn rest(method: &str, url: &str, auth: Auth, body: Option<Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = match auth {
        Auth::Query(token) => format!("{url}?token={token}"),
        _ => url.to_string(),
    };
    let header = match auth {
        Auth::Header(token) => Some(format!("token {token}")),
        _ => None,
    };
    let mut response = match method {
        "GET" | "DELETE" => {
            let mut request = if method == "GET" {
                agent.get(&url)
            } else {
                agent.delete(&url)
            };
            if let Some(h) = &header {
                request = request.header("authorization", h);
            }
            request.call()
        }
        _ => {
            let mut request = if method == "PATCH" {
                agent.patch(&url)
            } else {
                agent.post(&url)
            };
            if let Some(h) = &header {
                request = request.header("authorization", h);
            }
            match body {
                Some(body) => request
                    .header("content-type", "application/json")
                    .send(body.to_string()),
                None => request.send_empty(),
            }
        }
    }
    .expect("an HTTP answer");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[derive(Clone, Copy)]
enum Auth<'a> {
    Query(&'a str),
    Header(&'a str),
}

/// A Jupyter client of one kernel's channels, in the legacy JSON framing.
struct Channels {
    socket: WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    /// Every message read so far, in order.
    seen: Vec<Value>,
}

impl Channels {
    fn connect(port: u16, id: &str, token: &str) -> Result<Channels, String> {
        let url = format!("ws://127.0.0.1:{port}/api/kernels/{id}/channels?token={token}");
        let (socket, _) = tungstenite::connect(url).map_err(|e| match e {
            tungstenite::Error::Http(response) => format!("HTTP {}", response.status().as_u16()),
            other => other.to_string(),
        })?;
        if let tungstenite::stream::MaybeTlsStream::Plain(stream) = socket.get_ref() {
            stream
                .set_read_timeout(Some(PATIENCE))
                .expect("a read timeout");
        }
        Ok(Channels {
            socket,
            seen: Vec::new(),
        })
    }

    /// Sends a request (on `channel`; the shell's without one) and answers its msg_id.
    fn send(&mut self, channel: Option<&str>, msg_type: &str, content: Value) -> String {
        let msg_id = format!("{msg_type}-{}", self.seen.len() + rand_suffix());
        let mut message = json!({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": "test-client",
                       "username": "test", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content,
        });
        if let Some(channel) = channel {
            message["channel"] = channel.into();
        }
        self.socket
            .send(Message::text(message.to_string()))
            .expect("send");
        msg_id
    }

    fn read(&mut self) -> Value {
        loop {
            let read = self.socket.read();
            let Ok(message) = read else {
                panic!(
                    "no message within the patience ({read:?}); seen: {:#?}",
                    self.seen
                );
            };
            match message {
                Message::Text(text) => {
                    let message: Value = serde_json::from_str(text.as_str()).expect("JSON");
                    self.seen.push(message.clone());
                    return message;
                }
                Message::Close(_) => panic!("the kernel closed the channels"),
                _ => continue,
            }
        }
    }

    /// The first message, among those seen or read from now, for which `done` holds.
    fn until(&mut self, mut done: impl FnMut(&Value) -> bool) -> Value {
        if let Some(found) = self.seen.iter().find(|m| done(m)) {
            return found.clone();
        }
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < PATIENCE,
                "waited too long; seen: {:#?}",
                self.seen
            );
            let message = self.read();
            if done(&message) {
                return message;
            }
        }
    }

    /// What the anchor's host waits for: the request's reply and its `status: idle`, in
    /// either order. Answers the reply and the iopub messages of the request.
    fn finish(&mut self, msg_id: &str) -> (Value, Vec<Value>) {
        let start = Instant::now();
        let of = |m: &Value| m["parent_header"]["msg_id"] == msg_id;
        loop {
            let reply = self.seen.iter().find(|m| {
                of(m)
                    && m["msg_type"]
                        .as_str()
                        .is_some_and(|t| t.ends_with("_reply"))
            });
            let idle = self.seen.iter().any(|m| {
                of(m) && m["msg_type"] == "status" && m["content"]["execution_state"] == "idle"
            });
            if let (Some(reply), true) = (reply, idle) {
                let reply = reply.clone();
                let iopub = self
                    .seen
                    .iter()
                    .filter(|m| of(m) && m["channel"] == "iopub")
                    .cloned()
                    .collect();
                return (reply, iopub);
            }
            assert!(
                start.elapsed() < PATIENCE,
                "waited too long; seen: {:#?}",
                self.seen
            );
            self.read();
        }
    }

    fn execute(&mut self, code: &str) -> (Value, Vec<Value>) {
        let id = self.send(
            Some("shell"),
            "execute_request",
            json!({
                "code": code, "silent": false, "store_history": true, "user_expressions": {},
                "allow_stdin": false, "stop_on_error": true,
            }),
        );
        self.finish(&id)
    }
}

fn rand_suffix() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    1000 * NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn types(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["msg_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The `error` among `messages`: its traceback is the report the cell wrote (from
/// `Traceback` to the line naming the error), and no stream repeats it.
fn assert_error_report(messages: &[Value], last_line: &str) {
    let error = messages
        .iter()
        .find(|m| m["msg_type"] == "error")
        .unwrap_or_else(|| panic!("an error message: {messages:#?}"));
    let traceback: Vec<&str> = error["content"]["traceback"]
        .as_array()
        .expect("a traceback")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        traceback.first().copied(),
        Some("Traceback (most recent call last):"),
        "{error:#}, among {messages:#?}"
    );
    assert_eq!(traceback.last().copied(), Some(last_line), "{error:#}");
    assert!(
        !stream_text(messages, "stderr").contains("Traceback"),
        "the report went to stderr too: {messages:#?}"
    );
}

/// What the `error` messages among `messages` say: value and traceback.
fn error_text(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["msg_type"] == "error")
        .map(|m| {
            let lines: Vec<&str> = m["content"]["traceback"]
                .as_array()
                .map(|t| t.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "{}\n{}\n",
                m["content"]["evalue"].as_str().unwrap_or_default(),
                lines.join("\n")
            )
        })
        .collect()
}

fn stream_text(messages: &[Value], name: &str) -> String {
    messages
        .iter()
        .filter(|m| m["msg_type"] == "stream" && m["content"]["name"] == name)
        .map(|m| m["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn the_anchor_hosts_sequence_runs_interrupts_and_resets_a_kernel() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    let token = Auth::Query(TOKEN);
    let (status, specs) = rest("GET", &format!("{base}/kernelspecs"), token, None);
    assert_eq!(status, 200, "{specs}");
    assert_eq!(specs["default"], "python3");
    for name in ["python3", "javascript", "lua"] {
        let spec = &specs["kernelspecs"][name];
        assert!(spec["resources"].is_object(), "{name}: {specs:#}");
        assert!(
            spec["spec"]["metadata"]["language_info"]["name"].is_string(),
            "{spec:#}"
        );
    }
    let (status, api) = rest("GET", &base, Auth::Header(TOKEN), None);
    assert_eq!(status, 200, "{api}");
    assert!(api["version"].is_string());

    let (status, model) = rest(
        "POST",
        &format!("{base}/kernels"),
        token,
        Some(json!({"name": "python3"})),
    );
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_eq!(model["name"], "python3");
    assert!(model["last_activity"].is_string() && model["execution_state"].is_string());
    assert!(model["connections"].is_u64());

    let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    // Output, both streams, a display, in order between busy and idle, each with the
    // request as parent.
    let (reply, iopub) = ch.execute(
        "import sys\nx = 41\nprint('out')\nprint('err', file=sys.stderr)\ndisplay({'k': [1, 2]})",
    );
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(reply["channel"], "shell");
    for key in [
        "header",
        "msg_id",
        "msg_type",
        "parent_header",
        "metadata",
        "content",
        "buffers",
        "channel",
    ] {
        assert!(reply.get(key).is_some(), "{key}: {reply:#}");
    }
    let kinds = types(&iopub);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("status"),
        "{kinds:?}"
    );
    assert_eq!(iopub[0]["content"]["execution_state"], "busy");
    assert!(kinds.contains(&"execute_input".to_string()), "{kinds:?}");
    assert_eq!(stream_text(&iopub, "stdout"), "out\n", "{iopub:#?}");
    assert_eq!(stream_text(&iopub, "stderr"), "err\n", "{iopub:#?}");
    let display = iopub
        .iter()
        .find(|m| m["msg_type"] == "display_data")
        .expect("display_data");
    assert_eq!(
        display["content"]["data"]["application/json"],
        json!({"k": [1, 2]})
    );

    // An error, and stop_on_error aborting the request queued behind it.
    let failing = ch.send(
        None,
        "execute_request",
        json!({
            "code": "import time\ntime.sleep(1)\n1/0", "stop_on_error": true,
        }),
    );
    let queued = ch.send(
        None,
        "execute_request",
        json!({"code": "x = 'not run'", "stop_on_error": true}),
    );
    let (reply, iopub) = ch.finish(&failing);
    assert_eq!(reply["content"]["status"], "error", "{reply:#}");
    assert_eq!(reply["content"]["ename"], "ZeroDivisionError", "{reply:#}");
    let error = iopub
        .iter()
        .find(|m| m["msg_type"] == "error")
        .expect("an error message");
    assert_eq!(error["content"]["ename"], "ZeroDivisionError");
    // As ipykernel: the whole report is the error's traceback, not also on stderr.
    assert_error_report(&iopub, "ZeroDivisionError: division by zero");
    let (reply, _) = ch.finish(&queued);
    assert_eq!(reply["content"]["status"], "aborted", "{reply:#}");
    let (reply, iopub) = ch.execute("print(x)");
    assert_eq!(reply["content"]["status"], "ok");
    assert_eq!(
        stream_text(&iopub, "stdout"),
        "41\n",
        "the aborted cell did not run"
    );

    // stdin is refused with the anchor's text, and no input_request is ever sent.
    let (reply, iopub) = ch.execute("input('name? ')");
    assert_eq!(reply["content"]["status"], "error", "{reply:#}");
    assert!(!types(&iopub).contains(&"input_request".to_string()));
    // Wherever a client reads it: a stream, or the error's value or traceback.
    let text = stream_text(&iopub, "stdout") + &stream_text(&iopub, "stderr") + &error_text(&iopub);
    assert!(
        text.contains("Kernel requested stdin; interactive input is not supported."),
        "{text}"
    );

    // The other shell requests.
    let info = ch.send(Some("shell"), "kernel_info_request", json!({}));
    let (reply, _) = ch.finish(&info);
    assert_eq!(
        reply["content"]["language_info"]["name"], "python",
        "{reply:#}"
    );
    ch.execute("x_longer_name = 2");
    let complete = ch.send(
        None,
        "complete_request",
        json!({"code": "print(x_lon", "cursor_pos": 11}),
    );
    let (reply, _) = ch.finish(&complete);
    assert_eq!(
        reply["content"]["matches"],
        json!(["x_longer_name"]),
        "{reply:#}"
    );
    assert_eq!(reply["content"]["cursor_start"], 6);
    let inspect = ch.send(
        None,
        "inspect_request",
        json!({"code": "x_longer_name", "cursor_pos": 3, "detail_level": 0}),
    );
    let (reply, _) = ch.finish(&inspect);
    assert_eq!(reply["content"]["found"], true, "{reply:#}");
    assert!(reply["content"]["data"]["text/plain"]
        .as_str()
        .unwrap_or_default()
        .contains("int"));
    let is_complete = ch.send(None, "is_complete_request", json!({"code": "def f():"}));
    let (reply, _) = ch.finish(&is_complete);
    assert_eq!(reply["content"]["status"], "incomplete", "{reply:#}");
    let history = ch.send(
        None,
        "history_request",
        json!({"output": false, "raw": true, "hist_access_type": "tail", "n": 10}),
    );
    let (reply, _) = ch.finish(&history);
    let cells = reply["content"]["history"]
        .as_array()
        .expect("history")
        .clone();
    assert!(cells.iter().any(|h| h[2] == "print(x)"), "{reply:#}");
    let comms = ch.send(None, "comm_info_request", json!({}));
    let (reply, _) = ch.finish(&comms);
    assert_eq!(reply["content"]["comms"], json!({}));

    // Interrupt by REST, then on control, as the anchor's host cancels a cell.
    let long = ch.send(None, "execute_request", json!({
        "code": "import time\nprint('started', flush=True)\ntime.sleep(300)", "stop_on_error": true,
    }));
    ch.until(|m| m["msg_type"] == "stream" && m["parent_header"]["msg_id"] == long);
    let (status, _) = rest(
        "POST",
        &format!("{base}/kernels/{id}/interrupt"),
        token,
        None,
    );
    assert_eq!(status, 204);
    let control = ch.send(Some("control"), "interrupt_request", json!({}));
    let (reply, _) = ch.finish(&long);
    assert_eq!(reply["content"]["status"], "error", "{reply:#}");
    assert_eq!(reply["content"]["ename"], "KeyboardInterrupt", "{reply:#}");
    let answer = ch.until(|m| m["parent_header"]["msg_id"] == control);
    assert_eq!(answer["msg_type"], "interrupt_reply", "{answer:#}");
    assert_eq!(answer["channel"], "control");
    // Idempotent, and the next cell is not touched by an interrupt sent while idle.
    let (status, _) = rest(
        "POST",
        &format!("{base}/kernels/{id}/interrupt"),
        token,
        None,
    );
    assert_eq!(status, 204);
    let (reply, iopub) = ch.execute("print(x + 1)");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(stream_text(&iopub, "stdout"), "42\n");

    // Listed, then reset by DELETE and a new POST: a fresh namespace under a new id.
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["id"] == id.as_str()),
        "{listed:#}"
    );
    let (status, _) = rest("DELETE", &format!("{base}/kernels/{id}"), token, None);
    assert_eq!(status, 204);
    let (status, _) = rest("GET", &format!("{base}/kernels/{id}"), token, None);
    assert_eq!(status, 404);
    let (status, _) = rest("DELETE", &format!("{base}/kernels/{id}"), token, None);
    assert_eq!(status, 404);
    let (status, model) = rest("POST", &format!("{base}/kernels"), token, None);
    assert_eq!(status, 201, "{model}");
    let fresh = model["id"].as_str().expect("an id").to_string();
    assert_ne!(fresh, id);
    let mut ch = Channels::connect(net.port, &fresh, TOKEN).expect("the channels");
    let (reply, _) = ch.execute("x");
    assert_eq!(reply["content"]["ename"], "NameError", "{reply:#}");
    drop(ch);
    net.daemon.stop();
}

#[test]
fn a_person_sees_an_agents_json_rpc_cells_and_shares_its_namespace() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    let token = Auth::Header(TOKEN);
    let mut agent = net.daemon.client();
    let first = agent.eval("agent", json!([{"language": "py", "code": "a = 1"}]));
    assert_eq!(first["cells"][0]["status"], "complete", "{first:#}");
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    let kernel = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|k| k["cellvisor"]["session"] == "agent" && k["name"] == "python3")
        .unwrap_or_else(|| panic!("the agent's session is a kernel: {listed:#}"))
        .clone();
    let id = kernel["id"].as_str().expect("an id").to_string();
    let (_, again) = rest("GET", &format!("{base}/kernels"), token, None);
    assert!(
        again
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["id"] == id.as_str()),
        "a stable id"
    );
    let mut person = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let agent_cell = "print('from the agent')\na = a + 1";
    let cells = json!([{"language": "py", "code": agent_cell}]);
    let runs = std::thread::spawn(move || agent.eval("agent", cells));
    let input = person.until(|m| m["msg_type"] == "execute_input");
    assert_eq!(input["content"]["code"], agent_cell);
    let parent = input["parent_header"]["msg_id"].clone();
    let output = person.until(|m| m["msg_type"] == "stream");
    assert_eq!(output["content"]["text"], "from the agent\n");
    assert_eq!(output["parent_header"]["msg_id"], parent);
    person.until(|m| {
        m["msg_type"] == "status"
            && m["content"]["execution_state"] == "idle"
            && m["parent_header"]["msg_id"] == parent
    });
    let result = runs.join().expect("the agent's eval");
    assert_eq!(result["cells"][0]["status"], "complete", "{result:#}");
    // The person's cells run in the same namespace.
    let (reply, iopub) = person.execute("print(a)");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(stream_text(&iopub, "stdout"), "2\n");
    let mut agent = net.daemon.client();
    let seen = agent.eval("agent", json!([{"language": "py", "code": "a"}]));
    assert_eq!(seen["cells"][0]["output"], "2\n");
    // The person sees the agent's value as its execute_result, not as a stream.
    let result = person.until(|m| m["msg_type"] == "execute_result");
    assert_eq!(result["content"]["data"]["text/plain"], "2", "{result:#}");
    let parent = result["parent_header"]["msg_id"].clone();
    let idle = person.until(|m| {
        m["msg_type"] == "status"
            && m["content"]["execution_state"] == "idle"
            && m["parent_header"]["msg_id"] == parent
    });
    assert_eq!(idle["parent_header"]["msg_type"], "execute_request");
    assert!(
        !person
            .seen
            .iter()
            .any(|m| m["parent_header"]["msg_id"] == parent && m["msg_type"] == "stream"),
        "the value was a stream as well: {:#?}",
        person.seen
    );
    // An agent's failing cell: its report is the error's traceback there too.
    let code = "print('before')\n{}['missing']";
    let failing = json!([{"language": "py", "code": code}]);
    let runs = std::thread::spawn(move || agent.eval("agent", failing));
    let input = person.until(|m| m["msg_type"] == "execute_input" && m["content"]["code"] == code);
    let parent = input["parent_header"]["msg_id"].clone();
    person.until(|m| {
        m["msg_type"] == "status"
            && m["content"]["execution_state"] == "idle"
            && m["parent_header"]["msg_id"] == parent
    });
    let shown: Vec<Value> = person
        .seen
        .iter()
        .filter(|m| m["parent_header"]["msg_id"] == parent)
        .cloned()
        .collect();
    assert_eq!(stream_text(&shown, "stdout"), "before\n", "{shown:#?}");
    assert_error_report(&shown, "KeyError: 'missing'");
    runs.join().expect("the agent's eval");
    drop(person);
    net.daemon.stop();
}

#[test]
fn unknown_kernels_wrong_tokens_and_other_tenants_kernels_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alpha, beta) = (
        "alpha-token-0123456789abcdef",
        "beta-token-0123456789abcdef",
    );
    std::fs::write(dir.path().join("alpha.token"), alpha).expect("a test file");
    std::fs::write(dir.path().join("beta.token"), beta).expect("a test file");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenants]]\nname = \"alpha\"\ntoken-file = \"alpha.token\"\n\
         [[tenants]]\nname = \"beta\"\ntoken-file = \"beta.token\"\n",
    )
    .expect("a test file");
    let extra = format!("tenants-file = {:?}\n", tenants.display().to_string());
    let net = NetDaemon::start(false, &extra, "");
    let base = net.http_url("/api");
    let (status, model) = rest(
        "POST",
        &format!("{base}/kernels"),
        Auth::Query(alpha),
        Some(json!({"name": "lua"})),
    );
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    let mut ch = Channels::connect(net.port, &id, alpha).expect("alpha's channels");
    let (reply, iopub) = ch.execute("print(6 * 7)");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(stream_text(&iopub, "stdout"), "42\n");

    // Beta sees none of alpha's kernels, and its id is unknown to beta everywhere.
    let (status, listed) = rest("GET", &format!("{base}/kernels"), Auth::Query(beta), None);
    assert_eq!((status, listed), (200, json!([])));
    for (method, path) in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/interrupt"),
        ("POST", "/restart"),
    ] {
        let (status, body) = rest(
            method,
            &format!("{base}/kernels/{id}{path}"),
            Auth::Query(beta),
            None,
        );
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("no kernel"),
            "{body}"
        );
    }
    assert_eq!(
        Channels::connect(net.port, &id, beta).err(),
        Some("HTTP 404".to_string())
    );
    let unknown = "00000000-0000-4000-8000-000000000000";
    let (status, _) = rest(
        "GET",
        &format!("{base}/kernels/{unknown}"),
        Auth::Query(alpha),
        None,
    );
    assert_eq!(status, 404);
    let (status, body) = rest(
        "POST",
        &format!("{base}/kernels"),
        Auth::Query(alpha),
        Some(json!({"name": "ruby"})),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("python3"),
        "{body}"
    );
    // A wrong or missing token: 401, on REST and on the channels.
    for auth in [
        Auth::Query("wrong-token-0123456789"),
        Auth::Header("wrong-token-0123456789"),
    ] {
        let (status, _) = rest("GET", &format!("{base}/kernels"), auth, None);
        assert_eq!(status, 401);
    }
    assert_eq!(
        Channels::connect(net.port, &id, "wrong-token-0123456789").err(),
        Some("HTTP 401".to_string())
    );
    // The kernel still runs for its tenant.
    let (reply, _) = ch.execute("x = 1");
    assert_eq!(reply["content"]["status"], "ok");
    // A reload that rotates alpha's token closes alpha's open channels at once (a read
    // that timed out instead would be an error of its own).
    std::fs::write(
        dir.path().join("alpha.token"),
        "alpha-rotated-0123456789abcdef",
    )
    .expect("a test file");
    net.daemon
        .client()
        .call("config/reload", json!({}))
        .expect("reloaded");
    let closed = loop {
        match ch.socket.read() {
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break Err(e)
            }
            Err(_) => break Ok(()),
        }
    };
    assert!(
        closed.is_ok(),
        "the rotated token's channels stayed open: {closed:?}"
    );
    assert_eq!(
        Channels::connect(net.port, &id, alpha).err(),
        Some("HTTP 401".to_string())
    );
    drop(ch);
    net.daemon.stop();
}

/// The round trip of a trivial cell through the gateway's channels (until both the reply
/// and `idle` arrived) against the JSON-RPC WebSocket's `eval`, on one daemon: a
/// measurement, not a check (`cargo test --test jupyter -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement: run it by name"]
fn round_trip_through_the_gateway_and_the_json_rpc_websocket() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    let started = Instant::now();
    let (status, model) = rest("POST", &format!("{base}/kernels"), Auth::Query(TOKEN), None);
    let start_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let mut rpc = net.ws(Some(TOKEN), None).expect("the JSON-RPC WebSocket");
    let cells = json!({"session": "bench", "cells": [{"language": "py", "code": "1"}]});
    for _ in 0..5 {
        ch.execute("1");
        rpc.call("eval", cells.clone()).expect("eval");
    }
    let runs = 200;
    let (mut gateway, mut json_rpc) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let (reply, _) = ch.execute("1");
        gateway.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(reply["content"]["status"], "ok");
        ch.seen.clear();
        let t = Instant::now();
        rpc.call("eval", cells.clone()).expect("eval");
        json_rpc.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (g, j) = (median(&mut gateway), median(&mut json_rpc));
    eprintln!(
        "kernel start (POST /api/kernels, Python worker started): {start_ms:.1} ms\n\
         trivial execute_request round trip, median of {runs}: gateway WebSocket {g:.3} ms, \
         JSON-RPC WebSocket eval {j:.3} ms, ratio {:.2}",
        g / j
    );
    drop(ch);
    net.daemon.stop();
}

#[test]
fn javascript_and_lua_kernels_complete_and_inspect_from_their_namespace() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    for (name, define, prefix, expected, inspected, error) in [
        (
            "javascript",
            "globalThis.gadget = {spin: 1, spot: 2}",
            "gadget.sp",
            json!(["gadget.spin", "gadget.spot"]),
            "gadget",
            "ReferenceError",
        ),
        (
            "lua",
            "gadget = {spin = 1, spot = 2}",
            "gadget.sp",
            json!(["gadget.spin", "gadget.spot"]),
            "gadget",
            "LuaError",
        ),
    ] {
        let (status, model) = rest(
            "POST",
            &format!("{base}/kernels"),
            Auth::Header(TOKEN),
            Some(json!({"name": name})),
        );
        assert_eq!(status, 201, "{model}");
        let id = model["id"].as_str().expect("an id").to_string();
        let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
        let (reply, _) = ch.execute(define);
        assert_eq!(reply["content"]["status"], "ok", "{name}: {reply:#}");
        let code = format!("x = {prefix}");
        let cursor = code.chars().count();
        let complete = ch.send(
            None,
            "complete_request",
            json!({"code": code, "cursor_pos": cursor}),
        );
        let (reply, _) = ch.finish(&complete);
        assert_eq!(reply["content"]["matches"], expected, "{name}: {reply:#}");
        assert_eq!(reply["content"]["cursor_start"], 4);
        let inspect = ch.send(
            None,
            "inspect_request",
            json!({"code": inspected, "cursor_pos": 2}),
        );
        let (reply, _) = ch.finish(&inspect);
        assert_eq!(reply["content"]["found"], true, "{name}: {reply:#}");
        let text = reply["content"]["data"]["text/plain"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("Type:"), "{name}: {text}");
        // A trailing value is the execute_result, as ipykernel sends it: not a stream.
        let (reply, iopub) = ch.execute("6 * 7");
        assert_eq!(reply["content"]["status"], "ok", "{name}: {reply:#}");
        let result = iopub
            .iter()
            .find(|m| m["msg_type"] == "execute_result")
            .unwrap_or_else(|| panic!("{name}: no execute_result: {iopub:#?}"));
        assert_eq!(result["content"]["data"]["text/plain"], "42", "{name}");
        assert_eq!(
            result["content"]["execution_count"],
            reply["content"]["execution_count"]
        );
        assert_eq!(stream_text(&iopub, "stdout"), "", "{name}: {iopub:#?}");
        let (reply, iopub) = ch.execute("nothing_here()");
        assert_eq!(reply["content"]["ename"], error, "{name}: {reply:#}");
        assert!(
            iopub.iter().any(|m| m["msg_type"] == "error"),
            "{name}: {iopub:#?}"
        );
        let info = ch.send(Some("control"), "kernel_info_request", json!({}));
        let answer = ch.until(|m| m["parent_header"]["msg_id"] == info.as_str());
        assert_eq!(answer["content"]["language_info"]["name"], name);
        drop(ch);
    }
    net.daemon.stop();
}

/// `/api/sessions` as JupyterLab's services use it: a path's session over a new kernel (or
/// one named by id), listed, renamed, moved to another kernel (the old one shut down) and
/// deleted with its kernel; another tenant's session is unknown to a tenant.
#[test]
fn sessions_tie_paths_to_kernels_per_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alpha, beta) = (
        "alpha-token-0123456789abcdef",
        "beta-token-0123456789abcdef",
    );
    std::fs::write(dir.path().join("alpha.token"), alpha).expect("a test file");
    std::fs::write(dir.path().join("beta.token"), beta).expect("a test file");
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenants]]\nname = \"alpha\"\ntoken-file = \"alpha.token\"\n\
         [[tenants]]\nname = \"beta\"\ntoken-file = \"beta.token\"\n",
    )
    .expect("a test file");
    let extra = format!("tenants-file = {:?}\n", tenants.display().to_string());
    let net = NetDaemon::start(false, &extra, "");
    let sessions = net.http_url("/api/sessions");
    let kernels = net.http_url("/api/kernels");
    let (a, b) = (Auth::Header(alpha), Auth::Query(beta));

    let body = json!({"path": "work/a.ipynb", "name": "a.ipynb", "type": "notebook",
                      "kernel": {"name": "python3"}});
    let (status, session) = rest("POST", &sessions, a, Some(body.clone()));
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().expect("an id").to_string();
    let kernel = session["kernel"]["id"]
        .as_str()
        .expect("a kernel")
        .to_string();
    assert_eq!(session["path"], "work/a.ipynb");
    assert_eq!(session["type"], "notebook");
    assert_eq!(session["kernel"]["name"], "python3");
    // The kernel is the tenant's, and runs.
    let mut ch = Channels::connect(net.port, &kernel, alpha).expect("the channels");
    let (reply, _) = ch.execute("kept = 5");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    // The same path again is the same session.
    let (status, again) = rest("POST", &sessions, a, Some(body));
    assert_eq!((status, &again["id"]), (201, &session["id"]));
    let (_, listed) = rest("GET", &sessions, a, None);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");

    // Another tenant: its own empty list, and alpha's session unknown on every route.
    assert_eq!(rest("GET", &sessions, b, None), (200, json!([])));
    let one = format!("{sessions}/{id}");
    assert_eq!(rest("GET", &one, b, None).0, 404);
    assert_eq!(rest("PATCH", &one, b, Some(json!({"name": "x"}))).0, 404);
    assert_eq!(rest("DELETE", &one, b, None).0, 404);
    // Nor can it tie a session to alpha's kernel.
    let stolen = json!({"path": "b.ipynb", "kernel": {"id": kernel}});
    assert_eq!(rest("POST", &sessions, b, Some(stolen)).0, 404);

    // Bad bodies are named.
    let (status, refused) = rest("POST", &sessions, a, Some(json!({"kernel": "python3"})));
    assert_eq!(status, 400, "{refused}");
    assert!(refused["message"]
        .as_str()
        .unwrap_or_default()
        .contains("kernel must be an object"));
    let (status, refused) = rest("POST", &sessions, a, Some(json!({"name": "no path"})));
    assert_eq!(status, 400, "{refused}");
    let (status, _) = rest(
        "POST",
        &sessions,
        a,
        Some(json!({"path": "c", "kernel": {"name": "ruby"}})),
    );
    assert_eq!(status, 404);

    // Renamed and moved: the session keeps its kernel until another is asked for.
    let (status, renamed) = rest(
        "PATCH",
        &one,
        a,
        Some(json!({"path": "work/b.ipynb", "name": "b"})),
    );
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(
        (&renamed["path"], &renamed["kernel"]["id"]),
        (&json!("work/b.ipynb"), &json!(kernel))
    );
    let (status, moved) = rest("PATCH", &one, a, Some(json!({"kernel": {"name": "lua"}})));
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["kernel"]["name"], "lua");
    let lua_kernel = moved["kernel"]["id"]
        .as_str()
        .expect("a kernel")
        .to_string();
    assert_ne!(lua_kernel, kernel);
    // The kernel it had was shut down, as jupyter_server does.
    assert_eq!(rest("GET", &format!("{kernels}/{kernel}"), a, None).0, 404);
    drop(ch);
    let (_, fetched) = rest("GET", &one, a, None);
    assert_eq!(fetched["kernel"]["id"], lua_kernel.as_str());

    // Deleted: the session and its kernel are gone.
    assert_eq!(rest("DELETE", &one, a, None).0, 204);
    assert_eq!(rest("GET", &one, a, None).0, 404);
    assert_eq!(
        rest("GET", &format!("{kernels}/{lua_kernel}"), a, None).0,
        404
    );
    assert_eq!(rest("GET", &sessions, a, None), (200, json!([])));
    net.daemon.stop();
}

/// A progress cell: a line cleared at once, then `clear_output(wait=True)` before each of
/// three lines (the emulation's shell: the test daemon's Python has no IPython).
const PROGRESS_CELL: &str = "clear_output = get_ipython().display_pub.clear_output\n\
    print('old')\nclear_output()\nfor i in range(3):\n    clear_output(wait=True)\n    print(i)";

/// The stream and `clear_output` messages of one execution, in order, as (type, what).
fn shown_and_cleared(messages: &[Value]) -> Vec<(String, Value)> {
    messages
        .iter()
        .filter_map(|m| {
            let content = &m["content"];
            match m["msg_type"].as_str()? {
                "stream" => Some(("stream".to_string(), content["text"].clone())),
                "clear_output" => Some(("clear_output".to_string(), content["wait"].clone())),
                _ => None,
            }
        })
        .collect()
}

fn progress_on_iopub() -> Vec<(String, Value)> {
    let mut expected = vec![
        ("stream".to_string(), json!("old\n")),
        ("clear_output".to_string(), json!(false)),
    ];
    for i in 0..3 {
        expected.push(("clear_output".to_string(), json!(true)));
        expected.push(("stream".to_string(), json!(format!("{i}\n"))));
    }
    expected
}

/// `clear_output` reaches Jupyter clients as iopub `clear_output` with its `wait`, in order
/// with the cell's streams: the kernel's own cells, and an agent's JSON-RPC cell watched by a
/// person, whose JSON-RPC result keeps only what came after the clears (and whose events
/// carry the clears too).
#[test]
fn clear_output_reaches_jupyter_clients_in_order_and_trims_json_rpc_results() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    let token = Auth::Header(TOKEN);
    let (status, model) = rest("POST", &format!("{base}/kernels"), token, None);
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let (reply, iopub) = ch.execute(PROGRESS_CELL);
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(shown_and_cleared(&iopub), progress_on_iopub(), "{iopub:#?}");
    let idle = iopub.last().expect("iopub messages");
    assert_eq!(idle["content"]["execution_state"], "idle", "{iopub:#?}");

    // An agent's cell, watched by a person on the agent's session's kernel.
    let mut agent = net.daemon.client();
    agent.eval("agent", json!([{"language": "py", "code": "a = 1"}]));
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    let kernel = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|k| k["cellvisor"]["session"] == "agent")
        .unwrap_or_else(|| panic!("the agent's kernel: {listed:#}"))
        .clone();
    let mut person =
        Channels::connect(net.port, kernel["id"].as_str().unwrap(), TOKEN).expect("channels");
    let cells = json!({"session": "agent", "cells": [{"language": "py", "code": PROGRESS_CELL}]});
    let runs = std::thread::spawn(move || agent.call_collect("eval", cells));
    let input = person.until(|m| m["msg_type"] == "execute_input");
    let parent = input["parent_header"]["msg_id"].clone();
    person.until(|m| {
        m["msg_type"] == "status"
            && m["content"]["execution_state"] == "idle"
            && m["parent_header"]["msg_id"] == parent
    });
    let watched: Vec<Value> = person
        .seen
        .iter()
        .filter(|m| m["parent_header"]["msg_id"] == parent)
        .cloned()
        .collect();
    assert_eq!(
        shown_and_cleared(&watched),
        progress_on_iopub(),
        "{watched:#?}"
    );
    let (events, response) = runs.join().expect("the agent's eval");
    let result = &response["result"];
    assert_eq!(result["cells"][0]["status"], "complete", "{response:#}");
    assert_eq!(result["cells"][0]["output"], "2\n", "{result:#}");
    let clears: Vec<&Value> = events
        .iter()
        .map(|e| &e["params"])
        .filter(|p| p["event"] == "clear_output")
        .map(|p| &p["wait"])
        .collect();
    assert_eq!(
        clears,
        [&json!(false), &json!(true), &json!(true), &json!(true)],
        "{events:#?}"
    );
    drop(ch);
    drop(person);
    net.daemon.stop();
}

/// Whether `kernels` (a `GET /api/kernels` answer) lists `id`.
fn lists(kernels: &Value, id: &str) -> bool {
    kernels
        .as_array()
        .is_some_and(|all| all.iter().any(|k| k["id"] == id))
}

/// Reads until the kernel tells its client it is dead (or the connection closes after it).
fn until_dead(channels: &mut Channels) {
    channels.until(|m| m["msg_type"] == "status" && m["content"]["execution_state"] == "dead");
}

/// A kernel whose session ends by another host's doing (a JSON-RPC `close`) leaves the
/// listing, its id is 404, its `/api/sessions` entry goes, and its WebSocket is told `dead`;
/// the session started again is the same kernel id again.
#[test]
fn a_kernel_whose_session_is_closed_leaves_the_listing_and_its_clients_are_told() {
    let net = NetDaemon::start(false, "", "");
    let base = net.http_url("/api");
    let token = Auth::Header(TOKEN);
    let mut agent = net.daemon.client();
    agent.eval("agent", json!([{"language": "py", "code": "a = 1"}]));
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    let id = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|k| k["cellvisor"]["session"] == "agent")
        .and_then(|k| k["id"].as_str())
        .unwrap_or_else(|| panic!("the agent's kernel: {listed:#}"))
        .to_string();
    let mut person = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let (reply, _) = person.execute("print(a)");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    let body = json!({"path": "agent.ipynb", "type": "notebook", "kernel": {"id": id}});
    let (status, session) = rest("POST", &format!("{base}/sessions"), token, Some(body));
    assert_eq!(status, 201, "{session}");

    let closed = agent.call("close", json!({"session": "agent"}));
    assert!(closed.is_ok(), "{closed:?}");
    until_dead(&mut person);
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    assert!(!lists(&listed, &id), "still listed: {listed:#}");
    let (status, _) = rest("GET", &format!("{base}/kernels/{id}"), token, None);
    assert_eq!(status, 404);
    assert_eq!(
        rest("GET", &format!("{base}/sessions"), token, None),
        (200, json!([]))
    );
    assert!(
        Channels::connect(net.port, &id, TOKEN).is_err(),
        "the channels of an ended kernel opened"
    );

    // The agent starts the session again: the same kernel id, a fresh namespace.
    agent.eval("agent", json!([{"language": "py", "code": "b = 2"}]));
    let (status, model) = rest("GET", &format!("{base}/kernels/{id}"), token, None);
    assert_eq!(status, 200, "{model}");
    let mut again = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let (reply, iopub) = again.execute("print(b)");
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    assert_eq!(stream_text(&iopub, "stdout"), "2\n");
    drop(again);
    net.daemon.stop();
}

/// A kernel started with `POST /api/kernels` whose session the daemon evicts when idle: it
/// leaves the listing and its client is told `dead` (as the eviction happens, not at the
/// next request).
#[test]
fn a_kernel_whose_session_is_evicted_leaves_the_listing_and_its_clients_are_told() {
    // Long enough to connect first on a loaded machine, short enough to wait for.
    let net = NetDaemon::start(false, "", "idle-timeout = \"5s\"\n");
    let base = net.http_url("/api");
    let token = Auth::Header(TOKEN);
    let (status, model) = rest("POST", &format!("{base}/kernels"), token, None);
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    until_dead(&mut ch);
    let (_, listed) = rest("GET", &format!("{base}/kernels"), token, None);
    assert!(!lists(&listed, &id), "still listed: {listed:#}");
    assert_eq!(
        rest("GET", &format!("{base}/kernels/{id}"), token, None).0,
        404
    );
    net.daemon.stop();
}

/// `display(..., display_id=...)` and its handle's `update` reach Jupyter clients as
/// `display_data` and `update_display_data` with the id in `transient`, and `clear_output`
/// as `clear_output` (IPython's display machinery, or cellvisor's `IPython` where the
/// session's Python has none).
#[test]
fn display_ids_reach_iopub_as_display_data_and_update_display_data() {
    let net = NetDaemon::start(false, "", "");
    let token = Auth::Header(TOKEN);
    let (status, model) = rest("POST", &net.http_url("/api/kernels"), token, None);
    assert_eq!(status, 201, "{model}");
    let id = model["id"].as_str().expect("an id").to_string();
    let mut ch = Channels::connect(net.port, &id, TOKEN).expect("the channels");
    let (reply, iopub) = ch.execute(
        "import IPython\nfrom IPython.display import clear_output, display, HTML, Markdown\n\
         display(Markdown('gone'))\nclear_output()\n\
         print(hasattr(IPython, '__cellvisor_shim__'))\n\
         display(Markdown('plain'))\n\
         h = display(HTML('<b>1</b>'), display_id=True)\nh.update(HTML('<b>2</b>'))",
    );
    assert_eq!(reply["content"]["status"], "ok", "{reply:#}");
    // Which IPython the cell had: the shim exactly where the session's Python has none.
    let real = std::process::Command::new(common::shared_python())
        .args(["-c", "import IPython"])
        .status()
        .expect("run the sessions' python")
        .success();
    let shim = if real { "False\n" } else { "True\n" };
    assert_eq!(stream_text(&iopub, "stdout"), shim);
    let displays: Vec<(&str, &Value)> = iopub
        .iter()
        .filter_map(|m| Some((m["msg_type"].as_str()?, &m["content"])))
        .filter(|(kind, _)| kind.ends_with("display_data"))
        .collect();
    assert_eq!(displays.len(), 4, "{iopub:#?}");
    let cleared = iopub.iter().position(|m| m["msg_type"] == "clear_output");
    let gone = iopub
        .iter()
        .position(|m| m["content"]["data"]["text/markdown"] == "gone");
    assert!(
        gone.is_some()
            && cleared > gone
            && cleared < iopub.iter().position(|m| m["msg_type"] == "stream"),
        "{iopub:#?}"
    );
    let displays = &displays[1..];
    assert_eq!(displays[0].0, "display_data");
    assert_eq!(displays[0].1["data"]["text/markdown"], "plain");
    assert_eq!(displays[0].1["transient"], json!({}));
    let (shown, updated) = (displays[1], displays[2]);
    let display_id = shown.1["transient"]["display_id"].clone();
    assert!(
        display_id.as_str().is_some_and(|id| id.len() == 32),
        "{iopub:#?}"
    );
    assert_eq!(shown.0, "display_data");
    assert_eq!(shown.1["data"]["text/html"], "<b>1</b>");
    assert_eq!(updated.0, "update_display_data");
    assert_eq!(updated.1["data"]["text/html"], "<b>2</b>");
    assert_eq!(updated.1["transient"]["display_id"], display_id);
    for (_, content) in displays {
        assert!(
            content["data"]
                .get("application/x-cellvisor-display")
                .is_none(),
            "{content:#}"
        );
    }
    drop(ch);
    net.daemon.stop();
}
