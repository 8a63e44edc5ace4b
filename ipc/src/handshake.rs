//! The first exchange on every supervisor<->worker connection: each side sends `Hello` with
//! its [`PROTOCOL_VERSION`] and checks the other's, so a stale binary fails loudly at start
//! instead of misreading frames later.

use crate::frame::{read_frame, read_frame_async, write_frame, write_frame_async, FrameError};
use crate::message::{FromWorker, Language, ToWorker, PROTOCOL_VERSION};
use std::io::{Read, Write};
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The two sides were built from different protocol versions; talking on would misread frames.
    #[error("peer speaks protocol version {theirs}, we speak {ours}")]
    VersionMismatch {
        /// The version this side speaks.
        ours: u32,
        /// The version the peer announced.
        theirs: u32,
    },
    /// The peer's first frame was not `Hello` (it is not a cellvisor peer, or out of step).
    #[error("peer opened with {0} instead of Hello")]
    UnexpectedFirstFrame(String),
    /// The peer closed before its `Hello` (a worker that died while starting).
    #[error("peer closed the connection before saying Hello")]
    Closed,
    /// The `Hello` frame could not be read or written.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// What a worker says about itself in its `Hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHello {
    /// The worker's process id, for signals and for accounting its process tree.
    pub pid: u32,
    /// The language it runs, checked against the one the supervisor started.
    pub language: Language,
    /// Engine and version, shown in `status`.
    pub engine: String,
}

/// Worker side: announce ourselves, then wait for the supervisor's `Hello`.
pub fn worker_handshake<R: Read, W: Write>(
    reader: &mut R,
    writer: &mut W,
    language: Language,
    engine: &str,
) -> Result<(), HandshakeError> {
    write_frame(
        writer,
        &FromWorker::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            language,
            engine: engine.to_string(),
        },
    )?;
    match read_frame::<_, ToWorker>(reader)? {
        Some(ToWorker::Hello { version }) => check_version(version),
        Some(other) => Err(HandshakeError::UnexpectedFirstFrame(format!("{other:?}"))),
        None => Err(HandshakeError::Closed),
    }
}

/// Supervisor side: send our `Hello`, then read and check the worker's.
pub async fn supervisor_handshake<R, W>(
    reader: &mut R,
    writer: &mut W,
) -> Result<WorkerHello, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    write_frame_async(
        writer,
        &ToWorker::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .await?;
    match read_frame_async::<_, FromWorker>(reader).await? {
        Some(FromWorker::Hello {
            version,
            pid,
            language,
            engine,
        }) => {
            check_version(version)?;
            Ok(WorkerHello {
                pid,
                language,
                engine,
            })
        }
        Some(other) => Err(HandshakeError::UnexpectedFirstFrame(kind_of(&other))),
        None => Err(HandshakeError::Closed),
    }
}

fn check_version(theirs: u32) -> Result<(), HandshakeError> {
    if theirs == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(HandshakeError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs,
        })
    }
}

fn kind_of(frame: &FromWorker) -> String {
    let debug = format!("{frame:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{bind_async, connect};
    use interprocess::local_socket::traits::tokio::Listener as _;

    #[tokio::test(flavor = "multi_thread")]
    async fn both_sides_agree_over_a_real_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sock");
        let listener = bind_async(&path).unwrap();
        let worker_path = path.clone();
        let worker = std::thread::spawn(move || {
            let stream = connect(&worker_path).unwrap();
            worker_handshake(&mut &stream, &mut &stream, Language::Lua, "Lua 5.4").unwrap();
        });
        let (mut rx, mut tx) = tokio::io::split(listener.accept().await.unwrap());
        let hello = supervisor_handshake(&mut rx, &mut tx).await.unwrap();
        assert_eq!(hello.language, Language::Lua);
        assert_eq!(hello.engine, "Lua 5.4");
        worker.join().unwrap();
    }

    #[tokio::test]
    async fn a_version_mismatch_is_named() {
        let mut from_worker = Vec::new();
        write_frame(
            &mut from_worker,
            &FromWorker::Hello {
                version: PROTOCOL_VERSION + 1,
                pid: 1,
                language: Language::Python,
                engine: String::new(),
            },
        )
        .unwrap();
        let mut sink = Vec::new();
        let err = supervisor_handshake(&mut from_worker.as_slice(), &mut sink)
            .await
            .unwrap_err();
        assert!(
            matches!(err, HandshakeError::VersionMismatch { .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_first_frame_other_than_hello_is_refused() {
        let mut from_worker = Vec::new();
        write_frame(&mut from_worker, &FromWorker::Pong { seq: 1 }).unwrap();
        let mut sink = Vec::new();
        let err = supervisor_handshake(&mut from_worker.as_slice(), &mut sink)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Pong"), "{err}");
    }
}
