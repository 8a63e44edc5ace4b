//! The worker's side of the link, frame by frame: the test plays the supervisor on the
//! socket of a real worker process (real QuickJS, Lua, Python) and checks what it answers
//! and when. The engine thread reads frames between cells and a control thread takes over
//! while a cell runs: heartbeats, interrupts and tool results must get through either way.

mod common;

use cellvisor_ipc::frame::{read_frame, write_frame};
use cellvisor_ipc::{
    CellOutcome, ExecuteCell, FromWorker, OutputStream, ToWorker, ToolInfo, PROTOCOL_VERSION,
};
use common::World;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the machine is shared and loaded; these bound a hang, not a speed.
const PATIENCE: Duration = Duration::from_secs(20);

/// A worker process and the supervisor's end of its socket.
struct Worker {
    child: Child,
    stream: UnixStream,
    /// Frames read while looking for another one, in order.
    seen: Vec<FromWorker>,
    world: World,
}

impl Worker {
    fn start(language: &str) -> Worker {
        let world = World::new();
        let socket = world.runtime_dir().join("worker.sock");
        let listener = UnixListener::bind(&socket).expect("bind the worker's socket");
        let child = Command::new(env!("CARGO_BIN_EXE_cellvisor"))
            .args(["__worker", language, "--socket"])
            .arg(&socket)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDG_RUNTIME_DIR", world.runtime_dir())
            .env(
                "CELLVISOR_PYTHON",
                "/root/.pyenv/versions/3.11.7/bin/python3",
            )
            .current_dir(world.work_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the worker");
        listener.set_nonblocking(true).expect("nonblocking accept");
        let deadline = Instant::now() + PATIENCE;
        let stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(err) => panic!("the worker did not connect: {err}"),
            }
        };
        stream.set_nonblocking(false).expect("blocking stream");
        stream
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        let mut worker = Worker {
            child,
            stream,
            seen: Vec::new(),
            world,
        };
        worker.send(&ToWorker::Hello {
            version: PROTOCOL_VERSION,
        });
        worker.expect(|frame| matches!(frame, FromWorker::Hello { .. }));
        worker
    }

    fn send(&mut self, frame: &ToWorker) {
        write_frame(&mut self.stream, frame).expect("write a frame to the worker");
    }

    fn execute(&mut self, cell_id: u64, code: &str, tools: Vec<ToolInfo>) {
        self.send(&ToWorker::Execute(ExecuteCell {
            cell_id,
            code: code.into(),
            cwd: None,
            tools,
            session_env: Vec::new(),
            env_changes: Vec::new(),
            task: Default::default(),
        }));
    }

    /// Reads frames until one matches `wanted` (the others are kept in `seen`).
    fn expect(&mut self, wanted: impl Fn(&FromWorker) -> bool) -> FromWorker {
        loop {
            let frame = read_frame::<_, FromWorker>(&mut self.stream)
                .unwrap_or_else(|err| {
                    panic!(
                        "reading from the worker: {err}; seen so far: {:?}",
                        self.seen
                    )
                })
                .unwrap_or_else(|| panic!("the worker hung up; seen: {:?}", self.seen));
            if wanted(&frame) {
                return frame;
            }
            self.seen.push(frame);
        }
    }

    /// Waits until the cell has printed `text` on stdout (in one frame or several): the
    /// cell is running.
    fn expect_printed(&mut self, cell_id: u64, text: &str) {
        let mut printed = Vec::new();
        while !String::from_utf8_lossy(&printed).contains(text) {
            let frame = self.expect(|frame| {
                matches!(frame, FromWorker::Output { cell_id: id, stream: OutputStream::Stdout, .. }
                    if *id == cell_id)
            });
            if let FromWorker::Output { data, .. } = frame {
                printed.extend_from_slice(&data);
            }
        }
    }

    fn expect_pong(&mut self, seq: u64) {
        self.expect(|frame| *frame == FromWorker::Pong { seq });
    }

    /// The cell's `Done`, with what it printed to stdout on the way.
    fn expect_done(&mut self, cell_id: u64) -> (CellOutcome, String) {
        let start = self.seen.len();
        let done = self.expect(
            |frame| matches!(frame, FromWorker::Done { cell_id: id, .. } if *id == cell_id),
        );
        let FromWorker::Done { outcome, .. } = done else {
            unreachable!("matched a Done")
        };
        let printed: Vec<u8> = self.seen[start..]
            .iter()
            .filter_map(|frame| match frame {
                FromWorker::Output {
                    cell_id: id,
                    stream: OutputStream::Stdout,
                    data,
                } if *id == cell_id => Some(data.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        (outcome, String::from_utf8_lossy(&printed).into_owned())
    }

    /// `Shutdown`, and the worker is gone with every process it started.
    fn shut_down(mut self) {
        self.send(&ToWorker::Shutdown);
        let deadline = Instant::now() + PATIENCE;
        while self
            .child
            .try_wait()
            .expect("wait for the worker")
            .is_none()
        {
            assert!(Instant::now() < deadline, "the worker ignored Shutdown");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.world.assert_no_processes_left(PATIENCE);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Long past the control thread's grace (1 ms), short for a test.
const PAST_THE_GRACE: Duration = Duration::from_millis(100);

#[test]
fn heartbeats_are_answered_while_a_js_cell_spins_and_an_interrupt_stops_it() {
    let mut worker = Worker::start("js");
    worker.execute(1, "console.log('spinning'); for (;;) {}", Vec::new());
    worker.expect_printed(1, "spinning\n");
    std::thread::sleep(PAST_THE_GRACE);
    for seq in 1..=3 {
        worker.send(&ToWorker::Ping { seq });
        worker.expect_pong(seq);
    }
    worker.send(&ToWorker::Interrupt { cell_id: 1 });
    assert_eq!(worker.expect_done(1).0, CellOutcome::Interrupted);
    // The engine reads again: the next cell runs, and a ping between cells is answered.
    worker.send(&ToWorker::Ping { seq: 4 });
    worker.expect_pong(4);
    worker.execute(2, "console.log(6 * 7)", Vec::new());
    assert_eq!(
        worker.expect_done(2),
        (CellOutcome::Completed, "42\n".into())
    );
    worker.shut_down();
}

#[test]
fn an_interrupt_sent_right_behind_its_cell_stops_it() {
    for language in ["js", "lua"] {
        let mut worker = Worker::start(language);
        let spin = if language == "js" {
            "for (;;) {}"
        } else {
            "while true do end"
        };
        // Within the grace: the control thread is not reading yet when the interrupt lands.
        worker.execute(1, spin, Vec::new());
        worker.send(&ToWorker::Interrupt { cell_id: 1 });
        assert_eq!(
            worker.expect_done(1).0,
            CellOutcome::Interrupted,
            "{language}"
        );
        // An interrupt for a cell that ended, read by the engine between cells, stops
        // nothing; nor does one for a cell never sent.
        worker.send(&ToWorker::Interrupt { cell_id: 1 });
        worker.send(&ToWorker::Interrupt { cell_id: 9 });
        let quick = if language == "js" {
            "console.log('on')"
        } else {
            "print('on')"
        };
        worker.execute(2, quick, Vec::new());
        assert_eq!(
            worker.expect_done(2),
            (CellOutcome::Completed, "on\n".into()),
            "{language}"
        );
        worker.shut_down();
    }
}

#[test]
fn heartbeats_are_answered_during_a_loop_of_quick_cells() {
    let mut worker = Worker::start("lua");
    for cell_id in 1..=300 {
        worker.execute(cell_id, &format!("print({cell_id})"), Vec::new());
        if cell_id % 10 == 0 {
            worker.send(&ToWorker::Ping { seq: cell_id });
        }
        assert_eq!(
            worker.expect_done(cell_id),
            (CellOutcome::Completed, format!("{cell_id}\n"))
        );
    }
    worker.send(&ToWorker::Ping { seq: 301 });
    worker.expect_pong(301);
    let pongs: Vec<u64> = worker
        .seen
        .iter()
        .filter_map(|frame| match frame {
            FromWorker::Pong { seq } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(pongs, (1..=30).map(|n| n * 10).collect::<Vec<_>>());
    worker.shut_down();
}

fn echo_tool() -> ToolInfo {
    ToolInfo {
        name: "echo".into(),
        description: "Gives its arguments back".into(),
        input_schema_json: "{}".into(),
    }
}

#[test]
fn a_tool_result_reaches_the_cell_waiting_for_it() {
    let echo = echo_tool();
    for (language, code) in [
        (
            "js",
            "const r = await tools.echo({n: 41}); console.log(r.n + 1)",
        ),
        ("lua", "print(tool.echo({n = 41}).n + 1)"),
        ("py", "print(tool.echo(n=41)['n'] + 1)"),
    ] {
        let mut worker = Worker::start(language);
        for cell_id in 1..=3 {
            worker.execute(cell_id, code, vec![echo.clone()]);
            let call = worker.expect(|frame| matches!(frame, FromWorker::ToolCall { .. }));
            let FromWorker::ToolCall {
                call_id, args_json, ..
            } = call
            else {
                unreachable!("matched a ToolCall")
            };
            worker.send(&ToWorker::ToolResult {
                call_id,
                outcome: Ok(args_json),
            });
            assert_eq!(
                worker.expect_done(cell_id),
                (CellOutcome::Completed, "42\n".into()),
                "{language}"
            );
        }
        worker.shut_down();
    }
}

#[test]
fn heartbeats_and_interrupts_reach_a_python_cell() {
    let mut worker = Worker::start("py");
    worker.execute(
        1,
        "import time\nprint('sleeping')\nfor _ in range(600): time.sleep(0.05)",
        Vec::new(),
    );
    worker.expect_printed(1, "sleeping\n");
    std::thread::sleep(PAST_THE_GRACE);
    worker.send(&ToWorker::Ping { seq: 1 });
    worker.expect_pong(1);
    worker.send(&ToWorker::Interrupt { cell_id: 1 });
    assert_eq!(worker.expect_done(1).0, CellOutcome::Interrupted);
    worker.execute(2, "print(6 * 7)", Vec::new());
    assert_eq!(
        worker.expect_done(2),
        (CellOutcome::Completed, "42\n".into())
    );
    worker.shut_down();
}

#[test]
fn a_quick_python_cells_done_comes_once_and_a_late_interrupt_stops_nothing() {
    let mut worker = Worker::start("py");
    // The Python output thread sends a completed cell's Done (with its value) itself; the
    // engine thread must not send a second one, and an interrupt that crosses the Done must
    // not reach the next cell.
    for cell_id in 1..=50 {
        worker.execute(cell_id, &format!("x = {cell_id}\nx * 2"), Vec::new());
        assert_eq!(
            worker.expect_done(cell_id),
            (CellOutcome::Completed, format!("{}\n", cell_id * 2))
        );
        worker.send(&ToWorker::Interrupt { cell_id });
    }
    worker.execute(
        51,
        "import time\ntime.sleep(0.2)\nprint('slept', x)",
        Vec::new(),
    );
    assert_eq!(
        worker.expect_done(51),
        (CellOutcome::Completed, "slept 50\n".into())
    );
    // Every Done was the one awaited: a second Done of any cell would be among the frames
    // passed over on the way.
    worker.send(&ToWorker::Ping { seq: 7 });
    worker.expect_pong(7);
    let extra: Vec<_> = worker
        .seen
        .iter()
        .filter(|frame| matches!(frame, FromWorker::Done { .. }))
        .collect();
    assert!(extra.is_empty(), "Done sent twice: {extra:?}");
    worker.shut_down();
}

#[test]
fn a_js_value_goes_out_before_the_work_the_cell_left_pending() {
    let mut worker = Worker::start("js");
    // The value is shown while a timer is still pending: it must reach the supervisor now,
    // not with the cell's Done (the test interrupts the cell only once it has the value).
    worker.execute(
        1,
        "setTimeout(() => console.log('late'), 600000); 6 * 7",
        Vec::new(),
    );
    worker.expect_printed(1, "42\n");
    worker.send(&ToWorker::Interrupt { cell_id: 1 });
    assert_eq!(worker.expect_done(1).0, CellOutcome::Interrupted);
    worker.shut_down();
}

/// How many times the worker's thread named `name` was switched out so far.
fn switches_of(pid: u32, name: &str) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the worker's threads");
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).expect("thread status");
        return status
            .lines()
            .filter(|line| line.contains("ctxt_switches:"))
            .filter_map(|line| line.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
    }
    panic!("the worker has no thread named {name}");
}

#[test]
fn between_cells_the_control_thread_sleeps_without_waking() {
    let mut worker = Worker::start("js");
    for cell_id in 1..=20 {
        worker.execute(cell_id, "1 + 1", Vec::new());
        worker.expect_done(cell_id);
    }
    // Past the one more grace it may wait after the last cell.
    std::thread::sleep(PAST_THE_GRACE);
    let pid = worker.child.id();
    let before = switches_of(pid, "frame-control");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        switches_of(pid, "frame-control"),
        before,
        "an idle worker's control thread woke up"
    );
    worker.shut_down();
}

#[test]
fn output_held_back_to_merge_still_arrives_while_the_cell_spins() {
    let mut worker = Worker::start("js");
    worker.execute(
        1,
        "for (let i = 0; i < 2000; i++) console.log(i); for (;;) {}",
        Vec::new(),
    );
    let expected: String = (0..2000).map(|i| format!("{i}\n")).collect();
    let mut printed = Vec::new();
    // Every line arrives, in order, while the cell still spins (the test interrupts it only
    // once it has them all).
    while printed.len() < expected.len() {
        if let FromWorker::Output {
            cell_id: 1, data, ..
        } = worker.expect(|frame| matches!(frame, FromWorker::Output { .. }))
        {
            printed.extend_from_slice(&data);
        }
    }
    assert_eq!(String::from_utf8_lossy(&printed), expected);
    worker.send(&ToWorker::Interrupt { cell_id: 1 });
    assert_eq!(worker.expect_done(1).0, CellOutcome::Interrupted);
    worker.shut_down();
}
