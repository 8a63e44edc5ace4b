//! Jupyter messages as the legacy JSON framing carries them (one text frame each, with a
//! `channel`), read leniently (no `channel`: shell; no `date`, `version` or `session`:
//! allowed) and written whole (`header, msg_id, msg_type, parent_header, metadata, content,
//! buffers, channel`), the same shape a ZMQ kernel signs and sends in parts.

use serde_json::{json, Map, Value};

/// The protocol version the replies speak (what `kernel_info_reply` says too).
pub const PROTOCOL_VERSION: &str = "5.3";

/// Why a client's frame is not a message this kernel can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadMessage {
    /// Not JSON, or not an object.
    #[error("a frame must be one JSON object (a Jupyter message): {0}")]
    NotJson(String),
    /// No `header.msg_type` (or `msg_type`).
    #[error("the message has no header.msg_type: each message needs a header with its msg_id and msg_type")]
    NoType,
    /// A channel that is none of the kernel's.
    #[error("unknown channel {0:?}: the channels are shell, control, stdin and iopub")]
    Channel(String),
}

/// A request a client sent: what the kernel reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `shell`, `control` or `stdin` (shell when the frame names none).
    pub channel: String,
    /// The request's header as sent (the `parent_header` of everything it causes).
    pub header: Value,
    /// `header.msg_type`.
    pub msg_type: String,
    /// The client's session id (`header.session`), empty when absent.
    pub session: String,
    /// The request's content (an empty object when absent).
    pub content: Value,
}

impl Request {
    /// Reads one text frame.
    pub fn parse(text: &str) -> Result<Request, BadMessage> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| BadMessage::NotJson(e.to_string()))?;
        Request::from_value(value)
    }

    /// Reads one message already parsed (a binary frame's, say).
    pub fn from_value(value: Value) -> Result<Request, BadMessage> {
        let Value::Object(object) = value else {
            return Err(BadMessage::NotJson("not an object".into()));
        };
        let mut header = object.get("header").cloned().unwrap_or(Value::Null);
        if !header.is_object() {
            header = Value::Object(Map::new());
        }
        let msg_type = header["msg_type"]
            .as_str()
            .or_else(|| object.get("msg_type").and_then(Value::as_str))
            .filter(|t| !t.is_empty())
            .ok_or(BadMessage::NoType)?
            .to_string();
        if let Some(map) = header.as_object_mut() {
            map.entry("msg_type")
                .or_insert_with(|| Value::String(msg_type.clone()));
            if let Some(id) = object.get("msg_id").filter(|_| !map.contains_key("msg_id")) {
                map.insert("msg_id".into(), id.clone());
            }
        }
        let channel = match object.get("channel").and_then(Value::as_str) {
            None | Some("") => "shell".to_string(),
            Some(c @ ("shell" | "control" | "stdin" | "iopub")) => c.to_string(),
            Some(other) => return Err(BadMessage::Channel(other.to_string())),
        };
        let session = header["session"].as_str().unwrap_or_default().to_string();
        let content = match object.get("content") {
            Some(c @ Value::Object(_)) => c.clone(),
            _ => json!({}),
        };
        Ok(Request {
            channel,
            header,
            msg_type,
            session,
            content,
        })
    }
}

/// A message the kernel sends: a reply on the request's channel or an iopub broadcast.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// `shell`, `control` or `iopub`.
    pub channel: &'static str,
    /// Its type (`execute_reply`, `stream`, ...).
    pub msg_type: String,
    /// The header of the request that caused it (`{}` for none).
    pub parent_header: Value,
    /// Its content.
    pub content: Value,
    /// Its metadata (`{}` unless a reply says more).
    pub metadata: Value,
}

impl Outgoing {
    /// A message caused by the request whose header is `parent`.
    pub fn new(channel: &'static str, msg_type: &str, parent: &Value, content: Value) -> Self {
        Outgoing {
            channel,
            msg_type: msg_type.to_string(),
            parent_header: parent.clone(),
            content,
            metadata: json!({}),
        }
    }

    /// The whole message, with a fresh `msg_id`, `session` the kernel's session id and
    /// `date` now.
    pub fn to_json(&self, session: &str) -> Value {
        let header = self.header(session);
        let msg_id = header["msg_id"].clone();
        json!({
            "header": header,
            "msg_id": msg_id,
            "msg_type": self.msg_type,
            "parent_header": self.parent_header,
            "metadata": self.metadata,
            "content": self.content,
            "buffers": [],
            "channel": self.channel,
        })
    }
}

impl Outgoing {
    /// A fresh header for this message: a new `msg_id`, `session` the kernel's session id,
    /// `date` now.
    pub fn header(&self, session: &str) -> Value {
        json!({
            "msg_id": uuid::Uuid::new_v4().to_string(),
            "msg_type": self.msg_type,
            "session": session,
            "username": "cellvisor",
            "date": now(),
            "version": PROTOCOL_VERSION,
        })
    }
}

impl Request {
    /// A request whose parts came apart (ZeroMQ's frames): its `header` (which must name
    /// its `msg_type`) and `content` (an empty object when it is none).
    pub fn from_parts(channel: &str, header: Value, content: Value) -> Result<Request, BadMessage> {
        let msg_type = header["msg_type"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or(BadMessage::NoType)?
            .to_string();
        let session = header["session"].as_str().unwrap_or_default().to_string();
        let content = if content.is_object() {
            content
        } else {
            json!({})
        };
        Ok(Request {
            channel: channel.to_string(),
            header,
            msg_type,
            session,
            content,
        })
    }
}

/// Now, as the ISO 8601 UTC time Jupyter headers carry.
pub fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_channel_or_date_is_read_as_shell() {
        let r = Request::parse(
            r#"{"header": {"msg_id": "m1", "msg_type": "execute_request", "session": "s"},
                "parent_header": {}, "metadata": {}, "content": {"code": "1"}}"#,
        )
        .unwrap();
        assert_eq!(r.channel, "shell");
        assert_eq!(r.msg_type, "execute_request");
        assert_eq!(r.session, "s");
        assert_eq!(r.content["code"], "1");
        assert_eq!(r.header["msg_id"], "m1");
        // The top-level msg_type and msg_id of some clients are enough.
        let r = Request::parse(
            r#"{"msg_id": "m2", "msg_type": "kernel_info_request", "channel": "control"}"#,
        )
        .unwrap();
        assert_eq!(
            (r.channel.as_str(), r.header["msg_id"].as_str()),
            ("control", Some("m2"))
        );
        assert_eq!(r.content, json!({}));
    }

    #[test]
    fn bad_frames_are_named() {
        assert!(matches!(
            Request::parse("nope"),
            Err(BadMessage::NotJson(_))
        ));
        assert_eq!(Request::parse(r#"{"header": {}}"#), Err(BadMessage::NoType));
        let err = Request::parse(r#"{"header": {"msg_type": "x"}, "channel": "hb"}"#).unwrap_err();
        assert!(err.to_string().contains("shell, control"), "{err}");
    }

    #[test]
    fn an_outgoing_message_has_every_field_a_client_reads() {
        let parent = json!({"msg_id": "m1", "msg_type": "execute_request"});
        let out = Outgoing::new(
            "iopub",
            "status",
            &parent,
            json!({"execution_state": "busy"}),
        )
        .to_json("kernel-session");
        for key in [
            "header",
            "msg_id",
            "msg_type",
            "parent_header",
            "metadata",
            "content",
            "buffers",
            "channel",
        ] {
            assert!(out.get(key).is_some(), "{key} missing: {out}");
        }
        assert_eq!(out["msg_id"], out["header"]["msg_id"]);
        assert_eq!(out["header"]["session"], "kernel-session");
        assert_eq!(out["parent_header"]["msg_id"], "m1");
        assert!(out["header"]["date"].as_str().unwrap().ends_with('Z'));
    }
}
