//! Engine tests against the real python3 on this machine; the prelude's in
//! `prelude_tests.rs`.

use super::*;
use cellvisor_ipc::FromWorker;
use std::thread;

/// Marks the end of a cell's frames in the test's outbox.
const END_OF_CELL: u64 = u64::MAX;

struct Ran {
    outcome: Result<CellOutcome, WorkerError>,
    output: Vec<u8>,
    displays: Vec<serde_json::Value>,
    /// The bundles of the cell's trailing value (sent under `VALUE_MIME`), apart from
    /// `displays`.
    values: Vec<serde_json::Value>,
    /// (name, args JSON) of each host tool call, in order.
    tool_calls: Vec<(String, String)>,
    /// How much output had arrived at each `Yield` frame.
    yields: Vec<usize>,
}

impl Ran {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }

    fn completed(&self) -> bool {
        matches!(self.outcome, Ok(CellOutcome::Completed))
    }

    /// The details of the status events, in order.
    fn statuses(&self) -> Vec<serde_json::Value> {
        self.displays
            .iter()
            .filter_map(|bundle| bundle.get(STATUS_MIME).cloned())
            .collect()
    }

    /// The displays that are not status events.
    fn rich(&self) -> Vec<serde_json::Value> {
        self.displays
            .iter()
            .filter(|bundle| bundle.get(STATUS_MIME).is_none())
            .cloned()
            .collect()
    }
}

const STATUS_MIME: &str = "application/x-cellvisor-status";
const VALUE_MIME: &str = "application/x-cellvisor-value";
/// The cell a host runs to ask for the values' bundles (the gateway's, in `snippets.rs`).
const PYTHON_SEND_VALUES: &str = "__import__('cellvisor_prelude').send_values()";

struct Harness {
    engine: PythonEngine,
    next_id: u64,
    _runtime_dir: Option<tempfile::TempDir>,
}

impl Harness {
    fn new() -> Harness {
        let runtime_dir = tempfile::tempdir().unwrap();
        let context = WorkerContext {
            runtime_dir: runtime_dir.path().to_path_buf(),
        };
        let engine = PythonEngine::new(&context).expect("python starts");
        Harness {
            engine,
            next_id: 1,
            _runtime_dir: Some(runtime_dir),
        }
    }

    /// A harness over an interpreter started in `runtime_dir`, which the caller keeps.
    fn in_runtime_dir(runtime_dir: &Path) -> Harness {
        let context = WorkerContext {
            runtime_dir: runtime_dir.to_path_buf(),
        };
        Harness {
            engine: PythonEngine::new(&context).expect("python starts"),
            next_id: 1,
            _runtime_dir: None,
        }
    }

    fn with_interpreter(interpreter: &Interpreter) -> Result<Harness, WorkerError> {
        let runtime_dir = tempfile::tempdir().unwrap();
        let engine = PythonEngine::start(interpreter, runtime_dir.path())?;
        Ok(Harness {
            engine,
            next_id: 1,
            _runtime_dir: Some(runtime_dir),
        })
    }

    fn run(&mut self, code: &str) -> Ran {
        self.run_with(code, &Interrupt::default())
    }

    /// Runs a cell while another thread drains the outbox (a big output would otherwise
    /// fill it and block the cell).
    fn run_with(&mut self, code: &str, interrupt: &Interrupt) -> Ran {
        self.run_full(code, interrupt, Vec::new(), |_, _| {
            Some(Err("no tools in this test".into()))
        })
    }

    /// Runs a cell offering `tools`, with the collector thread playing the host: it answers
    /// each tool call with `host(name, args_json)` (`None`: never answers).
    fn run_full(
        &mut self,
        code: &str,
        interrupt: &Interrupt,
        tools: Vec<cellvisor_ipc::ToolInfo>,
        host: impl Fn(&str, &str) -> Option<Result<String, String>> + Send + 'static,
    ) -> Ran {
        let cell_id = self.next_id;
        self.next_id += 1;
        let (outbox, rx) = Outbox::new(64);
        let host_outbox = outbox.clone();
        let collector = thread::spawn(move || {
            let (mut output, mut displays, mut calls) = (Vec::new(), Vec::new(), Vec::new());
            let mut values = Vec::new();
            let mut yields = Vec::new();
            for frame in rx {
                match frame {
                    FromWorker::Output {
                        cell_id: id, data, ..
                    } if id == cell_id => output.extend_from_slice(&data),
                    FromWorker::Yield { cell_id: id } if id == cell_id => yields.push(output.len()),
                    FromWorker::Display { bundle_json, .. } => {
                        let bundle: serde_json::Value = serde_json::from_str(&bundle_json).unwrap();
                        match bundle.get(VALUE_MIME) {
                            Some(value) => values.push(value.clone()),
                            None => displays.push(bundle),
                        }
                    }
                    FromWorker::ToolCall {
                        cell_id: id,
                        call_id,
                        name,
                        args_json,
                    } => {
                        assert_eq!(id, cell_id);
                        calls.push((name.clone(), args_json.clone()));
                        if let Some(answer) = host(&name, &args_json) {
                            host_outbox.deliver_tool_result(call_id, answer);
                        }
                    }
                    FromWorker::Pong { seq: END_OF_CELL } => break,
                    _ => {}
                }
            }
            (output, displays, values, calls, yields)
        });
        let cell = ExecuteCell {
            cell_id,
            code: code.to_string(),
            cwd: None,
            tools,
            session_env: Vec::new(),
            env_changes: Vec::new(),
            task: Default::default(),
        };
        let outcome = self.engine.execute(&cell, &outbox, interrupt);
        outbox.send(FromWorker::Pong { seq: END_OF_CELL });
        let (output, displays, values, tool_calls, yields) = collector.join().unwrap();
        Ran {
            outcome,
            output,
            displays,
            values,
            tool_calls,
            yields,
        }
    }

    /// Raises the interrupt the way the runtime does when it reads an `Interrupt`, after `delay`.
    fn interrupt_after(&self, delay: Duration) -> (Interrupt, thread::JoinHandle<()>) {
        let interrupt = Interrupt::default();
        let flag = interrupt.flag();
        let hook = self.engine.interrupt_hook().unwrap();
        let raiser = thread::spawn(move || {
            thread::sleep(delay);
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            hook();
        });
        (interrupt, raiser)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.engine.child.id() as i32)
    }
}

fn engine_error(ran: &Ran) -> String {
    match &ran.outcome {
        Err(error) => error.to_string(),
        other => panic!("expected the engine to fail, got {other:?}"),
    }
}

fn failed_summary(ran: &Ran) -> String {
    match &ran.outcome {
        Ok(CellOutcome::Failed { summary }) => summary.clone(),
        other => panic!("expected a failed cell, got {other:?}: {}", ran.text()),
    }
}

#[test]
fn names_the_python_version() {
    let started = Instant::now();
    let harness = Harness::new();
    eprintln!("python engine started in {:?}", started.elapsed());
    let name = harness.engine.engine_name();
    assert!(name.starts_with("Python 3."), "{name}");
}

#[test]
fn state_persists_and_trailing_value_is_shown() {
    let mut py = Harness::new();
    let first = py.run("x = 41");
    assert!(first.completed());
    assert_eq!(first.text(), "");
    assert_eq!(py.run("x + 1").text(), "42\n");
    assert_eq!(
        py.run("def f(v):\n    return v * 2\nf('ab')").text(),
        "'abab'\n"
    );
    assert_eq!(py.run("None").text(), "");
    assert_eq!(py.run("y = [x]\ny").text(), "[41]\n");
    assert_eq!(py.run("import __main__\n__main__.y").text(), "[41]\n");
}

#[test]
fn a_trailing_value_is_also_sent_as_its_bundle_for_execute_result() {
    let mut py = Harness::new();
    // Not sent until the host asks: it costs every cell with a value.
    let ran = py.run("x = 41\nx + 1");
    assert_eq!(ran.text(), "42\n");
    assert!(ran.values.is_empty(), "{:?}", ran.values);
    assert!(py.run(PYTHON_SEND_VALUES).completed());
    let ran = py.run("x + 1");
    assert_eq!(ran.text(), "42\n");
    assert_eq!(ran.values, vec![serde_json::json!({"text/plain": "42"})]);
    let ran = py.run("{'a': [1, 2]}");
    assert_eq!(ran.text(), "{'a': [1, 2]}\n");
    let value =
        serde_json::json!({"application/json": {"a": [1, 2]}, "text/plain": "{'a': [1, 2]}"});
    assert_eq!(ran.values, vec![value.clone()]);
    assert_eq!(
        ran.displays,
        vec![value],
        "the rich form still goes out as a display"
    );
    // No value, none sent: a print, an assignment, None, a hidden value.
    for code in ["print(1)", "y = 2", "None", "3;"] {
        assert_eq!(
            py.run(code).values,
            Vec::<serde_json::Value>::new(),
            "{code}"
        );
    }
}

#[test]
fn yield_control_follows_all_the_output_written_before_it() {
    let mut py = Harness::new();
    // Enough output to fill the pipe several times: the yield must still come after all of
    // it and before what follows (it travels as a marker in its place in the output).
    let ran = py.run(
        "import os\nfor i in range(2000):\n    print('x' * 99)\nos.system('echo child')\n\
         yield_control()\nprint('after')\nyield_control()",
    );
    assert!(ran.completed(), "{}", ran.text());
    let before = 2000 * 100 + "child\n".len();
    assert_eq!(ran.yields, [before, before + "after\n".len()]);
    assert!(ran.text().ends_with("child\nafter\n"), "{}", ran.text());
}

/// Prints and a subprocess's output keep their order on stdout; stderr, a pipe of its own,
/// keeps its order and never comes ahead of stdout written before it (stdout written an
/// instant after it may come first: the two streams travel apart, as in Jupyter).
#[test]
fn prints_tracebacks_and_subprocess_output_keep_their_order() {
    let mut py = Harness::new();
    let ran = py.run(
        "import os, sys\nprint('one')\nos.system('echo two')\nprint('three', file=sys.stderr)\nprint('four')",
    );
    assert!(ran.completed());
    let text = ran.text();
    assert_eq!(text.replace("three\n", ""), "one\ntwo\nfour\n", "{text}");
    let (two, three) = (text.find("two"), text.find("three"));
    assert!(two.is_some() && three.is_some() && two < three, "{text}");
}

#[test]
fn errors_show_a_clean_traceback_and_a_summary() {
    let mut py = Harness::new();
    py.run("def inner():\n    return 1 / 0");
    let ran = py.run("print('before')\ninner()");
    assert_eq!(failed_summary(&ran), "ZeroDivisionError: division by zero");
    let text = ran.text();
    assert!(
        text.starts_with("before\nTraceback (most recent call last):\n"),
        "{text}"
    );
    assert!(
        text.contains("File \"<cell 2>\", line 2, in <module>"),
        "{text}"
    );
    assert!(text.contains("return 1 / 0"), "{text}");
    assert!(!text.contains("runner-"), "runner frames leak: {text}");
    assert!(
        text.ends_with("ZeroDivisionError: division by zero\n"),
        "{text}"
    );

    let ran = py.run("x = (1,");
    assert!(
        failed_summary(&ran).starts_with("SyntaxError: "),
        "{}",
        ran.text()
    );
    assert!(ran.text().contains("<cell 3>"), "{}", ran.text());

    let ran = py.run("import sys\nsys.exit(3)");
    assert_eq!(failed_summary(&ran), "SystemExit: 3");
    // Exiting with 0 or None is a successful end of the cell (and nothing after it runs).
    let ran = py.run("exit()\nprint('after')");
    assert!(ran.completed() && ran.text().is_empty(), "{}", ran.text());
    assert!(py.run("import sys\nsys.exit(0)").completed());
    let ran = py.run("input()");
    assert!(failed_summary(&ran).contains("Kernel requested stdin"));
    assert!(!ran.text().contains("runner.py"), "{}", ran.text());
    let ran = py.run("class Custom(Exception): pass\nraise Custom('boom')");
    assert_eq!(failed_summary(&ran), "Custom: boom");
    assert_eq!(py.run("'still alive'").text(), "'still alive'\n");
}

#[test]
fn top_level_await_runs_on_a_persistent_loop() {
    let mut py = Harness::new();
    let ran = py.run("import asyncio\nasync def twice(v):\n    await asyncio.sleep(0.01)\n    return v * 2\nloop = asyncio.get_running_loop()\nawait twice(21)");
    assert_eq!(ran.text(), "42\n");
    assert_eq!(
        py.run("(await asyncio.sleep(0, 'x'), asyncio.get_running_loop() is loop)")
            .text(),
        "('x', True)\n"
    );
    let ran = py.run("await asyncio.sleep(0)\nraise ValueError('async')");
    assert_eq!(failed_summary(&ran), "ValueError: async");
    assert!(!ran.text().contains("asyncio/"), "{}", ran.text());
}

#[test]
fn reading_stdin_is_an_error_with_the_expected_message() {
    let mut py = Harness::new();
    let message = "Kernel requested stdin; interactive input is not supported.";
    for code in [
        "input('name? ')",
        "import sys\nsys.stdin.readline()",
        "import sys\nsys.stdin.read()",
    ] {
        let ran = py.run(code);
        let summary = failed_summary(&ran);
        assert_eq!(summary, format!("StdinNotImplementedError: {message}"));
        assert!(ran.text().contains(message));
    }
    // Subprocesses see an empty stdin instead of hanging.
    assert_eq!(
        py.run("import subprocess\nsubprocess.run(['cat']).returncode")
            .text(),
        "0\n"
    );
}

#[test]
fn display_sends_mime_bundles() {
    let mut py = Harness::new();
    let ran = py.run("r = display({'k': [1, 2]})\ndisplay(5)\nclass H:\n    def _repr_html_(self):\n        return '<b>x</b>'\ndisplay(H(), 'text')\nr");
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "", "display returns None");
    assert_eq!(
        ran.displays,
        vec![
            serde_json::json!({"application/json": {"k": [1, 2]}, "text/plain": "{'k': [1, 2]}"}),
            serde_json::json!({"text/plain": "5"}),
            serde_json::json!({"text/html": "<b>x</b>", "text/plain": ran.displays[2]["text/plain"]}),
            serde_json::json!({"text/plain": "text"}),
        ]
    );
    let ran = py.run("display([float('nan'), object()])");
    assert_eq!(ran.displays.len(), 1);
    assert!(ran.displays[0].get("application/json").is_none());
}

#[test]
fn interrupt_stops_a_busy_loop_and_keeps_state() {
    let mut py = Harness::new();
    py.run("count = 0");
    let (interrupt, raiser) = py.interrupt_after(Duration::from_millis(300));
    let ran = py.run_with("while True:\n    count += 1", &interrupt);
    raiser.join().unwrap();
    assert!(
        matches!(ran.outcome, Ok(CellOutcome::Interrupted)),
        "{:?}",
        ran.outcome
    );
    assert_eq!(py.run("count > 0").text(), "True\n");

    py.run("import asyncio");
    let (interrupt, raiser) = py.interrupt_after(Duration::from_millis(200));
    let ran = py.run_with("await asyncio.sleep(30)", &interrupt);
    raiser.join().unwrap();
    assert!(
        matches!(ran.outcome, Ok(CellOutcome::Interrupted)),
        "{:?}",
        ran.outcome
    );
    assert_eq!(
        py.run("await asyncio.sleep(0, 'loop ok')").text(),
        "'loop ok'\n"
    );
}

#[test]
fn interrupt_while_idle_is_harmless() {
    let mut py = Harness::new();
    py.run("z = 5");
    py.engine.interrupt_hook().unwrap()();
    thread::sleep(Duration::from_millis(100));
    assert_eq!(py.run("z").text(), "5\n");
}

#[test]
fn interrupt_raised_before_the_cell_reaches_python_still_applies() {
    let mut py = Harness::new();
    let interrupt = Interrupt::default();
    interrupt
        .flag()
        .store(true, std::sync::atomic::Ordering::SeqCst);
    py.engine.interrupt_hook().unwrap()();
    let ran = py.run_with("import time\ntime.sleep(30)", &interrupt);
    assert!(
        matches!(ran.outcome, Ok(CellOutcome::Interrupted)),
        "{:?}",
        ran.outcome
    );
    assert_eq!(py.run("1").text(), "1\n");
}

#[test]
fn child_killed_during_a_cell_that_ignores_sigint_ends_execute() {
    let mut py = Harness::new();
    let pid = py.pid();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let _ = kill(pid, Signal::SIGKILL);
    });
    let (interrupt, raiser) = py.interrupt_after(Duration::from_millis(100));
    let ran = py.run_with(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)",
        &interrupt,
    );
    killer.join().unwrap();
    raiser.join().unwrap();
    assert_eq!(
        engine_error(&ran),
        "python was killed by signal 9 (SIGKILL)"
    );
}

#[test]
fn python_exiting_is_an_engine_error() {
    let mut py = Harness::new();
    let ran = py.run("print('bye')\nimport os\nos._exit(3)");
    assert_eq!(engine_error(&ran), "python exited with code 3");
    assert_eq!(ran.text(), "bye\n");
    let again = py.run("1");
    assert_eq!(engine_error(&again), "python exited with code 3");
}

#[test]
fn python_crashing_names_the_signal() {
    let mut py = Harness::new();
    let ran = py.run("import ctypes\nctypes.string_at(0)");
    assert_eq!(
        engine_error(&ran),
        "python was killed by signal 11 (SIGSEGV)"
    );
}

#[test]
fn large_output_is_streamed_whole() {
    let mut py = Harness::new();
    let ran = py.run("for i in range(50_000):\n    print('x' * 99)");
    assert!(ran.completed());
    assert_eq!(ran.output.len(), 5_000_000);
    assert!(ran.output.iter().all(|b| *b == b'x' || *b == b'\n'));
}

#[test]
fn output_is_raw_bytes() {
    let mut py = Harness::new();
    let ran = py.run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\n')\nsys.stdout.flush()");
    assert_eq!(ran.output, b"\xff\xfe\n");
    assert_eq!(py.run("print('caf\\u00e9')").output, "café\n".as_bytes());
}

#[test]
fn output_after_a_cell_ends_does_not_break_anything() {
    let mut py = Harness::new();
    let ran = py.run("import threading, time\nthreading.Timer(0.1, lambda: print('late')).start()");
    assert!(ran.completed());
    thread::sleep(Duration::from_millis(300));
    assert_eq!(py.run("2").text(), "2\n");
}

#[test]
fn failure_to_start_shows_what_python_printed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("python3");
    std::fs::write(&fake, "#!/bin/sh\necho 'broken install' >&2\nexit 2\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let interpreter = Interpreter {
        program: fake,
        venv: None,
    };
    let error = Harness::with_interpreter(&interpreter)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error
            .contains("failed to start cellvisor's runner: python exited with code 2; it printed:"),
        "{error}"
    );
    assert!(error.ends_with("broken install"), "{error}");
}

#[test]
fn venv_interpreter_gets_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("env");
    let created = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(created.success());
    let interpreter = Interpreter {
        program: venv.join("bin/python"),
        venv: Some(venv.clone()),
    };
    let mut py = Harness::with_interpreter(&interpreter).unwrap();
    let ran = py.run(
        "import os, sys\n(sys.prefix, os.environ['VIRTUAL_ENV'], os.environ['PATH'].split(':')[0])",
    );
    let venv = venv.display();
    assert_eq!(ran.text(), format!("('{venv}', '{venv}', '{venv}/bin')\n"));
}

/// The resident size of the heap of the interpreter behind `py`, in kB.
fn heap_kb(py: &mut Harness) -> u64 {
    let ran = py.run(
        "def _heap_kb():\n\
         \x20   kb, inside = 0, False\n\
         \x20   for line in open('/proc/self/smaps'):\n\
         \x20       fields = line.split()\n\
         \x20       if '-' in fields[0]:\n\
         \x20           inside = fields[-1] == '[heap]'\n\
         \x20       elif inside and fields[0] == 'Rss:':\n\
         \x20           kb += int(fields[1])\n\
         \x20   return kb\n\
         print(_heap_kb())",
    );
    assert!(ran.completed(), "{}", ran.text());
    ran.text().trim().parse().expect("a number of kB")
}

#[test]
fn the_first_python_in_a_directory_compiles_its_modules_in_a_child_that_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut cold = Harness::in_runtime_dir(dir.path());
    let cached: Vec<String> = std::fs::read_dir(
        install_runner(dir.path())
            .unwrap()
            .with_file_name("__pycache__"),
    )
    .expect("the bytecode cache was written")
    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
    .collect();
    for module in ["cellvisor_runner.", "cellvisor_prelude."] {
        assert!(
            cached.iter().any(|name| name.starts_with(module)),
            "{cached:?}"
        );
    }
    let mut warm = Harness::in_runtime_dir(dir.path());
    let (cold_heap, warm_heap) = (heap_kb(&mut cold), heap_kb(&mut warm));
    // Compiling in the serving interpreter left ~1.8 MB more heap resident for its life.
    assert!(
        cold_heap <= warm_heap + 1024,
        "the first interpreter keeps {cold_heap} kB of heap, a later one {warm_heap} kB"
    );
    assert_eq!(cold.run("print(1 + 1)").text(), "2\n");
}

#[test]
fn runner_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = install_runner(dir.path()).unwrap();
    let second = install_runner(dir.path()).unwrap();
    assert_eq!(first, second);
    assert_eq!(std::fs::read_to_string(&first).unwrap(), LAUNCHER_SOURCE);
    let runner = first.with_file_name(RUNNER_MODULE_FILE);
    assert_eq!(std::fs::read_to_string(runner).unwrap(), RUNNER_SOURCE);
    let prelude = first.with_file_name(PRELUDE_FILE);
    assert_eq!(std::fs::read_to_string(prelude).unwrap(), PRELUDE_SOURCE);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn marker_lookalikes_and_closed_stdout_do_not_confuse_the_sync() {
    let mut py = Harness::new();
    let fake = "print('\\x1ecellvisor-sync:not-the-token:2\\x1e')";
    let ran = py.run(fake);
    assert_eq!(ran.output, b"\x1ecellvisor-sync:not-the-token:2\x1e\n");
    let started = Instant::now();
    let ran = py.run("import os\nprint('last words')\nos.close(1)\nos.close(2)");
    assert!(ran.completed());
    assert_eq!(ran.text(), "last words\n");
    // The runner puts fd 1 and 2 back before the next cell, and the sync marker still
    // arrives at once.
    assert_eq!(py.run("'stdout again'").text(), "'stdout again'\n");
    assert!(py.run("x = 1").completed());
    assert!(
        started.elapsed() < SYNC_TIMEOUT,
        "the marker is not on fd 1"
    );
}

#[test]
fn big_cells_go_through() {
    let mut py = Harness::new();
    let code = format!("s = '{}'\nlen(s)", "y".repeat(1 << 20));
    assert_eq!(py.run(&code).text(), "1048576\n");
}

#[test]
fn closing_the_event_pipe_ends_the_engine_cleanly() {
    let mut py = Harness::new();
    let ran = py.run("import os\nos.close(4)");
    assert_eq!(engine_error(&ran), "python exited with code 1");
}

#[path = "prelude_tests.rs"]
mod prelude_tests;

#[path = "notebook_tests.rs"]
mod notebook_tests;

#[test]
fn ipython_syntax_is_only_recognised_where_a_statement_starts() {
    let mut py = Harness::new();
    let ran = py.run(
        "text = '''\n!not a command\n%not a magic\n'''\nvalues = [1,\n  2]\nprint(repr(text), 7 % 4, 1 != 2, values)",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "'\\n!not a command\\n%not a magic\\n' 3 True [1, 2]\n"
    );
    let ran = py.run("for word in ['a', 'b']:\n    !echo $word\nlisted = !echo {2 * 21}\nlisted");
    assert_eq!(ran.text(), "a\nb\n['42']\n");
    let ran = py.run("%%writefile\nbody");
    assert_eq!(
        failed_summary(&ran),
        "UsageError: %%writefile: give one file name (and -a to append)"
    );
    assert!(!ran.text().contains("cellvisor_ipython"), "{}", ran.text());
}

#[test]
fn a_trailing_value_goes_where_the_cell_pointed_stdout() {
    let mut py = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("moved.txt");
    let moved = py.run(&format!(
        "import os\nf = open({:?}, 'w')\nos.dup2(f.fileno(), 1)\n42",
        path.display().to_string()
    ));
    assert!(moved.completed(), "{}", moved.text());
    assert_eq!(moved.text(), "");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "42\n");
    // fd 1 is back on the pipe for the next cell; a replaced sys.stdout still gets the value.
    let replaced = py.run("import io, sys\nbuf = io.StringIO()\nsys.stdout = buf\n7");
    assert!(replaced.completed());
    assert_eq!(replaced.text(), "");
    let back = py.run("sys.stdout = sys.__stdout__\nprint('after')\nbuf.getvalue()");
    assert_eq!(back.text(), "after\n'7\\n'\n");
}

#[test]
fn a_trailing_value_that_cannot_be_encoded_fails_the_cell_as_before() {
    let mut py = Harness::new();
    let ran = py.run("class Odd:\n    def __repr__(self):\n        return '\\udc80'\nOdd()");
    assert!(
        matches!(&ran.outcome, Ok(CellOutcome::Failed { summary }) if summary.starts_with("UnicodeEncodeError")),
        "{:?} {}",
        ran.outcome,
        ran.text()
    );
    assert_eq!(py.run("1+1").text(), "2\n");
}

#[test]
fn the_runner_starts_from_cached_bytecode() {
    let mut py = Harness::new();
    let ran = py.run("import sys\nsys.modules['cellvisor_runner'].__cached__");
    assert!(ran.completed(), "{}", ran.text());
    let cached = ran.text();
    let cached = cached.trim().trim_matches('\'');
    assert!(
        std::path::Path::new(cached).is_file(),
        "no bytecode cache at {cached}"
    );
    let ran = py.run("input()");
    assert!(
        matches!(&ran.outcome, Ok(CellOutcome::Failed { summary }) if summary.starts_with("StdinNotImplementedError:")),
        "{:?}",
        ran.outcome
    );
}
