//! The bearer token of the network listeners: read from `daemon.token-file`, compared in
//! constant time, replaced by `config/reload`.

use super::NetworkError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
#[cfg(test)]
use subtle::ConstantTimeEq;

/// Tokens shorter than this are refused: a guessable token guards nothing.
const MIN_TOKEN_BYTES: usize = 16;

/// The token every network request but `/healthz` must carry, kept as its digest so that
/// comparing takes the same time whatever the presented token's length.
#[derive(Clone)]
pub(crate) struct Token {
    digest: [u8; 32],
    path: PathBuf,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(from {})", self.path.display())
    }
}

impl Token {
    /// Reads the token from `path`: its first line, without surrounding white space.
    pub(crate) fn load(path: &Path) -> Result<Token, NetworkError> {
        let refuse = |reason: String| NetworkError::Token {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
        warn_if_others_may_read(path);
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(refuse(format!(
                "the token is {} bytes; it must be at least {MIN_TOKEN_BYTES} (e.g. `head -c 32 \
                 /dev/urandom | base64 > {}`)",
                token.len(),
                path.display()
            )));
        }
        Ok(Token {
            digest: Sha256::digest(token.as_bytes()).into(),
            path: path.to_path_buf(),
        })
    }

    /// The token's digest: what names a credential without holding it.
    pub(crate) fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// Whether an `Authorization` header's value is `Bearer <this token>`.
    #[cfg(test)]
    pub(crate) fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(presented) = authorization.and_then(|h| bearer(h)) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(presented).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

/// Says so at start (and at each reload) when other users may read a token file: at the
/// `uid` isolation level every session runs as a user of its own, so a token file of mode
/// 0644 is one `open()` away from every cell, whatever the daemon hides.
fn warn_if_others_may_read(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        tracing::warn!(
            "the token file {} is readable by other users (mode {mode:04o}): cells running as \
             other uids could read it and drive this daemon; chmod 600 it",
            path.display()
        );
    }
}

/// The credentials of a `Bearer` authorization, or of Jupyter's `token` one (the scheme
/// is case-insensitive).
pub(super) fn bearer(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at_checked(7)?;
    if scheme.eq_ignore_ascii_case(b"bearer ") {
        return Some(rest.trim_ascii());
    }
    let (scheme, rest) = header.split_at_checked(6)?;
    scheme
        .eq_ignore_ascii_case(b"token ")
        .then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> Result<Token, NetworkError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, text).unwrap();
        Token::load(&path)
    }

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let t = token("0123456789abcdef-secret\n").unwrap();
        assert!(t.admits(Some(b"Bearer 0123456789abcdef-secret")));
        assert!(t.admits(Some(b"bearer 0123456789abcdef-secret ")));
        assert!(t.admits(Some(b"token 0123456789abcdef-secret")));
        for wrong in [
            &b"Bearer 0123456789abcdef-secreT"[..],
            b"Bearer 0123456789abcdef-secret2",
            b"Bearer ",
            b"Basic 0123456789abcdef-secret",
            b"0123456789abcdef-secret",
            b"",
        ] {
            assert!(!t.admits(Some(wrong)), "{}", String::from_utf8_lossy(wrong));
        }
        assert!(!t.admits(None));
    }

    #[test]
    fn a_short_or_missing_token_is_refused_with_the_path() {
        let err = token("short").unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
        let err = Token::load(Path::new("/nonexistent/token"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/token"), "{err}");
    }
}
