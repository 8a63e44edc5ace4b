//! Tests of the JavaScript engine, driven through `Engine::execute`.
use super::*;
use cellvisor_ipc::{FromWorker, OutputStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// What one cell produced.
#[derive(Debug)]
pub(super) struct Ran {
    pub(super) outcome: CellOutcome,
    pub(super) stdout: String,
    pub(super) stderr: String,
    displays: Vec<serde_json::Value>,
    /// The bundles of the cell's trailing value (`application/x-cellvisor-value`).
    values: Vec<serde_json::Value>,
    /// The `application/x-cellvisor-status` payloads, in order.
    status: Vec<serde_json::Value>,
    /// Tool calls the cell made: `(name, args)`.
    tool_calls: Vec<(String, serde_json::Value)>,
    /// How much stdout had arrived at each `Yield` frame.
    yields: Vec<usize>,
}

const STATUS_MIME: &str = "application/x-cellvisor-status";

/// Answers a tool call the way the host would.
type Host = dyn Fn(&str, &serde_json::Value) -> Result<String, String> + Send + Sync;

fn tool(name: &str) -> cellvisor_ipc::ToolInfo {
    cellvisor_ipc::ToolInfo {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema_json: r#"{"type":"object"}"#.into(),
    }
}

/// Runs one cell, playing the host on another thread: frames are collected and tool calls
/// answered by `host`.
fn run_full(
    engine: &mut JsEngine,
    code: &str,
    tools: Vec<cellvisor_ipc::ToolInfo>,
    interrupt: &Interrupt,
    host: Arc<Host>,
) -> Ran {
    let (outbox, rx) = Outbox::new(10_000);
    let cell = ExecuteCell {
        cell_id: 7,
        code: code.into(),
        cwd: None,
        tools,
        session_env: Vec::new(),
        env_changes: Vec::new(),
        task: Default::default(),
    };
    let done = Arc::new(AtomicBool::new(false));
    let player = thread::spawn({
        let outbox = outbox.clone();
        let done = Arc::clone(&done);
        move || {
            let mut ran = Ran {
                outcome: CellOutcome::Completed,
                stdout: String::new(),
                stderr: String::new(),
                displays: Vec::new(),
                values: Vec::new(),
                status: Vec::new(),
                tool_calls: Vec::new(),
                yields: Vec::new(),
            };
            loop {
                let frame = match rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(frame) => frame,
                    Err(_) if done.load(Ordering::SeqCst) => match rx.try_recv() {
                        Ok(frame) => frame,
                        Err(_) => return ran,
                    },
                    Err(_) => continue,
                };
                match frame {
                    FromWorker::Output {
                        cell_id: 7,
                        stream,
                        data,
                    } => {
                        let text = String::from_utf8(data).expect("utf-8 output");
                        match stream {
                            OutputStream::Stdout => ran.stdout.push_str(&text),
                            OutputStream::Stderr => ran.stderr.push_str(&text),
                        }
                    }
                    FromWorker::Display {
                        cell_id: 7,
                        bundle_json,
                    } => {
                        let bundle: serde_json::Value =
                            serde_json::from_str(&bundle_json).expect("bundle is JSON");
                        if let Some(value) = bundle.get("application/x-cellvisor-value") {
                            ran.values.push(value.clone());
                            continue;
                        }
                        match bundle.get(STATUS_MIME) {
                            Some(status) => ran.status.push(status.clone()),
                            None => ran.displays.push(bundle),
                        }
                    }
                    FromWorker::ToolCall {
                        cell_id: 7,
                        call_id,
                        name,
                        args_json,
                    } => {
                        let args: serde_json::Value =
                            serde_json::from_str(&args_json).expect("args are JSON");
                        let answer = host(&name, &args);
                        ran.tool_calls.push((name, args));
                        outbox.deliver_tool_result(call_id, answer);
                    }
                    FromWorker::Yield { cell_id: 7 } => ran.yields.push(ran.stdout.len()),
                    other => panic!("unexpected frame {other:?}"),
                }
            }
        }
    });
    let outcome = engine
        .execute(&cell, &outbox, interrupt)
        .expect("the engine survives every cell");
    done.store(true, Ordering::SeqCst);
    let mut ran = player.join().expect("host thread");
    ran.outcome = outcome;
    ran
}

fn no_host() -> Arc<Host> {
    Arc::new(|name: &str, _: &serde_json::Value| Err(format!("no tool {name}")))
}

fn run_with(engine: &mut JsEngine, code: &str, interrupt: &Interrupt) -> Ran {
    run_full(engine, code, Vec::new(), interrupt, no_host())
}

pub(super) fn run(engine: &mut JsEngine, code: &str) -> Ran {
    run_with(engine, code, &Interrupt::default())
}

pub(super) fn engine() -> JsEngine {
    JsEngine::with_limits(None, None).expect("engine starts")
}

pub(super) fn stdout_of(engine: &mut JsEngine, code: &str) -> String {
    let ran = run(engine, code);
    assert_eq!(ran.outcome, CellOutcome::Completed, "{code}: {ran:?}");
    ran.stdout
}

/// Runs `code` and raises the interrupt after a moment, as the runtime would on an `Interrupt`.
fn run_interrupted(engine: &mut JsEngine, code: &str) -> Ran {
    let interrupt = Interrupt::default();
    let flag = interrupt.flag();
    let raiser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        flag.store(true, Ordering::SeqCst);
    });
    let ran = run_with(engine, code, &interrupt);
    raiser.join().expect("raiser thread");
    ran
}

#[test]
fn engine_name_names_quickjs_and_its_version() {
    let name = engine().engine_name();
    assert!(name.starts_with("QuickJS"), "{name}");
    assert!(name.chars().any(|c| c.is_ascii_digit()), "{name}");
}

#[test]
fn declarations_persist_between_cells() {
    let mut js = engine();
    stdout_of(
        &mut js,
        "let x = 2; const y = 3; var w = 4\nfunction f() { return x * y }\nclass K { v() { return 7 } }",
    );
    assert_eq!(stdout_of(&mut js, "f() + new K().v() + w"), "17\n");
    assert_eq!(stdout_of(&mut js, "x = 10; f()"), "30\n");
}

#[test]
fn running_a_cell_again_redeclares_its_bindings() {
    let mut js = engine();
    let cell = "const a = 1; let b = [a]; class C {}\nb";
    assert_eq!(stdout_of(&mut js, cell), "[1]\n");
    assert_eq!(stdout_of(&mut js, cell), "[1]\n");
    assert_eq!(stdout_of(&mut js, "const a = 5; a + b[0]"), "6\n");
}

#[test]
fn console_and_print_write_to_their_streams() {
    let mut js = engine();
    let ran = run(
        &mut js,
        "console.log('a', 1, {b: [1]}, [1, 2], null, undefined, true, 1.5, NaN)\n\
         console.info('i'); console.debug('d'); print('p', 2)\n\
         console.error('e', {x: 1}); console.warn('w')",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed);
    assert_eq!(
        ran.stdout,
        "a 1 {\"b\":[1]} [1,2] null undefined true 1.5 NaN\ni\nd\np 2\n"
    );
    assert_eq!(ran.stderr, "e {\"x\":1}\nw\n");
}

#[test]
fn unserializable_values_fall_back_to_string() {
    let mut js = engine();
    let out = stdout_of(
        &mut js,
        "const cyclic = {}; cyclic.self = cyclic\nconsole.log(cyclic, 10n, Symbol('s'))",
    );
    assert_eq!(out, "[object Object] 10 Symbol(s)\n");
}

#[test]
fn the_trailing_value_is_shown() {
    let mut js = engine();
    assert_eq!(
        stdout_of(&mut js, "let t = [1, 2, 3]; t.map(v => v * 2)"),
        "[2,4,6]\n"
    );
    assert_eq!(stdout_of(&mut js, "'raw string'"), "raw string\n");
    assert_eq!(stdout_of(&mut js, "6 * 7"), "42\n");
    assert_eq!(
        stdout_of(&mut js, "({a: {b: true}})"),
        "{\"a\":{\"b\":true}}\n"
    );
    assert_eq!(
        stdout_of(&mut js, "(function add(a, b) { return a + b })"),
        "function add(a, b) { return a + b }\n"
    );
    assert_eq!(stdout_of(&mut js, "undefined"), "");
    assert_eq!(stdout_of(&mut js, "let quiet = 1"), "");
    assert_eq!(stdout_of(&mut js, "null"), "null\n");
}

#[test]
fn a_trailing_value_is_also_sent_as_its_bundle_for_execute_result() {
    let mut js = engine();
    // Not sent until the host asks: it costs every cell with a value.
    let ran = run(&mut js, "6 * 7");
    assert_eq!(ran.stdout, "42\n");
    assert!(ran.values.is_empty(), "{:?}", ran.values);
    let ask = "Object.defineProperty(globalThis, '__cellvisorSendValues', \
               {value: true, writable: true, configurable: true}); undefined";
    assert_eq!(run(&mut js, ask).stdout, "");
    let ran = run(&mut js, "6 * 7");
    assert_eq!(ran.stdout, "42\n");
    assert_eq!(ran.values, vec![serde_json::json!({"text/plain": "42"})]);
    let ran = run(&mut js, "({a: [1]})");
    let value = serde_json::json!({"application/json": {"a": [1]}, "text/plain": "{\"a\":[1]}"});
    assert_eq!(ran.values, vec![value.clone()]);
    assert_eq!(ran.displays, vec![value]);
    for code in ["console.log(1)", "let quiet = 1", "undefined"] {
        assert!(run(&mut js, code).values.is_empty(), "{code}");
    }
}

#[test]
fn top_level_await_works_and_its_bindings_persist() {
    let mut js = engine();
    assert_eq!(stdout_of(&mut js, "await Promise.resolve(5)"), "5\n");
    stdout_of(
        &mut js,
        "async function f() { await null; return 9 }\nlet a = await f()",
    );
    assert_eq!(stdout_of(&mut js, "a"), "9\n");
    // A trailing promise is awaited.
    assert_eq!(stdout_of(&mut js, "f()"), "9\n");
    // Chains the cell started but did not await still run before it ends.
    assert_eq!(
        stdout_of(
            &mut js,
            "Promise.resolve().then(() => console.log('later')); 1"
        ),
        "1\nlater\n"
    );
}

#[test]
fn display_sends_mime_bundles() {
    let mut js = engine();
    let ran = run(&mut js, "display({k: [1, 2]}); display('hi'); display([1])");
    assert_eq!(ran.outcome, CellOutcome::Completed);
    assert_eq!(ran.stdout, "", "display returns undefined");
    assert_eq!(
        ran.displays,
        vec![
            serde_json::json!({"application/json": {"k": [1, 2]}, "text/plain": "{\"k\":[1,2]}"}),
            serde_json::json!({"text/plain": "hi"}),
            serde_json::json!({"application/json": [1], "text/plain": "[1]"}),
        ]
    );
}

#[test]
fn an_error_reports_its_stack_and_summary() {
    let mut js = engine();
    stdout_of(&mut js, "let kept = 'still here'");
    let ran = run(
        &mut js,
        "function boom() { throw new Error('boom') }\nconsole.log('before')\nboom()",
    );
    assert_eq!(
        ran.outcome,
        CellOutcome::Failed {
            summary: "Error: boom".into()
        }
    );
    assert_eq!(ran.stdout, "before\n");
    assert!(
        ran.stderr.starts_with("Error: boom\n    at boom"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("at <eval>"), "{}", ran.stderr);
    assert!(ran.stderr.ends_with('\n'));
    assert_eq!(stdout_of(&mut js, "kept"), "still here\n");
}

#[test]
fn thrown_values_rejections_and_syntax_errors_fail_the_cell() {
    let mut js = engine();
    let failed = |summary: &str| CellOutcome::Failed {
        summary: summary.into(),
    };
    let ran = run(&mut js, "throw 42");
    assert_eq!(ran.outcome, failed("Uncaught 42"));
    assert_eq!(ran.stderr, "Uncaught 42\n");
    let ran = run(&mut js, "throw {code: 1}");
    assert_eq!(ran.outcome, failed("Uncaught {\"code\":1}"));
    let ran = run(&mut js, "await Promise.reject(new TypeError('nope'))");
    assert_eq!(ran.outcome, failed("TypeError: nope"));
    assert_eq!(ran.stderr.matches("nope").count(), 1, "{ran:?}");
    let ran = run(&mut js, "(async () => { throw new RangeError('late') })()");
    assert_eq!(ran.outcome, failed("RangeError: late"));
    let ran = run(&mut js, "1 +");
    assert!(
        matches!(&ran.outcome, CellOutcome::Failed { summary } if summary.starts_with("SyntaxError")),
        "{ran:?}"
    );
    let ran = run(&mut js, "function deep() { return deep() + 1 } deep()");
    assert_eq!(
        ran.outcome,
        failed("RangeError: Maximum call stack size exceeded")
    );
    let ran = run(&mut js, "Promise.reject(new Error('lost')); 'value'");
    assert_eq!(ran.outcome, failed("Uncaught (in promise) Error: lost"));
    assert_eq!(ran.stdout, "value\n");
    assert!(
        ran.stderr
            .starts_with("Uncaught (in promise) Error: lost\n    at"),
        "{ran:?}"
    );
    let ran = run(
        &mut js,
        "const handled = Promise.reject(1); await null; handled.catch(() => {}); 2",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    let ran = run(&mut js, "await new Promise(() => {})");
    assert!(matches!(ran.outcome, CellOutcome::Failed { .. }), "{ran:?}");
    let ran = run(&mut js, "'a\0b'");
    assert!(matches!(ran.outcome, CellOutcome::Failed { .. }), "{ran:?}");
    assert_eq!(stdout_of(&mut js, "'fine'"), "fine\n");
}

#[test]
fn an_interrupt_stops_busy_loops_and_keeps_state() {
    let mut js = engine();
    stdout_of(&mut js, "let before = 1");
    for code in [
        "globalThis.during = 2; while (true) {}",
        "try { while (true) {} } catch (e) { console.log('caught', e) } finally { console.log('finally') }",
        "for (;;) { try { while (true) {} } catch (e) {} }",
        "await (async () => { while (true) { await null } })()",
        "(async () => { while (true) { await null } })(); 'not awaited'",
    ] {
        let ran = run_interrupted(&mut js, code);
        assert_eq!(ran.outcome, CellOutcome::Interrupted, "{code}: {ran:?}");
        assert!(!ran.stdout.contains("caught"), "{code}: {ran:?}");
    }
    assert_eq!(stdout_of(&mut js, "before + during"), "3\n");
}

#[test]
fn running_out_of_memory_fails_the_cell_and_not_the_engine() {
    let mut js = JsEngine::with_limits(Some(64 * 1024 * 1024), None).expect("engine starts");
    let ran = run(
        &mut js,
        "let a = []; while (true) a.push(new Array(1e6).fill(1))",
    );
    const LIMIT: u64 = 64 * 1024 * 1024;
    match &ran.outcome {
        CellOutcome::OutOfMemory {
            summary,
            limit_bytes,
            used_bytes,
        } => {
            assert!(summary.contains("out of memory"), "{ran:?}");
            assert_eq!(*limit_bytes, LIMIT);
            // The heap was at its limit, give or take the allocation that failed.
            assert!(*used_bytes > LIMIT / 2 && *used_bytes <= LIMIT, "{ran:?}");
        }
        other => panic!("expected out of memory, got {other:?} ({ran:?})"),
    }
    assert!(ran.stderr.contains("out of"), "{}", ran.stderr);
    assert_eq!(stdout_of(&mut js, "1 + 1"), "2\n");
    assert_eq!(stdout_of(&mut js, "a = null; [1, 2].length"), "2\n");
    assert_eq!(
        stdout_of(&mut js, "new Array(1e6).fill(1).length"),
        "1000000\n"
    );
}

#[test]
fn a_small_stack_limit_is_a_range_error() {
    let mut js = JsEngine::with_limits(None, Some(128 * 1024)).expect("engine starts");
    let ran = run(
        &mut js,
        "let depth = 0; function down() { depth++; down() } down()",
    );
    assert_eq!(
        ran.outcome,
        CellOutcome::Failed {
            summary: "RangeError: Maximum call stack size exceeded".into()
        }
    );
    assert_eq!(stdout_of(&mut js, "depth > 10"), "true\n");
}

// ---- preludes, display, return, timers, code mode, tools, modules -------------------------

fn engine_in(dir: &std::path::Path) -> JsEngine {
    JsEngine::with_options(
        None,
        None,
        HostDirs {
            artifact_dir: Some(dir.join("artifacts")),
            store_dir: Some(dir.join("store")),
        },
    )
    .expect("engine starts")
}

fn completed(engine: &mut JsEngine, code: &str) -> Ran {
    let ran = run(engine, code);
    assert_eq!(ran.outcome, CellOutcome::Completed, "{code}: {ran:?}");
    ran
}

fn failed_with(engine: &mut JsEngine, code: &str, needle: &str) -> Ran {
    let ran = run(engine, code);
    match &ran.outcome {
        CellOutcome::Failed { summary } => assert!(summary.contains(needle), "{code}: {ran:?}"),
        other => panic!("{code}: expected a failure, got {other:?}: {ran:?}"),
    }
    ran
}

fn js_string(path: &std::path::Path) -> String {
    serde_json::to_string(&path.display().to_string()).expect("json")
}

#[test]
fn file_preludes_read_write_append_and_report_status() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut js = engine_in(dir.path());
    let file = js_string(&dir.path().join("sub/notes.txt"));
    let ran = completed(
        &mut js,
        &format!(
            "const f = {file}\nawait write(f, 'one\\ntwo\\n')\nawait append(f, 'three\\n')\n\
             print(await read(f)); print(await read(f, 2, 1)); print(await read(f, {{offset: 3, numbered: true}}))"
        ),
    );
    assert_eq!(ran.stdout, "one\ntwo\nthree\n\ntwo\n\n     3\tthree\n\n");
    let path = dir.path().join("sub/notes.txt").display().to_string();
    assert_eq!(
        ran.status,
        vec![
            serde_json::json!({"op": "write", "path": path, "bytes": 8}),
            serde_json::json!({"op": "append", "path": path, "bytes": 6}),
            serde_json::json!({"op": "read", "path": path, "lines": 3, "offset": 1}),
            serde_json::json!({"op": "read", "path": path, "lines": 1, "offset": 2}),
            serde_json::json!({"op": "read", "path": path, "lines": 1, "offset": 3}),
        ]
    );
    assert!(ran.displays.is_empty(), "{ran:?}");
    // The file helpers return promises.
    assert_eq!(
        completed(&mut js, "read(f) instanceof Promise").stdout,
        "true\n"
    );
    let ran = failed_with(
        &mut js,
        "await read(f + '.missing')",
        "Error: read: No such file or directory: '",
    );
    assert!(ran.status.is_empty());
    failed_with(
        &mut js,
        "await read(42)",
        "TypeError: read: path must be a string",
    );
    failed_with(
        &mut js,
        "await read(f, 0)",
        "TypeError: read: offset must be an integer >= 1",
    );
    failed_with(
        &mut js,
        "await write(f, {})",
        "TypeError: write: content must be a string",
    );
    let caught = completed(
        &mut js,
        "await read('/nonexistent/x').then(() => 'no', (e) => e instanceof Error)",
    );
    assert_eq!(caught.stdout, "true\n");
}

#[test]
fn text_preludes_sort_uniq_counter_and_diff() {
    let mut js = engine();
    let ran = completed(
        &mut js,
        "print(JSON.stringify(await sort('b\\na\\nc\\na\\n')))\n\
         print(JSON.stringify(await sort('b\\na\\nb', true, true)))\n\
         print(JSON.stringify(await uniq('a\\na\\nb\\na\\n')))\n\
         print(JSON.stringify(await uniq('a\\na\\nb', true)))\n\
         print(JSON.stringify(await counter(['x', 'y', 'x', 'z', 'y', 'x'])))\n\
         print(JSON.stringify(await counter('b\\na\\nb\\na\\nc', 2)))\n\
         print(JSON.stringify(await counter(['a', 'b', 'b'], {reverse: true})))\n\
         print(await diff('a\\nb\\n', 'a\\nc\\n'))\n\
         JSON.stringify(await diff('same', 'same'))",
    );
    assert_eq!(
        ran.stdout,
        "\"a\\na\\nb\\nc\\n\"\n\"b\\na\"\n\"a\\nb\\na\\n\"\n\"      2 a\\n      1 b\"\n\
         [[\"x\",3],[\"y\",2],[\"z\",1]]\n[[\"b\",2],[\"a\",2]]\n[[\"a\",1],[\"b\",2]]\n\
         --- a\n+++ b\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\"\"\n"
    );
    let ops: Vec<_> = ran.status.iter().map(|s| s["op"].clone()).collect();
    assert_eq!(
        ops,
        ["sort", "sort", "uniq", "uniq", "counter", "counter", "counter", "diff", "diff"]
    );
    assert_eq!(ran.status[0], serde_json::json!({"op": "sort", "lines": 4}));
    assert_eq!(
        ran.status[4],
        serde_json::json!({"op": "counter", "items": 3})
    );
    assert_eq!(
        ran.status[7],
        serde_json::json!({"op": "diff", "added": 1, "removed": 1})
    );
    failed_with(
        &mut js,
        "await counter(5)",
        "TypeError: counter: items must be",
    );
    failed_with(
        &mut js,
        "await sort('a', 'yes')",
        "TypeError: sort: reverse must be",
    );
}

#[test]
fn tree_env_and_output_preludes() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("artifacts")).expect("dir");
    std::fs::create_dir_all(dir.path().join("t/a")).expect("dir");
    std::fs::write(dir.path().join("t/a/x.txt"), "").expect("write");
    std::fs::write(dir.path().join("artifacts/out-1.txt"), "spilled").expect("write");
    let mut js = engine_in(dir.path());
    let root = js_string(&dir.path().join("t"));
    let ran = completed(&mut js, &format!("await tree({root}, 1)"));
    let shown = dir.path().join("t").display().to_string();
    assert_eq!(ran.stdout, format!("{shown}\n└── a/\n"));
    assert_eq!(
        ran.status,
        vec![serde_json::json!({"op": "tree", "path": shown, "entries": 1})]
    );
    let ran = completed(
        &mut js,
        "await env('CELLVISOR_JS_TEST_VAR', 'v1')\n\
         const all = await env();\n\
         [await env('CELLVISOR_JS_TEST_VAR'), all.CELLVISOR_JS_TEST_VAR, await env('CELLVISOR_JS_UNSET_VAR')]",
    );
    assert_eq!(ran.stdout, "[\"v1\",\"v1\",null]\n");
    assert_eq!(
        ran.status,
        vec![
            serde_json::json!({"op": "env", "key": "CELLVISOR_JS_TEST_VAR"}),
            serde_json::json!({"op": "env"}),
            serde_json::json!({"op": "env", "key": "CELLVISOR_JS_TEST_VAR"}),
            serde_json::json!({"op": "env", "key": "CELLVISOR_JS_UNSET_VAR"}),
        ]
    );
    let ran = completed(&mut js, "await output('out-1')");
    assert_eq!(ran.stdout, "spilled\n");
    assert_eq!(
        ran.status,
        vec![serde_json::json!({"op": "output", "ids": ["out-1"], "bytes": 7})]
    );
    // Several ids: joined with newlines; `bytes` counts the outputs, not the separators.
    std::fs::write(dir.path().join("artifacts/out-2.txt"), "more").expect("write");
    let ran = completed(&mut js, "await output('out-1', 'out-2')");
    assert_eq!(ran.stdout, "spilled\nmore\n");
    assert_eq!(
        ran.status,
        vec![serde_json::json!({"op": "output", "ids": ["out-1", "out-2"], "bytes": 11})]
    );
    // The same words as Lua and Python for the same failures.
    let file = dir.path().join("t/a/x.txt");
    failed_with(
        &mut js,
        &format!("await tree({})", js_string(&file)),
        &format!("tree: Not a directory: '{}'", file.display()),
    );
    failed_with(
        &mut js,
        &format!("await read({})", js_string(&dir.path().join("t"))),
        &format!("read: Is a directory: '{}'", dir.path().join("t").display()),
    );
    failed_with(
        &mut js,
        "await output('nope')",
        "output: unknown output id 'nope'",
    );
    failed_with(
        &mut js,
        "await output('../x')",
        "output: invalid output id '../x'",
    );
}

#[test]
fn the_trailing_value_and_display_send_rich_bundles() {
    let mut js = engine();
    let ran = completed(&mut js, "({k: [1, 2]})");
    assert_eq!(ran.stdout, "{\"k\":[1,2]}\n");
    assert_eq!(
        ran.displays,
        vec![serde_json::json!({"application/json": {"k": [1, 2]}, "text/plain": "{\"k\":[1,2]}"})]
    );
    let ran = completed(&mut js, "42");
    assert!(ran.displays.is_empty(), "scalars have no rich form");
    // A bundle too big for a frame is not sent; the text still is.
    let ran = completed(
        &mut js,
        "const big = ['x'.repeat(9 * 1024 * 1024)]; big.length",
    );
    assert_eq!(ran.stdout, "1\n");
    let ran = completed(&mut js, "big");
    assert!(ran.displays.is_empty());
    assert_eq!(ran.stdout.len(), 9 * 1024 * 1024 + 5);
    let ran = completed(&mut js, "display(big)");
    assert!(ran.displays.is_empty());
    assert!(ran.stderr.contains("was not sent"), "{}", ran.stderr);
    let ran = completed(
        &mut js,
        "display({type: 'image', data: 'data:image/png;base64,AAAA', mimeType: 'image/png'})",
    );
    assert_eq!(
        ran.displays,
        vec![serde_json::json!({"image/png": "AAAA", "text/plain": "<image image/png>"})]
    );
}

#[test]
fn a_top_level_return_gives_the_cells_value() {
    let mut js = engine();
    let ran = completed(
        &mut js,
        "const a = 20\nif (a > 10) return a * 2\nprint('not reached')\na",
    );
    assert_eq!(ran.stdout, "40\n");
    assert_eq!(completed(&mut js, "return").stdout, "");
    assert_eq!(
        completed(
            &mut js,
            "try { return 'r' } finally { print('finally runs') }"
        )
        .stdout,
        "finally runs\nr\n"
    );
    assert_eq!(
        completed(&mut js, "try { return 1 } catch (e) { print('caught') }").stdout,
        "1\n"
    );
    assert_eq!(
        completed(
            &mut js,
            "for (const x of [1, 2, 3]) { if (x == 2) { return {x} } }"
        )
        .stdout,
        "{\"x\":2}\n"
    );
    // Declarations of a cell that returns still persist, and const can be declared again.
    completed(
        &mut js,
        "const kept = 5\nfunction helper() { return kept + 1 }\nreturn helper()",
    );
    assert_eq!(completed(&mut js, "const kept = 6; helper()").stdout, "7\n");
    assert_eq!(
        completed(&mut js, "return Promise.resolve(9)").stdout,
        "9\n"
    );
    assert_eq!(
        completed(&mut js, "const f = () => { return 3 }\nf()").stdout,
        "3\n"
    );
}

#[test]
fn timers_run_in_order_and_end_with_the_cell() {
    let mut js = engine();
    let ran = completed(
        &mut js,
        "const order = []\n\
         setTimeout(() => order.push('c'), 30)\n\
         setTimeout(() => order.push('a'), 0)\n\
         setTimeout((x) => order.push(x), 0, 'b')\n\
         const dropped = setTimeout(() => order.push('never'), 5); clearTimeout(dropped)\n\
         let n = 0; const tick = setInterval(() => { order.push('i' + ++n); if (n == 3) clearInterval(tick) }, 1)\n\
         await new Promise((resolve) => setTimeout(resolve, 60))\n\
         order.join(',')",
    );
    let order = ran.stdout.trim().to_string();
    assert!(order.starts_with("a,b,"), "{order}");
    assert!(order.ends_with(",c"), "{order}");
    assert_eq!(order.matches('i').count(), 3, "{order}");
    assert!(!order.contains("never"), "{order}");
    // A timer still pending when the cell's value is known keeps the cell alive: it fires
    // within the cell, after the value is shown.
    let ran = completed(
        &mut js,
        "globalThis.late = 0; setTimeout(() => { late = 1; text('later') }, 20); 'scheduled'",
    );
    assert_eq!(ran.stdout, "scheduled\nlater\n");
    assert_eq!(stdout_of(&mut js, "late"), "1\n");
    // A cleared one does not.
    let ran = completed(
        &mut js,
        "const t = setTimeout(() => text('never'), 10); clearTimeout(t); 'cleared'",
    );
    assert_eq!(ran.stdout, "cleared\n");
    // A throwing timer fails the cell.
    failed_with(
        &mut js,
        "await new Promise(() => setTimeout(() => { throw new Error('in timer') }, 1))",
        "Error: in timer",
    );
}

#[test]
fn an_interrupt_stops_a_cell_waiting_on_timers() {
    let mut js = engine();
    let ran = run_interrupted(&mut js, "await new Promise((r) => setTimeout(r, 60000))");
    assert_eq!(ran.outcome, CellOutcome::Interrupted, "{ran:?}");
    let ran = run_interrupted(
        &mut js,
        "setInterval(() => {}, 0); await new Promise(() => {})",
    );
    assert_eq!(ran.outcome, CellOutcome::Interrupted, "{ran:?}");
    assert_eq!(stdout_of(&mut js, "1"), "1\n");
}

#[test]
fn yield_control_comes_after_the_output_before_it_and_the_cell_goes_on() {
    let mut js = engine();
    let ran = completed(
        &mut js,
        "text('a'); yield_control(); await new Promise((r) => setTimeout(r, 10)); text('b'); \
         yield_control(); 'end'",
    );
    assert_eq!(ran.stdout, "a\nb\nend\n");
    assert_eq!(ran.yields, [2, 4]);
}

#[test]
fn code_mode_text_image_and_notify() {
    let mut js = engine();
    let ran = completed(
        &mut js,
        "text('raw'); text({a: 1}); text('line\\n'); notify('halfway'); notify({n: 1}); \
         image('data:image/png;base64,iVBO'); image('data:image/jpeg;base64,/9j/', 'high'); \
         audio('data:audio/wav;base64,UklG')",
    );
    assert_eq!(ran.stdout, "raw\n{\"a\":1}\nline\n");
    assert_eq!(
        ran.status,
        vec![
            serde_json::json!({"op": "notify", "message": "halfway"}),
            serde_json::json!({"op": "notify", "message": "{\"n\":1}"})
        ]
    );
    assert_eq!(
        ran.displays,
        vec![
            serde_json::json!({"image/png": "iVBO", "text/plain": "<image image/png>"}),
            serde_json::json!({"image/jpeg": "/9j/", "text/plain": "<image image/jpeg>",
                "application/x-cellvisor-image-detail": "high"}),
            serde_json::json!({"audio/wav": "UklG", "text/plain": "<audio audio/wav>"}),
        ]
    );
    let forwarded = completed(
        &mut js,
        "image({type: 'image', data: 'R0lG', mimeType: 'image/gif'})",
    );
    assert_eq!(
        forwarded.displays,
        vec![serde_json::json!({"image/gif": "R0lG", "text/plain": "<image image/gif>"})]
    );
    failed_with(
        &mut js,
        "notify('  ')",
        "notify: the message must not be empty",
    );
    failed_with(
        &mut js,
        "image('data:image/png;base64,iVBO', 'huge')",
        "image: detail must be one of auto, low, high, original",
    );
    failed_with(
        &mut js,
        "audio('data:image/png;base64,iVBO')",
        "TypeError: audio: expected a data URL",
    );
    failed_with(
        &mut js,
        "image('http://x/y.png')",
        "TypeError: image: expected a data URL",
    );
}

#[test]
fn store_and_load_persist_json_on_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut js = engine_in(dir.path());
    let ran = completed(&mut js, "store('results', {n: [1, 2], s: 'x'})");
    assert_eq!(
        ran.status,
        vec![serde_json::json!({"op": "store", "key": "results", "bytes": 19})]
    );
    let saved = std::fs::read_to_string(dir.path().join("store/results.json")).expect("file");
    assert_eq!(saved, "{\"n\":[1,2],\"s\":\"x\"}");
    // Another engine (a restarted worker) sees it.
    let mut fresh = engine_in(dir.path());
    assert_eq!(
        completed(&mut fresh, "(await load('results')).n[1]").stdout,
        "2\n"
    );
    assert_eq!(
        completed(&mut fresh, "String(load('missing'))").stdout,
        "undefined\n"
    );
    // Synchronous, as the code-mode API has them: the counter works without await.
    let counter = "store('c', (load('c') ?? 0) + 1); text(load('c'))";
    assert_eq!(completed(&mut fresh, counter).stdout, "1\n");
    assert_eq!(completed(&mut fresh, counter).stdout, "2\n");
    failed_with(&mut js, "await store('../x', 1)", "invalid key");
    failed_with(
        &mut js,
        "await store('f', {g() {}})",
        "value.g is a function",
    );
    failed_with(
        &mut js,
        "await store('u', undefined)",
        "the value is undefined",
    );
    failed_with(&mut js, "await store('b', [1n])", "value[0] is a BigInt");
    failed_with(
        &mut js,
        "const c = {}; c.c = c; await store('c', c)",
        "value.c is a cycle",
    );
}

/// Issue 27 item 7: a stored number beyond a double (a 5000-digit integer, as Python can
/// write, or 1e400) is refused by `load`, as Python and Lua refuse it, not read as Infinity.
#[test]
fn load_refuses_a_number_beyond_a_double() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    let huge = format!("{{\"n\": [1, {}]}}", "7".repeat(5000));
    std::fs::write(store.join("huge.json"), huge).expect("write");
    std::fs::write(store.join("exp.json"), "[-1e400]").expect("write");
    // A long run of digits inside a string, or a small exponent, loads as it is.
    let digits = format!("{{\"s\": \"{}\", \"x\": 1e300}}", "7".repeat(400));
    std::fs::write(store.join("fine.json"), digits).expect("write");
    let mut js = engine_in(dir.path());
    for key in ["huge", "exp"] {
        let ran = failed_with(
            &mut js,
            &format!("text(String(load('{key}')))"),
            &format!("load: the stored value of \"{key}\" is not valid JSON (number out of range"),
        );
        assert!(!ran.stdout.contains("Infinity"), "{ran:?}");
    }
    assert_eq!(
        completed(
            &mut js,
            "const f = load('fine'); text(f.s.length + ' ' + f.x)"
        )
        .stdout,
        "400 1e+300\n"
    );
}

#[test]
fn exit_ends_the_cell_successfully() {
    let mut js = engine();
    let ran = completed(&mut js, "print('before'); exit(); print('after')");
    assert_eq!(ran.stdout, "before\n");
    let ran = completed(
        &mut js,
        "try { exit() } catch (e) { print('swallowed') }\nprint('after')\nwhile (true) {}",
    );
    assert_eq!(ran.stdout, "", "{ran:?}");
    // Nothing after exit() runs to any effect: not catch, not finally, not an outer catch.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut js = engine_in(dir.path());
    completed(
        &mut js,
        "globalThis.flag = 'before'; store('kept', 1)\n\
         try { try { exit() } finally { flag = 'inner-finally' } }\n\
         catch (e) { flag = 'catch-ran' } finally { flag = 'finally-ran' }\n\
         flag = 'after'",
    );
    assert_eq!(
        stdout_of(&mut js, "[flag, load('kept')].join()"),
        "before,1\n"
    );
    completed(
        &mut js,
        "async function f() { try { await null; exit() } catch { flag = 'async-catch' } }\n\
         try { await f() } catch { flag = 'outer-catch' }",
    );
    assert_eq!(stdout_of(&mut js, "flag"), "before\n");
    // exit() also ends a cell kept alive by timers.
    let ran = completed(
        &mut js,
        "setTimeout(() => exit(), 5); setTimeout(() => text('never'), 200); 'v'",
    );
    assert_eq!(ran.stdout, "v\n");
    let file = js_string(&dir.path().join("after-exit.txt"));
    completed(
        &mut js,
        &format!("try {{ exit() }} catch {{ await write({file}, 'no') }} finally {{ print('f') }}"),
    );
    assert!(!dir.path().join("after-exit.txt").exists());
    let ran = completed(
        &mut js,
        "await new Promise((r) => setTimeout(r, 1)); exit(); 5",
    );
    assert_eq!(ran.stdout, "");
    assert_eq!(stdout_of(&mut js, "'next cell runs'"), "next cell runs\n");
}

fn echo_host() -> Arc<Host> {
    Arc::new(|name: &str, args: &serde_json::Value| match name {
        "echo" => Ok(serde_json::json!({"echoed": args}).to_string()),
        "slow" => {
            thread::sleep(Duration::from_millis(30));
            Ok("\"slow done\"".into())
        }
        _ => Err(format!("the tool {name} broke")),
    })
}

#[test]
fn tools_round_trip_through_the_host() {
    let mut js = engine();
    let tools = vec![tool("echo"), tool("slow"), tool("broken")];
    let ran = run_full(
        &mut js,
        "const r = await tool.echo({q: 1})\n\
         const [a, b] = await Promise.all([tools.slow(), tool.echo([2])])\n\
         print(JSON.stringify(r), a, JSON.stringify(b))\n\
         try { await tool.broken({}) } catch (e) { print(e instanceof Error, e.message) }\n\
         try { await tool.nope() } catch (e) { print(e.message) }\n\
         ALL_TOOLS.map((t) => t.name + ':' + t.input_schema.type).join(' ')",
        tools,
        &Interrupt::default(),
        echo_host(),
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "{\"echoed\":{\"q\":1}} slow done {\"echoed\":[2]}\n\
         true tool \"broken\" failed: the tool broken broke\n\
         unknown tool \"nope\": the declared tools are: echo, slow, broken\n\
         echo:object slow:object broken:object\n"
    );
    let names: Vec<_> = ran
        .tool_calls
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, ["echo", "slow", "echo", "broken"]);
    // Tools are per cell: the next cell declares none.
    let ran = run(&mut js, "await tool.echo({})");
    assert!(
        matches!(&ran.outcome, CellOutcome::Failed { summary } if summary.contains("this request declares no tools")),
        "{ran:?}"
    );
    assert_eq!(stdout_of(&mut js, "ALL_TOOLS.length"), "0\n");
}

#[test]
fn tool_names_with_dashes_and_dots_declarations_and_search() {
    let mut js = engine();
    let list_dir = cellvisor_ipc::ToolInfo {
        name: "list-dir".into(),
        description: "Lists a directory".into(),
        input_schema_json: r#"{"type":"object","properties":{"path":{"type":"string"},"depth":{"type":"integer"}},"required":["path"]}"#.into(),
    };
    let search = cellvisor_ipc::ToolInfo {
        name: "github.search_issues".into(),
        description: "Searches issues on GitHub".into(),
        input_schema_json: r#"{"type":"object","properties":{"q":{"type":"string"}}}"#.into(),
    };
    let host: Arc<Host> = Arc::new(|name: &str, args: &serde_json::Value| {
        Ok(serde_json::json!({"tool": name, "args": args}).to_string())
    });
    let ran = run_full(
        &mut js,
        "text(await tools['list-dir']({path: '.'}))\n\
         text(await tools.list_dir({path: 'src'}))\n\
         text(await tools.github_search_issues({q: 'x'}))\n\
         text(ALL_TOOLS.map((t) => t.declaration).join('\\n'))\n\
         text(await tools.tool_search({query: 'issues'}))\n\
         text(await tools.tool_search({query: 'list_dir', limit: 5}))\n\
         for (const bad of [{query: ' '}, {query: 'x', limit: 0}]) {\n\
           try { await tools.tool_search(bad) } catch (e) { text(e.message) }\n\
         }",
        vec![list_dir, search],
        &Interrupt::default(),
        host,
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "{\"args\":{\"path\":\".\"},\"tool\":\"list-dir\"}\n\
         {\"args\":{\"path\":\"src\"},\"tool\":\"list-dir\"}\n\
         {\"args\":{\"q\":\"x\"},\"tool\":\"github.search_issues\"}\n\
         declare function list_dir(args: { path: string; depth?: number }): Promise<unknown>;\n\
         declare function github_search_issues(args: { q?: string }): Promise<unknown>;\n\
         {\"tools\":[{\"name\":\"github.search_issues\",\"description\":\"Searches issues on GitHub\"}]}\n\
         {\"tools\":[{\"name\":\"list-dir\",\"description\":\"Lists a directory\"}]}\n\
         query must not be empty\n\
         limit must be greater than zero\n"
    );
}

#[test]
fn an_interrupt_stops_a_cell_waiting_on_a_tool() {
    let mut js = engine();
    let interrupt = Interrupt::default();
    let flag = interrupt.flag();
    let raiser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        flag.store(true, Ordering::SeqCst);
    });
    // The host answers late; a cell the interrupt ended never sees the answer.
    let late: Arc<Host> = Arc::new(|_: &str, _: &serde_json::Value| {
        thread::sleep(Duration::from_millis(400));
        Ok("1".into())
    });
    let ran = run_full(
        &mut js,
        "const answer = await tool.wait({}); console.log('answered', answer)",
        vec![tool("wait")],
        &interrupt,
        late,
    );
    raiser.join().expect("raiser");
    assert_eq!(ran.outcome, CellOutcome::Interrupted, "{ran:?}");
    assert!(!ran.stdout.contains("answered"), "{ran:?}");
    assert_eq!(stdout_of(&mut js, "2"), "2\n");
}

#[test]
fn modules_import_statically_and_dynamically_and_reload_edits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lib = dir.path().join("lib.js");
    std::fs::write(
        &lib,
        "import { twice } from './helpers/math.js'\nexport const four = twice(2)\nexport default 'lib v1'\n",
    )
    .expect("write");
    std::fs::create_dir_all(dir.path().join("helpers")).expect("dir");
    std::fs::write(
        dir.path().join("helpers/math.js"),
        "export function twice(x) { return x * 2 }\n",
    )
    .expect("write");
    let mut js = engine();
    let spec = js_string(&lib);
    assert_eq!(
        completed(
            &mut js,
            &format!("import name, {{ four as f }} from {spec}\nimport * as all from {spec}\n[name, f, all.four]")
        )
        .stdout,
        "[\"lib v1\",4,4]\n"
    );
    // The bindings persist, and the cell can run again.
    assert_eq!(completed(&mut js, "name").stdout, "lib v1\n");
    assert_eq!(
        completed(&mut js, &format!("import name from {spec}\nname")).stdout,
        "lib v1\n"
    );
    // An edit is picked up by the next import.
    std::fs::write(&lib, "export default 'lib v2, longer'\n").expect("write");
    assert_eq!(
        completed(&mut js, &format!("(await import({spec})).default")).stdout,
        "lib v2, longer\n"
    );
    // Packages in node_modules, imported from a module in the project.
    let package = dir.path().join("node_modules/esm-pkg");
    std::fs::create_dir_all(package.join("dist")).expect("dir");
    std::fs::write(
        package.join("package.json"),
        r#"{"name": "esm-pkg", "exports": {".": {"require": "./dist/x.cjs", "import": "./dist/x.mjs"}}}"#,
    )
    .expect("write");
    std::fs::write(
        package.join("dist/x.mjs"),
        "export const hello = 'from esm-pkg'\n",
    )
    .expect("write");
    let cjs = dir.path().join("node_modules/cjs-only");
    std::fs::create_dir_all(&cjs).expect("dir");
    std::fs::write(
        cjs.join("package.json"),
        r#"{"name": "cjs-only", "main": "index.js"}"#,
    )
    .expect("write");
    std::fs::write(
        cjs.join("index.js"),
        "module.exports = { a: require('x') }\n",
    )
    .expect("write");
    let uses = dir.path().join("uses.js");
    std::fs::write(&uses, "export { hello } from 'esm-pkg'\n").expect("write");
    assert_eq!(
        completed(
            &mut js,
            &format!("(await import({})).hello", js_string(&uses))
        )
        .stdout,
        "from esm-pkg\n"
    );
    let uses_cjs = dir.path().join("uses-cjs.js");
    std::fs::write(&uses_cjs, "import x from 'cjs-only'\nexport default x\n").expect("write");
    failed_with(
        &mut js,
        &format!("await import({})", js_string(&uses_cjs)),
        "CommonJS",
    );
    failed_with(&mut js, "await import('node:http')", "Node.js built-in");
    failed_with(&mut js, "import { connect } from 'net'", "Node.js built-in");
    let missing = js_string(&dir.path().join("missing.js"));
    let ran = failed_with(
        &mut js,
        &format!("import m from {missing}"),
        "cannot find module",
    );
    assert!(ran.stderr.contains("missing.js.js"), "{}", ran.stderr);
    failed_with(
        &mut js,
        "await import('no-such-package-anywhere')",
        "cannot find package",
    );
}
