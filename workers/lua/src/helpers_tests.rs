//! Tests of the helpers in helpers.lua (and host_table.rs), trailing-table bundles and host tools.

use super::*;
use serde_json::json;

const STATUS_MIME: &str = "application/x-cellvisor-status";

/// A Lua string literal for `text` (JSON string syntax is valid Lua for these).
fn lua_literal(text: &str) -> String {
    Json::String(text.to_string()).to_string()
}

fn path_literal(path: &std::path::Path) -> String {
    lua_literal(&path.display().to_string())
}

fn statuses(ran: &Ran) -> Vec<Json> {
    ran.displays
        .iter()
        .filter_map(|bundle| bundle.get(STATUS_MIME).cloned())
        .collect()
}

/// Runs `code`, expecting an error whose summary ends with `message` and no status event.
fn assert_fails(lua: &mut LuaEngine, code: &str, message: &str) {
    let (summary, ran) = failed(lua, code);
    assert!(
        summary.ends_with(message),
        "{code}: {summary:?} should end with {message:?}"
    );
    assert!(
        summary.starts_with("cell["),
        "{code}: the error points at the cell: {summary}"
    );
    assert!(statuses(&ran).is_empty(), "{code}: {:?}", statuses(&ran));
}

#[test]
fn read_write_append_report_status_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut lua = engine();
    let file = path_literal(&dir.path().join("sub/notes.txt"));
    let ran = run(
        &mut lua,
        &format!(
            "local f = {file}\n\
             write(f, 'alpha\\nbeta\\ngamma\\n')\n\
             append(f, 'delta')\n\
             io.write(read(f) .. '|' .. read(f, 2, 2) .. '|' .. read(f, {{numbered = true, limit = 1}}))\n\
             print(read(f, 2, 2, true) == '     2\\tbeta\\n     3\\tgamma\\n', read(f, 9) == '', read(f, 1, 0) == '')"
        ),
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "alpha\nbeta\ngamma\ndelta|beta\ngamma\n|     1\talpha\ntrue\ttrue\ttrue\n"
    );
    let path = dir.path().join("sub/notes.txt").display().to_string();
    assert_eq!(
        statuses(&ran),
        vec![
            json!({"op": "write", "path": path, "bytes": 17}),
            json!({"op": "append", "path": path, "bytes": 5}),
            json!({"op": "read", "path": path, "lines": 4, "offset": 1}),
            json!({"op": "read", "path": path, "lines": 2, "offset": 2}),
            json!({"op": "read", "path": path, "lines": 1, "offset": 1}),
            json!({"op": "read", "path": path, "lines": 2, "offset": 2}),
            json!({"op": "read", "path": path, "lines": 0, "offset": 9}),
            json!({"op": "read", "path": path, "lines": 0, "offset": 1}),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sub/notes.txt")).unwrap(),
        "alpha\nbeta\ngamma\ndelta"
    );
    let missing = dir.path().join("missing.txt").display().to_string();
    let sub = dir.path().join("sub").display().to_string();
    for (code, message) in [
        (
            format!("read({})", lua_literal(&missing)),
            format!("read: No such file or directory: '{missing}'"),
        ),
        (
            format!("read({})", lua_literal(&sub)),
            format!("read: Is a directory: '{sub}'"),
        ),
        (
            format!("read({file}, 0)"),
            "read: offset must be at least 1, not 0".into(),
        ),
        (
            format!("read({file}, 1, '3')"),
            "read: limit must be an integer, not string".into(),
        ),
        (
            format!("read({file}, 1.5)"),
            "read: offset must be an integer, not non-integral number".into(),
        ),
        (
            "read(3)".into(),
            "read: path must be a string, not number".into(),
        ),
        (
            format!("write({file}, 5)"),
            "write: content must be a string, not number".into(),
        ),
        (
            "write('', 'x')".into(),
            "write: path must not be empty".into(),
        ),
        (
            format!("append({}, 'x')", lua_literal(&sub)),
            format!("append: Is a directory: '{sub}'"),
        ),
    ] {
        assert_fails(&mut lua, &code, &message);
    }
}

#[test]
fn text_helpers_sort_uniq_count_and_diff() {
    let mut lua = engine();
    let ran = run(
        &mut lua,
        "assert(sort('b\\na\\nc\\na\\n') == 'a\\na\\nb\\nc\\n')\n\
         assert(sort('b\\na', true) == 'b\\na')\n\
         assert(sort('b\\na\\nb\\n', false, true) == 'a\\nb\\n')\n\
         assert(sort('\\u{e9}\\nz\\nA') == 'A\\nz\\n\\u{e9}')\n\
         assert(uniq('a\\na\\nb\\na\\n') == 'a\\nb\\na\\n')\n\
         assert(uniq('a\\na\\nb', true) == '      2 a\\n      1 b')\n\
         local c = counter('x\\ny\\nx\\nz\\ny\\nx\\n')\n\
         assert(#c == 3 and c[1][1] == 'x' and c[1][2] == 3 and c[3][1] == 'z')\n\
         c = counter({'b', 'a', 'a', 'b', 'c'}, 2)\n\
         assert(#c == 2 and c[1][1] == 'b' and c[2][1] == 'a')\n\
         c = counter({1, 2, 2, 3}, nil, true)\n\
         assert(c[1][1] == 1 and c[2][1] == 3 and c[3][1] == 2 and c[3][2] == 2)\n\
         assert(diff('same\\n', 'same\\n') == '')\n\
         return diff('a\\nb\\nc\\n', 'a\\nB\\nc\\nd\\n'), counter({'k', 'k'})",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "--- a\n+++ b\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\t[[\"k\",2]]\n"
    );
    let statuses = statuses(&ran);
    let ops: Vec<_> = statuses.iter().map(|s| s["op"].clone()).collect();
    assert_eq!(
        ops,
        [
            "sort", "sort", "sort", "sort", "uniq", "uniq", "counter", "counter", "counter",
            "diff", "diff", "counter"
        ]
    );
    assert_eq!(statuses[0], json!({"op": "sort", "lines": 4}));
    assert_eq!(statuses[2], json!({"op": "sort", "lines": 2}));
    assert_eq!(statuses[4], json!({"op": "uniq", "lines": 3}));
    assert_eq!(statuses[6], json!({"op": "counter", "items": 3}));
    assert_eq!(
        statuses[10],
        json!({"op": "diff", "added": 2, "removed": 1})
    );
    for (code, message) in [
        ("sort(5)", "sort: text must be a string, not number"),
        ("uniq(nil)", "uniq: text must be a string, not nil"),
        (
            "counter({{1}})",
            "counter: items must be strings or numbers, not table",
        ),
        (
            "counter(5)",
            "counter: items must be a table or a string, not number",
        ),
        (
            "counter('a', -1)",
            "counter: limit must be at least 0, not -1",
        ),
        ("diff('a', 1)", "diff: b must be a string, not number"),
    ] {
        assert_fails(&mut lua, code, message);
    }
}

#[test]
fn tree_lists_like_the_tree_command() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir_all(root.join("a/deep/d1")).unwrap();
    std::fs::write(root.join("a/deep/d1/f.txt"), "f").unwrap();
    std::fs::write(root.join("a/x.txt"), "x").unwrap();
    std::fs::write(root.join("b.txt"), "b").unwrap();
    std::fs::write(root.join(".hidden"), "h").unwrap();
    std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
    let mut lua = engine();
    let shown = root.display().to_string();
    let ran = run(
        &mut lua,
        &format!(
            "print(tree({0}))\nprint(tree({0}, 1, true))",
            lua_literal(&shown)
        ),
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        format!(
            "{shown}\n├── a/\n│   ├── deep/\n│   │   └── d1/\n│   └── x.txt\n├── b.txt\n└── link\n\
             {shown}\n├── .hidden\n├── a/\n├── b.txt\n└── link\n"
        )
    );
    assert_eq!(
        statuses(&ran),
        vec![
            json!({"op": "tree", "path": shown, "entries": 6}),
            json!({"op": "tree", "path": shown, "entries": 4}),
        ]
    );
    let file = root.join("b.txt").display().to_string();
    for (code, message) in [
        (
            "tree('/nonexistent-cellvisor')".to_string(),
            "tree: No such file or directory: '/nonexistent-cellvisor'".to_string(),
        ),
        (
            format!("tree({})", lua_literal(&file)),
            format!("tree: Not a directory: '{file}'"),
        ),
        (
            "tree('.', 0)".into(),
            "tree: max_depth must be at least 1, not 0".into(),
        ),
    ] {
        assert_fails(&mut lua, &code, &message);
    }
}

#[test]
fn tree_defaults_to_the_current_directory() {
    let mut lua = engine();
    let ran = run(&mut lua, "return tree():sub(1, 1)");
    assert_eq!(ran.stdout, ".\n");
    assert_eq!(statuses(&ran)[0]["path"], ".");
}

#[test]
fn env_and_output_read_the_process_environment_and_artifacts() {
    let artifacts = tempfile::tempdir().unwrap();
    std::fs::write(artifacts.path().join("abc.txt"), "first\n").unwrap();
    std::fs::write(artifacts.path().join("def.txt"), "second").unwrap();
    let mut lua = engine();
    let ran = run(
        &mut lua,
        &format!(
            "assert(env('CV_LUA_TEST_KEY', 'v1') == nil)\n\
             assert(env('CV_LUA_TEST_KEY') == 'v1' and os.getenv('CV_LUA_TEST_KEY') == 'v1')\n\
             assert(env('CV_LUA_TEST_MISSING') == nil)\n\
             assert(env()['CV_LUA_TEST_KEY'] == 'v1')\n\
             env('CELLVISOR_ARTIFACT_DIR', {})\n\
             assert(output('abc') == 'first\\n')\n\
             return output('abc', 'def')",
            path_literal(artifacts.path())
        ),
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(ran.stdout, "first\n\nsecond\n");
    assert_eq!(
        statuses(&ran),
        vec![
            json!({"op": "env", "key": "CV_LUA_TEST_KEY"}),
            json!({"op": "env", "key": "CV_LUA_TEST_KEY"}),
            json!({"op": "env", "key": "CV_LUA_TEST_MISSING"}),
            json!({"op": "env"}),
            json!({"op": "env", "key": cellvisor_ipc::env::ARTIFACT_DIR}),
            json!({"op": "output", "ids": ["abc"], "bytes": 6}),
            json!({"op": "output", "ids": ["abc", "def"], "bytes": 12}),
        ]
    );
    for (code, message) in [
        ("output('zzz')", "output: unknown output id 'zzz'"),
        ("output('../abc')", "output: invalid output id '../abc'"),
        ("output('a/b')", "output: invalid output id 'a/b'"),
        ("output()", "output: give at least one output id"),
        ("env('A=B', 'x')", "env: invalid variable name 'A=B'"),
        ("env('K', {})", "env: value must be a string, not table"),
    ] {
        assert_fails(&mut lua, code, message);
    }
}

#[test]
fn trailing_tables_are_also_displayed() {
    let mut lua = engine();
    let ran = run(&mut lua, "{k = {1, 2}}");
    assert_eq!(ran.stdout, "{\"k\":[1,2]}\n");
    assert_eq!(
        ran.displays,
        vec![json!({"application/json": {"k": [1, 2]}, "text/plain": "{k = {1, 2}}"})]
    );
    let ran = run(&mut lua, "1, {true}");
    assert_eq!(ran.stdout, "1\t[true]\n");
    assert_eq!(
        ran.displays,
        vec![json!({"application/json": [true], "text/plain": "{true}"})]
    );
    for plain in ["5", "'text'", "{f = print}", "nil", "x = {1}"] {
        let ran = run(&mut lua, plain);
        assert_eq!(ran.outcome, CellOutcome::Completed, "{plain}: {ran:?}");
        assert!(ran.displays.is_empty(), "{plain}: {:?}", ran.displays);
    }
}

fn tools() -> Vec<ToolInfo> {
    let tool = |name: &str, schema: &str| ToolInfo {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema_json: schema.into(),
    };
    vec![
        tool(
            "add",
            r#"{"type":"object","properties":{"a":{"type":"number"}}}"#,
        ),
        tool("fail", "{}"),
        tool("hang", "{}"),
    ]
}

/// Runs `code` offering [`tools`] while a thread plays the host: `add` sums `a` and `b`,
/// `fail` fails, `hang` never answers.
fn run_with_host(lua: &mut LuaEngine, code: &str, interrupt: &Interrupt) -> (Ran, Vec<String>) {
    let (outbox, rx) = Outbox::new(10_000);
    let host_outbox = outbox.clone();
    let host = thread::spawn(move || {
        let mut frames = Vec::new();
        let mut calls = Vec::new();
        for frame in rx {
            match frame {
                FromWorker::ToolCall {
                    call_id,
                    name,
                    args_json,
                    ..
                } => {
                    calls.push(format!("{name} {args_json}"));
                    let args: Json = serde_json::from_str(&args_json).unwrap();
                    let answer = match name.as_str() {
                        "add" => {
                            let sum =
                                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
                            Ok(json!({"sum": sum, "list": [1, null, "x"]}).to_string())
                        }
                        "fail" => Err("disk on fire".to_string()),
                        _ => continue,
                    };
                    host_outbox.deliver_tool_result(call_id, answer);
                }
                FromWorker::Pong { seq: u64::MAX } => break,
                other => frames.push(other),
            }
        }
        (frames, calls)
    });
    let cell = ExecuteCell {
        cell_id: 7,
        code: code.to_string(),
        cwd: None,
        tools: tools(),
        session_env: Vec::new(),
        env_changes: Vec::new(),
        task: Default::default(),
    };
    let outcome = lua
        .execute(&cell, &outbox, interrupt)
        .expect("engine survives");
    outbox.send(FromWorker::Pong { seq: u64::MAX });
    let (frames, calls) = host.join().unwrap();
    let mut ran = Ran {
        outcome,
        stdout: String::new(),
        stderr: String::new(),
        displays: Vec::new(),
        values: Vec::new(),
    };
    for frame in frames {
        match frame {
            FromWorker::Output { stream, data, .. } => {
                let text = String::from_utf8_lossy(&data);
                match stream {
                    OutputStream::Stdout => ran.stdout.push_str(&text),
                    OutputStream::Stderr => ran.stderr.push_str(&text),
                }
            }
            FromWorker::Display { bundle_json, .. } => {
                let bundle: serde_json::Value = serde_json::from_str(&bundle_json).unwrap();
                match bundle.get("application/x-cellvisor-value") {
                    Some(value) => ran.values.push(value.clone()),
                    None => ran.displays.push(bundle),
                }
            }
            _ => {}
        }
    }
    (ran, calls)
}

#[test]
fn host_tools_are_called_synchronously() {
    let mut lua = engine();
    let none = Interrupt::default();
    let (ran, calls) = run_with_host(
        &mut lua,
        "local r = tool.add({a = 2, b = 3})\n\
         local s = tools.add{a = 1}\n\
         print(r.sum, s.sum, r.list[2], r.list[3], #ALL_TOOLS, ALL_TOOLS[1].name, ALL_TOOLS[1].input_schema.properties.a.type)\n\
         local ok, err = pcall(tool.fail, {x = 1})\n\
         print(ok, err)\n\
         tool.fail()",
        &none,
    );
    assert_eq!(
        ran.stdout, "5\t1\tnil\tx\t3\tadd\tnumber\nfalse\ttool.fail: disk on fire\n",
        "{ran:?}"
    );
    assert_eq!(
        ran.outcome,
        CellOutcome::Failed {
            summary: "cell[1]:6: tool.fail: disk on fire".into()
        }
    );
    assert_eq!(
        calls,
        [
            r#"add {"a":2,"b":3}"#,
            r#"add {"a":1}"#,
            r#"fail {"x":1}"#,
            "fail {}"
        ]
    );
    let (ran, calls) = run_with_host(&mut lua, "tool.nope({})", &none);
    assert!(calls.is_empty());
    assert_eq!(
        ran.outcome,
        CellOutcome::Failed {
            summary: "cell[2]:1: no tool named 'nope'; declared tools: add, fail, hang".into()
        }
    );
    let (ran, _) = run_with_host(&mut lua, "tool.add(5)", &none);
    assert_eq!(
        ran.outcome,
        CellOutcome::Failed {
            summary: "cell[3]:1: tool.add: arguments must be a table, not integer".into()
        }
    );
    // Tools are per cell: one without them sees none.
    let ran = run(
        &mut lua,
        "return #ALL_TOOLS, pcall(function() return tool.add end)",
    );
    assert!(
        ran.stdout.starts_with("0\tfalse\t")
            && ran
                .stdout
                .contains("the host declared no tools for this cell"),
        "{ran:?}"
    );
}

#[test]
fn interrupt_breaks_a_tool_wait() {
    let mut lua = engine();
    let interrupt = Interrupt::default();
    let flag = interrupt.flag();
    let raiser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        flag.store(true, Ordering::SeqCst);
    });
    let (ran, calls) = run_with_host(&mut lua, "tool.hang({})", &interrupt);
    raiser.join().unwrap();
    assert_eq!(ran.outcome, CellOutcome::Interrupted, "{ran:?}");
    assert_eq!(calls, ["hang {}"]);
    let (ran, _) = run_with_host(
        &mut lua,
        "return tool.add({a = 40, b = 2}).sum",
        &Interrupt::default(),
    );
    assert_eq!(ran.stdout, "42\n");
}

#[test]
fn tools_are_reachable_by_identifier_and_searchable() {
    let mut lua = engine();
    let (ran, calls) = run_with_host(
        &mut lua,
        "print(tools.add{a = 1}.sum, tool['add']{a = 2}.sum, ALL_TOOLS[1].declaration)\n\
         local found = tools.tool_search{query = 'add'}\n\
         print(#found.tools, found.tools[1].name)\n\
         print(pcall(tools.tool_search, {query = ' '}))\n\
         print(pcall(tools.tool_search, {query = 'x', limit = 0}))",
        &Interrupt::default(),
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "1\t2\tdeclare function add(args: { a?: number }): Promise<unknown>;\n\
         1\tadd\n\
         false\tquery must not be empty\n\
         false\tlimit must be greater than zero\n"
    );
    assert_eq!(calls, [r#"add {"a":1}"#, r#"add {"a":2}"#]);
}
