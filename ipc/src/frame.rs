//! Length-prefixed bincode frames.
//!
//! A frame is a little-endian `u32` payload length followed by the bincode payload. The length
//! is checked against [`MAX_FRAME_BYTES`] before anything is allocated, so a corrupt or hostile
//! peer costs an error on that connection and nothing more.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, Read, Write};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest payload accepted or sent: big enough for any display bundle, small enough that a
/// bogus length prefix cannot make either side allocate without bound.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

const HEADER_BYTES: usize = 4;

/// Why a frame could not be read or written. Every variant ends the connection it came from.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix asks for more than [`MAX_FRAME_BYTES`]: a bogus or hostile peer.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The length the frame claimed.
        len: usize,
        /// The most either side accepts.
        max: usize,
    },
    /// The peer went away mid-frame (it crashed or was killed while writing).
    #[error("connection closed in the middle of a frame ({got} of {expected} bytes)")]
    Truncated {
        /// Bytes that arrived.
        got: usize,
        /// Bytes the length prefix promised.
        expected: usize,
    },
    /// The payload is not a message of this protocol version.
    #[error("undecodable frame: {0}")]
    Decode(String),
    /// The payload decoded with bytes left over: the two sides disagree about a message.
    #[error("frame of {len} bytes has {extra} trailing bytes after its message")]
    TrailingBytes {
        /// The frame's length.
        len: usize,
        /// Bytes after the decoded message.
        extra: usize,
    },
    /// A message that bincode could not encode (a bug on the sending side).
    #[error("unencodable message: {0}")]
    Encode(String),
    /// The connection itself failed.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME_BYTES>()
}

/// Encodes `message` into a complete frame (header included), ready for one `write_all`.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; HEADER_BYTES];
    bincode::serde::encode_into_std_write(message, &mut buf, bincode_config())
        .map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = buf.len() - HEADER_BYTES;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    let header = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        max: MAX_FRAME_BYTES,
    })?;
    buf[..HEADER_BYTES].copy_from_slice(&header.to_le_bytes());
    Ok(buf)
}

/// Decodes one payload (without its header).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let (message, used) = bincode::serde::decode_from_slice(payload, bincode_config())
        .map_err(|e| FrameError::Decode(e.to_string()))?;
    if used != payload.len() {
        return Err(FrameError::TrailingBytes {
            len: payload.len(),
            extra: payload.len() - used,
        });
    }
    Ok(message)
}

fn payload_len(header: [u8; HEADER_BYTES]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    Ok(len)
}

/// Writes one frame.
pub fn write_frame<W: Write, T: Serialize>(writer: &mut W, message: &T) -> Result<(), FrameError> {
    writer.write_all(&encode(message)?)?;
    Ok(())
}

/// Reads one frame; `Ok(None)` is a clean end of stream between frames.
pub fn read_frame<R: Read, T: DeserializeOwned>(reader: &mut R) -> Result<Option<T>, FrameError> {
    let mut header = [0u8; HEADER_BYTES];
    if !read_exact_or_eof(reader, &mut header)? {
        return Ok(None);
    }
    let mut payload = vec![0u8; payload_len(header)?];
    let got = read_up_to(reader, &mut payload)?;
    if got < payload.len() {
        return Err(FrameError::Truncated {
            got,
            expected: payload.len(),
        });
    }
    decode(&payload).map(Some)
}

/// Fills `buf`; `false` on EOF before the first byte, `Truncated` on EOF after it.
fn read_exact_or_eof<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<bool, FrameError> {
    let got = read_up_to(reader, buf)?;
    match got {
        0 => Ok(false),
        n if n == buf.len() => Ok(true),
        n => Err(FrameError::Truncated {
            got: n,
            expected: buf.len(),
        }),
    }
}

fn read_up_to<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(filled)
}

/// Async twin of [`write_frame`], for the supervisor.
pub async fn write_frame_async<W, T>(writer: &mut W, message: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    writer.write_all(&encode(message)?).await?;
    writer.flush().await?;
    Ok(())
}

/// Async twin of [`read_frame`], for the supervisor.
pub async fn read_frame_async<R, T>(reader: &mut R) -> Result<Option<T>, FrameError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut header = [0u8; HEADER_BYTES];
    let got = read_up_to_async(reader, &mut header).await?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_BYTES {
        return Err(FrameError::Truncated {
            got,
            expected: HEADER_BYTES,
        });
    }
    let mut payload = vec![0u8; payload_len(header)?];
    let got = read_up_to_async(reader, &mut payload).await?;
    if got < payload.len() {
        return Err(FrameError::Truncated {
            got,
            expected: payload.len(),
        });
    }
    decode(&payload).map(Some)
}

async fn read_up_to_async<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
) -> Result<usize, FrameError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{CellOutcome, FromWorker, OutputStream, ToWorker};
    use std::io::Cursor;

    fn roundtrip(message: &FromWorker) -> FromWorker {
        let bytes = encode(message).unwrap();
        read_frame(&mut Cursor::new(bytes)).unwrap().unwrap()
    }

    #[test]
    fn messages_survive_a_round_trip() {
        let messages = [
            FromWorker::Output {
                cell_id: 7,
                stream: OutputStream::Stderr,
                data: b"caf\xc3\xa9 \xff".to_vec(),
            },
            FromWorker::Done {
                cell_id: 7,
                outcome: CellOutcome::Failed {
                    summary: "ZeroDivisionError: division by zero".into(),
                },
                processes_ended: 0,
                processes_seen: 0,
                usage: Default::default(),
            },
            FromWorker::Pong { seq: u64::MAX },
        ];
        for message in &messages {
            assert_eq!(&roundtrip(message), message);
        }
    }

    #[test]
    fn several_frames_read_back_in_order_then_clean_eof() {
        let mut bytes = Vec::new();
        for seq in 0..3 {
            write_frame(&mut bytes, &ToWorker::Ping { seq }).unwrap();
        }
        let mut cursor = Cursor::new(bytes);
        for seq in 0..3 {
            let got: ToWorker = read_frame(&mut cursor).unwrap().unwrap();
            assert_eq!(got, ToWorker::Ping { seq });
        }
        assert!(read_frame::<_, ToWorker>(&mut cursor).unwrap().is_none());
    }

    #[test]
    fn oversized_length_prefix_is_rejected_before_allocating() {
        let mut bytes = (u32::MAX).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let err = read_frame::<_, ToWorker>(&mut Cursor::new(bytes)).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len, .. } if len == u32::MAX as usize));
    }

    #[test]
    fn oversized_message_is_refused_by_the_sender() {
        let message = FromWorker::Output {
            cell_id: 1,
            stream: OutputStream::Stdout,
            data: vec![b'x'; MAX_FRAME_BYTES + 1],
        };
        assert!(matches!(encode(&message), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn truncated_header_and_payload_are_errors() {
        let err = read_frame::<_, ToWorker>(&mut Cursor::new(vec![1, 0])).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Truncated {
                got: 2,
                expected: 4
            }
        ));

        let mut bytes = encode(&ToWorker::Ping { seq: 300 }).unwrap();
        bytes.pop();
        let err = read_frame::<_, ToWorker>(&mut Cursor::new(bytes)).unwrap_err();
        assert!(matches!(err, FrameError::Truncated { .. }));
    }

    #[test]
    fn garbage_payload_is_a_decode_error() {
        let mut bytes = 3u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0xff, 0xff, 0xff]);
        let err = read_frame::<_, ToWorker>(&mut Cursor::new(bytes)).unwrap_err();
        assert!(matches!(err, FrameError::Decode(_)), "{err}");
    }

    #[test]
    fn trailing_bytes_inside_a_frame_are_an_error() {
        let mut frame = encode(&ToWorker::Shutdown).unwrap();
        frame.push(0);
        let len = (frame.len() - HEADER_BYTES) as u32;
        frame[..HEADER_BYTES].copy_from_slice(&len.to_le_bytes());
        let err = read_frame::<_, ToWorker>(&mut Cursor::new(frame)).unwrap_err();
        assert!(matches!(err, FrameError::TrailingBytes { extra: 1, .. }));
    }

    #[tokio::test]
    async fn async_reader_agrees_with_sync_writer() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &ToWorker::Ping { seq: 9 }).unwrap();
        bytes.extend_from_slice(&[5, 0]);
        let mut reader = bytes.as_slice();
        let got: Option<ToWorker> = read_frame_async(&mut reader).await.unwrap();
        assert_eq!(got, Some(ToWorker::Ping { seq: 9 }));
        let err = read_frame_async::<_, ToWorker>(&mut reader)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::Truncated { .. }));
    }
}
