//! Requests that run once: a client names an `eval` with a `request_id` of its choosing, and
//! a retry with the same id (after a connection lost mid-request, a router's retry) is
//! answered with the first run's result instead of running the cells again. And whether a
//! cell's state was saved before its answer, so a failed save is told, never only logged.

use serde::{Deserialize, Serialize};

/// The longest `request_id`.
pub const MAX_REQUEST_ID: usize = 128;

/// A `request_id` that is not one a session can remember.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "request_id {shown}: {why}; a request_id is 1 to {MAX_REQUEST_ID} printable ASCII \
     characters without spaces (`!` to `~`), e.g. a UUID"
)]
pub struct RequestIdError {
    /// The id as given, cut and escaped for a message.
    pub shown: String,
    /// What is wrong with it.
    pub why: String,
}

/// Checks `id` against the allowed form: 1 to [`MAX_REQUEST_ID`] characters from `!` to `~`.
pub fn check_request_id(id: &str) -> Result<(), RequestIdError> {
    let refuse = |why: String| RequestIdError {
        shown: format!("{:?}", id.chars().take(40).collect::<String>()),
        why,
    };
    if id.is_empty() {
        return Err(refuse("it is empty".into()));
    }
    if id.len() > MAX_REQUEST_ID {
        return Err(refuse(format!("it is {} bytes long", id.len())));
    }
    if let Some(bad) = id.chars().find(|c| !matches!(c, '!'..='~')) {
        return Err(refuse(format!("it holds {bad:?}")));
    }
    Ok(())
}

/// A fresh request id: 128 random bits in hex, which no other client will choose.
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness from the kernel: the clock, the process and a counter still make an
        // id no retry of another request shares.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return format!("{nanos:x}-{:x}-{count:x}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a cell's state was saved before its answer went out (`snapshots.when =
/// "every-cell"`): a host that needs the cell's effect to survive a crash reads it here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Saved {
    /// The snapshot was written.
    pub saved: bool,
    /// Why it was not (absent when it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_of_the_allowed_form_pass_and_others_say_what_is_allowed() {
        for good in ["a", "0b1c-2d", &"x".repeat(MAX_REQUEST_ID), "!~{}[]"] {
            assert_eq!(check_request_id(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            (&"x".repeat(MAX_REQUEST_ID + 1) as &str, "129 bytes"),
            ("a b", "' '"),
            ("tab\there", "'\\t'"),
            ("é", "'é'"),
        ] {
            let message = check_request_id(bad).expect_err(bad).to_string();
            assert!(message.contains(why), "{message}");
            assert!(message.contains("1 to 128 printable ASCII"), "{message}");
        }
    }

    #[test]
    fn fresh_ids_are_valid_and_differ() {
        let (a, b) = (new_request_id(), new_request_id());
        assert_ne!(a, b);
        assert_eq!(check_request_id(&a), Ok(()));
        assert_eq!(a.len(), 32);
    }
}
