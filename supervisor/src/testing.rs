//! A scripted worker for actor tests: no process and no interpreter, but the real frames and
//! handshake over a socket pair, and answers the test controls. Each launch makes one fake
//! worker on a thread of its own.
//!
//! A cell's code says what the fake does with it:
//! - `ok:<text>`: prints `<text>` and completes;
//! - `fail`: fails;
//! - `crash`: dies at once, as by SIGSEGV;
//! - `hang`: runs until interrupted (if [`Script::honour_interrupts`]) or killed.

use crate::cell::CellSpec;
use crate::session::outcome::Exit;
use crate::session::CellJob;
use crate::session::CellReport;
use crate::spawn::{
    BoxFuture, Launcher, StartError, StartedWorker, StderrTail, WorkerProcess, WorkerSpec,
};
use cellvisor_ipc::frame::{read_frame, write_frame};
use cellvisor_ipc::handshake::{supervisor_handshake, worker_handshake};
use cellvisor_ipc::socket::AsyncStream;
use cellvisor_ipc::state::{SkippedName, SnapshotMeta, StateRefusal, StateReport, StateTask};
use cellvisor_ipc::taken::TakenRecord;
use cellvisor_ipc::{CellOutcome, FromWorker, OutputStream, ToWorker};
use nix::sys::signal::Signal;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// A job for a cell of `code`, the receiver of its outcome, and the requester's side (the
/// cell counts as abandoned once it is dropped).
pub fn job(
    language: cellvisor_ipc::Language,
    code: &str,
    timeout: Option<f64>,
) -> (CellJob, oneshot::Receiver<CellReport>, watch::Sender<()>) {
    let (reply, outcome) = oneshot::channel();
    let (requester_alive, requester) = watch::channel(());
    static NEXT_CELL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let job = CellJob {
        cell_id: NEXT_CELL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        index: 0,
        spec: CellSpec {
            language,
            code: code.into(),
            title: None,
            timeout,
            reset: false,
            yield_time_ms: None,
        },
        yield_time: None,
        may_yield: true,
        cwd: None,
        events: None,
        tools: Arc::from([]),
        tool_host: None,
        max_output_bytes: None,
        python: None,
        sandbox: None,
        keeps_level_confinement: false,
        caller_env: None,
        requester,
        reply,
        state: None,
        once: None,
    };
    (job, outcome, requester_alive)
}

/// How every fake worker of a launcher behaves; the test flips these at any time.
pub struct Script {
    pub answer_pings: AtomicBool,
    pub honour_interrupts: AtomicBool,
    /// Saves are refused as over the size cap.
    pub refuse_saves: AtomicBool,
}

/// Fake pids start far above any real one, so nothing real is ever signalled by mistake.
const FIRST_FAKE_PID: u32 = 3_000_000_000;

/// How many processes a scripted worker says it ended with an interrupted cell.
pub const SCRIPTED_PROCESSES_ENDED: u32 = 3;

/// Starts fake workers.
pub struct FakeLauncher {
    pub script: Arc<Script>,
    next_pid: AtomicU32,
    launched: Mutex<Vec<Arc<ScriptedControl>>>,
}

impl FakeLauncher {
    pub fn new() -> Arc<FakeLauncher> {
        Arc::new(FakeLauncher {
            script: Arc::new(Script {
                answer_pings: AtomicBool::new(true),
                honour_interrupts: AtomicBool::new(true),
                refuse_saves: AtomicBool::new(false),
            }),
            next_pid: AtomicU32::new(FIRST_FAKE_PID),
            launched: Mutex::new(Vec::new()),
        })
    }

    /// Every fake worker started so far, oldest first.
    pub fn launched(&self) -> Vec<Arc<ScriptedControl>> {
        self.launched.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The fake worker with `pid`.
    pub fn worker(&self, pid: u32) -> Arc<ScriptedControl> {
        self.launched()
            .into_iter()
            .find(|w| w.pid == pid)
            .unwrap_or_else(|| panic!("no fake worker {pid}"))
    }
}

impl Launcher for FakeLauncher {
    fn launch(
        &self,
        spec: WorkerSpec,
        _serial: u64,
    ) -> BoxFuture<Result<StartedWorker, StartError>> {
        let pid = self.next_pid.fetch_add(1, Ordering::SeqCst);
        let script = Arc::clone(&self.script);
        let control = Arc::new(ScriptedControl {
            pid,
            exit: watch::channel(None).0,
            stream: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
        });
        if let Ok(mut launched) = self.launched.lock() {
            launched.push(Arc::clone(&control));
        }
        Box::pin(async move {
            let (ours, theirs) = UnixStream::pair().map_err(StartError::Accept)?;
            let keep = theirs.try_clone().map_err(StartError::Accept)?;
            if let Ok(mut stream) = control.stream.lock() {
                *stream = Some(keep);
            }
            let taken = TakenRecord::in_file(tempfile::tempfile().map_err(StartError::Accept)?)
                .map_err(StartError::Accept)?;
            let worker_record = taken.try_clone().map_err(StartError::Accept)?;
            let worker = Arc::clone(&control);
            let language = spec.language;
            std::thread::spawn(move || worker.serve(theirs, language, &script, &worker_record));
            ours.set_nonblocking(true).map_err(StartError::Accept)?;
            let uds = interprocess::os::unix::uds_local_socket::tokio::Stream::try_from(
                OwnedFd::from(ours),
            )
            .map_err(StartError::Accept)?;
            let stream = AsyncStream::from(uds);
            let (mut reader, mut writer) = tokio::io::split(stream);
            let hello = supervisor_handshake(&mut reader, &mut writer)
                .await
                .map_err(|error| StartError::Handshake {
                    error,
                    stderr: String::new(),
                })?;
            let (reader, writer) = crate::socket_halves::split_async(reader.unsplit(writer))
                .map_err(StartError::Accept)?;
            Ok(StartedWorker {
                pid,
                engine: hello.engine,
                child: WorkerProcess::Scripted(ScriptedProcess { control }),
                reader,
                writer,
                stderr_tail: StderrTail::default(),
                taken,
            })
        })
    }
}

/// The test's and the supervisor's hold on one fake worker.
pub struct ScriptedControl {
    pid: u32,
    /// How it ended, once it did.
    exit: watch::Sender<Option<Exit>>,
    /// Its end of the socket, to cut it when it is killed.
    stream: Mutex<Option<UnixStream>>,
    /// The frames it received, in order.
    seen: Mutex<Vec<ToWorker>>,
}

impl ScriptedControl {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A signal from the supervisor: TERM and KILL end the fake as they would a worker.
    pub fn signal(&self, signal: Signal) {
        if matches!(signal, Signal::SIGTERM | Signal::SIGKILL) {
            self.end(Exit::Signal(signal as i32));
        }
    }

    /// How it ended, if it did (as a host would read it).
    pub fn exit(&self) -> Option<String> {
        self.exit.borrow().as_ref().map(Exit::to_string)
    }

    /// How many pings it received.
    pub fn pings(&self) -> usize {
        self.seen
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|f| matches!(f, ToWorker::Ping { .. }))
                    .count()
            })
            .unwrap_or_default()
    }

    /// The frames it received (pings left out).
    pub fn seen(&self) -> Vec<ToWorker> {
        self.seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|f| !matches!(f, ToWorker::Ping { .. }))
            .collect()
    }

    fn end(&self, how: Exit) {
        self.exit.send_if_modified(|exit| {
            let first = exit.is_none();
            if first {
                *exit = Some(how);
            }
            first
        });
        if let Ok(mut stream) = self.stream.lock() {
            if let Some(stream) = stream.take() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn serve(
        &self,
        stream: UnixStream,
        language: cellvisor_ipc::Language,
        script: &Script,
        taken: &TakenRecord,
    ) {
        let mut reader = &stream;
        let mut writer = &stream;
        if worker_handshake(&mut reader, &mut writer, language, "fake 1.0").is_err() {
            self.end(Exit::Code(1));
            return;
        }
        let mut hanging: Option<u64> = None;
        let mut send = |frame: FromWorker| write_frame(&mut writer, &frame).is_ok();
        while self.exit().is_none() {
            let Ok(Some(frame)) = read_frame::<_, ToWorker>(&mut reader) else {
                break;
            };
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(frame.clone());
            }
            let alive = match frame {
                ToWorker::Ping { seq } if script.answer_pings.load(Ordering::SeqCst) => {
                    send(FromWorker::Pong { seq })
                }
                // A worker that dies as each cell reaches it, before starting it (as one
                // that cannot start its threads does).
                ToWorker::Execute(cell) if cell.code == "die-unstarted" => {
                    self.end(Exit::Code(1));
                    false
                }
                ToWorker::Execute(cell) if cell.task != StateTask::Code => {
                    let report = fake_state_task(&cell.task, script);
                    let cell_id = cell.cell_id;
                    send(FromWorker::State { cell_id, report })
                        && send(FromWorker::Done {
                            cell_id,
                            outcome: CellOutcome::Completed,
                            processes_ended: 0,
                            processes_seen: 0,
                            usage: Default::default(),
                        })
                }
                ToWorker::Execute(cell) => {
                    let cell_id = cell.cell_id;
                    if taken.record(cell_id).is_err() {
                        self.end(Exit::Code(1));
                        return;
                    }
                    let done = |outcome| FromWorker::Done {
                        cell_id,
                        outcome,
                        processes_ended: 0,
                        processes_seen: 0,
                        usage: Default::default(),
                    };
                    match cell.code.as_str() {
                        "hang" => {
                            hanging = Some(cell_id);
                            true
                        }
                        "crash" => {
                            self.end(Exit::Signal(Signal::SIGSEGV as i32));
                            false
                        }
                        "fail" => send(done(CellOutcome::Failed {
                            summary: "failed".into(),
                        })),
                        code => {
                            let text = code.strip_prefix("ok:").unwrap_or(code);
                            send(FromWorker::Output {
                                cell_id,
                                stream: OutputStream::Stdout,
                                data: format!("{text}\n").into_bytes(),
                            }) && send(done(CellOutcome::Completed))
                        }
                    }
                }
                ToWorker::Interrupt { cell_id }
                    if hanging == Some(cell_id)
                        && script.honour_interrupts.load(Ordering::SeqCst) =>
                {
                    hanging = None;
                    // As a real worker does after ending the cell's processes.
                    send(FromWorker::Done {
                        cell_id,
                        outcome: CellOutcome::Interrupted,
                        processes_ended: SCRIPTED_PROCESSES_ENDED,
                        processes_seen: SCRIPTED_PROCESSES_ENDED,
                        usage: Default::default(),
                    })
                }
                ToWorker::Shutdown => {
                    self.end(Exit::Code(0));
                    false
                }
                _ => true,
            };
            if !alive {
                break;
            }
        }
        self.end(Exit::Code(0));
    }
}

/// A fake worker's state task: a save writes its reason into the file (a load reads it back
/// as the snapshot's reason), the namespace is always `x`, `conn` is never saveable.
fn fake_state_task(task: &StateTask, script: &Script) -> StateReport {
    let skipped = || {
        vec![SkippedName {
            name: "conn".into(),
            why: "socket objects cannot be saved".into(),
        }]
    };
    match task {
        StateTask::Save(_) if script.refuse_saves.load(Ordering::SeqCst) => {
            StateReport::Refused(StateRefusal::TooBig { bytes: 9, max: 8 })
        }
        StateTask::Save(order) => {
            let path = std::path::Path::new(&order.path);
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(path, &order.reason));
            match written {
                Ok(()) => StateReport::Saved {
                    bytes: order.reason.len() as u64,
                    saved: vec!["x".into()],
                    skipped: skipped(),
                },
                Err(err) => StateReport::Refused(StateRefusal::Failed {
                    why: err.to_string(),
                }),
            }
        }
        StateTask::Load(order) => match std::fs::read_to_string(&order.path) {
            Ok(reason) => StateReport::Loaded {
                restored: vec!["x".into()],
                skipped: skipped(),
                meta: SnapshotMeta {
                    language: cellvisor_ipc::Language::Python,
                    taken_at: "2026-12-02T07:00:00Z".into(),
                    reason,
                    node: "fake-node".into(),
                    saved: vec!["x".into()],
                    skipped: skipped(),
                    payload_bytes: 0,
                    engine: "fake 1.0".into(),
                },
            },
            Err(_) => StateReport::Refused(StateRefusal::Missing),
        },
        StateTask::Names | StateTask::Code => StateReport::Names(Vec::new()),
    }
}

/// The supervisor's side of a fake worker's "process".
pub struct ScriptedProcess {
    control: Arc<ScriptedControl>,
}

impl ScriptedProcess {
    pub fn control(&self) -> Arc<ScriptedControl> {
        Arc::clone(&self.control)
    }

    pub async fn wait(&mut self) -> Exit {
        let mut exit = self.control.exit.subscribe();
        let how = match exit.wait_for(Option::is_some).await {
            Ok(how) => how.clone().unwrap_or(Exit::Unknown),
            Err(_) => Exit::Unknown,
        };
        how
    }

    pub fn is_running(&self) -> bool {
        self.control.exit().is_none()
    }
}
