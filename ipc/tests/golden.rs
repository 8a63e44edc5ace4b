//! Golden frames: one checked-in example of every message, as the bytes that travel.
//!
//! Each example is encoded and compared with `tests/golden/frames.txt`, and each checked-in
//! frame is decoded and compared with the example, so any change to the wire (a field added,
//! reordered or retyped, a variant moved) fails here. After a deliberate change, bump
//! `PROTOCOL_VERSION` and regenerate the file:
//!
//!     CELLVISOR_BLESS=1 cargo test -p cellvisor-ipc --test golden

use cellvisor_ipc::frame::{decode, encode};
use cellvisor_ipc::state::{
    LoadOrder, NameInfo, SaveOrder, SkippedName, SnapshotMeta, StateRefusal, StateReport, StateTask,
};
use cellvisor_ipc::{
    CellOutcome, DoneUsage, ExecuteCell, FromWorker, Language, OutputStream, ToWorker, ToolInfo,
    PROTOCOL_VERSION,
};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The length header in front of every frame's payload.
const HEADER_BYTES: usize = 4;

/// A name for every variant; the match has no wildcard, so a new message cannot be added
/// without coming here (and then into [`to_worker_examples`]).
fn to_worker_name(message: &ToWorker) -> &'static str {
    match message {
        ToWorker::Hello { .. } => "to-worker/hello",
        ToWorker::Execute(ExecuteCell { task, .. }) => match task {
            StateTask::Code => "to-worker/execute",
            StateTask::Save(_) => "to-worker/execute-save",
            StateTask::Load(_) => "to-worker/execute-load",
            StateTask::Names => "to-worker/execute-names",
        },
        ToWorker::Interrupt { .. } => "to-worker/interrupt",
        ToWorker::Ping { .. } => "to-worker/ping",
        ToWorker::ToolResult { outcome: Ok(_), .. } => "to-worker/tool-result-ok",
        ToWorker::ToolResult {
            outcome: Err(_), ..
        } => "to-worker/tool-result-err",
        ToWorker::Shutdown => "to-worker/shutdown",
    }
}

/// As [`to_worker_name`], for the worker's messages.
fn from_worker_name(message: &FromWorker) -> &'static str {
    match message {
        FromWorker::Hello {
            language: Language::Python,
            ..
        } => "from-worker/hello-py",
        FromWorker::Hello {
            language: Language::JavaScript,
            ..
        } => "from-worker/hello-js",
        FromWorker::Hello {
            language: Language::Lua,
            ..
        } => "from-worker/hello-lua",
        FromWorker::Output {
            stream: OutputStream::Stdout,
            ..
        } => "from-worker/output-stdout",
        FromWorker::Output {
            stream: OutputStream::Stderr,
            ..
        } => "from-worker/output-stderr",
        FromWorker::Display { .. } => "from-worker/display",
        FromWorker::Done {
            outcome: CellOutcome::Completed,
            ..
        } => "from-worker/done-completed",
        FromWorker::Done {
            outcome: CellOutcome::Failed { .. },
            ..
        } => "from-worker/done-failed",
        FromWorker::Done {
            outcome: CellOutcome::Interrupted,
            ..
        } => "from-worker/done-interrupted",
        FromWorker::Done {
            outcome: CellOutcome::OutOfMemory { .. },
            ..
        } => "from-worker/done-out-of-memory",
        FromWorker::Pong { .. } => "from-worker/pong",
        FromWorker::ToolCall { .. } => "from-worker/tool-call",
        FromWorker::Fatal { .. } => "from-worker/fatal",
        FromWorker::Notice { .. } => "from-worker/notice",
        FromWorker::Yield { .. } => "from-worker/yield",
        FromWorker::State { report, .. } => match report {
            StateReport::Saved { .. } => "from-worker/state-saved",
            StateReport::Loaded { .. } => "from-worker/state-loaded",
            StateReport::Names(_) => "from-worker/state-names",
            StateReport::Refused(_) => "from-worker/state-refused",
        },
    }
}

fn state_task(task: StateTask) -> ToWorker {
    ToWorker::Execute(ExecuteCell {
        cell_id: 8,
        code: String::new(),
        cwd: None,
        tools: Vec::new(),
        session_env: Vec::new(),
        env_changes: Vec::new(),
        task,
    })
}

fn state_examples() -> Vec<FromWorker> {
    let skipped = vec![SkippedName {
        name: "conn".into(),
        why: "socket objects cannot be saved".into(),
    }];
    let report = |report| FromWorker::State { cell_id: 8, report };
    vec![
        report(StateReport::Saved {
            bytes: 1234,
            saved: vec!["df".into()],
            skipped: skipped.clone(),
        }),
        report(StateReport::Loaded {
            restored: vec!["df".into(), "np".into()],
            skipped: skipped.clone(),
            meta: SnapshotMeta {
                language: Language::Python,
                taken_at: "2026-12-02T07:00:00Z".into(),
                reason: "idle eviction".into(),
                node: "node-a".into(),
                saved: vec!["df".into(), "np".into()],
                skipped,
                payload_bytes: 1200,
                engine: "Python 3.12.3".into(),
            },
        }),
        report(StateReport::Names(vec![NameInfo {
            name: "df".into(),
            kind: "DataFrame".into(),
            size_bytes: Some(4096),
            saveable: true,
            note: None,
        }])),
        report(StateReport::Refused(StateRefusal::TooBig {
            bytes: 300,
            max: 256,
        })),
    ]
}

fn to_worker_examples() -> Vec<ToWorker> {
    vec![
        ToWorker::Hello {
            version: PROTOCOL_VERSION,
        },
        ToWorker::Execute(ExecuteCell {
            cell_id: 7,
            code: "print('é')\n".into(),
            cwd: Some("/tmp/work".into()),
            tools: vec![ToolInfo {
                name: "search".into(),
                description: "finds things".into(),
                input_schema_json: r#"{"type":"object"}"#.into(),
            }],
            session_env: vec![("CELLVISOR_SESSION".into(), "notes".into())],
            env_changes: vec![
                ("MYAPP_MODE".into(), Some("dev".into())),
                ("LC_ALL".into(), None),
            ],
            task: Default::default(),
        }),
        state_task(StateTask::Save(Box::new(SaveOrder {
            path: "/state/s/py/latest.snap".into(),
            key: vec![1, 2, 3],
            max_bytes: 1 << 28,
            taken_at: "2026-12-02T07:00:00Z".into(),
            reason: "idle eviction".into(),
            node: "node-a".into(),
        }))),
        state_task(StateTask::Load(Box::new(LoadOrder {
            path: "/state/s/py/latest.snap".into(),
            key: vec![1, 2, 3],
            replace: true,
        }))),
        state_task(StateTask::Names),
        ToWorker::Interrupt { cell_id: 300 },
        ToWorker::Ping { seq: u64::MAX },
        ToWorker::ToolResult {
            call_id: 1,
            outcome: Ok(r#"{"hits":2}"#.into()),
        },
        ToWorker::ToolResult {
            call_id: 2,
            outcome: Err("no such tool".into()),
        },
        ToWorker::Shutdown,
    ]
}

fn from_worker_examples() -> Vec<FromWorker> {
    let hello = |language| FromWorker::Hello {
        version: PROTOCOL_VERSION,
        pid: 4242,
        language,
        engine: "Engine 1.0".into(),
    };
    vec![
        hello(Language::Python),
        hello(Language::JavaScript),
        hello(Language::Lua),
        FromWorker::Output {
            cell_id: 7,
            stream: OutputStream::Stdout,
            data: b"out\n".to_vec(),
        },
        FromWorker::Output {
            cell_id: 7,
            stream: OutputStream::Stderr,
            data: vec![0xff, 0x00, b'e'],
        },
        FromWorker::Display {
            cell_id: 7,
            bundle_json: r#"{"text/plain":"x"}"#.into(),
        },
        FromWorker::Done {
            cell_id: 7,
            outcome: CellOutcome::Completed,
            processes_ended: 0,
            processes_seen: 0,
            usage: Default::default(),
        },
        FromWorker::Done {
            cell_id: 8,
            outcome: CellOutcome::Failed {
                summary: "ValueError: bad".into(),
            },
            processes_ended: 0,
            processes_seen: 0,
            usage: Default::default(),
        },
        FromWorker::Done {
            cell_id: 9,
            outcome: CellOutcome::Interrupted,
            processes_ended: 28,
            processes_seen: 30,
            usage: DoneUsage {
                cpu_ticks: 4321,
                rss_bytes: 17 << 20,
                descriptors_open: 12,
                descriptors_limit: 1024,
            },
        },
        FromWorker::Done {
            cell_id: 10,
            outcome: CellOutcome::OutOfMemory {
                summary: "InternalError: out of memory".into(),
                limit_bytes: 64 << 20,
                used_bytes: (64 << 20) - 12,
            },
            processes_ended: 0,
            processes_seen: 0,
            usage: Default::default(),
        },
        FromWorker::Pong { seq: 5 },
        FromWorker::ToolCall {
            cell_id: 7,
            call_id: 1,
            name: "search".into(),
            args_json: r#"{"q":"a"}"#.into(),
        },
        FromWorker::Fatal {
            message: "interpreter died".into(),
        },
        FromWorker::Notice {
            message: "startup module failed".into(),
        },
        FromWorker::Yield { cell_id: 7 },
    ]
    .into_iter()
    .chain(state_examples())
    .collect()
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/frames.txt")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex digits"))
        .collect()
}

/// Every example's name and frame, in order.
fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let to = to_worker_examples()
        .into_iter()
        .map(|m| (to_worker_name(&m), encode(&m).expect("encodes")));
    let from = from_worker_examples()
        .into_iter()
        .map(|m| (from_worker_name(&m), encode(&m).expect("encodes")));
    to.chain(from).collect()
}

fn render() -> String {
    let mut out = String::from(
        "# One bincode frame (length header + payload, hex) of every ipc message; see\n\
         # ipc/tests/golden.rs. Regenerate: CELLVISOR_BLESS=1 cargo test -p cellvisor-ipc --test golden\n",
    );
    let _ = writeln!(out, "protocol-version {PROTOCOL_VERSION}");
    for (name, frame) in frames() {
        let _ = writeln!(out, "{name} {}", hex(&frame));
    }
    out
}

#[test]
fn every_message_has_a_distinct_example() {
    let names: Vec<&str> = frames().iter().map(|(name, _)| *name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}

#[test]
fn frames_match_the_golden_file() {
    if std::env::var_os("CELLVISOR_BLESS").is_some() {
        std::fs::write(golden_path(), render()).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(golden_path()).expect("tests/golden/frames.txt");
    let mut lines = golden.lines().filter(|line| !line.starts_with('#'));
    let version = lines
        .next()
        .and_then(|line| line.strip_prefix("protocol-version "))
        .expect("a protocol-version line");
    assert_eq!(
        version,
        PROTOCOL_VERSION.to_string(),
        "PROTOCOL_VERSION changed: regenerate with CELLVISOR_BLESS=1"
    );
    let checked_in: Vec<(&str, Vec<u8>)> = lines
        .map(|line| {
            let (name, frame) = line.split_once(' ').expect("`name hex` lines");
            (name, unhex(frame))
        })
        .collect();
    let ours = frames();
    let names = |frames: &[(&str, Vec<u8>)]| -> Vec<String> {
        frames.iter().map(|(name, _)| name.to_string()).collect()
    };
    assert_eq!(
        names(&checked_in),
        names(&ours),
        "the set of messages changed"
    );
    for ((name, golden), (_, encoded)) in checked_in.iter().zip(&ours) {
        assert_eq!(
            hex(encoded),
            hex(golden),
            "{name}: the wire changed without a PROTOCOL_VERSION bump (bump it, then bless)"
        );
    }
    // And back: each checked-in frame decodes to its example and encodes to itself.
    let to_examples = to_worker_examples();
    let from_examples = from_worker_examples();
    for (index, (name, frame)) in checked_in.iter().enumerate() {
        let payload = &frame[HEADER_BYTES..];
        let reencoded = if index < to_examples.len() {
            let message: ToWorker = decode(payload).expect("decodes");
            assert_eq!(message, to_examples[index], "{name}");
            encode(&message).expect("encodes")
        } else {
            let message: FromWorker = decode(payload).expect("decodes");
            assert_eq!(message, from_examples[index - to_examples.len()], "{name}");
            encode(&message).expect("encodes")
        };
        assert_eq!(&reencoded, frame, "{name}");
    }
}
