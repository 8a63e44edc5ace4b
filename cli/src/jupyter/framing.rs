//! The binary framing of Jupyter's `v1.kernel.websocket.jupyter.org` WebSocket subprotocol,
//! spoken when a client offers it (JupyterLab does): one binary frame per message, a table of
//! little-endian `u64` offsets (their count first), then the channel's name and the message's
//! parts (`header`, `parent_header`, `metadata`, `content` as JSON, then any buffers).
//! Converted here to and from the JSON object of the legacy framing, so the rest of the
//! gateway reads and writes one shape.

use super::message::BadMessage;
use serde_json::{Map, Value};

/// The subprotocol's name, as a client offers it.
pub const V1_PROTOCOL: &str = "v1.kernel.websocket.jupyter.org";

/// The JSON parts of a message, in the order the framing carries them.
const PARTS: [&str; 4] = ["header", "parent_header", "metadata", "content"];

/// One binary frame of `message` (a legacy-framing JSON object naming its `channel`).
/// Buffers are not carried: the gateway's kernels send none.
pub fn encode(message: &Value) -> Vec<u8> {
    let channel = message["channel"].as_str().unwrap_or("iopub").as_bytes();
    let parts: Vec<Vec<u8>> = PARTS
        .iter()
        .map(|key| {
            let part = message
                .get(*key)
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new()));
            serde_json::to_vec(&part).unwrap_or_else(|_| b"{}".to_vec())
        })
        .collect();
    let count = 2 + parts.len();
    let mut offsets = Vec::with_capacity(count);
    let mut at = 8 * (1 + count);
    offsets.push(at);
    at += channel.len();
    offsets.push(at);
    for part in &parts {
        at += part.len();
        offsets.push(at);
    }
    let mut frame = Vec::with_capacity(at);
    frame.extend_from_slice(&(count as u64).to_le_bytes());
    for offset in offsets {
        frame.extend_from_slice(&(offset as u64).to_le_bytes());
    }
    frame.extend_from_slice(channel);
    for part in parts {
        frame.extend_from_slice(&part);
    }
    frame
}

/// The legacy-framing JSON object of one binary frame (its channel as `channel`); buffers,
/// which no request the kernels answer carries, are dropped.
pub fn decode(frame: &[u8]) -> Result<Value, BadMessage> {
    let bad = |why: &str| BadMessage::NotJson(format!("a v1 binary frame {why}"));
    let word = |i: usize| -> Option<usize> {
        let bytes = frame.get(8 * i..8 * (i + 1))?;
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        usize::try_from(u64::from_le_bytes(word)).ok()
    };
    let count = word(0).ok_or_else(|| bad("is shorter than its offset count"))?;
    if !(2..=64).contains(&count) {
        return Err(bad("must have 2 to 64 offsets"));
    }
    let offsets: Vec<usize> = (1..=count)
        .map(word)
        .collect::<Option<_>>()
        .ok_or_else(|| bad("is shorter than its offsets"))?;
    let in_order = offsets.windows(2).all(|w| w[0] <= w[1]);
    if !in_order || offsets[count - 1] > frame.len() || offsets[0] < 8 * (1 + count) {
        return Err(bad("has offsets out of order or past its end"));
    }
    let slice = |i: usize| &frame[offsets[i]..offsets[i + 1]];
    let channel =
        std::str::from_utf8(slice(0)).map_err(|_| bad("has a channel that is not UTF-8"))?;
    let mut message = Map::new();
    message.insert("channel".into(), Value::String(channel.to_string()));
    for (index, key) in PARTS.iter().enumerate() {
        if index + 2 >= count {
            break;
        }
        let part: Value = serde_json::from_slice(slice(index + 1))
            .map_err(|e| BadMessage::NotJson(format!("the {key} of a v1 binary frame: {e}")))?;
        message.insert((*key).to_string(), part);
    }
    Ok(Value::Object(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What jupyter_server's `serialize_msg_to_ws_v1` writes for the same message.
    fn reference(channel: &str, parts: &[&str]) -> Vec<u8> {
        let mut offsets = vec![8 * (1 + 1 + parts.len() + 1)];
        offsets.push(offsets[0] + channel.len());
        for part in parts {
            offsets.push(offsets.last().unwrap() + part.len());
        }
        let mut out = (offsets.len() as u64).to_le_bytes().to_vec();
        for offset in &offsets {
            out.extend_from_slice(&(*offset as u64).to_le_bytes());
        }
        out.extend_from_slice(channel.as_bytes());
        for part in parts {
            out.extend_from_slice(part.as_bytes());
        }
        out
    }

    #[test]
    fn a_message_is_framed_as_jupyter_server_frames_it_and_read_back() {
        let message = json!({
            "channel": "shell",
            "header": {"msg_id": "m1", "msg_type": "execute_request"},
            "parent_header": {},
            "metadata": {},
            "content": {"code": "1"},
            "msg_id": "m1", "msg_type": "execute_request", "buffers": [],
        });
        let frame = encode(&message);
        let parts = [
            r#"{"msg_id":"m1","msg_type":"execute_request"}"#,
            "{}",
            "{}",
            r#"{"code":"1"}"#,
        ];
        assert_eq!(frame, reference("shell", &parts));
        let read = decode(&frame).unwrap();
        for key in ["channel", "header", "parent_header", "metadata", "content"] {
            assert_eq!(read[key], message[key], "{key}");
        }
    }

    #[test]
    fn a_frame_with_buffers_drops_them_and_a_short_one_lacks_parts() {
        let with_buffer = reference("shell", &[r#"{"msg_type":"x"}"#, "{}", "{}", "{}", "raw"]);
        assert_eq!(decode(&with_buffer).unwrap()["header"]["msg_type"], "x");
        let header_only = reference("control", &[r#"{"msg_type":"y"}"#]);
        let read = decode(&header_only).unwrap();
        assert_eq!(read["channel"], "control");
        assert!(read.get("content").is_none());
    }

    #[test]
    fn broken_frames_are_refused_with_a_reason() {
        assert!(decode(b"").is_err());
        assert!(decode(&1u64.to_le_bytes()).is_err(), "one offset");
        let mut frame = reference("shell", &["{}"]);
        frame.truncate(20);
        assert!(decode(&frame).is_err(), "cut short");
        let mut past = reference("shell", &["{}"]);
        past[16..24].copy_from_slice(&1000u64.to_le_bytes());
        assert!(decode(&past).is_err(), "an offset past the end");
        let not_json = reference("shell", &["{nope"]);
        let err = decode(&not_json).unwrap_err().to_string();
        assert!(err.contains("header"), "{err}");
        let huge = reference("shell", &["{}"]);
        let mut huge = huge;
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_err(), "an absurd count");
    }
}
