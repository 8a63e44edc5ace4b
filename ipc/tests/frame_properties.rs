//! Property tests of the frame decoder: arbitrary and mutated bytes from a peer never panic
//! and always end in a frame or a typed [`FrameError`].
//!
//! Cases per property: proptest's `PROPTEST_CASES` (256 unless set; CI keeps the default,
//! a recorded run uses 100000).

use cellvisor_ipc::frame::{decode, encode, read_frame};
use cellvisor_ipc::{
    CellOutcome, ExecuteCell, FrameError, FromWorker, Language, OutputStream, ToWorker, ToolInfo,
};
use proptest::prelude::*;
use std::io::Cursor;

/// Real messages of both directions, encoded: the material mutations start from.
fn sample_frames() -> Vec<Vec<u8>> {
    let to_worker = [
        ToWorker::Hello { version: 1 },
        ToWorker::Execute(ExecuteCell {
            cell_id: 7,
            code: "print('é')".into(),
            cwd: Some("/tmp".into()),
            tools: vec![ToolInfo {
                name: "t".into(),
                description: "d".into(),
                input_schema_json: "{}".into(),
            }],
            session_env: vec![("CELLVISOR_SESSION".into(), "s".into())],
            env_changes: vec![("A".into(), Some("1".into())), ("B".into(), None)],
            task: Default::default(),
        }),
        ToWorker::Interrupt { cell_id: 3 },
        ToWorker::Ping { seq: u64::MAX },
        ToWorker::ToolResult {
            call_id: 1,
            outcome: Err("no".into()),
        },
        ToWorker::Shutdown,
    ];
    let from_worker = [
        FromWorker::Hello {
            version: 1,
            pid: 42,
            language: Language::Lua,
            engine: "Lua 5.4".into(),
        },
        FromWorker::Output {
            cell_id: 1,
            stream: OutputStream::Stderr,
            data: vec![0, 255, 10],
        },
        FromWorker::Done {
            cell_id: 1,
            outcome: CellOutcome::Completed,
            processes_ended: 0,
            processes_seen: 0,
            usage: Default::default(),
        },
        FromWorker::Fatal {
            message: "x".into(),
        },
    ];
    let mut frames: Vec<Vec<u8>> = to_worker
        .iter()
        .map(|m| encode(m).expect("encode"))
        .collect();
    frames.extend(from_worker.iter().map(|m| encode(m).expect("encode")));
    frames
}

/// Reads frames until the stream ends or one fails; every failure must be a typed error.
fn read_all<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<usize, FrameError> {
    let mut reader = Cursor::new(bytes);
    let mut frames = 0;
    while read_frame::<_, T>(&mut reader)?.is_some() {
        frames += 1;
    }
    Ok(frames)
}

proptest! {
    #[test]
    fn arbitrary_bytes_are_frames_or_typed_errors(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_all::<FromWorker>(&bytes);
        let _ = read_all::<ToWorker>(&bytes);
        let _ = decode::<FromWorker>(&bytes);
        let _ = decode::<ToWorker>(&bytes);
    }

    #[test]
    fn mutated_frames_are_frames_or_typed_errors(
        which in 0usize..10,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let frames = sample_frames();
        let mut bytes = frames[which % frames.len()].clone();
        for (at, value) in edits {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        match read_all::<FromWorker>(&bytes) {
            Ok(_) | Err(FrameError::TooLarge { .. }) | Err(FrameError::Truncated { .. })
            | Err(FrameError::Decode(_)) | Err(FrameError::TrailingBytes { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error from bytes in memory: {other}"),
        }
        let _ = read_all::<ToWorker>(&bytes);
    }

    #[test]
    fn every_message_survives_a_round_trip(cell_id in any::<u64>(), code in ".*", data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let execute = ToWorker::Execute(ExecuteCell { cell_id, code, cwd: None, tools: Vec::new(), session_env: Vec::new(), env_changes: Vec::new(), task: Default::default() });
        let frame = encode(&execute).expect("encode");
        let back: ToWorker = read_frame(&mut Cursor::new(&frame)).expect("read").expect("a frame");
        prop_assert_eq!(back, execute);
        let output = FromWorker::Output { cell_id, stream: OutputStream::Stdout, data };
        let frame = encode(&output).expect("encode");
        let back: FromWorker = read_frame(&mut Cursor::new(&frame)).expect("read").expect("a frame");
        prop_assert_eq!(back, output);
    }
}
