//! The session's workspace files as MCP resources, `cellvisor://workspace/<path>`, on the
//! HTTP transport (where a session works in a workspace of its own): a client lists what
//! its cells wrote and reads it without running code. Paths are checked and resolved beneath
//! the workspace as `files/read` resolves them (no `..`, no link out, regular files only).

use cellvisor::workspaces::files::{FileError, Root};
use cellvisor::workspaces::Workspace;
use rmcp::model::{ErrorData, Resource, ResourceContents, ResourceTemplate};
use std::io::Read;

/// The scheme and authority of a workspace file's resource URI.
pub(super) const URI_PREFIX: &str = "cellvisor://workspace/";

/// How many files `resources/list` names at most.
const MAX_LISTED: usize = 1000;

/// One session's workspace, as resources.
#[derive(Debug, Clone)]
pub(super) struct WorkspaceFiles {
    workspace: Workspace,
}

impl WorkspaceFiles {
    pub(super) fn new(workspace: Workspace) -> WorkspaceFiles {
        WorkspaceFiles { workspace }
    }

    /// Whether `uri` names a workspace file (rather than an artifact).
    pub(super) fn names(uri: &str) -> bool {
        uri.starts_with(URI_PREFIX)
    }

    /// The workspace's regular files (at most [`MAX_LISTED`]).
    pub(super) async fn list(&self) -> Vec<Resource> {
        let dir = self.workspace.dir().to_path_buf();
        let listed = tokio::task::spawn_blocking(move || {
            Root::open(&dir).and_then(|root| root.list("", true, MAX_LISTED * 4))
        })
        .await;
        let Ok(Ok((entries, _))) = listed else {
            return Vec::new();
        };
        entries
            .into_iter()
            .filter(|entry| entry.kind == "file")
            .take(MAX_LISTED)
            .map(|entry| {
                Resource::new(uri_of(&entry.path), entry.path.clone())
                    .with_description("A file in the session's workspace")
                    .with_size(entry.size)
            })
            .collect()
    }

    /// `resources/read` of a workspace file: text when it is UTF-8, else a base64 blob.
    pub(super) async fn read(&self, uri: &str) -> Result<ResourceContents, ErrorData> {
        let path = path_of(uri).ok_or_else(|| {
            ErrorData::resource_not_found(
                format!(
                    "no resource {uri:?}: workspace resources are {URI_PREFIX}<path>, the path \
                     relative to the session's workspace, percent-encoded"
                ),
                None,
            )
        })?;
        let dir = self.workspace.dir().to_path_buf();
        let wanted = path.clone();
        let read = tokio::task::spawn_blocking(move || {
            let (file, size) = Root::open(&dir)?.open_read(&wanted)?;
            if size > super::resources::MAX_READ_BYTES {
                return Ok(Err(size));
            }
            let mut bytes = Vec::new();
            file.take(super::resources::MAX_READ_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|source| FileError::Io {
                    path: wanted.clone(),
                    source,
                })?;
            Ok(Ok(bytes))
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match read {
            Ok(Ok(bytes)) => Ok(super::resources::contents(uri, bytes)),
            Ok(Err(size)) => Err(ErrorData::invalid_params(
                format!(
                    "{path:?} is {size} bytes, more than the {} MiB a resource read returns; \
                     download it (GET /v1/sessions/<id>/files/<path>) or read it in parts with \
                     files/read",
                    super::resources::MAX_READ_BYTES >> 20
                ),
                None,
            )),
            Err(FileError::NotFound(_)) => Err(ErrorData::resource_not_found(
                format!("no file {path:?} in this session's workspace"),
                Some(serde_json::json!({ "uri": uri })),
            )),
            Err(err) => Err(ErrorData::invalid_params(err.to_string(), None)),
        }
    }
}

/// The template of workspace file URIs, for `resources/templates/list`.
pub(super) fn template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{URI_PREFIX}{{+path}}"), "workspace file")
        .with_title("A file in the session's workspace")
        .with_description("A file the session's cells (or a host's upload) left in its workspace")
}

/// The URI of `path`: each byte outside `A-Z a-z 0-9 - . _ ~ /` percent-encoded.
fn uri_of(path: &str) -> String {
    let mut uri = String::from(URI_PREFIX);
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b'/') {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// The path a workspace URI names, percent-decoded; `None` for another URI or bad escapes.
fn path_of(uri: &str) -> Option<String> {
    let encoded = uri.strip_prefix(URI_PREFIX)?.as_bytes();
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        if encoded[i] == b'%' {
            let hex = std::str::from_utf8(encoded.get(i + 1..i + 3)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            bytes.push(encoded[i]);
            i += 1;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_other_uris_are_not_paths() {
        for path in ["a.txt", "dir/sub file.csv", "ü/%x"] {
            assert_eq!(path_of(&uri_of(path)).as_deref(), Some(path));
        }
        assert_eq!(path_of("cellvisor://artifact/x"), None);
        assert_eq!(path_of(&format!("{URI_PREFIX}%zz")), None);
    }
}
