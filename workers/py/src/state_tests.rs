//! Snapshots through the real engine and the real python: saved by one interpreter, loaded
//! by a fresh one, as a restore after an eviction does.

use super::super::interpreter::Interpreter;
use super::super::PythonEngine;
use crate::runtime::{Engine, Interrupt, Outbox, StateError, WorkerContext};
use cellvisor_ipc::state::{NameInfo, StateRefusal, StateReport, StateTask};
use cellvisor_ipc::{CellOutcome, ExecuteCell, FromWorker};
use cellvisor_worker_core::state::testing::{load, run_task, save};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A python worker and the cells run on it.
struct Py {
    engine: PythonEngine,
    next_id: u64,
    _runtime_dir: tempfile::TempDir,
}

impl Py {
    /// The python the worker finds on this machine.
    fn found() -> Py {
        let runtime_dir = tempfile::tempdir().unwrap();
        let context = WorkerContext {
            runtime_dir: runtime_dir.path().to_path_buf(),
        };
        Py {
            engine: PythonEngine::new(&context).expect("python starts"),
            next_id: 1,
            _runtime_dir: runtime_dir,
        }
    }

    fn on(interpreter: &Interpreter) -> Py {
        let runtime_dir = tempfile::tempdir().unwrap();
        Py {
            engine: PythonEngine::start(interpreter, runtime_dir.path()).expect("python starts"),
            next_id: 1,
            _runtime_dir: runtime_dir,
        }
    }

    /// The found python, with cloudpickle and dill made unimportable: a python without them.
    fn without_by_value() -> Py {
        let mut py = Py::found();
        py.run("__import__('sys').modules.update(cloudpickle=None, dill=None)");
        py
    }

    /// Runs a cell that must complete; what it printed.
    fn run(&mut self, code: &str) -> String {
        let cell_id = self.next_id;
        self.next_id += 1;
        let (outbox, frames) = Outbox::new(10_000);
        let cell = ExecuteCell {
            cell_id,
            code: code.to_string(),
            cwd: None,
            tools: Vec::new(),
            session_env: Vec::new(),
            env_changes: Vec::new(),
            task: Default::default(),
        };
        let outcome = self.engine.execute(&cell, &outbox, &Interrupt::default());
        let output: Vec<u8> = frames
            .try_iter()
            .filter_map(|frame| match frame {
                FromWorker::Output { data, .. } => Some(data),
                _ => None,
            })
            .flatten()
            .collect();
        let text = String::from_utf8_lossy(&output).into_owned();
        assert!(
            matches!(outcome, Ok(CellOutcome::Completed)),
            "{code}: {outcome:?}: {text}"
        );
        text
    }
}

/// The test venv (numpy, pandas, cloudpickle), made by `scripts/test-venv numpy pandas
/// cloudpickle`; `None` (the test is skipped) when it is not there.
fn venv_interpreter() -> Option<Interpreter> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv");
    let program = venv.join("bin/python");
    let usable = std::process::Command::new(&program)
        .args(["-c", "import numpy, pandas, cloudpickle"])
        .status()
        .is_ok_and(|status| status.success());
    if !usable {
        eprintln!(
            "skipped: {} has no numpy, pandas and cloudpickle",
            program.display()
        );
        return None;
    }
    Some(Interpreter {
        program,
        venv: Some(venv),
    })
}

fn snapshot_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("state").join("python.snapshot")
}

fn saved_names(report: &StateReport) -> (Vec<String>, Vec<(String, String)>) {
    match report {
        StateReport::Saved { saved, skipped, .. } => (
            saved.clone(),
            skipped
                .iter()
                .map(|s| (s.name.clone(), s.why.clone()))
                .collect(),
        ),
        other => panic!("expected a saved snapshot, got {other:?}"),
    }
}

fn restored_names(report: &StateReport) -> Vec<String> {
    match report {
        StateReport::Loaded { restored, .. } => restored.clone(),
        other => panic!("expected a loaded snapshot, got {other:?}"),
    }
}

fn names_of(py: &mut Py) -> Vec<NameInfo> {
    match run_task(&mut py.engine, StateTask::Names) {
        (CellOutcome::Completed, StateReport::Names(names)) => names,
        other => panic!("expected names, got {other:?}"),
    }
}

fn name<'a>(names: &'a [NameInfo], wanted: &str) -> &'a NameInfo {
    names
        .iter()
        .find(|info| info.name == wanted)
        .unwrap_or_else(|| panic!("{wanted} not in {names:?}"))
}

const SESSION: &str = "\
import json as j
import socket
x = 41
words = {'a': [1, 2], 'b': 'text'}
def add(v):
    return v + x
sq = lambda v: v * v
class Point:
    def __init__(self, a, b):
        self.a, self.b = a, b
    def norm2(self):
        return self.a ** 2 + self.b ** 2
p = Point(3, 4)
conn = socket.socket()
gen = (i for i in range(3))
";

const USES_EVERY_NAME: &str =
    "print(add(1), sq(3), p.norm2(), isinstance(p, Point), j.dumps(words), 'conn' in dir())";

/// The session's names saved by `first` come back in `second`, functions bound to its
/// namespace, instances of its class, the module under its alias; the socket and the
/// generator are skipped with their reasons.
fn session_survives(mut first: Py, mut second: Py, how_code_is_kept: &str) {
    first.run(SESSION);
    let listed = names_of(&mut first);
    assert_eq!(name(&listed, "add").note.as_deref(), Some(how_code_is_kept));
    assert_eq!(
        name(&listed, "Point").note.as_deref(),
        Some(how_code_is_kept)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = snapshot_path(&dir);
    let (saved, skipped) = saved_names(&save(&mut first.engine, &path, 1 << 30));
    for kept in ["j (module)", "x", "words", "add", "sq", "Point", "p"] {
        assert!(saved.contains(&kept.to_string()), "{kept} not in {saved:?}");
    }
    assert_eq!(
        skipped,
        vec![
            ("conn".into(), "socket objects cannot be saved".into()),
            ("gen".into(), "generators cannot be saved".into()),
        ]
    );
    drop(first);
    let restored = restored_names(&load(&mut second.engine, &path, false));
    assert_eq!(restored, saved);
    assert_eq!(
        second.run(USES_EVERY_NAME),
        "42 9 25 True {\"a\": [1, 2], \"b\": \"text\"} False\n"
    );
    // The functions read the namespace they are in now, not a copy taken at the snapshot.
    assert_eq!(
        second.run("x = 100\nprint(add(1), Point.norm2.__globals__ is globals())"),
        "101 True\n"
    );
}

#[test]
fn a_session_survives_a_new_interpreter() {
    session_survives(Py::found(), Py::found(), found_python_keeps_code());
}

/// How the found python keeps functions: by value when it has cloudpickle or dill.
fn found_python_keeps_code() -> &'static str {
    let mut py = Py::found();
    let has = py.run(
        "import importlib.util as u\n\
         print('cloudpickle' if u.find_spec('cloudpickle') else 'dill' if u.find_spec('dill') else '')",
    );
    match has.trim() {
        "cloudpickle" => "by value (cloudpickle)",
        "dill" => "by value (dill)",
        _ => "by source text",
    }
}

#[test]
fn without_cloudpickle_functions_and_classes_are_kept_by_source_text() {
    session_survives(
        Py::without_by_value(),
        Py::without_by_value(),
        "by source text",
    );
}

#[test]
fn with_cloudpickle_functions_and_classes_are_kept_by_value() {
    let Some(venv) = venv_interpreter() else {
        return;
    };
    session_survives(Py::on(&venv), Py::on(&venv), "by value (cloudpickle)");
}

#[test]
fn without_cloudpickle_a_closure_is_skipped_and_says_why() {
    let mut py = Py::without_by_value();
    py.run(
        "def make(n):\n    def inner(v):\n        return v + n\n    return inner\nplus2 = make(2)",
    );
    let dir = tempfile::tempdir().unwrap();
    let (saved, skipped) = saved_names(&save(&mut py.engine, &snapshot_path(&dir), 1 << 30));
    assert_eq!(saved, vec!["make".to_string()]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].0, "plus2");
    assert!(skipped[0].1.contains("cloudpickle"), "{skipped:?}");
}

#[test]
fn replace_leaves_exactly_what_the_snapshot_held() {
    let mut py = Py::found();
    py.run("x = 1\ny = 2");
    let dir = tempfile::tempdir().unwrap();
    let path = snapshot_path(&dir);
    saved_names(&save(&mut py.engine, &path, 1 << 30));
    py.run("y = 5\nz = 3");
    restored_names(&load(&mut py.engine, &path, false));
    assert_eq!(py.run("print(x, y, z)"), "1 2 3\n");
    py.run("z = 3");
    restored_names(&load(&mut py.engine, &path, true));
    assert_eq!(
        py.run("print(x, y, 'z' in dir(), callable(display))"),
        "1 2 False True\n"
    );
}

#[test]
fn a_snapshot_past_its_cap_is_refused_and_not_written() {
    let mut py = Py::found();
    py.run("small = 1\nbig = bytes(1_000_000)");
    let dir = tempfile::tempdir().unwrap();
    let path = snapshot_path(&dir);
    let (outcome, report) = run_task(
        &mut py.engine,
        StateTask::Save(Box::new(cellvisor_ipc::state::SaveOrder {
            path: path.display().to_string(),
            key: cellvisor_worker_core::state::testing::TEST_KEY.to_vec(),
            max_bytes: 100_000,
            taken_at: "2026-12-02T07:00:00Z".into(),
            reason: "test".into(),
            node: "node-a".into(),
        })),
    );
    assert!(matches!(outcome, CellOutcome::Failed { .. }), "{outcome:?}");
    match report {
        StateReport::Refused(StateRefusal::TooBig { bytes, max }) => {
            assert_eq!(max, 100_000);
            assert!(bytes > 100_000, "{bytes}");
        }
        other => panic!("expected TooBig, got {other:?}"),
    }
    assert!(!path.exists());
    assert_eq!(py.run("print(small)"), "1\n");
}

#[test]
fn a_payload_that_is_not_ours_fails_cleanly() {
    let mut py = Py::found();
    py.run("x = 1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payload");
    let interrupt = Interrupt::default();
    for payload in [
        &b""[..],
        b"garbage of some length",
        b"CVPYSTATE\x01\xff\xff\xff\x7f{",
    ] {
        std::fs::write(&path, payload).unwrap();
        let len = payload.len() as u64;
        match py.engine.load_state(&path, len, true, &interrupt) {
            Err(StateError::Failed(why)) => assert!(why.contains("cannot be read"), "{why}"),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
    assert_eq!(
        py.run("print(x)"),
        "1\n",
        "a refused payload changes nothing"
    );
}

#[test]
fn the_payload_is_read_up_to_its_length_only() {
    let mut py = Py::found();
    py.run("x = 7");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payload");
    let interrupt = Interrupt::default();
    py.engine.save_state(&path, 1 << 20, &interrupt).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"the runtime's trailer");
    std::fs::write(&path, &bytes).unwrap();
    py.run("x = 0");
    let loaded = py.engine.load_state(&path, len, false, &interrupt).unwrap();
    assert_eq!(loaded.restored, vec!["x".to_string()]);
    assert_eq!(py.run("print(x)"), "7\n");
    match py.engine.load_state(&path, len - 1, false, &interrupt) {
        Err(StateError::Failed(why)) => assert!(why.contains("cannot be read"), "{why}"),
        other => panic!("a cut payload must fail, got {other:?}"),
    }
}

#[test]
fn names_lists_kind_size_and_whether_each_is_kept() {
    let mut py = Py::without_by_value();
    py.run("import socket\nimport json as j\nn = 5\ndef f():\n    pass\nconn = socket.socket()");
    let names = names_of(&mut py);
    let listed: Vec<&str> = names.iter().map(|info| info.name.as_str()).collect();
    assert_eq!(listed, ["socket", "j", "n", "f", "conn"]);
    let n = name(&names, "n");
    assert_eq!(
        (n.kind.as_str(), n.saveable, n.note.clone()),
        ("int", true, None)
    );
    assert!(n.size_bytes.is_some_and(|size| size > 0));
    let j = name(&names, "j");
    assert_eq!(
        (j.kind.as_str(), j.note.as_deref()),
        ("module", Some("by import of json"))
    );
    let f = name(&names, "f");
    assert_eq!(
        (f.kind.as_str(), f.note.as_deref()),
        ("function", Some("by source text"))
    );
    let conn = name(&names, "conn");
    assert_eq!(
        (conn.kind.as_str(), conn.saveable, conn.note.as_deref()),
        ("socket", false, Some("socket objects cannot be saved"))
    );
}

#[test]
fn an_object_whose_pickling_raises_is_skipped_with_its_message() {
    let mut py = Py::found();
    py.run("class Odd:\n    def __reduce__(self):\n        raise TypeError('odd things stay')\nodd = Odd()\nkept = [1]");
    let dir = tempfile::tempdir().unwrap();
    let (saved, skipped) = saved_names(&save(&mut py.engine, &snapshot_path(&dir), 1 << 30));
    assert!(saved.contains(&"kept".to_string()), "{saved:?}");
    assert_eq!(skipped, vec![("odd".into(), "odd things stay".into())]);
}

#[test]
fn an_interrupt_stops_a_snapshot_and_the_session_goes_on() {
    let mut py = Py::found();
    py.run("import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(30)\nslow = Slow()\nx = 1");
    let interrupt = Interrupt::default();
    let flag = interrupt.flag();
    let hook = py.engine.interrupt_hook().unwrap();
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        hook();
    });
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let saved = py
        .engine
        .save_state(&dir.path().join("p"), 1 << 20, &interrupt);
    raiser.join().unwrap();
    assert!(
        matches!(saved, Err(StateError::Failed(ref why)) if why == "interrupted"),
        "{saved:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(py.run("print(x)"), "1\n");
}

#[test]
fn a_python_that_dies_under_a_snapshot_is_fatal() {
    let mut py = Py::found();
    py.run("import os\nclass Die:\n    def __reduce__(self):\n        os._exit(3)\nd = Die()");
    let dir = tempfile::tempdir().unwrap();
    let saved = py
        .engine
        .save_state(&dir.path().join("p"), 1 << 20, &Interrupt::default());
    match saved {
        Err(StateError::Fatal(err)) => assert!(err.to_string().contains("code 3"), "{err}"),
        other => panic!("expected a fatal error, got {other:?}"),
    }
    assert!(matches!(
        py.engine.list_names(&Interrupt::default()),
        Err(StateError::Fatal(_))
    ));
}

/// Saves and loads `py`'s namespace `rounds` times into a fresh interpreter made by `fresh`;
/// prints the median times and the payload's size.
fn timed(label: &str, py: &mut Py, fresh: impl Fn() -> Py) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payload");
    let interrupt = Interrupt::default();
    let (mut saves, mut loads) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let _ = std::fs::remove_file(&path);
        let started = Instant::now();
        py.engine.save_state(&path, 1 << 30, &interrupt).unwrap();
        saves.push(started.elapsed());
        let len = std::fs::metadata(&path).unwrap().len();
        let mut second = fresh();
        let started = Instant::now();
        let loaded = second
            .engine
            .load_state(&path, len, false, &interrupt)
            .unwrap();
        loads.push(started.elapsed());
        assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    }
    saves.sort();
    loads.sort();
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!(
        "{label}: save {:?}, load {:?} (median of 3), {size} bytes",
        saves[1], loads[1]
    );
    (saves[1], loads[1])
}

#[test]
fn timing_of_a_hundred_small_names() {
    let mut py = Py::found();
    py.run("for i in range(100):\n    globals()['v%d' % i] = {'i': i, 'name': 'value %d' % i, 'items': list(range(i % 10))}");
    let (_, load_time) = timed("100 small names", &mut py, Py::found);
    assert!(load_time < Duration::from_secs(2), "{load_time:?}");
}

#[test]
fn numpy_arrays_and_dataframes_round_trip_quickly() {
    let Some(venv) = venv_interpreter() else {
        return;
    };
    let mut py = Py::on(&venv);
    py.run(
        "import numpy as np\narr = np.arange(100 * 2**20 // 8, dtype=np.float64)\narr[7] = -1.5",
    );
    let (_, load_time) = timed("a 100 MB NumPy array", &mut py, || Py::on(&venv));
    assert!(load_time < Duration::from_secs(5), "{load_time:?}");
    py.run(
        "import pandas as pd\ndel arr\nn = 50 * 2**20 // 24\n\
         df = pd.DataFrame({'a': np.arange(n), 'b': np.linspace(0, 1, n), 'c': np.ones(n)})",
    );
    let names = names_of(&mut py);
    let df = name(&names, "df");
    assert_eq!(df.kind, "DataFrame");
    assert!(
        df.size_bytes
            .is_some_and(|size| size >= 50 * (1 << 20) - 100),
        "{df:?}"
    );
    timed("a 50 MB DataFrame", &mut py, || Py::on(&venv));

    let dir = tempfile::tempdir().unwrap();
    let path = snapshot_path(&dir);
    py.run("arr = np.arange(10.0)\narr[7] = -1.5");
    saved_names(&save(&mut py.engine, &path, 1 << 30));
    let mut second = Py::on(&venv);
    restored_names(&load(&mut second.engine, &path, false));
    assert_eq!(
        second.run("print(np.__name__, arr[7], arr.flags.writeable, df.shape, df['b'].iloc[-1])"),
        format!("numpy -1.5 True ({}, 3) 1.0\n", 50 * (1 << 20) / 24)
    );
}

/// The history's names (`In`, `Out`, `_`, `_N`, `_iN`, ...) are the session's, not the
/// cells': a snapshot neither lists nor saves them.
#[test]
fn history_names_are_not_listed_or_saved() {
    let mut py = Py::found();
    py.run("x = 41");
    assert_eq!(py.run("x + 1"), "42\n");
    py.run("y = _ + len(In)");
    let listed: Vec<String> = names_of(&mut py)
        .into_iter()
        .map(|info| info.name)
        .collect();
    assert_eq!(listed, ["x", "y"]);
}
