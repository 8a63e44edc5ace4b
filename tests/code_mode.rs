//! Code mode end to end through the daemon: the helpers of the code-mode script API in
//! JavaScript, Python and Lua (text, image, audio, notify, store/load, exit), JavaScript timers
//! that keep a cell alive, and host tools named as MCP servers name them, with their
//! TypeScript declarations and `tools.tool_search`.

mod common;

use common::daemon::{cell, output, Client, Daemon};
use serde_json::{json, Value};

fn one(client: &mut Client, session: &str, language: &str, code: &str) -> Value {
    client.eval(session, json!([{"language": language, "code": code}]))
}

fn status_ops(cell: &Value) -> Vec<Value> {
    cell["status_events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The counter of the code-mode API, in each language, with the language's own "missing".
const COUNTERS: [(&str, &str, &str, &str); 3] = [
    (
        "js",
        "store('c', (load('c') ?? 0) + 1); text(load('c'))",
        "text(String(load('never-stored')))",
        "undefined\n",
    ),
    (
        "py",
        "store('c', (load('c') or 0) + 1); text(load('c'))",
        "print(load('never-stored'))",
        "None\n",
    ),
    (
        "lua",
        "store('c', (load('c') or 0) + 1); text(load('c'))",
        "print(load('never-stored'))",
        "nil\n",
    ),
];

#[test]
fn the_store_load_counter_counts_across_requests_in_every_language() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for (language, counter, missing, nothing) in COUNTERS {
        let session = format!("counter-{language}");
        let first = one(&mut client, &session, language, counter);
        assert_eq!(output(&first, 0), "1\n", "{language}: {first:#}");
        let second = one(&mut client, &session, language, counter);
        assert_eq!(output(&second, 0), "2\n", "{language}: {second:#}");
        // A reset replaces the worker; the stored value stays.
        client
            .call("reset", json!({"session": session, "language": language}))
            .expect("reset");
        let third = one(&mut client, &session, language, counter);
        assert_eq!(output(&third, 0), "3\n", "{language}: {third:#}");
        let empty = one(&mut client, &session, language, missing);
        assert_eq!(output(&empty, 0), nothing, "{language}: {empty:#}");
    }
    // Storing a function is refused with a message that says what and where.
    for (language, code) in [
        ("js", "store('f', {run: () => 1})"),
        ("py", "store('f', {'run': lambda: 1})"),
        ("lua", "store('f', {run = function() end})"),
    ] {
        let refused = one(&mut client, "refusals", language, code);
        let failed = cell(&refused, 0);
        assert_eq!(failed["status"], "error", "{language}: {refused:#}");
        let text = failed["output"].as_str().unwrap_or_default();
        assert!(
            text.contains("is a function, which JSON cannot hold"),
            "{language}: {text}"
        );
    }
    // The values are the session's, whatever the language: Python reads what Lua counted.
    let shared = one(&mut client, "counter-lua", "py", "text(load('c'))");
    assert_eq!(output(&shared, 0), "3\n", "{shared:#}");
    daemon.stop();
}

/// Store keys and whether the key rule accepts them. JavaScript and Lua check keys in the
/// workers' Rust helpers, Python in its prelude: this table is what keeps the two copies of
/// the rule (and of the `<key>.json` layout) the same.
fn store_keys() -> Vec<(String, bool)> {
    let mut keys: Vec<(String, bool)> = [
        ("k-1.v2", true),
        ("_", true),
        ("a..b", true),
        ("Z9-", true),
        ("trailing.", true),
        ("", false),
        (".hidden", false),
        ("..", false),
        ("../x", false),
        ("a/b", false),
        ("sp ace", false),
        ("caf\u{e9}", false),
        ("tab\t", false),
    ]
    .into_iter()
    .map(|(key, valid)| (key.to_string(), valid))
    .collect();
    keys.push(("k".repeat(128), true));
    keys.push(("k".repeat(129), false));
    keys
}

#[test]
fn every_language_applies_the_same_store_key_rule_to_the_same_files() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let keys = store_keys();
    let names = serde_json::to_string(&keys.iter().map(|(k, _)| k).collect::<Vec<_>>())
        .expect("keys as JSON");
    let expected: String = keys
        .iter()
        .map(|(_, valid)| if *valid { "ok " } else { "refused " })
        .collect();
    // Each language stores 1 under every key, noting which keys it refused.
    let lua_names = names.replacen('[', "{", 1).replacen(']', "}", 1);
    for (language, code) in [
        (
            "js",
            format!(
                "let seen = ''; for (const k of {names}) {{ \
                 try {{ store(k, 1); seen += 'ok '; }} catch (e) {{ seen += 'refused '; }} }} \
                 text(seen)"
            ),
        ),
        (
            "py",
            format!(
                "seen = ''\nfor k in {names}:\n    try:\n        store(k, 1)\n        \
                 seen += 'ok '\n    except Exception:\n        seen += 'refused '\ntext(seen)"
            ),
        ),
        (
            "lua",
            format!(
                "local seen = '' for _, k in ipairs({lua_names}) do \
                 if pcall(store, k, 1) then seen = seen .. 'ok ' else seen = seen .. 'refused ' end \
                 end text(seen)"
            ),
        ),
    ] {
        let result = one(&mut client, &format!("keys-{language}"), language, &code);
        assert_eq!(output(&result, 0), format!("{expected}\n"), "{language}: {result:#}");
    }
    // One session, every language: what one stored under the longest key, the others load.
    let longest = "k".repeat(128);
    one(
        &mut client,
        "keys-shared",
        "py",
        &format!("store('{longest}', {{'from': 'py'}})"),
    );
    let js = one(
        &mut client,
        "keys-shared",
        "js",
        &format!("text(load('{longest}').from)"),
    );
    assert_eq!(output(&js, 0), "py\n", "{js:#}");
    one(
        &mut client,
        "keys-shared",
        "lua",
        &format!("store('{longest}', {{from = 'lua'}})"),
    );
    let py = one(
        &mut client,
        "keys-shared",
        "py",
        &format!("text(load('{longest}')['from'])"),
    );
    assert_eq!(output(&py, 0), "lua\n", "{py:#}");
    daemon.stop();
}

#[test]
fn pending_timers_keep_a_js_cell_alive_and_die_with_a_cancelled_one() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let both = one(
        &mut client,
        "timers",
        "js",
        "setTimeout(() => text('later'), 50); 'scheduled'",
    );
    assert_eq!(cell(&both, 0)["status"], "complete", "{both:#}");
    assert_eq!(output(&both, 0), "scheduled\nlater\n", "{both:#}");
    let cleared = one(
        &mut client,
        "timers",
        "js",
        "const t = setTimeout(() => text('cancelled timer ran'), 50); clearTimeout(t); 'cleared'",
    );
    assert_eq!(output(&cleared, 0), "cleared\n", "{cleared:#}");
    // A cell that never runs out of timers is cancelled at its timeout, and takes its pending
    // timers with it: the next cell sees no stray output.
    let cancelled = client.eval("timers",
        json!([{"language": "js", "timeout": 1,
                "code": "setTimeout(() => text('stray'), 1500); setInterval(() => {}, 20); 'waiting'"}]),
    );
    assert_eq!(cell(&cancelled, 0)["status"], "cancelled", "{cancelled:#}");
    let next = one(
        &mut client,
        "timers",
        "js",
        "await new Promise((resolve) => setTimeout(resolve, 1000)); 'clean'",
    );
    assert_eq!(output(&next, 0), "clean\n", "{next:#}");
    daemon.stop();
}

#[test]
fn exit_skips_catch_and_finally_and_keeps_what_was_stored() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let exited = one(
        &mut client,
        "exit",
        "js",
        "globalThis.flag = 'unchanged'; store('before_exit', 7); text('shown')\n\
         try { exit() } catch (e) { globalThis.flag = 'catch-ran' } finally { globalThis.flag = 'finally-ran' }\n\
         globalThis.flag = 'after'",
    );
    assert_eq!(cell(&exited, 0)["status"], "complete", "{exited:#}");
    assert_eq!(output(&exited, 0), "shown\n", "{exited:#}");
    let after = one(
        &mut client,
        "exit",
        "js",
        "[flag, load('before_exit')].join()",
    );
    assert_eq!(output(&after, 0), "unchanged,7\n", "{after:#}");
    daemon.stop();
}

/// Runs one `eval` whose tools the test answers: every call gets back its own name and
/// arguments.
fn eval_with_echo_tools(client: &mut Client, params: Value) -> Value {
    let id = client.send("eval", params);
    loop {
        let message = client.read().expect("connection open");
        if message["method"] == "tool/call" {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"tool": message["params"]["name"], "args": message["params"]["arguments"]}});
            client.send_line(&answer.to_string());
        } else if message["id"] == json!(id) {
            return message["result"].clone();
        }
    }
}

#[test]
fn tools_named_like_mcp_tools_are_declared_callable_and_searchable() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let tools = json!([
        {"name": "list-dir", "description": "Lists the entries of a directory",
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}},
                          "required": ["path"]}},
        {"name": "github.search_issues", "description": "Searches issues in a GitHub repository",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
    ]);
    let js = "text(await tools['list-dir']({path: '.'}))\n\
              text(await tools.list_dir({path: 'src', depth: 1}))\n\
              text(await tools['github.search_issues']({query: 'bug'}))\n\
              for (const t of ALL_TOOLS) text(t.declaration)\n\
              text(await tools.tool_search({query: 'issues'}))\n\
              for (const bad of [{query: '   '}, {query: 'issues', limit: 0}]) {\n\
                try { await tools.tool_search(bad) } catch (e) { text(e.message) }\n\
              }";
    let result = eval_with_echo_tools(
        &mut client,
        json!({"session": "tools", "tools": tools, "cells": [{"language": "js", "code": js}]}),
    );
    assert_eq!(cell(&result, 0)["status"], "complete", "{result:#}");
    let lines: Vec<&str> = output(&result, 0).lines().collect();
    let calls: Vec<Value> = lines[..3]
        .iter()
        .map(|line| serde_json::from_str(line).expect("a tool's echo"))
        .collect();
    assert_eq!(
        calls,
        [
            json!({"tool": "list-dir", "args": {"path": "."}}),
            json!({"tool": "list-dir", "args": {"path": "src", "depth": 1}}),
            json!({"tool": "github.search_issues", "args": {"query": "bug"}}),
        ]
    );
    assert_eq!(
        lines[3..5],
        [
            "declare function list_dir(args: { path: string; depth?: number }): Promise<unknown>;",
            "declare function github_search_issues(args: { query: string }): Promise<unknown>;",
        ]
    );
    let found: Value = serde_json::from_str(lines[5]).expect("search result");
    assert_eq!(
        found["tools"][0]["name"], "github.search_issues",
        "{found:#}"
    );
    assert_eq!(
        found["tools"][0]["description"],
        "Searches issues in a GitHub repository"
    );
    assert_eq!(
        lines[6..],
        ["query must not be empty", "limit must be greater than zero"]
    );

    // Python and Lua reach them too, and their ALL_TOOLS carry the same declarations.
    let result = eval_with_echo_tools(
        &mut client,
        json!({"session": "tools", "tools": tools, "cells": [
            {"language": "py", "code": "print(tool.list_dir(path='.')['tool'], ALL_TOOLS[1]['declaration'])"},
            {"language": "lua", "code": "print(tools['github.search_issues']{query = 'x'}.tool, ALL_TOOLS[1].declaration)"},
        ]}),
    );
    assert_eq!(
        output(&result, 0),
        "list-dir declare function github_search_issues(args: { query: string }): Promise<unknown>;\n",
        "{result:#}"
    );
    assert_eq!(
        output(&result, 1),
        "github.search_issues\tdeclare function list_dir(args: { path: string; depth?: number }): Promise<unknown>;\n",
        "{result:#}"
    );

    // A name outside the rule is refused at the request, with the rule.
    let refused = client
        .call(
            "eval",
            json!({"session": "tools", "tools": [{"name": "list dir"}],
                   "cells": [{"language": "js", "code": "1"}]}),
        )
        .expect_err("a bad tool name is refused");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"list dir\"")
            && message.contains("1 to 128 characters from A-Z a-z 0-9 _ - ."),
        "{refused:#}"
    );
    daemon.stop();
}

#[test]
fn notify_is_streamed_before_the_cell_ends() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for (language, code) in [
        ("js", "notify('step 1'); await new Promise((r) => setTimeout(r, 200)); text('done')"),
        ("py", "import time\nnotify('step 1'); time.sleep(0.2); text('done')"),
        ("lua", "notify('step 1'); local t = os.clock() + 0.2; while os.clock() < t do end; text('done')"),
    ] {
        let (events, response) = client.call_collect(
            "eval",
            json!({"session": "notify", "cells": [{"language": language, "code": code}]}),
        );
        let kinds: Vec<String> = events
            .iter()
            .map(|event| {
                let params = &event["params"];
                match params["event"].as_str().unwrap_or_default() {
                    "status" => format!("status:{}", params["status"]["message"]),
                    "output" => format!("output:{}", params["text"].as_str().unwrap_or_default()),
                    other => other.to_string(),
                }
            })
            .collect();
        let notified = kinds.iter().position(|k| k == "status:\"step 1\"");
        let printed = kinds.iter().position(|k| k == "output:done\n");
        assert!(
            notified.is_some() && notified < printed,
            "{language}: the note comes as it happens: {kinds:?}"
        );
        assert_eq!(response["result"]["cells"][0]["status"], "complete");
    }
    daemon.stop();
}

#[test]
fn python_and_lua_have_the_code_mode_helpers() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let png = "data:image/png;base64,iVBORw0KGgo=";
    let wav = "data:audio/wav;base64,UklGRg==";
    for (language, code) in [
        (
            "py",
            format!(
                "text('plain'); text({{'k': [1, 2]}}); notify('working')\n\
                 image('{png}', 'low'); audio('{wav}')\n\
                 store('kept', {{'n': 1}}); print(load('kept')['n'])\n\
                 exit()\n\
                 print('never')"
            ),
        ),
        (
            "lua",
            format!(
                "text('plain'); text({{k = {{1, 2}}}}); notify('working')\n\
                 image('{png}', 'low'); audio('{wav}')\n\
                 store('kept', {{n = 1}}); print(load('kept').n)\n\
                 exit()\n\
                 print('never')"
            ),
        ),
    ] {
        let session = format!("helpers-{language}");
        let result = one(&mut client, &session, language, &code);
        let ran = cell(&result, 0);
        assert_eq!(ran["status"], "complete", "{language}: {result:#}");
        assert_eq!(
            ran["output"], "plain\n{\"k\":[1,2]}\n1\n",
            "{language}: {result:#}"
        );
        let ops = status_ops(ran);
        assert!(
            ops.contains(&json!({"op": "notify", "message": "working"})),
            "{language}: {ops:?}"
        );
        assert!(
            ops.contains(&json!({"op": "store", "key": "kept", "bytes": 7})),
            "{language}: {ops:?}"
        );
        let displays = ran["displays"].as_array().cloned().unwrap_or_default();
        assert!(
            displays.contains(
                &json!({"image/png": "iVBORw0KGgo=", "text/plain": "<image image/png>",
                                      "application/x-cellvisor-image-detail": "low"})
            ),
            "{language}: {displays:?}"
        );
        assert!(
            displays.contains(&json!({"audio/wav": "UklGRg==", "text/plain": "<audio audio/wav>"})),
            "{language}: {displays:?}"
        );
    }
    daemon.stop();
}

#[test]
fn os_exit_in_lua_ends_the_cell_not_the_worker() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let started = one(&mut client, "lua-exit", "lua", "kept = 'state'");
    assert_eq!(cell(&started, 0)["status"], "complete", "{started:#}");
    let pid_before = status_row(&mut client, "lua-exit")["pid"].clone();
    let failed = one(
        &mut client,
        "lua-exit",
        "lua",
        "print('before'); os.exit(3); print('after')",
    );
    let ran = cell(&failed, 0);
    assert_eq!(ran["status"], "error", "{failed:#}");
    assert_eq!(
        ran["output"], "before\nexit(3): the cell ended with status 3\n",
        "{failed:#}"
    );
    let ok = one(&mut client, "lua-exit", "lua", "os.exit(); print('after')");
    assert_eq!(cell(&ok, 0)["status"], "complete", "{ok:#}");
    assert_eq!(cell(&ok, 0)["output"], "", "{ok:#}");
    let state = one(&mut client, "lua-exit", "lua", "kept");
    assert_eq!(
        output(&state, 0),
        "state\n",
        "the worker kept its state: {state:#}"
    );
    assert_eq!(cell(&state, 0)["notice"], Value::Null, "{state:#}");
    let row = status_row(&mut client, "lua-exit");
    assert_eq!(row["pid"], pid_before, "the same worker: {row:#}");
    assert_eq!(row["restarts"], 0, "{row:#}");
    daemon.stop();
}

/// The `status` row of `session`'s worker.
fn status_row(client: &mut Client, session: &str) -> Value {
    let status = client.call("status", json!({})).expect("status");
    status
        .as_array()
        .into_iter()
        .flatten()
        .find(|row| row["session"] == session)
        .cloned()
        .expect("the session has a worker")
}

/// Issue 28 item 6: a truncation notice names the spilled output as `artifact://<id>`, the
/// reference hosts hold, and `output()` takes that reference in every language.
#[test]
fn output_takes_the_artifact_reference_a_truncation_notice_prints() {
    let daemon = Daemon::start_with("[output]\nmax-bytes = \"1KiB\"\n");
    let mut client = daemon.client();
    let spilled = one(
        &mut client,
        "artifact-ref",
        "py",
        "for i in range(400): print(f'line {i:04d}')",
    );
    let truncation = &cell(&spilled, 0)["truncation"];
    assert_eq!(truncation["truncated"], true, "{spilled:#}");
    let path = truncation["artifact_path"].as_str().expect("artifact path");
    let id = std::path::Path::new(path)
        .file_stem()
        .and_then(|stem| stem.to_str())
        .expect("artifact id");
    let reference = format!("artifact://{id}");
    let notice = format!("full output in {path} ({reference}) ...]");
    assert!(output(&spilled, 0).contains(&notice), "{spilled:#}");
    let whole: String = (0..400).map(|i| format!("line {i:04}\n")).collect();
    for (language, code) in [
        ("py", format!("print(len(output('{reference}')))")),
        ("js", format!("text((await output('{reference}')).length)")),
        ("lua", format!("print(#output('{reference}'))")),
    ] {
        let read = one(&mut client, "artifact-ref", language, &code);
        assert_eq!(
            output(&read, 0),
            format!("{}\n", whole.len()),
            "{language}: {read:#}"
        );
        let bare = one(
            &mut client,
            "artifact-ref",
            language,
            &code.replace("artifact://", ""),
        );
        assert_eq!(output(&read, 0), output(&bare, 0), "{language}: {bare:#}");
    }
    let refused = one(
        &mut client,
        "artifact-ref",
        "py",
        "output('artifact://../x')",
    );
    assert_eq!(cell(&refused, 0)["status"], "error", "{refused:#}");
    assert!(
        output(&refused, 0).contains("output: invalid output id 'artifact://../x'")
            || cell(&refused, 0)["error"]
                .to_string()
                .contains("invalid output id 'artifact://../x'"),
        "{refused:#}"
    );
    daemon.stop();
}

/// Issue 27 item 7: a stored integer too big for a double (5000 digits) is refused by every
/// language's `load`, JavaScript included (it gave `Infinity`), each naming the key.
#[test]
fn every_language_refuses_to_load_an_integer_beyond_a_double() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let written = one(
        &mut client,
        "huge",
        "py",
        "import os\nd = os.environ['CELLVISOR_STORE_DIR']\nos.makedirs(d, exist_ok=True)\n\
         open(os.path.join(d, 'huge.json'), 'w').write('{\"n\": [' + '7' * 5000 + ']}')",
    );
    assert_eq!(cell(&written, 0)["status"], "complete", "{written:#}");
    for (language, code) in [
        ("js", "text(String(load('huge').n[0]))"),
        ("py", "print(load('huge')['n'][0])"),
        ("lua", "print(load('huge').n[1])"),
    ] {
        let loaded = one(&mut client, "huge", language, code);
        let failed = cell(&loaded, 0);
        assert_eq!(failed["status"], "error", "{language}: {loaded:#}");
        let text = failed["output"].as_str().unwrap_or_default();
        assert!(
            text.contains("load: the stored value of") && text.contains("huge"),
            "{language}: {text}"
        );
        assert!(!text.contains("Infinity"), "{language}: {text}");
    }
    // A float beyond a double is refused too, not read as `inf`.
    let written = one(
        &mut client,
        "huge",
        "py",
        "import os\nd = os.environ['CELLVISOR_STORE_DIR']\n\
         open(os.path.join(d, 'far.json'), 'w').write('[1e400, 1.5]')",
    );
    assert_eq!(cell(&written, 0)["status"], "complete", "{written:#}");
    for (language, code) in [
        ("js", "text(String(load('far')[0]))"),
        ("py", "print(load('far')[0])"),
        ("lua", "print(load('far')[1])"),
    ] {
        let loaded = one(&mut client, "huge", language, code);
        let text = cell(&loaded, 0)["output"].as_str().unwrap_or_default();
        assert!(text.contains("number out of range"), "{language}: {text}");
        assert!(
            !text.contains("inf\n") && !text.contains("Infinity"),
            "{language}: {text}"
        );
    }
    daemon.stop();
}

/// Issue 27 item 7: a Lua table with integer keys that is no sequence (sparse, or with a
/// field besides its items) comes back from `store`/`load` with integer keys, not strings;
/// Python and JavaScript load the same JSON object with its string keys.
#[test]
fn a_sparse_lua_table_keeps_its_integer_keys_through_the_store() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let stored = one(
        &mut client,
        "sparse",
        "lua",
        "store('sparse', {[1] = 1, [1000000] = 2}); store('packed', table.pack(10, 20))",
    );
    assert_eq!(cell(&stored, 0)["status"], "complete", "{stored:#}");
    let lua = one(
        &mut client,
        "sparse",
        "lua",
        "local t = load('sparse')\n\
         print(t[1], t[1000000], t['1'], math.type(next(t)))\n\
         local p = load('packed')\n\
         print(#p, p[1], p[2], p.n, p['1'])",
    );
    assert_eq!(
        output(&lua, 0),
        "1\t2\tnil\tinteger\n2\t10\t20\t2\tnil\n",
        "{lua:#}"
    );
    let py = one(
        &mut client,
        "sparse",
        "py",
        "print(sorted(load('sparse').items()))",
    );
    assert_eq!(output(&py, 0), "[('1', 1), ('1000000', 2)]\n", "{py:#}");
    let js = one(
        &mut client,
        "sparse",
        "js",
        "text(load('sparse')[1000000] + ' ' + JSON.stringify(load('packed')))",
    );
    assert_eq!(output(&js, 0), "2 {\"1\":10,\"2\":20,\"n\":2}\n", "{js:#}");
    daemon.stop();
}

/// Issue 27 item 7: Lua's `load(chunk)` is the store helper in a cell; calling it with code
/// fails with a message that names `lua_load`, Lua's own `load`.
#[test]
fn lua_load_of_a_chunk_points_at_lua_load() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for code in ["load('return 6 * 7')()", "load(function() return nil end)"] {
        let result = one(&mut client, "chunk", "lua", code);
        let failed = cell(&result, 0);
        assert_eq!(failed["status"], "error", "{code}: {result:#}");
        let text = failed["output"].as_str().unwrap_or_default();
        assert!(text.contains("lua_load"), "{code}: {text}");
    }
    let builtin = one(&mut client, "chunk", "lua", "lua_load('return 6 * 7')()");
    assert_eq!(output(&builtin, 0), "42\n", "{builtin:#}");
    daemon.stop();
}

/// Anchor 001: `tools.tool_search` "exists only when the writer's view has deferred tools".
/// Without declared tools it is absent in every language (JavaScript used to give a function
/// that threw; Lua raised on the lookup).
#[test]
fn tool_search_is_absent_when_no_tools_are_declared() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    for (language, code, expected) in [
        (
            "js",
            "text(typeof tools.tool_search); text('tool_search' in tools); text(typeof tools.tool_search?.call)",
            "undefined\nfalse\nundefined\n",
        ),
        ("py", "print(hasattr(tools, 'tool_search'))", "False\n"),
        (
            "lua",
            "print(tools.tool_search == nil, pcall(function() return tools.tool_search end))",
            "true\ttrue\tnil\n",
        ),
    ] {
        let result = one(&mut client, "no-tools", language, code);
        assert_eq!(cell(&result, 0)["status"], "complete", "{result:#}");
        assert_eq!(output(&result, 0), expected, "{language}: {result:#}");
    }
    // With a tool declared, it is there (and ranks it).
    let tools = json!([{"name": "list-dir", "description": "Lists a directory"}]);
    for (language, code) in [
        (
            "js",
            "text((await tools.tool_search({query: 'list'})).tools[0].name)",
        ),
        (
            "py",
            "print(tools.tool_search(query='list')['tools'][0]['name'])",
        ),
        (
            "lua",
            "print(tools.tool_search{query = 'list'}.tools[1].name)",
        ),
    ] {
        let result = eval_with_echo_tools(
            &mut client,
            json!({"session": "no-tools", "tools": tools,
                   "cells": [{"language": language, "code": code}]}),
        );
        assert_eq!(output(&result, 0), "list-dir\n", "{language}: {result:#}");
    }
    daemon.stop();
}

/// Anchor 001: a progress note sent while nobody watches the cell waits for the next look,
/// "and they are dropped if the cell ends first". A note the next `wait` sees while the cell
/// still runs is handed to it.
#[test]
fn a_notify_nobody_saw_is_dropped_when_the_cell_ends_first() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let marker = daemon.world.dir.path().join("notified");
    std::fs::create_dir_all(&marker).expect("marker dir");
    for (language, code) in [
        (
            "py",
            "import time\nprint('a', flush=True)\ntime.sleep(0.6)\nnotify('unseen')\n\
             time.sleep(0.3)\nprint('b')",
        ),
        (
            "js",
            "text('a'); await new Promise((r) => setTimeout(r, 600)); notify('unseen');\n\
             await new Promise((r) => setTimeout(r, 300)); text('b')",
        ),
    ] {
        let session = format!("notes-{language}");
        let yielded = client.eval(
            &session,
            json!([{"language": language, "yield_time_ms": 200, "code": code}]),
        );
        assert_eq!(cell(&yielded, 0)["status"], "running", "{yielded:#}");
        let id = cell(&yielded, 0)["cell_id"].clone();
        // Nobody watches until the cell has ended.
        daemon.wait_for_state(&session, "idle");
        let last = client
            .call("wait", json!({"session": session, "cell_id": id}))
            .expect("the ended cell's result is kept");
        assert_eq!(last["status"], "complete", "{language}: {last:#}");
        assert_eq!(last["output"], "b\n", "{language}: {last:#}");
        let notes: Vec<Value> = status_ops(&last)
            .into_iter()
            .filter(|event| event["op"] == "notify")
            .collect();
        assert!(notes.is_empty(), "{language}: dropped, not kept: {last:#}");
    }

    // Sent unwatched, then a wait looks while the cell still runs: the wait gets it.
    let flag = marker.join("late");
    let yielded = client.eval(
        "notes",
        json!([{"language": "py", "yield_time_ms": 200, "code": format!(
            "import os, time\ntime.sleep(0.4)\nnotify('for the next look')\n\
             open({flag:?}, 'w').close()\nwhile os.path.exists({flag:?}): time.sleep(0.05)\nprint('done')"
        )}]),
    );
    let id = cell(&yielded, 0)["cell_id"].clone();
    let sent = common::wait_until(std::time::Duration::from_secs(30), || {
        flag.exists().then_some(()).ok_or(())
    });
    assert!(sent.is_ok(), "the note was sent");
    let look = client
        .call(
            "wait",
            json!({"session": "notes", "cell_id": id, "yield_time_ms": 100}),
        )
        .expect("wait answered");
    std::fs::remove_file(&flag).expect("let the cell end");
    let messages: Vec<Value> = status_ops(&look)
        .into_iter()
        .filter(|event| event["op"] == "notify")
        .map(|event| event["message"].clone())
        .collect();
    assert_eq!(messages, [json!("for the next look")], "{look:#}");
    let end = client
        .call("wait", json!({"session": "notes", "cell_id": id}))
        .expect("wait answered");
    assert_eq!(end["status"], "complete", "{end:#}");
    daemon.stop();
}
