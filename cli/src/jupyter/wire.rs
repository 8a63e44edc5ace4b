//! A Jupyter message as ZeroMQ carries it: the routing ids, `<IDS|MSG>`, the HMAC-SHA256 of
//! the four JSON parts (header, parent header, metadata, content) in lowercase hex, the four
//! parts, then any buffers. The key is the connection file's; an empty key signs nothing and
//! checks nothing, as Jupyter's own sessions do. Plain data: frames in, a request or an error
//! out; a message in, frames out.

use super::message::{BadMessage, Outgoing, Request};
use bytes::Bytes;
use cellvisor_os::locking::lock;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// The frame between the routing ids and the signature.
pub const DELIMITER: &[u8] = b"<IDS|MSG>";

/// Why frames are not a message this kernel acts on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// No `<IDS|MSG>` frame.
    #[error("no <IDS|MSG> delimiter frame: not a Jupyter message")]
    NoDelimiter,
    /// Fewer than the signature and four JSON parts after the delimiter.
    #[error("{0} frames after <IDS|MSG>; a message has the signature and four JSON parts")]
    TooFewParts(usize),
    /// The signature is not the HMAC-SHA256 of the parts under the connection's key.
    #[error("bad signature: the message was not signed with this kernel's connection key")]
    BadSignature,
    /// A part that is not JSON.
    #[error("the {part} part is not JSON: {why}")]
    NotJson {
        /// Which part (`header`, `parent_header`, `metadata`, `content`).
        part: &'static str,
        /// What the parser said.
        why: String,
    },
    /// A signature this kernel read before: the same message sent again.
    #[error("replayed message: its signature was on a message read before")]
    Replayed,
    /// JSON, but not a request (no `msg_type`).
    #[error(transparent)]
    Message(#[from] BadMessage),
}

/// Signs and checks messages with the connection file's key.
#[derive(Clone)]
pub struct Signer {
    /// Whether the connection has a key: then every message must carry its signature.
    keyed: bool,
    /// The key's MAC (`None` with a key only if HMAC refused it: then nothing verifies).
    mac: Option<Hmac<Sha256>>,
}

impl Signer {
    /// The signer of `key` (HMAC-SHA256; an empty key signs nothing).
    pub fn new(key: &str) -> Signer {
        let keyed = !key.is_empty();
        let mac = keyed
            .then(|| <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).ok())
            .flatten();
        Signer { keyed, mac }
    }

    /// Whether messages are signed (the connection file has a key).
    pub fn keyed(&self) -> bool {
        self.keyed
    }

    fn mac_of(&self, parts: &[&[u8]]) -> Option<Hmac<Sha256>> {
        let mut mac = self.mac.clone()?;
        for part in parts {
            mac.update(part);
        }
        Some(mac)
    }

    /// The hex signature of `parts` (empty without a key).
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        match self.mac_of(parts) {
            Some(mac) => mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            None => String::new(),
        }
    }

    /// Whether `signature` (hex) signs `parts`; compared in constant time. Anything goes
    /// without a key; nothing with a key HMAC could not take.
    pub fn verify(&self, signature: &[u8], parts: &[&[u8]]) -> bool {
        if !self.keyed {
            return true;
        }
        let Some(mac) = self.mac_of(parts) else {
            return false;
        };
        match unhex(signature) {
            Some(tag) => mac.verify_slice(&tag).is_ok(),
            None => false,
        }
    }
}

/// The signatures of the last [`Replays::KEPT`] messages read, so that a signed message sent
/// again (captured and replayed by a peer without the key) is refused, as jupyter_client's
/// `Session` refuses a duplicate signature.
#[derive(Debug, Default)]
pub struct Replays {
    seen: HashSet<Bytes>,
    order: VecDeque<Bytes>,
}

impl Replays {
    /// How many signatures are remembered (jupyter_client keeps 2^16 too).
    pub const KEPT: usize = 1 << 16;

    /// Whether `signature` is new (then it is remembered, the oldest forgotten past the bound).
    pub fn first_time(&mut self, signature: &Bytes) -> bool {
        if !self.seen.insert(signature.clone()) {
            return false;
        }
        self.order.push_back(signature.clone());
        if self.order.len() > Self::KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        true
    }
}

/// Reads the messages of every channel of one kernel: the signature checked with its key,
/// and a signature seen before refused on any channel.
#[derive(Clone)]
pub struct Reader {
    signer: Signer,
    replays: Arc<Mutex<Replays>>,
}

impl Reader {
    /// The reader of a kernel whose messages `signer` checks.
    pub fn new(signer: Signer) -> Reader {
        Reader {
            signer,
            replays: Arc::default(),
        }
    }

    /// [`decode`], then refused if its signature was seen before (with a key).
    pub fn read(&self, frames: Vec<Bytes>, channel: &str) -> Result<Incoming, WireError> {
        let incoming = decode(frames, channel, &self.signer)?;
        if self.signer.keyed() {
            let mut replays = lock(&self.replays);
            if !replays.first_time(&incoming.signature) {
                return Err(WireError::Replayed);
            }
        }
        Ok(incoming)
    }
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// A request off a ROUTER socket: who sent it (to route the reply back) and what it asks.
#[derive(Debug)]
pub struct Incoming {
    /// The routing ids before the delimiter.
    pub ids: Vec<Bytes>,
    /// Its signature, as sent.
    pub signature: Bytes,
    /// The request.
    pub request: Request,
}

/// Reads the frames of one message that came on `channel`, checking its signature.
pub fn decode(frames: Vec<Bytes>, channel: &str, signer: &Signer) -> Result<Incoming, WireError> {
    let at = frames
        .iter()
        .position(|f| f.as_ref() == DELIMITER)
        .ok_or(WireError::NoDelimiter)?;
    let mut ids = frames;
    let rest = ids.split_off(at);
    let after = rest.len() - 1;
    if after < 5 {
        return Err(WireError::TooFewParts(after));
    }
    let signature = rest[1].clone();
    let parts: Vec<&[u8]> = rest[2..6].iter().map(Bytes::as_ref).collect();
    if !signer.verify(&signature, &parts) {
        return Err(WireError::BadSignature);
    }
    let json = |index: usize, part: &'static str| -> Result<Value, WireError> {
        serde_json::from_slice(parts[index]).map_err(|e| WireError::NotJson {
            part,
            why: e.to_string(),
        })
    };
    let header = json(0, "header")?;
    json(1, "parent_header")?;
    json(2, "metadata")?;
    let content = json(3, "content")?;
    let request = Request::from_parts(channel, header, content)?;
    Ok(Incoming {
        ids,
        signature,
        request,
    })
}

/// The frames of `message` to the peer with routing `ids` (none on iopub), from the kernel's
/// `session`, signed.
pub fn encode(ids: &[Bytes], message: &Outgoing, session: &str, signer: &Signer) -> Vec<Bytes> {
    let json = |value: &Value| Bytes::from(value.to_string());
    let parts = [
        json(&message.header(session)),
        json(&message.parent_header),
        json(&message.metadata),
        json(&message.content),
    ];
    let signature = {
        let refs: Vec<&[u8]> = parts.iter().map(Bytes::as_ref).collect();
        signer.sign(&refs)
    };
    let mut frames = ids.to_vec();
    frames.push(Bytes::from_static(DELIMITER));
    frames.push(Bytes::from(signature));
    frames.extend(parts);
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frames(signer: &Signer, header: &Value, content: &Value) -> Vec<Bytes> {
        let parts: Vec<Vec<u8>> = [header, &json!({}), &json!({}), content]
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let mut out = vec![Bytes::from_static(b"peer"), Bytes::from_static(DELIMITER)];
        out.push(Bytes::from(signer.sign(&refs)));
        out.extend(parts.into_iter().map(Bytes::from));
        out
    }

    #[test]
    fn a_signed_request_is_read_and_a_reply_round_trips() {
        let signer = Signer::new("secret");
        let header = json!({"msg_id": "m1", "msg_type": "execute_request", "session": "s"});
        let incoming = decode(
            frames(&signer, &header, &json!({"code": "1"})),
            "shell",
            &signer,
        )
        .expect("a signed message is read");
        assert_eq!(incoming.ids, vec![Bytes::from_static(b"peer")]);
        assert_eq!(incoming.request.msg_type, "execute_request");
        assert_eq!(incoming.request.content["code"], "1");
        // A reply the kernel writes is read back by a peer with the same key.
        let reply = Outgoing::new("shell", "execute_reply", &header, json!({"status": "ok"}));
        let out = encode(&incoming.ids, &reply, "kernel", &signer);
        assert_eq!(out[0].as_ref(), b"peer");
        assert_eq!(out[1].as_ref(), DELIMITER);
        assert_eq!(out[2].len(), 64);
        let back = decode(out, "shell", &signer).expect("the reply verifies");
        assert_eq!(back.request.msg_type, "execute_reply");
        assert_eq!(back.request.header["session"], "kernel");
    }

    #[test]
    fn a_signed_message_sent_again_is_refused_on_any_channel() {
        let reader = Reader::new(Signer::new("secret"));
        let header = json!({"msg_id": "m1", "msg_type": "execute_request"});
        let sent = frames(&Signer::new("secret"), &header, &json!({"code": "1"}));
        assert!(reader.read(sent.clone(), "shell").is_ok());
        assert_eq!(
            reader.read(sent.clone(), "shell").unwrap_err(),
            WireError::Replayed
        );
        assert_eq!(
            reader.read(sent, "control").unwrap_err(),
            WireError::Replayed
        );
        // Another message (another msg_id) is read; without a key nothing is remembered.
        let other = json!({"msg_id": "m2", "msg_type": "execute_request"});
        let signer = Signer::new("secret");
        assert!(reader
            .read(frames(&signer, &other, &json!({})), "shell")
            .is_ok());
        let open = Reader::new(Signer::new(""));
        let unsigned = frames(&Signer::new(""), &header, &json!({}));
        assert!(open.read(unsigned.clone(), "shell").is_ok());
        assert!(open.read(unsigned, "shell").is_ok());
        // The oldest signatures are forgotten past the bound.
        let mut replays = Replays::default();
        for n in 0..=Replays::KEPT {
            assert!(replays.first_time(&Bytes::from(n.to_string())));
        }
        assert!(replays.first_time(&Bytes::from("0")));
        assert!(!replays.first_time(&Bytes::from(Replays::KEPT.to_string())));
    }

    #[test]
    fn forged_tampered_and_malformed_messages_are_refused() {
        let signer = Signer::new("secret");
        let header = json!({"msg_id": "m1", "msg_type": "kernel_info_request"});
        // Signed with another key.
        let forged = frames(&Signer::new("other"), &header, &json!({}));
        assert_eq!(
            decode(forged, "shell", &signer).unwrap_err(),
            WireError::BadSignature
        );
        // Unsigned, to a kernel with a key.
        let unsigned = frames(&Signer::new(""), &header, &json!({}));
        assert_eq!(
            decode(unsigned, "shell", &signer).unwrap_err(),
            WireError::BadSignature
        );
        // Signed, then its content changed.
        let mut tampered = frames(&signer, &header, &json!({"code": "1"}));
        tampered[6] = Bytes::from_static(br#"{"code": "2"}"#);
        assert_eq!(
            decode(tampered, "shell", &signer).unwrap_err(),
            WireError::BadSignature
        );
        // Not hex at all.
        let mut garbled = frames(&signer, &header, &json!({}));
        garbled[2] = Bytes::from_static(b"zz");
        assert_eq!(
            decode(garbled, "shell", &signer).unwrap_err(),
            WireError::BadSignature
        );
        assert_eq!(
            decode(vec![Bytes::from_static(b"x")], "shell", &signer).unwrap_err(),
            WireError::NoDelimiter
        );
        let short = vec![Bytes::from_static(DELIMITER), Bytes::from_static(b"sig")];
        assert_eq!(
            decode(short, "shell", &signer).unwrap_err(),
            WireError::TooFewParts(1)
        );
        // Without a key, anything signed or not is read.
        let open = Signer::new("");
        assert!(decode(frames(&signer, &header, &json!({})), "shell", &open).is_ok());
        let not_json = {
            let mut f = frames(&open, &header, &json!({}));
            f[3] = Bytes::from_static(b"{");
            f
        };
        assert!(matches!(
            decode(not_json, "shell", &open),
            Err(WireError::NotJson { part: "header", .. })
        ));
    }
}
