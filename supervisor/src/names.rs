//! Session names: the one type a session name has once it crosses into the supervisor, the
//! one place its rules are checked, and the one mapping from a name to a path component.
//!
//! A leaf module: the actors, the stores and the hosts all use it, and it uses none of them.
//!
//! The mapping to a path component ([`SessionName::dir_name`]) is injective: every byte
//! outside `A-Z a-z 0-9 - _ : @` and `.` (past the first byte) is written `%XX`, `%` itself
//! included, so the component decodes back to exactly one key and two keys never share a
//! directory (a property test checks it). Plain names of `A-Z a-z 0-9 - _` keep the
//! directory names they always had.

use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;

/// The longest session name, in bytes.
pub const MAX_SESSION_NAME: usize = 128;

/// Separates a pair key's session name from its directory hash.
const PAIR_MARK: char = '@';

/// Hex digits of the directory's hash in a pair key (64 bits).
const HASH_HEX: usize = 16;

/// Marks a per-call request's throw-away session (`<name>~call-<n>`): no name holds it.
const THROWAWAY_MARK: char = '~';

/// A session name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid session name {0:?}: use 1 to {MAX_SESSION_NAME} characters from A-Z a-z 0-9 . _ - :"
)]
pub struct SessionNameError(pub String);

/// A checked session key: a plain session name, under `sessions.key = "session+cwd"` a
/// pair key `<name>@<16 hex of SHA-256(cwd)>`, or a per-call request's throw-away session.
/// Only this module makes one, so every name the supervisor holds was checked once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct SessionName(String);

impl SessionName {
    /// A plain session name: 1-128 bytes of `A-Z a-z 0-9 . _ - :`.
    pub fn parse(name: &str) -> Result<SessionName, SessionNameError> {
        if is_plain_name(name) {
            Ok(SessionName(name.to_string()))
        } else {
            Err(SessionNameError(name.to_string()))
        }
    }

    /// A plain name or a pair key (as `status` and the supervisor's own lists show them).
    pub fn parse_key(key: &str) -> Result<SessionName, SessionNameError> {
        match split_pair(key) {
            Some((name, _)) if is_plain_name(name) => Ok(SessionName(key.to_string())),
            _ => SessionName::parse(key),
        }
    }

    /// The key of the pair (`name`, `canonical_cwd`).
    pub fn pair(name: &SessionName, canonical_cwd: &Path) -> SessionName {
        use std::os::unix::ffi::OsStrExt;
        let digest = Sha256::digest(canonical_cwd.as_os_str().as_bytes());
        let hex: String = digest
            .iter()
            .take(HASH_HEX / 2)
            .map(|byte| format!("{byte:02x}"))
            .collect();
        SessionName(format!("{}{PAIR_MARK}{hex}", name.plain()))
    }

    /// The throw-away session of request `request` on `name` (`fresh` or per-call).
    pub fn throwaway(name: &SessionName, request: u64) -> SessionName {
        SessionName(format!("{}{THROWAWAY_MARK}call-{request}", name.0))
    }

    /// Whether this is a per-call request's throw-away session.
    pub fn is_throwaway(&self) -> bool {
        self.0.contains(THROWAWAY_MARK)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The session name without a pair's directory hash.
    pub fn plain(&self) -> &str {
        split_pair(&self.0).map_or(&self.0, |(name, _)| name)
    }

    /// The session name and directory hash of a pair key; `None` for a plain name.
    pub fn split_pair(&self) -> Option<(&str, &str)> {
        split_pair(&self.0)
    }

    /// The path component of this session's directories and files (store, snapshots,
    /// checkpoints, artifacts, temporary directory, lease): injective, never `.` or `..`,
    /// never holding `/`.
    pub fn dir_name(&self) -> String {
        encode_component(&self.0)
    }
}

/// Unit tests name sessions by literals.
#[cfg(test)]
impl From<&str> for SessionName {
    fn from(name: &str) -> SessionName {
        SessionName::parse_key(name).expect("a valid session name in a test")
    }
}

impl std::ops::Deref for SessionName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SessionName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for SessionName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Separates a network tenant's name from its session's (`<tenant>/<name>`): the daemon
/// refuses `/` in the names clients send, so only the daemon's tenancy makes this form.
const TENANT_MARK: char = '/';

/// The longest tenant name, in bytes.
pub const MAX_TENANT_NAME: usize = 32;

/// A session name, within a tenant's namespace or not: `[<tenant>/]<name>`, the tenant of
/// `a-z 0-9 - _`, the name of `A-Z a-z 0-9 . _ - :`.
fn is_plain_name(name: &str) -> bool {
    match name.split_once(TENANT_MARK) {
        Some((tenant, rest)) => is_tenant_name(tenant) && is_bare_name(rest),
        None => is_bare_name(name),
    }
}

/// A tenant's name as its sessions carry it.
pub fn is_tenant_name(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant.len() <= MAX_TENANT_NAME
        && tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'))
}

fn is_bare_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SESSION_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

/// The session name and directory hash of a pair key; `None` for any other text.
pub(crate) fn split_pair(key: &str) -> Option<(&str, &str)> {
    let (name, hash) = key.rsplit_once(PAIR_MARK)?;
    let is_hash = hash.len() == HASH_HEX
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (is_hash && !name.is_empty()).then_some((name, hash))
}

/// `text` as one path component, injectively: bytes of `A-Z a-z 0-9 - _ : @`, and `.` past
/// the first byte, stay; every other byte (`%` among them) becomes `%XX`. The empty text
/// becomes `%`, which no other text becomes.
pub fn encode_component(text: &str) -> String {
    if text.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(text.len());
    for (i, byte) in text.bytes().enumerate() {
        let kept = byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b':' | b'@')
            || (byte == b'.' && i > 0);
        if kept {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reverses [`encode_component`]: the proof that it is injective.
    fn decode_component(component: &str) -> Option<Vec<u8>> {
        if component == "%" {
            return Some(Vec::new());
        }
        let bytes = component.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = component.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        Some(out)
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        // Plain names and names within a tenant (`<tenant>/<name>`).
        prop_oneof![
            "[A-Za-z0-9._:-]{1,40}",
            "[a-z0-9_-]{1,8}/[A-Za-z0-9._:-]{1,30}"
        ]
    }

    proptest! {
        #[test]
        fn no_two_names_share_a_path_component(a in name_strategy(), b in name_strategy()) {
            let (a, b) = (SessionName::parse(&a).unwrap(), SessionName::parse(&b).unwrap());
            if a != b {
                prop_assert_ne!(a.dir_name(), b.dir_name());
            }
        }

        #[test]
        fn no_name_shares_a_component_with_a_pair(
            a in name_strategy(),
            b in name_strategy(),
            cwd in "/[a-z/]{0,20}",
        ) {
            let plain = SessionName::parse(&a).unwrap();
            let pair = SessionName::pair(&SessionName::parse(&b).unwrap(), Path::new(&cwd));
            prop_assert_ne!(plain.dir_name(), pair.dir_name());
        }

        #[test]
        fn every_text_decodes_back_from_its_component(text in any::<String>()) {
            let component = encode_component(&text);
            prop_assert_eq!(decode_component(&component), Some(text.as_bytes().to_vec()));
            prop_assert!(!component.contains('/') && !component.contains('\0'));
            prop_assert!(component != "." && component != "..");
        }

        #[test]
        fn distinct_texts_get_distinct_components(a in any::<String>(), b in any::<String>()) {
            if a != b {
                prop_assert_ne!(encode_component(&a), encode_component(&b));
            }
        }
    }

    #[test]
    fn the_colliding_names_of_old_are_apart() {
        let dotted = SessionName::parse("team.alpha").unwrap();
        let lookalike = SessionName::parse("team_alpha-0466522c").unwrap();
        assert_ne!(dotted.dir_name(), lookalike.dir_name());
        assert_eq!(dotted.dir_name(), "team.alpha");
    }

    #[test]
    fn plain_names_keep_their_directory_names_and_dots_are_never_special() {
        assert_eq!(
            SessionName::parse("agent-1_x").unwrap().dir_name(),
            "agent-1_x"
        );
        assert_eq!(SessionName::parse(".").unwrap().dir_name(), "%2E");
        assert_eq!(SessionName::parse("..").unwrap().dir_name(), "%2E.");
        assert_eq!(SessionName::parse(".a").unwrap().dir_name(), "%2Ea");
        assert_eq!(encode_component("%2E"), "%252E");
    }

    #[test]
    fn names_are_checked_in_one_place() {
        assert!(SessionName::parse("agent-1:task.2_x").is_ok());
        // A tenant's session (`<tenant>/<name>`), which only the daemon's tenancy makes.
        assert!(SessionName::parse("team-a/s1.x").is_ok());
        for bad in [
            "",
            "a b",
            "A/b",
            "/b",
            "a/",
            "a/b/c",
            "a@b",
            "é",
            &"x".repeat(MAX_SESSION_NAME + 1),
        ] {
            let err = SessionName::parse(bad).unwrap_err();
            assert!(
                err.to_string().contains("from A-Z a-z 0-9 . _ - :"),
                "{bad:?}"
            );
        }
        let pair = SessionName::pair(&SessionName::parse("a.b").unwrap(), Path::new("/p"));
        assert_eq!(pair.plain(), "a.b");
        assert_eq!(SessionName::parse_key(pair.as_str()).unwrap(), pair);
        assert!(SessionName::parse(pair.as_str()).is_err());
    }
}
