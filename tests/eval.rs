//! `cellvisor eval` end to end: the real binary, real python3, QuickJS and Lua workers.
//! These run the supervisor inside the command (`--no-daemon`); `daemon.rs` covers the same
//! command through the daemon.

mod common;

use cellvisor::{CellSpec, EvalRequest, Language};
use common::{cells, path_str, World};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

#[test]
fn one_cell_in_each_language_prints_42() {
    let world = World::new();
    for (language, code) in [
        ("py", "print(6*7)"),
        ("js", "console.log(6*7)"),
        ("lua", "print(6*7)"),
    ] {
        let run = world.run(&["eval", "--no-daemon", "-l", language, code]);
        run.assert_code(0);
        assert_eq!(run.stdout, "42\n", "{language}: {}", run.stderr);
    }
    world.assert_no_processes_left(SETTLE);
}

/// A Python cell that prints the command line of the worker that started its interpreter.
const PRINT_WORKER_COMMAND: &str =
    "import os\nprint(open(f'/proc/{os.getppid()}/cmdline').read().replace('\\0', ' ').strip())";

#[test]
fn python_sessions_run_on_the_python_worker_program_beside_cellvisor() {
    let world = World::new();
    let run = world.run(&["eval", "--no-daemon", PRINT_WORKER_COMMAND]);
    run.assert_code(0);
    let cellvisor = Path::new(env!("CARGO_BIN_EXE_cellvisor"));
    let expected = format!(
        "{} --build {} --else {} __worker py --socket ",
        cellvisor.with_file_name("cellvisor-py-worker").display(),
        cellvisor::worker_entry::BUILD_ID,
        cellvisor.display()
    );
    assert!(
        run.stdout.starts_with(&expected),
        "{}{}",
        run.stdout,
        run.stderr
    );
    // The other languages still run on cellvisor itself.
    for (language, code) in [("js", "console.log(6*7)"), ("lua", "print(6*7)")] {
        let run = world.run(&["eval", "--no-daemon", "-l", language, code]);
        run.assert_code(0);
        assert_eq!(run.stdout, "42\n", "{language}: {}", run.stderr);
    }
    world.assert_no_processes_left(SETTLE);
}

/// A request for one Python cell in `session` that prints its worker's command line.
fn printing_the_worker_command(session: &str) -> EvalRequest {
    EvalRequest {
        session: session.into(),
        cells: vec![CellSpec::new(Language::Python, PRINT_WORKER_COMMAND)],
        ..Default::default()
    }
}

/// Runs a Python cell printing its worker's command line on a supervisor whose workers run
/// `cellvisor`; what it printed.
async fn python_worker_command_under(world: &World, cellvisor: &Path) -> String {
    let cv = world.supervisor_running(cellvisor.to_path_buf(), |_| {});
    let request = printing_the_worker_command("alone");
    let mut result = cv.eval(request, None).await.expect("request accepted");
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
    result.cells.remove(0).report.output
}

/// A directory of the world holding a `cellvisor` (a link to the one under test).
fn cellvisor_in(world: &World, dir: &str) -> std::path::PathBuf {
    let dir = world.dir.path().join(dir);
    std::fs::create_dir_all(&dir).expect("bin dir");
    let cellvisor = dir.join("cellvisor");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cellvisor"), &cellvisor).expect("symlink");
    cellvisor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sessions_run_on_cellvisor_itself_where_the_python_worker_program_is_missing() {
    let world = World::new();
    // A `cellvisor` with nothing beside it, as `cargo run` may leave it.
    let cellvisor = cellvisor_in(&world, "alone");
    let output = python_worker_command_under(&world, &cellvisor).await;
    let expected = format!("{} __worker py --socket ", cellvisor.display());
    assert!(output.starts_with(&expected), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_workers_start_on_cellvisor_when_the_python_worker_program_went_away() {
    let world = World::new();
    let cellvisor = cellvisor_in(&world, "removed");
    let program = cellvisor.with_file_name("cellvisor-py-worker");
    let real = Path::new(env!("CARGO_BIN_EXE_cellvisor")).with_file_name("cellvisor-py-worker");
    std::os::unix::fs::symlink(&real, &program).expect("symlink");
    // The supervisor sees the program at its start (no prewarmed worker runs it yet) ...
    let cv = world.supervisor_running(cellvisor.clone(), |c| c.python.prewarm = 0);
    // ... and it is gone before the first Python worker starts (an install replacing it).
    std::fs::remove_file(&program).expect("remove the program");
    let request = printing_the_worker_command("removed");
    let mut result = cv.eval(request, None).await.expect("request accepted");
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
    let output = result.cells.remove(0).report.output;
    let expected = format!("{} __worker py --socket ", cellvisor.display());
    assert!(output.starts_with(&expected), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_program_of_another_build_hands_the_worker_to_cellvisor() {
    let world = World::new();
    let cellvisor = cellvisor_in(&world, "stale");
    // The real program, told that the supervisor is another build than its own (as an old
    // `cellvisor-py-worker` left beside a `cellvisor` that `cargo run` relinked would be).
    let real = Path::new(env!("CARGO_BIN_EXE_cellvisor")).with_file_name("cellvisor-py-worker");
    let script = format!(
        "#!/bin/sh\nshift 2\nexec '{}' --build another-build \"$@\"\n",
        real.display()
    );
    let program = cellvisor.with_file_name("cellvisor-py-worker");
    std::fs::write(&program, script).expect("write the program");
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let output = python_worker_command_under(&world, &cellvisor).await;
    let expected = format!("{} __worker py --socket ", cellvisor.display());
    assert!(output.starts_with(&expected), "{output}");
}

#[test]
fn state_persists_per_language_and_languages_do_not_share_it() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": "x = 41"},
        {"language": "py", "code": "x + 1"},
        {"language": "js", "code": "let x = 1; var y = 'js'"},
        {"language": "js", "code": "x + 1"},
        {"language": "js", "code": "typeof globalThis.z"},
        {"language": "lua", "code": "x = 41"},
        {"language": "lua", "code": "x + 1"},
        {"language": "py", "code": "print(x, 'y' in globals())"},
    ]));
    run.assert_code(0);
    let result = run.json();
    let outputs: Vec<&str> = cells(&result)
        .iter()
        .map(|c| c["output"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(outputs[1], "42\n");
    assert_eq!(outputs[3], "2\n");
    assert_eq!(outputs[4], "undefined\n");
    assert_eq!(outputs[6], "42\n");
    assert_eq!(outputs[7], "41 False\n", "py state is its own: {result:#}");
    assert_eq!(result["is_error"], false);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn the_first_failing_cell_stops_the_request() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": "a = 1", "title": "setup"},
        {"language": "py", "code": "def f():\n    return 1/0\nf()", "title": "boom"},
        {"language": "py", "code": "print('never')"},
        {"language": "js", "code": "1"},
    ]));
    run.assert_code(1);
    let result = run.json();
    let cells = cells(&result);
    assert_eq!(result["is_error"], true);
    assert_eq!(cells[0]["status"], "complete");
    assert_eq!(cells[1]["status"], "error");
    assert_eq!(cells[1]["exit_code"], 1);
    assert_eq!(cells[1]["title"], "boom");
    let traceback = cells[1]["output"].as_str().unwrap_or_default();
    assert!(traceback.contains("Traceback"), "{traceback}");
    assert!(traceback.contains("ZeroDivisionError"), "{traceback}");
    assert!(
        traceback.contains("return 1/0"),
        "source line shown: {traceback}"
    );
    for skipped in &cells[2..] {
        assert_eq!(skipped["status"], "skipped");
    }
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn errors_in_js_and_lua_carry_their_stack() {
    let world = World::new();
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "-l",
        "js",
        "function f() { throw new Error('boom') }\nf()",
        "--json",
    ]);
    run.assert_code(1);
    let output = run.json()["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        output.contains("boom") && output.contains("at "),
        "{output}"
    );

    let run = world.run(&[
        "eval",
        "--no-daemon",
        "-l",
        "lua",
        "error('kaput')",
        "--json",
    ]);
    run.assert_code(1);
    let output = run.json()["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        output.contains("kaput") && output.contains("traceback"),
        "{output}"
    );
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn human_output_has_headers_and_errors_on_stderr() {
    let world = World::new();
    let file = world.cells_file(&json!([
        {"language": "py", "code": "print('hi')", "title": "greet"},
        {"language": "py", "code": "raise ValueError('bad value')"},
        {"language": "py", "code": "print('never')"},
    ]));
    let run = world.run(&["eval", "--no-daemon", "--cells", path_str(&file)]);
    run.assert_code(1);
    assert!(run.stdout.contains("[1/3] greet\nhi\n"), "{}", run.stdout);
    assert!(
        run.stderr.contains("ValueError: bad value"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("[3/3] py (skipped)"), "{}", run.stderr);
    assert!(!run.stdout.contains("never"));
}

#[test]
fn five_megabytes_of_output_are_truncated_into_an_artifact() {
    let world = World::new();
    let code =
        "import sys\nfor i in range(50_000):\n    sys.stdout.write(f'{i:06d} ' + 'x' * 92 + '\\n')";
    let run = world.run(&["eval", "--no-daemon", "-l", "py", code, "--json"]);
    run.assert_code(0);
    let result = run.json();
    let cell = &result["cells"][0];
    let output = cell["output"].as_str().unwrap_or_default();
    assert!(output.len() <= 52 * 1024, "kept {} bytes", output.len());
    assert!(output.starts_with("000000 x"), "head kept");
    assert!(
        output
            .trim_end()
            .ends_with(&format!("049999 {}", "x".repeat(92))),
        "tail kept"
    );
    let truncation = &cell["truncation"];
    assert_eq!(truncation["truncated"], true);
    assert_eq!(truncation["total_bytes"], 5_000_000);
    assert_eq!(truncation["total_lines"], 50_000);
    let artifact = truncation["artifact_path"].as_str().expect("artifact path");
    let saved = std::fs::read(artifact).expect("artifact readable");
    assert_eq!(saved.len(), 5_000_000);
    assert!(saved.starts_with(b"000000 x"));
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn output_of_subprocesses_and_invalid_utf8_is_captured() {
    let world = World::new();
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "-l",
        "py",
        "import os, sys\nprint('before', flush=True)\nos.system('echo from-shell')\n_ = sys.stdout.buffer.write(b'bad \\xff byte\\n')",
        "--json",
    ]);
    run.assert_code(0);
    let output = run.json()["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(output, "before\nfrom-shell\nbad \u{fffd} byte\n");
}

#[test]
fn reading_stdin_is_a_clear_error() {
    let world = World::new();
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "-l",
        "py",
        "input('name? ')",
        "--json",
    ]);
    run.assert_code(1);
    let output = run.json()["cells"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        output.contains("Kernel requested stdin; interactive input is not supported."),
        "{output}"
    );
}

#[test]
fn trailing_values_and_top_level_await() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n    return 5\nv = await f()\nv * 2"},
        {"language": "py", "code": "{'k': [1, 2]}"},
        {"language": "js", "code": "let t = [1,2,3]; t.map(v => v*2)"},
        {"language": "js", "code": "const v = await Promise.resolve(21); v * 2"},
        {"language": "lua", "code": "1 + 1, 'two'"},
    ]));
    run.assert_code(0);
    let result = run.json();
    let outputs: Vec<&str> = cells(&result)
        .iter()
        .map(|c| c["output"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        outputs,
        ["10\n", "{'k': [1, 2]}\n", "[2,4,6]\n", "42\n", "2\ttwo\n"]
    );
}

#[test]
fn display_sends_json_bundles_in_every_language() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": "display({'k': [1, 2]})"},
        {"language": "js", "code": "display({k: [1, 2]})"},
        {"language": "lua", "code": "display({k = {1, 2}})"},
        {"language": "py", "code": "display('plain')"},
    ]));
    run.assert_code(0);
    let result = run.json();
    for cell in &cells(&result)[..3] {
        assert_eq!(
            cell["displays"][0]["application/json"],
            json!({"k": [1, 2]}),
            "{cell:#}"
        );
    }
    assert_eq!(cells(&result)[3]["displays"][0]["text/plain"], "plain");
}

#[test]
fn reset_clears_state_of_one_language_only() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": "x = 1"},
        {"language": "js", "code": "var x = 2"},
        {"language": "py", "code": "print('x' in globals())", "reset": true},
        {"language": "js", "code": "x"},
    ]));
    run.assert_code(0);
    let result = run.json();
    assert_eq!(cells(&result)[2]["output"], "False\n");
    assert!(cells(&result)[2]["notice"]
        .as_str()
        .unwrap_or_default()
        .contains("reset"));
    assert_eq!(cells(&result)[3]["output"], "2\n");
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let world = World::new();
    let run = world.run(&["eval", "--no-daemon", "-l", "ruby", "puts 1"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("unknown language `ruby`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("py, js, lua"), "{}", run.stderr);

    let broken = world.dir.path().join("broken.json");
    std::fs::write(&broken, "[\n  {\"language\": \"py\", \"code\": 1}\n]").unwrap_or_default();
    let run = world.run(&["eval", "--no-daemon", "--cells", path_str(&broken)]);
    run.assert_code(2);
    assert!(run.stderr.contains("line 2 column"), "{}", run.stderr);

    let run = world.run(&["eval", "--no-daemon", "--cells", "/nonexistent/cells.json"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("cannot read cells file"),
        "{}",
        run.stderr
    );

    let run = world.run(&["eval", "--no-daemon"]);
    run.assert_code(2);
    assert!(run.stderr.contains("no code given"), "{}", run.stderr);

    let run = world.run(&["eval", "--no-daemon", "--timeout", "-3", "1"]);
    run.assert_code(2);

    let run = world.run(&["eval", "--no-daemon", "--no-such-flag"]);
    run.assert_code(2);

    let run = world.run(&["eval", "--no-daemon", "-s", "../escape", "1"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("invalid session name"),
        "{}",
        run.stderr
    );

    let run = world.run_with_stdin(
        &["eval", "--no-daemon", "--cells", "-", "--json"],
        "[{\"language\": \"lua\", \"code\": \"print(1)\"}]",
    );
    run.assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn killing_the_supervisor_takes_every_worker_and_child_with_it() {
    let world = World::new();
    let mut child = world
        .command()
        .args([
            "eval",
            "--no-daemon",
            "-l",
            "py",
            "import subprocess, time\nsubprocess.Popen(['sleep', '1000'])\nprint('ready', flush=True)\ntime.sleep(1000)",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    // Wait until the cell's own child exists: the supervisor, the shim, python and sleep.
    let ready = common::wait_until(Duration::from_secs(15), || {
        let n = world.processes().len();
        if n >= 4 {
            Ok(n)
        } else {
            Err(n)
        }
    });
    assert!(ready.is_ok(), "processes never came up: {ready:?}");
    child.kill().expect("SIGKILL the supervisor");
    let _ = child.wait();
    world.assert_no_processes_left(Duration::from_secs(2));
}

/// The one timeout rule (`host::validate`), as the command line meets it: a cell timeout
/// that is not a positive number is refused, with what is allowed; a positive one below
/// `cells.min-timeout` is raised to it, so the cell outlives what it asked for.
#[test]
fn timeouts_follow_the_one_rule_on_the_command_line() {
    let world = World::new();
    let run = world.run(&["eval", "--no-daemon", "-l", "js", "--timeout", "0", "1"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("timeout must be a positive number of seconds, got 0")
            && run.stderr.contains("1 to 600 seconds"),
        "{}",
        run.stderr
    );
    let sleeper = "await new Promise((done) => setTimeout(done, 300)); 'slept'";
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "-l",
        "js",
        "--timeout",
        "0.05",
        sleeper,
    ]);
    run.assert_code(0);
    assert_eq!(run.stdout, "slept\n", "{}", run.stderr);
    world.assert_no_processes_left(SETTLE);
}

/// HTML a cell offers is shown as Markdown on the terminal (converted by the text renderer,
/// not by the worker: the result keeps the HTML as the cell gave it).
#[test]
fn html_displays_are_printed_as_markdown() {
    let world = World::new();
    let code = "class Page:\n    def _repr_html_(self):\n        return '<h2>Title</h2><p>Some <b>bold</b></p><script>x()</script>'\ndisplay(Page())";
    let run = world.run(&["eval", "--no-daemon", "-l", "py", code]);
    run.assert_code(0);
    assert_eq!(run.stdout, "## Title\n\nSome **bold**\n", "{}", run.stderr);
    let run = world.run_cells(&json!([{"language": "py", "code": code}]));
    run.assert_code(0);
    let result = run.json();
    let bundle = &cells(&result)[0]["displays"][0];
    assert_eq!(
        bundle["text/html"],
        "<h2>Title</h2><p>Some <b>bold</b></p><script>x()</script>"
    );
    assert!(bundle.get("text/markdown").is_none(), "{bundle}");
    world.assert_no_processes_left(SETTLE);
}

/// A trailing value with a rich repr is one bundle, as in Jupyter (issue 28, item 2b): the
/// terminal shows its richest form once, not its `text/plain` repr beside it; the result
/// keeps the repr inside the bundle. A JSON value is still printed as text.
#[test]
fn a_trailing_value_with_a_rich_repr_is_shown_once() {
    let world = World::new();
    let code = "class H:\n    def _repr_html_(self):\n        return '<p>Some <b>bold</b></p>'\n\
                class M:\n    def _repr_markdown_(self):\n        return '*md*'\n";
    for (value, shown) in [("H()", "Some **bold**\n"), ("M()", "*md*\n")] {
        let cell = format!("{code}{value}");
        let run = world.run(&["eval", "-l", "py", &cell]);
        run.assert_code(0);
        assert_eq!(run.stdout, shown, "{}", run.stderr);
        assert!(!run.stdout.contains("object at 0x"), "{}", run.stdout);
        let run = world.run_cells(&json!([{"language": "py", "code": cell}]));
        run.assert_code(0);
        let result = run.json();
        let cell = &cells(&result)[0];
        assert_eq!(cell["output"], "", "{cell:#}");
        let displays = cell["displays"].as_array().expect("displays");
        assert_eq!(displays.len(), 1, "{cell:#}");
        // IPython's text for an object without a repr of its own: `<__main__.H at 0x...>`.
        assert!(
            displays[0]["text/plain"]
                .as_str()
                .is_some_and(|text| text.starts_with("<__main__.") && text.contains(" at 0x")),
            "{cell:#}"
        );
    }
    let run = world.run(&["eval", "-l", "py", "{'k': [1]}"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "{'k': [1]}\n", "{}", run.stderr);
    world.run(&["stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

/// A failed request of several cells ends naming the failed cell, on the terminal and in
/// the result (`failed_cell`), whose `summary` totals what the cells gave (issue 28, item 1).
#[test]
fn a_failed_request_names_its_failed_cell_and_totals_its_outputs() {
    let world = World::new();
    let cells = json!([
        {"language": "js", "code": "display({k: 1}); 1"},
        {"language": "py", "code": "write('a.txt', 'x')\nraise ValueError('no data')", "title": "load"},
        {"language": "lua", "code": "print('never')"}
    ]);
    let run = world.run_cells(&cells);
    run.assert_code(1);
    let result = run.json();
    assert_eq!(
        result["failed_cell"],
        json!({"index": 1, "title": "load", "status": "error"})
    );
    assert_eq!(
        result["summary"],
        json!({"languages": ["js", "py", "lua"], "json_outputs": 1, "images": 0, "status_events": 1}),
        "{result:#}"
    );
    let file = world.cells_file(&cells);
    let run = world.run(&[
        "eval",
        "--no-daemon",
        "--cells",
        file.to_str().expect("utf-8"),
    ]);
    run.assert_code(1);
    assert!(
        run.stderr.trim_end().ends_with(
            "cell 2 of 3 (\"load\") failed with an error; the cell after it was skipped"
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("never"), "{}", run.stdout);
    // A request that did not fail has no `failed_cell`, and a lone cell no summary line.
    let run = world.run_cells(&json!([{"language": "lua", "code": "print(1)"}]));
    run.assert_code(0);
    assert!(run.json().get("failed_cell").is_none());
    let run = world.run(&["eval", "--no-daemon", "-l", "py", "1/0"]);
    run.assert_code(1);
    assert!(!run.stderr.contains("cell 1 of 1"), "{}", run.stderr);
    world.assert_no_processes_left(SETTLE);
}

/// Placeholders as the anchor's `eval` tool words them (issue 28, item 2): a cell with
/// displays but no text says `(no text output)`, one with nothing at all `(no output)`; on
/// stderr, so stdout holds only what the cells gave.
#[test]
fn a_cell_without_text_says_no_text_output_or_no_output() {
    let world = World::new();
    let run = world.run(&["eval", "-l", "js", "display({k: 1})"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "{\n  \"k\": 1\n}\n", "{}", run.stderr);
    assert!(run.stderr.contains("(no text output)\n"), "{}", run.stderr);
    assert!(!run.stderr.contains("(no output)"), "{}", run.stderr);

    let run = world.run(&["eval", "-l", "py", "quiet = 1"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "", "{}", run.stderr);
    assert!(run.stderr.contains("(no output)\n"), "{}", run.stderr);
    assert!(!run.stderr.contains("(no text output)"), "{}", run.stderr);

    // A cell that printed something gets no placeholder.
    let run = world.run(&["eval", "-l", "lua", "print(1)"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "1\n");
    assert!(!run.stderr.contains("output)"), "{}", run.stderr);
    world.run(&["stop"]).assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

/// The gateway tool's request-level `timeout` and `reset` beside `cells` (issue 28, item 5):
/// the timeout applies to every cell that sets none, the reset restarts before the first
/// cell only; a bad timeout is refused saying what is allowed.
#[test]
fn the_daemon_takes_a_request_level_timeout_and_reset() {
    let daemon = common::daemon::Daemon::start();
    let mut client = daemon.client();
    client.eval("gw", json!([{"language": "py", "code": "x = 41"}]));

    let result = client
        .call(
            "eval",
            json!({"session": "gw", "reset": true, "cells": [
                {"language": "py", "code": "print('x' in globals())"},
                {"language": "py", "code": "y = 1"},
                {"language": "py", "code": "print('y' in globals())"},
            ]}),
        )
        .expect("a request-level reset is accepted");
    assert_eq!(common::daemon::output(&result, 0), "False\n", "{result:#}");
    assert_eq!(common::daemon::output(&result, 2), "True\n", "{result:#}");
    let notice = common::daemon::cell(&result, 0)["notice"].as_str();
    assert!(
        notice.is_some_and(|n| n.contains("reset")),
        "the first cell says its worker was reset: {result:#}"
    );
    assert!(
        common::daemon::cell(&result, 2)["notice"].is_null(),
        "no reset before a later cell: {result:#}"
    );

    let result = client
        .call(
            "eval",
            json!({"session": "gw", "timeout": 1, "cells": [
                {"language": "py", "timeout": 10, "code": "import time; time.sleep(1.5); print('own')"},
                {"language": "py", "code": "import time; time.sleep(5); print('never')"},
            ]}),
        )
        .expect("a request-level timeout is accepted");
    let first = common::daemon::cell(&result, 0);
    assert_eq!(
        first["status"], "complete",
        "a cell's own timeout wins: {result:#}"
    );
    assert_eq!(common::daemon::output(&result, 0), "own\n");
    let second = common::daemon::cell(&result, 1);
    assert_eq!(second["status"], "cancelled", "{result:#}");
    assert_eq!(
        common::daemon::output(&result, 1),
        "Command timed out after 1 seconds\n",
        "{result:#}"
    );

    for bad in [json!(0), json!(-2.5)] {
        let refused = client
            .call(
                "eval",
                json!({"session": "gw", "timeout": bad, "cells": [{"language": "py", "code": "1"}]}),
            )
            .expect_err("a non-positive request timeout is refused");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("the request's timeout must be a positive number of seconds")
                && message.contains("applies to every cell that sets none")
                && message.contains("1 to 600 seconds"),
            "{refused:#}"
        );
    }
    daemon.stop();
}
