//! The session's artifacts as MCP resources, `cellvisor://artifact/<id>`: a desktop fetches
//! the whole output that a tool result only references (`artifact://<id>` in its
//! truncation notice, and a resource link beside it).
//!
//! An artifact is a file `<id>.txt` in the supervisor's artifact directory (or in a
//! sandboxed session's own directory inside it), whose id starts with the session's path
//! component (`SessionName::dir_name`). A connection sees its own session's artifacts only.
//! Ids are checked before any path is made of them (letters, digits, `- _ : @ %`, and `.`
//! past the first byte: no `/`, never `.` or `..`), a file is opened without following links
//! and must be a regular file, so no id reaches outside the directory.

use rmcp::model::{ErrorData, Resource, ResourceContents, ResourceTemplate};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The scheme and authority of an artifact's resource URI.
pub(super) const URI_PREFIX: &str = "cellvisor://artifact/";

/// The largest artifact a `resources/read` returns whole (MCP messages are read whole by
/// clients); a larger one is refused with where else to read it.
pub(super) const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// The artifacts of one session.
#[derive(Debug, Clone)]
pub(super) struct Artifacts {
    dir: PathBuf,
    /// The session's name as its artifacts' names start with it.
    owner: String,
}

/// One artifact file found.
#[derive(Debug, PartialEq)]
struct Found {
    id: String,
    path: PathBuf,
    size: u64,
}

impl Artifacts {
    /// The artifacts of `session` in `dir`.
    pub(super) fn new(dir: &Path, session: &str) -> Artifacts {
        Artifacts {
            dir: dir.to_path_buf(),
            owner: cellvisor::names::encode_component(session),
        }
    }

    /// The resource URI of the artifact `id`.
    pub(super) fn uri(id: &str) -> String {
        format!("{URI_PREFIX}{id}")
    }

    /// The session's artifacts, as `resources/list` lists them (oldest first).
    pub(super) fn list(&self) -> Vec<Resource> {
        let mut found = self.scan();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
            .into_iter()
            .map(|artifact| {
                Resource::new(Artifacts::uri(&artifact.id), artifact.id.clone())
                    .with_title(format!("Full output {}", artifact.id))
                    .with_description(
                        "The whole output of a cell whose result was cut (head and tail kept)",
                    )
                    .with_mime_type("text/plain")
                    .with_size(artifact.size)
            })
            .collect()
    }

    /// `resources/read` of `uri`: the artifact whole, as text when it is UTF-8, else as a
    /// base64 blob with its MIME type.
    pub(super) fn read(&self, uri: &str) -> Result<ResourceContents, ErrorData> {
        let id = self.id_of(uri)?;
        let missing = || {
            ErrorData::resource_not_found(
                format!(
                    "no artifact {id:?} in this session: resources/list names the ones there \
                     are (they are pruned after `output.artifact-max-age`)"
                ),
                Some(serde_json::json!({ "uri": uri })),
            )
        };
        let file = format!("{id}.txt");
        let places = [self.dir.join(&file), self.dir.join(&self.owner).join(&file)];
        for path in places {
            match read_regular(&path) {
                Ok(bytes) => return Ok(contents(uri, bytes)),
                Err(ReadError::Missing) => continue,
                Err(ReadError::TooBig(size)) => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "artifact {id:?} is {size} bytes, more than the {} MiB a resource \
                             read returns; read it with output({id:?}) in a cell, in parts",
                            MAX_READ_BYTES >> 20
                        ),
                        None,
                    ))
                }
                Err(ReadError::Io(err)) => {
                    return Err(ErrorData::internal_error(
                        format!("cannot read artifact {id:?}: {err}"),
                        None,
                    ))
                }
            }
        }
        Err(missing())
    }

    /// The id a URI names, if it is an artifact URI of this session; the MCP error for a
    /// missing resource otherwise, saying what an artifact URI is.
    fn id_of<'u>(&self, uri: &'u str) -> Result<&'u str, ErrorData> {
        let refuse = |why: &str| {
            ErrorData::resource_not_found(
                format!(
                    "{why}: artifact resources are {URI_PREFIX}<id>, the id being the one in a \
                     result's `artifact://<id>` (letters, digits, - _ : @ % and inner dots)"
                ),
                Some(serde_json::json!({ "uri": uri })),
            )
        };
        let Some(id) = uri.strip_prefix(URI_PREFIX) else {
            return Err(refuse(&format!("no resource {uri:?}")));
        };
        if !valid_id(id) {
            return Err(refuse(&format!("{id:?} is not an artifact id")));
        }
        if !self.owns(id) {
            return Err(refuse(&format!(
                "no artifact {id:?} in this session (a session reads its own artifacts only)"
            )));
        }
        Ok(id)
    }

    /// Whether the artifact `id` is one of this session's: its name is the session's, then
    /// the language, the worker's pid (or `wait`) and the cell, as the supervisor names them.
    fn owns(&self, id: &str) -> bool {
        id.strip_prefix(&self.owner)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| artifact_tail().is_match(rest))
    }

    /// This session's artifact files, in the directory and in its own sandbox directory.
    fn scan(&self) -> Vec<Found> {
        let mut found = Vec::new();
        for dir in [self.dir.clone(), self.dir.join(&self.owner)] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".txt")) else {
                    continue;
                };
                if !valid_id(id) || !self.owns(id) {
                    continue;
                }
                // `DirEntry::metadata` does not follow links: a link is not an artifact.
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_file() {
                    found.push(Found {
                        id: id.to_string(),
                        path: entry.path(),
                        size: meta.len(),
                    });
                }
            }
        }
        found
    }
}

/// The template of artifact URIs, for `resources/templates/list`.
pub(super) fn template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{URI_PREFIX}{{id}}"), "artifact")
        .with_title("A cell's full output")
        .with_description(
            "The whole output of a cell whose result was cut; the id is the one in the \
             result's `artifact://<id>`",
        )
        .with_mime_type("text/plain")
}

/// An id as the supervisor makes them: letters, digits, `- _ : @ %`, and `.` past the first
/// byte, at most 255 bytes.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 255
        && !id.starts_with('.')
        && id.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'@' | b'%' | b'.')
        })
}

/// What follows the session's name in an artifact's id: `<language>-<pid>-<cell>` (a cell's
/// output), `<language>-wait-<cell>-<n>` (a `wait`'s), either with `-part<n>` (a later
/// window of a background cell).
fn artifact_tail() -> &'static regex::Regex {
    static TAIL: OnceLock<regex::Regex> = OnceLock::new();
    TAIL.get_or_init(|| {
        regex::Regex::new(r"^(py|js|lua)-([0-9]+-[0-9]+|wait-[0-9]+-[0-9]+)(-part[0-9]+)?$")
            .unwrap_or_else(|err| unreachable!("the artifact pattern is valid: {err}"))
    })
}

enum ReadError {
    Missing,
    TooBig(u64),
    Io(std::io::Error),
}

/// The bytes of the regular file at `path`, opened without following a link (a link a cell
/// planted is no artifact) and without blocking on a FIFO.
fn read_regular(path: &Path) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing),
        // A link (ELOOP) or anything else that is no artifact file.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Err(ReadError::Missing),
        Err(err) => return Err(ReadError::Io(err)),
    };
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::Missing);
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(ReadError::TooBig(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(ReadError::TooBig(bytes.len() as u64));
    }
    Ok(bytes)
}

/// An artifact's contents: UTF-8 text as text, anything else as a base64 blob.
pub(super) fn contents(uri: &str, bytes: Vec<u8>) -> ResourceContents {
    match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type("text/plain; charset=utf-8"),
        Err(not_text) => {
            use base64::Engine;
            let bytes = not_text.into_bytes();
            let mime = sniff(&bytes);
            ResourceContents::blob(
                base64::engine::general_purpose::STANDARD.encode(&bytes),
                uri,
            )
            .with_mime_type(mime)
        }
    }
}

/// The MIME type of binary content, by its first bytes.
fn sniff(bytes: &[u8]) -> &'static str {
    const KNOWN: &[(&[u8], &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xFF\xD8\xFF", "image/jpeg"),
        (b"GIF8", "image/gif"),
        (b"%PDF-", "application/pdf"),
    ];
    KNOWN
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map_or("application/octet-stream", |(_, mime)| mime)
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
