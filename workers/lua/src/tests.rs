use super::*;
use cellvisor_ipc::FromWorker;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

/// What one cell produced.
#[derive(Debug)]
struct Ran {
    outcome: CellOutcome,
    stdout: String,
    stderr: String,
    displays: Vec<Json>,
    /// The bundles of the cell's trailing values (`application/x-cellvisor-value`).
    values: Vec<Json>,
}

pub(super) fn engine() -> LuaEngine {
    LuaEngine::with_memory_limit(None).expect("engine starts")
}

fn run_with(engine: &mut LuaEngine, code: &str, interrupt: &Interrupt) -> Ran {
    let (outbox, rx) = Outbox::new(10_000);
    let cell = ExecuteCell {
        cell_id: 7,
        code: code.to_string(),
        cwd: None,
        tools: Vec::new(),
        session_env: Vec::new(),
        env_changes: Vec::new(),
        task: Default::default(),
    };
    let outcome = engine
        .execute(&cell, &outbox, interrupt)
        .expect("engine survives");
    let mut ran = Ran {
        outcome,
        stdout: String::new(),
        stderr: String::new(),
        displays: Vec::new(),
        values: Vec::new(),
    };
    for frame in rx.try_iter() {
        match frame {
            FromWorker::Output {
                cell_id,
                stream,
                data,
            } => {
                assert_eq!(cell_id, 7);
                let text = String::from_utf8_lossy(&data);
                match stream {
                    OutputStream::Stdout => ran.stdout.push_str(&text),
                    OutputStream::Stderr => ran.stderr.push_str(&text),
                }
            }
            FromWorker::Display {
                cell_id,
                bundle_json,
            } => {
                assert_eq!(cell_id, 7);
                let bundle: Json = serde_json::from_str(&bundle_json).expect("bundle is JSON");
                match bundle.get("application/x-cellvisor-value") {
                    Some(value) => ran.values.push(value.clone()),
                    None => ran.displays.push(bundle),
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    ran
}

fn run(engine: &mut LuaEngine, code: &str) -> Ran {
    run_with(engine, code, &Interrupt::default())
}

pub(super) fn completed(engine: &mut LuaEngine, code: &str) -> String {
    let ran = run(engine, code);
    assert_eq!(ran.outcome, CellOutcome::Completed, "{code}: {ran:?}");
    ran.stdout
}

fn failed(engine: &mut LuaEngine, code: &str) -> (String, Ran) {
    let ran = run(engine, code);
    match &ran.outcome {
        CellOutcome::Failed { summary } => (summary.clone(), ran),
        other => panic!("{code}: expected a failure, got {other:?} ({ran:?})"),
    }
}

/// Runs `code`, raising the interrupt flag from another thread after a short delay.
fn interrupted(engine: &mut LuaEngine, code: &str) -> Ran {
    let interrupt = Interrupt::default();
    let flag = interrupt.flag();
    let raiser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        flag.store(true, Ordering::SeqCst);
    });
    let ran = run_with(engine, code, &interrupt);
    raiser.join().expect("raiser thread");
    assert_eq!(ran.outcome, CellOutcome::Interrupted, "{code}: {ran:?}");
    ran
}

#[test]
fn engine_name_is_the_lua_version() {
    assert_eq!(engine().engine_name(), "Lua 5.4");
}

#[test]
fn globals_persist_between_cells() {
    let mut lua = engine();
    assert_eq!(completed(&mut lua, "x = 41"), "");
    assert_eq!(completed(&mut lua, "x + 1"), "42\n");
    completed(&mut lua, "function double(n) return n * 2 end");
    assert_eq!(completed(&mut lua, "double(x)"), "82\n");
}

#[test]
fn print_and_io_write_go_to_stdout() {
    let mut lua = engine();
    assert_eq!(
        completed(&mut lua, r#"print("a", 1, nil, true, 2.5)"#),
        "a\t1\tnil\ttrue\t2.5\n"
    );
    assert_eq!(
        completed(&mut lua, r#"io.write("x", 1, " ", 2.0, "\n")"#),
        "x1 2\n"
    );
    assert_eq!(
        completed(&mut lua, r#"io.stdout:write("method"):write("-chained\n")"#),
        "method-chained\n"
    );
    let ran = run(&mut lua, r#"io.stderr:write("oops\n")"#);
    assert_eq!(ran.outcome, CellOutcome::Completed);
    assert_eq!(ran.stderr, "oops\n");
    assert_eq!(completed(&mut lua, "print()"), "\n");
}

#[test]
fn a_trailing_value_is_also_sent_as_its_bundle_for_execute_result() {
    let mut lua = engine();
    // Not sent until the host asks: it costs every cell with a value.
    let ran = run(&mut lua, "1 + 1");
    assert_eq!(ran.stdout, "2\n");
    assert!(ran.values.is_empty(), "{:?}", ran.values);
    assert_eq!(run(&mut lua, "__cellvisor_send_values = true").stdout, "");
    let ran = run(&mut lua, "1 + 1");
    assert_eq!(ran.stdout, "2\n");
    assert_eq!(ran.values, vec![serde_json::json!({"text/plain": "2"})]);
    let ran = run(&mut lua, r#"1, "two""#);
    assert_eq!(
        ran.values,
        vec![serde_json::json!({"text/plain": "1\ttwo"})]
    );
    let ran = run(&mut lua, "{a = 1}");
    assert_eq!(
        ran.values,
        vec![serde_json::json!({"text/plain": "{\"a\":1}", "application/json": {"a": 1}})]
    );
    assert_eq!(
        ran.displays.len(),
        1,
        "the table still goes out as a display"
    );
    assert!(run(&mut lua, "print('side effect')").values.is_empty());
    assert!(run(&mut lua, "local x = 1").values.is_empty());
}

#[test]
fn trailing_values_are_shown() {
    let mut lua = engine();
    assert_eq!(completed(&mut lua, "1 + 1"), "2\n");
    assert_eq!(completed(&mut lua, r#"1, "two", 3.0"#), "1\ttwo\t3.0\n");
    assert_eq!(completed(&mut lua, "nil"), "nil\n");
    assert_eq!(completed(&mut lua, "print('side effect')"), "side effect\n");
    assert_eq!(completed(&mut lua, "{1, 2, 3}"), "[1,2,3]\n");
    assert_eq!(
        completed(&mut lua, "{b = {true, 'x'}, a = 1}"),
        "{\"a\":1,\"b\":[true,\"x\"]}\n"
    );
    assert_eq!(completed(&mut lua, "{}"), "{}\n");
    assert_eq!(
        completed(&mut lua, "{1, 2, x = 3}"),
        "{\"1\":1,\"2\":2,\"x\":3}\n"
    );
    assert!(completed(&mut lua, "{f = print}").starts_with("table: "));
    assert!(completed(&mut lua, "print").starts_with("function: "));
    assert!(completed(&mut lua, "function() end").starts_with("function: "));
    assert_eq!(
        completed(
            &mut lua,
            "setmetatable({}, {__tostring = function() return 'custom' end})"
        ),
        "custom\n"
    );
    assert_eq!(completed(&mut lua, "local y = 5\nreturn y * 2"), "10\n");
    assert_eq!(
        completed(&mut lua, "1, 2; -- trailing semicolon and comment"),
        "1\t2\n"
    );
    assert_eq!(completed(&mut lua, "select('#', nil, nil)"), "2\n");
    assert!(completed(&mut lua, "local t = {} t.self = t return t").starts_with("table: "));
}

#[test]
fn display_sends_mime_bundles() {
    let mut lua = engine();
    let ran = run(
        &mut lua,
        r#"display({1, 2, {a = true}}) display("hi") display(print) display({name = "x y"})"#,
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(ran.stdout, "", "display returns nil");
    assert_eq!(ran.displays.len(), 4);
    assert_eq!(
        ran.displays[0],
        serde_json::json!({"application/json": [1, 2, {"a": true}], "text/plain": "{1, 2, {a = true}}"})
    );
    assert_eq!(ran.displays[1], serde_json::json!({"text/plain": "hi"}));
    assert!(ran.displays[2]["text/plain"]
        .as_str()
        .is_some_and(|text| text.starts_with("function: ")));
    assert!(ran.displays[2].get("application/json").is_none());
    assert_eq!(
        ran.displays[3]["text/plain"],
        serde_json::json!(r#"{name = "x y"}"#)
    );
}

#[test]
fn errors_report_message_and_traceback() {
    let mut lua = engine();
    let (summary, ran) = failed(&mut lua, r#"error("boom")"#);
    assert_eq!(summary, "cell[1]:1: boom");
    assert!(
        ran.stderr.starts_with("cell[1]:1: boom\n"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("stack traceback:"), "{}", ran.stderr);
    assert!(ran.stderr.ends_with('\n'));

    completed(&mut lua, "function explode(t) return t.field.sub end");
    let (summary, ran) = failed(&mut lua, "local a = 1\nexplode({})");
    assert!(
        summary.starts_with("cell[2]:1: attempt to index a nil value"),
        "{summary}"
    );
    assert!(
        ran.stderr.contains("in function 'explode'"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("cell[3]:2: in main chunk"),
        "{}",
        ran.stderr
    );
    let (_, ran) = failed(&mut lua, "explode({})");
    assert!(
        ran.stderr.contains("cell[4]:1: in main chunk"),
        "{}",
        ran.stderr
    );

    let (summary, _) = failed(&mut lua, "x = = 1");
    assert!(summary.starts_with("cell[5]:1:"), "{summary}");
    assert!(summary.contains("unexpected symbol"), "{summary}");

    let (summary, _) = failed(&mut lua, "error({code = 1})");
    assert!(summary.starts_with("table: "), "{summary}");

    assert_eq!(completed(&mut lua, "'still alive'"), "still alive\n");
}

#[test]
fn reading_stdin_is_refused() {
    let mut lua = engine();
    let (summary, _) = failed(&mut lua, "io.read()");
    assert_eq!(
        summary,
        "Kernel requested stdin; interactive input is not supported."
    );
    let (summary, _) = failed(&mut lua, "io.stdin:read('l')");
    assert!(summary.contains("Kernel requested stdin"), "{summary}");
}

#[test]
fn a_top_level_yield_is_an_error() {
    let mut lua = engine();
    let (summary, ran) = failed(&mut lua, "x = 1\ncoroutine.yield(5)\nx = 2");
    assert_eq!(summary, STRAY_YIELD_MESSAGE);
    assert!(ran.stderr.contains("stack traceback:"), "{}", ran.stderr);
    assert_eq!(completed(&mut lua, "x"), "1\n");
    // Coroutines of the cell's own work as usual.
    assert_eq!(
        completed(
            &mut lua,
            "local co = coroutine.wrap(function() coroutine.yield(1) coroutine.yield(2) end)\nreturn co(), co()"
        ),
        "1\t2\n"
    );
}

#[test]
fn to_be_closed_variables_close_when_a_cell_stops() {
    let mut lua = engine();
    let (_, ran) = failed(
        &mut lua,
        "local guard <close> = setmetatable({}, {__close = function() closed = true end})\ncoroutine.yield()",
    );
    assert!(ran.stderr.contains(STRAY_YIELD_MESSAGE));
    assert_eq!(completed(&mut lua, "closed"), "true\n");
}

#[test]
fn interrupt_stops_a_busy_loop_and_state_survives() {
    let mut lua = engine();
    completed(&mut lua, "before = 'kept'");
    interrupted(&mut lua, "while true do end");
    assert_eq!(completed(&mut lua, "before"), "kept\n");
    assert_eq!(completed(&mut lua, "1 + 1"), "2\n");
}

#[test]
fn interrupt_is_not_caught_by_pcall() {
    let mut lua = engine();
    interrupted(&mut lua, "pcall(function() while true do end end)");
    interrupted(
        &mut lua,
        "local ok = pcall(function() while true do x = (x or 0) + 1 end end)\nafter = true",
    );
    assert_eq!(completed(&mut lua, "x > 0, after"), "true\tnil\n");
    interrupted(
        &mut lua,
        "while true do pcall(function() while true do end end) end",
    );
    assert_eq!(completed(&mut lua, "'next'"), "next\n");
}

#[test]
fn interrupt_reaches_nested_coroutines_and_c_boundaries() {
    let mut lua = engine();
    interrupted(
        &mut lua,
        "coroutine.wrap(function() while true do end end)()",
    );
    interrupted(
        &mut lua,
        "table.sort({3, 2, 1}, function(a, b) while true do end end)",
    );
    interrupted(
        &mut lua,
        "setmetatable({}, {__tostring = function() while true do end end})",
    );
    interrupted(
        &mut lua,
        "string.gsub('abc', '%w', function() while true do end end)",
    );
    assert_eq!(completed(&mut lua, "'fine'"), "fine\n");
}

#[test]
fn debug_sethook_cannot_remove_the_interrupt_hook() {
    let mut lua = engine();
    let (summary, _) = failed(&mut lua, "debug.sethook()");
    assert!(
        summary.contains("debug.sethook is not available"),
        "{summary}"
    );
    assert!(completed(&mut lua, "debug.traceback('here')").starts_with("here\nstack traceback:"));
}

#[test]
fn running_out_of_memory_fails_the_cell_only() {
    let mut lua = LuaEngine::with_memory_limit(Some(32 * 1024 * 1024)).expect("engine starts");
    completed(&mut lua, "kept = 'yes'");
    let ran = run(
        &mut lua,
        r#"local t = {} for i=1,1e9 do t[i] = string.rep("x", 100) .. i end"#,
    );
    const LIMIT: u64 = 32 * 1024 * 1024;
    match &ran.outcome {
        CellOutcome::OutOfMemory {
            summary,
            limit_bytes,
            used_bytes,
        } => {
            assert_eq!(summary, "not enough memory");
            assert_eq!(*limit_bytes, LIMIT);
            assert!(*used_bytes > LIMIT / 2 && *used_bytes <= LIMIT, "{ran:?}");
        }
        other => panic!("expected out of memory, got {other:?} ({ran:?})"),
    }
    assert!(ran.stderr.contains("32 MiB"), "{}", ran.stderr);
    assert_eq!(completed(&mut lua, "collectgarbage() return kept"), "yes\n");
    assert_eq!(
        completed(&mut lua, "#string.rep('x', 1000000)"),
        "1000000\n"
    );
}

#[test]
fn plain_data_detection() {
    let lua = Lua::new();
    let check = |code: &str| {
        let table: Table = lua.load(code).eval().expect("table");
        json::plain_table_json(&table)
    };
    assert_eq!(check("{1, 2, 3}"), Some(serde_json::json!([1, 2, 3])));
    assert_eq!(
        check("{[1] = 'a', [3] = 'c'}"),
        Some(serde_json::json!({"1": "a", "3": "c"}))
    );
    assert_eq!(check("{x = 0/0}"), None);
    assert_eq!(check("{[true] = 1}"), None);
    assert_eq!(check("local t = {} t[1] = t return t"), None);
    assert_eq!(
        check("local s = {1} return {s, s}"),
        Some(serde_json::json!([[1], [1]]))
    );
    assert_eq!(check("{1.5, 2}"), Some(serde_json::json!([1.5, 2])));
}

#[test]
fn runaway_recursion_is_an_ordinary_error() {
    let mut lua = engine();
    let (summary, _) = failed(&mut lua, "local function r() return 1 + r() end\nr()");
    assert!(summary.contains("stack overflow"), "{summary}");
    assert_eq!(completed(&mut lua, "'after'"), "after\n");
}

#[path = "code_mode_tests.rs"]
mod code_mode_tests;
#[path = "helpers_tests.rs"]
mod helpers_tests;
