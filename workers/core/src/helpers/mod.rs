//! The helpers JavaScript and Lua offer cells (`read`, `write`, `append`, `tree`, `output`,
//! `store`/`load`), written once: the engines only convert their values to and from these
//! functions, so a helper cannot behave one way in one language and another way in the
//! other. Everything works on bytes and paths; JavaScript, whose strings cannot hold
//! arbitrary bytes, converts results lossily, Lua hands them over as they are.
//!
//! Failures are [`HelperError`]s whose text is what the cell sees, in the words the Python
//! prelude uses for the same failure (`read: No such file or directory: 'notes.txt'`).
//!
//! - [`fs`]: `read` (streams the selected lines, never the whole file), `write`/`append`,
//!   `tree`, and [`fs::write_atomically`] for every file a worker replaces.
//! - [`output`]: spilled outputs by id.
//! - [`store`]: `store`/`load`, JSON per session on disk.
//!
//! `sort`, `uniq` and `diff` live in `crate::text`.

pub mod fs;
pub mod output;
pub mod store;

use std::path::{Path, PathBuf};

/// Directories the helpers use, fixed when an engine starts.
#[derive(Debug, Clone, Default)]
pub struct HostDirs {
    /// Spilled outputs (`$CELLVISOR_ARTIFACT_DIR`).
    pub artifact_dir: Option<PathBuf>,
    /// `store`/`load` files (`$CELLVISOR_STORE_DIR`), created on first `store`.
    pub store_dir: Option<PathBuf>,
}

impl HostDirs {
    /// The directories the worker's environment names (empty values count as unset).
    pub fn from_env() -> Self {
        HostDirs {
            artifact_dir: output::dir_from_env(),
            store_dir: store::dir_from_env(),
        }
    }
}

/// Why a helper failed; its text is the message the cell's error carries.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// The file system refused: `read: No such file or directory: 'notes.txt'`.
    #[error("{helper}: {}: '{}'", os_message(source), path.display())]
    Io {
        /// The helper the cell called.
        helper: &'static str,
        /// The path as the cell gave it.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A `scheme://` path: `https://x/y` would otherwise be written to `./https:/x/y` and
    /// `file:///etc/hostname` be "not found", so no helper takes one (as the anchor's JS
    /// helpers reject protocol URIs).
    #[error("{helper}: '{}' is a URI: file helpers take local file paths only (remote and file:// URIs are not supported)", path.display())]
    Uri {
        /// The helper the cell called.
        helper: &'static str,
        /// The path as the cell gave it.
        path: PathBuf,
    },
    /// Anything else, already worded for the cell (bad ids, bad keys, missing directories).
    #[error("{0}")]
    Refused(String),
}

impl HelperError {
    fn io(helper: &'static str, path: &Path, source: std::io::Error) -> Self {
        HelperError::Io {
            helper,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The scheme of `text` when it starts as a URI does (`https://x`, `file:///x`): a letter,
/// then letters, digits, `+`, `-` or `.` (RFC 3986), then `://`.
pub fn uri_scheme(text: &[u8]) -> Option<&[u8]> {
    let len = text
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
        .unwrap_or(text.len());
    let starts_with_letter = text.first().is_some_and(u8::is_ascii_alphabetic);
    (starts_with_letter && text[len..].starts_with(b"://")).then(|| &text[..len])
}

/// "No such file or directory" without Rust's " (os error 2)", as Python words it.
fn os_message(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}
