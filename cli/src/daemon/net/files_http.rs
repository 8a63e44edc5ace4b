//! `GET`, `PUT`, `DELETE /v1/sessions/<id>/files/<path>`: a session's workspace files as
//! plain HTTP, streamed both ways (the daemon holds one chunk of a file at a time, whatever
//! its size), with the credentials and tenancy of `/v1/rpc`. `GET` on a directory (or on
//! `/v1/sessions/<id>/files`) answers its listing as JSON.

use super::super::files::{blocking, Target};
use super::super::{tenancy, Daemon};
use super::Principal;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cellvisor::daemon::protocol::{MethodName, RpcError, MAX_LIST_ENTRIES};
use cellvisor::workspaces::files::FileError;
use cellvisor::workspaces::usage::Usage;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How much of a file one chunk of a download carries.
const CHUNK: usize = 256 * 1024;

/// `?recursive=true` on a listing.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    recursive: bool,
}

/// The session's workspace target for `principal`, the session named as `/v1/rpc` names it.
fn target(
    daemon: &Daemon,
    principal: &Principal,
    id: &str,
    what: MethodName,
) -> Result<Target, RpcError> {
    let mut params = Some(json!({ "session": id }));
    tenancy::enter(&principal.tenant, what, &mut params)?;
    let session = params
        .as_ref()
        .and_then(|p| p["session"].as_str())
        .unwrap_or(id)
        .to_string();
    Target::of(&daemon.cv, &principal.tenant, &session)
}

fn rpc_response(error: RpcError) -> Response {
    let status = match error.code {
        cellvisor::daemon::protocol::code::FORBIDDEN => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    (
        status,
        Json(json!({ "error": error.message, "code": error.code })),
    )
        .into_response()
}

/// The HTTP answer of a file operation's error.
fn file_response(err: FileError) -> Response {
    let status = match &err {
        FileError::Path { .. } | FileError::Escapes(_) | FileError::Kind { .. } => {
            StatusCode::BAD_REQUEST
        }
        FileError::NotFound(_) => StatusCode::NOT_FOUND,
        FileError::NotEmpty(_) => StatusCode::CONFLICT,
        FileError::Quota(_) => StatusCode::PAYLOAD_TOO_LARGE,
        FileError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let rpc = super::super::files::rpc_error(err);
    let mut body = json!({ "error": rpc.message, "code": rpc.code });
    if let Some(data) = rpc.data {
        body["data"] = data;
    }
    (status, Json(body)).into_response()
}

/// `GET /v1/sessions/<id>/files`: the workspace's listing.
pub(super) async fn list_root(
    State(daemon): State<Arc<Daemon>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    match target(&daemon, &principal, &id, MethodName::FilesList) {
        Ok(target) => listing(target, String::new(), query.recursive).await,
        Err(error) => rpc_response(error),
    }
}

async fn listing(target: Target, path: String, recursive: bool) -> Response {
    let listed = blocking(move || {
        let root = target.open()?;
        root.list(&path, recursive, MAX_LIST_ENTRIES)
    })
    .await;
    match listed {
        Ok((entries, truncated)) => {
            Json(json!({ "entries": entries, "truncated": truncated })).into_response()
        }
        Err(err) => file_response(err),
    }
}

/// `GET /v1/sessions/<id>/files/<path>`: the file's bytes, streamed (a directory's listing).
pub(super) async fn get(
    State(daemon): State<Arc<Daemon>>,
    Extension(principal): Extension<Principal>,
    Path((id, path)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    let target = match target(&daemon, &principal, &id, MethodName::FilesRead) {
        Ok(target) => target,
        Err(error) => return rpc_response(error),
    };
    let opening = target.clone();
    let wanted = path.clone();
    let opened = blocking(move || opening.open()?.open_read(&wanted)).await;
    let (file, size) = match opened {
        Ok(opened) => opened,
        Err(FileError::Kind {
            kind: "directory", ..
        }) => return listing(target, path, query.recursive).await,
        Err(err) => return file_response(err),
    };
    // Exactly the bytes `Content-Length` promised, whatever a running cell does to the file.
    let file = tokio::fs::File::from_std(file).take(size);
    let chunks = futures::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<Bytes, std::io::Error>(Bytes::from(buf)), Some(file)))
            }
            Err(err) => Some((Err(err), None)),
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response()
}

/// `PUT /v1/sessions/<id>/files/<path>`: the body becomes the file (replacing one there),
/// written as it arrives; a body past a quota is refused (413) and nothing of it kept.
pub(super) async fn put(
    State(daemon): State<Arc<Daemon>>,
    Extension(principal): Extension<Principal>,
    Path((id, path)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let target = match target(&daemon, &principal, &id, MethodName::FilesWrite) {
        Ok(target) => target,
        Err(error) => return closing(rpc_response(error)),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // Written aside, in the file's directory, then moved over it: a broken or refused upload
    // leaves the file that was there as it was.
    let aside = match path.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/.{name}.upload-{}", uuid::Uuid::new_v4().simple()),
        None => format!(".{path}.upload-{}", uuid::Uuid::new_v4().simple()),
    };
    let opening = target.clone();
    let wanted = path.clone();
    let writing = aside.clone();
    let opened = blocking(move || {
        let root = opening.open()?;
        let existing = root.existing_size(&wanted)?;
        let freed = Usage {
            bytes: existing.unwrap_or(0),
            files: u64::from(existing.is_some()),
        };
        let room = opening.admits(
            freed,
            Usage {
                bytes: declared,
                files: 1,
            },
        )?;
        let (file, _) = root.open_write(&writing, true)?;
        Ok((file, room))
    })
    .await;
    let (file, room) = match opened {
        Ok(opened) => opened,
        Err(err) => return closing(file_response(err)),
    };
    let mut file = tokio::fs::File::from_std(file);
    let mut stream = body.into_data_stream();
    let mut written: u64 = 0;
    let failure = loop {
        let chunk = match stream.next().await {
            None => break None,
            Some(Ok(chunk)) => chunk,
            Some(Err(err)) => break Some(Err(format!("the upload broke off: {err}"))),
        };
        written += chunk.len() as u64;
        if written > room {
            break Some(Ok(()));
        }
        if let Err(err) = file.write_all(&chunk).await {
            break Some(Err(format!("cannot write {path:?}: {err}")));
        }
    };
    let flushed = file.flush().await;
    drop(file);
    let failure = match (failure, flushed) {
        (None, Err(err)) => Some(Err(format!("cannot write {path:?}: {err}"))),
        (failure, _) => failure,
    };
    let failure = match failure {
        Some(failure) => failure,
        None => {
            let (moving, from, to) = (target.clone(), aside.clone(), path.clone());
            match blocking(move || moving.open()?.replace(&from, &to)).await {
                Ok(()) => {
                    return (
                        StatusCode::OK,
                        Json(json!({ "path": path, "written": written, "size": written })),
                    )
                        .into_response()
                }
                Err(err) => Err(err.to_string()),
            }
        }
    };
    // Nothing of a refused or broken upload is kept (the file it would have replaced stays):
    // the quota is measured without it.
    let removing = target.clone();
    let partial = aside.clone();
    let over_quota = failure.is_ok();
    let refused = blocking(move || {
        removing.open()?.delete(&partial, false)?;
        if !over_quota {
            return Ok(());
        }
        let added = Usage {
            bytes: written,
            files: 1,
        };
        removing.admits(Usage::default(), added).map(drop)
    })
    .await;
    closing(match (failure, refused) {
        (Ok(()), Err(err)) => file_response(err),
        (Ok(()), Ok(())) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            Json(json!({ "error": format!("{path:?}: the upload passed the workspace's quota while it ran; nothing of it was kept") })),
        )
            .into_response(),
        (Err(message), _) => (StatusCode::BAD_REQUEST, Json(json!({ "error": message }))).into_response(),
    })
}

/// A refusal sent before the request's body was read to its end: the connection closes after
/// it (the rest of the body is never read), and says so, so that a client does not send its
/// next request on it.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// `DELETE /v1/sessions/<id>/files/<path>[?recursive=true]`.
pub(super) async fn delete(
    State(daemon): State<Arc<Daemon>>,
    Extension(principal): Extension<Principal>,
    Path((id, path)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    let target = match target(&daemon, &principal, &id, MethodName::FilesDelete) {
        Ok(target) => target,
        Err(error) => return rpc_response(error),
    };
    let removing = path.clone();
    let removed = blocking(move || target.open()?.delete(&removing, query.recursive)).await;
    match removed {
        Ok(usage) => Json(json!({ "path": path, "bytes": usage.bytes, "files": usage.files }))
            .into_response(),
        Err(err) => file_response(err),
    }
}
