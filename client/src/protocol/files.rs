//! The parameters and answers of the workspace file methods (`files/list`, `files/read`,
//! `files/write`, `files/delete`): files in and out of a session's workspace without code
//! (docs/workspaces.md). Paths are relative to the workspace.

use serde::{Deserialize, Serialize};

/// The most bytes one `files/read` returns (a larger file is read in several, by `offset`),
/// and the most one `files/write` carries: well inside a request line once in base64.
pub const MAX_CHUNK_BYTES: u64 = 8 * 1024 * 1024;

/// The most entries one `files/list` returns unless it asks for fewer.
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// How a file's bytes travel in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text as a JSON string.
    Text,
    /// Any bytes, base64 (standard alphabet, padded).
    Base64,
}

/// `files/list` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FilesListParams {
    /// The session whose workspace is listed.
    #[serde(default = "default_session")]
    pub session: String,
    /// A directory (or file) in the workspace; the workspace itself when absent.
    #[serde(default)]
    pub path: String,
    /// Also list the subdirectories' entries.
    #[serde(default)]
    pub recursive: bool,
    /// At most this many entries (at most [`MAX_LIST_ENTRIES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// One entry of a `files/list` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileEntry {
    /// The path relative to the workspace.
    pub path: String,
    /// `file`, `dir`, `link` or `other` (a device, socket or fifo a cell made).
    pub kind: String,
    /// A file's size in bytes (0 for the rest).
    pub size: u64,
    /// Last modification, in seconds since the epoch.
    pub modified: i64,
}

/// The answer of `files/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FilesListResult {
    /// The entries, sorted by path.
    pub entries: Vec<FileEntry>,
    /// Whether `limit` cut the listing short.
    pub truncated: bool,
}

/// `files/read` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FilesReadParams {
    /// The session whose workspace holds the file.
    #[serde(default = "default_session")]
    pub session: String,
    /// The file, relative to the workspace.
    pub path: String,
    /// The first byte read.
    #[serde(default)]
    pub offset: u64,
    /// At most this many bytes (default and most: [`MAX_CHUNK_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// How the bytes come back; absent: text when they are UTF-8, else base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

/// The answer of `files/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FilesReadResult {
    /// The bytes read, in `encoding`.
    pub data: String,
    /// How `data` is written.
    pub encoding: Encoding,
    /// The first byte read.
    pub offset: u64,
    /// How many bytes were read.
    pub length: u64,
    /// The file's size.
    pub size: u64,
    /// Whether the read reached the end of the file.
    pub eof: bool,
}

/// `files/write` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FilesWriteParams {
    /// The session whose workspace receives the file.
    #[serde(default = "default_session")]
    pub session: String,
    /// The file, relative to the workspace; its missing directories are made.
    pub path: String,
    /// The bytes, in `encoding`.
    pub data: String,
    /// How `data` is written (default text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Where the bytes go; absent: the file is replaced by them. With an offset the rest of
    /// the file stays (a large file is written in several calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// The answer of `files/write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FilesWriteResult {
    /// The file written.
    pub path: String,
    /// Bytes written.
    pub written: u64,
    /// The file's size after the write.
    pub size: u64,
}

/// `files/delete` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FilesDeleteParams {
    /// The session whose workspace holds the file.
    #[serde(default = "default_session")]
    pub session: String,
    /// The file, link or directory, relative to the workspace.
    pub path: String,
    /// Remove a directory with everything in it (without: only an empty one).
    #[serde(default)]
    pub recursive: bool,
}

/// The answer of `files/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FilesDeleteResult {
    /// What was removed.
    pub path: String,
    /// Bytes of the regular files removed.
    pub bytes: u64,
    /// Entries removed (files, directories, links).
    pub files: u64,
}

fn default_session() -> String {
    "default".to_string()
}
