//! Files in and out of a session's workspace without code: the `files/*` methods, and the
//! target (workspace and quotas) the HTTP routes and MCP resources share with them.
//!
//! The session is named inside the caller's tenant (as every method names it); every path
//! is resolved beneath the workspace's descriptor by `cellvisor::workspaces::files`, and
//! every file operation runs on tokio's blocking pool, never on the actors' thread.

use super::net::Tenant;
use super::Daemon;
use base64::Engine;
use cellvisor::daemon::protocol::{
    code, Encoding, FileEntry, FilesDeleteParams, FilesDeleteResult, FilesListParams,
    FilesListResult, FilesReadParams, FilesReadResult, FilesWriteParams, FilesWriteResult,
    RpcError, MAX_CHUNK_BYTES, MAX_LIST_ENTRIES,
};
use cellvisor::workspaces::files::{FileError, Root};
use cellvisor::workspaces::usage::{Quota, Scope, Usage};
use cellvisor::workspaces::Workspace;
use cellvisor::SessionName;
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// A session's workspace and the quotas a write into it must keep.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) workspace: Workspace,
    /// Each quota with the directory it bounds (the workspace, or its tenant's directory).
    quotas: Vec<(Quota, PathBuf)>,
}

impl Target {
    /// The workspace of `session` (its internal name, inside `tenant`) with the node's and
    /// the tenant's quotas.
    pub(crate) fn of(
        cv: &cellvisor::Cellvisor,
        tenant: &Tenant,
        session: &str,
    ) -> Result<Target, RpcError> {
        let name = SessionName::parse(session)
            .map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))?;
        let workspace = cv.workspace(&name);
        let mut quotas = Vec::new();
        let node = cv.workspace_quota();
        if node.is_set() {
            quotas.push((node, workspace.dir().to_path_buf()));
        }
        let tenant_quota = Quota {
            scope: Scope::Tenant,
            max_bytes: tenant.quotas.workspace_bytes,
            max_files: tenant.quotas.workspace_files,
        };
        if tenant_quota.is_set() && !tenant.default {
            let dir = cellvisor::workspaces::tenant_dir(cv.workspaces_root(), &tenant.name);
            quotas.push((tenant_quota, dir));
        }
        Ok(Target { workspace, quotas })
    }

    /// The workspace opened (made first if missing).
    pub(crate) fn open(&self) -> Result<Root, FileError> {
        self.workspace.create().map_err(|source| FileError::Io {
            path: ".".into(),
            source,
        })?;
        Root::open(self.workspace.dir())
    }

    /// Whether every quota admits replacing `freed` by `added`; `Ok` carries the most bytes
    /// the write may still add past `freed` (`u64::MAX` without a byte quota).
    pub(crate) fn admits(&self, freed: Usage, added: Usage) -> Result<u64, FileError> {
        let mut room = u64::MAX;
        for (quota, dir) in &self.quotas {
            let now = cellvisor::workspaces::usage::measure_path(dir).map_err(|source| {
                FileError::Io {
                    path: ".".into(),
                    source,
                }
            })?;
            quota.admits(now, freed, added)?;
            if let Some(max) = quota.max_bytes {
                let kept = now.bytes.saturating_sub(freed.bytes);
                room = room.min(max.saturating_sub(kept));
            }
        }
        Ok(room)
    }
}

/// The JSON-RPC error of a file operation: a quota is -32008 naming it, a bad path invalid
/// params, the rest refused with the reason.
pub(crate) fn rpc_error(err: FileError) -> RpcError {
    match &err {
        FileError::Quota(exceeded) => RpcError {
            code: code::QUOTA_EXCEEDED,
            message: err.to_string(),
            data: Some(json!({"quota": exceeded.quota, "limit": exceeded.limit})),
        },
        FileError::Path { .. } | FileError::Escapes(_) | FileError::Kind { .. } => {
            RpcError::new(code::INVALID_PARAMS, err.to_string())
        }
        _ => RpcError::new(code::REQUEST_REFUSED, err.to_string()),
    }
}

/// Runs `work` on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(FileError::Io {
            path: ".".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// `files/list`: the entries under a path of the session's workspace.
pub(super) async fn list_method(
    daemon: &Daemon,
    tenant: &Tenant,
    p: FilesListParams,
) -> Result<Value, RpcError> {
    let target = Target::of(&daemon.cv, tenant, &p.session)?;
    blocking(move || list(&target, &p)).await.map_err(rpc_error)
}

/// `files/read`: bytes of a file of the session's workspace.
pub(super) async fn read_method(
    daemon: &Daemon,
    tenant: &Tenant,
    p: FilesReadParams,
) -> Result<Value, RpcError> {
    let target = Target::of(&daemon.cv, tenant, &p.session)?;
    blocking(move || read(&target, &p)).await.map_err(rpc_error)
}

/// `files/write`: a file into the session's workspace, whole or at an offset.
pub(super) async fn write_method(
    daemon: &Daemon,
    tenant: &Tenant,
    p: FilesWriteParams,
) -> Result<Value, RpcError> {
    let target = Target::of(&daemon.cv, tenant, &p.session)?;
    let bytes = decode(&p)?;
    blocking(move || write(&target, &p, &bytes))
        .await
        .map_err(rpc_error)
}

/// `files/delete`: a file or directory of the session's workspace.
pub(super) async fn delete_method(
    daemon: &Daemon,
    tenant: &Tenant,
    p: FilesDeleteParams,
) -> Result<Value, RpcError> {
    let target = Target::of(&daemon.cv, tenant, &p.session)?;
    blocking(move || delete(&target, &p))
        .await
        .map_err(rpc_error)
}

fn encoded<T: serde::Serialize>(value: &T) -> Result<Value, FileError> {
    serde_json::to_value(value).map_err(|e| FileError::Io {
        path: ".".into(),
        source: std::io::Error::other(e),
    })
}

fn list(target: &Target, p: &FilesListParams) -> Result<Value, FileError> {
    let limit = p.limit.unwrap_or(MAX_LIST_ENTRIES).min(MAX_LIST_ENTRIES);
    let root = target.open()?;
    let (entries, truncated) = root.list(&p.path, p.recursive, limit)?;
    encoded(&FilesListResult {
        entries: entries
            .into_iter()
            .map(|e| FileEntry {
                path: e.path,
                kind: e.kind,
                size: e.size,
                modified: e.modified,
            })
            .collect(),
        truncated,
    })
}

fn read(target: &Target, p: &FilesReadParams) -> Result<Value, FileError> {
    let root = target.open()?;
    let (mut file, size) = root.open_read(&p.path)?;
    let want = p.length.unwrap_or(MAX_CHUNK_BYTES).min(MAX_CHUNK_BYTES);
    let io = |source| FileError::Io {
        path: p.path.clone(),
        source,
    };
    file.seek(SeekFrom::Start(p.offset)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(want).read_to_end(&mut bytes).map_err(io)?;
    let length = bytes.len() as u64;
    let (data, encoding) = match p.encoding {
        Some(Encoding::Base64) => (base64_text(&bytes), Encoding::Base64),
        Some(Encoding::Text) => match String::from_utf8(bytes) {
            Ok(text) => (text, Encoding::Text),
            Err(_) => {
                return Err(FileError::Kind {
                    path: p.path.clone(),
                    kind: "file whose bytes are not UTF-8 text",
                    allowed: "read it with encoding \"base64\"",
                })
            }
        },
        None => match String::from_utf8(bytes) {
            Ok(text) => (text, Encoding::Text),
            Err(err) => (base64_text(err.as_bytes()), Encoding::Base64),
        },
    };
    encoded(&FilesReadResult {
        data,
        encoding,
        offset: p.offset,
        length,
        size,
        eof: p.offset.saturating_add(length) >= size,
    })
}

fn base64_text(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode(p: &FilesWriteParams) -> Result<Vec<u8>, RpcError> {
    let bytes = match p.encoding.unwrap_or(Encoding::Text) {
        Encoding::Text => p.data.as_bytes().to_vec(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(&p.data)
            .map_err(|e| {
                RpcError::new(
                    code::INVALID_PARAMS,
                    format!("data is not base64 ({e}); send standard, padded base64 or encoding \"text\""),
                )
            })?,
    };
    if bytes.len() as u64 > MAX_CHUNK_BYTES {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "data is {} bytes; one files/write carries at most {MAX_CHUNK_BYTES}: write a \
                 large file in parts with offset, or PUT it over HTTP",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

fn write(target: &Target, p: &FilesWriteParams, bytes: &[u8]) -> Result<Value, FileError> {
    let root = target.open()?;
    let existing = root.existing_size(&p.path)?;
    let had = existing.unwrap_or(0);
    let len = bytes.len() as u64;
    let size = match p.offset {
        None => len,
        Some(offset) => had.max(offset.saturating_add(len)),
    };
    let freed = Usage {
        bytes: had,
        files: u64::from(existing.is_some()),
    };
    target.admits(
        freed,
        Usage {
            bytes: size,
            files: 1,
        },
    )?;
    let (file, _) = root.open_write(&p.path, p.offset.is_none())?;
    file.write_all_at(bytes, p.offset.unwrap_or(0))
        .map_err(|source| FileError::Io {
            path: p.path.clone(),
            source,
        })?;
    encoded(&FilesWriteResult {
        path: p.path.clone(),
        written: len,
        size,
    })
}

fn delete(target: &Target, p: &FilesDeleteParams) -> Result<Value, FileError> {
    let root = target.open()?;
    let removed = root.delete(&p.path, p.recursive)?;
    encoded(&FilesDeleteResult {
        path: p.path.clone(),
        bytes: removed.bytes,
        files: removed.files,
    })
}
