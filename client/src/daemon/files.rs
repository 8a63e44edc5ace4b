//! A session's workspace files through the client: `upload`, `download` and `list` over
//! the `files/*` methods, a large file in parts of [`MAX_CHUNK_BYTES`], on any transport
//! (the Unix socket or a WebSocket).

use super::{Client, ClientError};
use crate::protocol::{
    method, Encoding, FilesListParams, FilesListResult, FilesReadParams, FilesReadResult,
    FilesWriteParams, MAX_CHUNK_BYTES,
};
use base64::Engine;

fn to_value<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ClientError> {
    serde_json::to_value(value).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Protocol(e.to_string()))
}

impl Client {
    /// Puts `data` into `session`'s workspace at `path` (relative to it), replacing a file
    /// there; its missing directories are made.
    pub async fn upload(
        &mut self,
        session: &str,
        path: &str,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let chunk = usize::try_from(MAX_CHUNK_BYTES).unwrap_or(usize::MAX);
        let mut offset = 0usize;
        loop {
            let end = data.len().min(offset + chunk);
            let params = FilesWriteParams {
                session: session.to_string(),
                path: path.to_string(),
                data: base64::engine::general_purpose::STANDARD.encode(&data[offset..end]),
                encoding: Some(Encoding::Base64),
                // The first part replaces the file; the others go after it.
                offset: (offset > 0).then_some(offset as u64),
            };
            self.call(method::FILES_WRITE, to_value(&params)?).await?;
            offset = end;
            if offset >= data.len() {
                return Ok(());
            }
        }
    }

    /// The bytes of the file `path` in `session`'s workspace.
    pub async fn download(&mut self, session: &str, path: &str) -> Result<Vec<u8>, ClientError> {
        let mut bytes = Vec::new();
        loop {
            let params = FilesReadParams {
                session: session.to_string(),
                path: path.to_string(),
                offset: bytes.len() as u64,
                length: None,
                encoding: Some(Encoding::Base64),
            };
            let part: FilesReadResult =
                from_value(self.call(method::FILES_READ, to_value(&params)?).await?)?;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(part.data.as_bytes())
                .map_err(|e| ClientError::Protocol(format!("files/read sent bad base64: {e}")))?;
            bytes.extend_from_slice(&decoded);
            if part.eof || decoded.is_empty() {
                return Ok(bytes);
            }
        }
    }

    /// The entries of the directory `path` (`""`: the workspace) of `session`'s workspace,
    /// with its subdirectories' when `recursive`.
    pub async fn list(
        &mut self,
        session: &str,
        path: &str,
        recursive: bool,
    ) -> Result<FilesListResult, ClientError> {
        let params = FilesListParams {
            session: session.to_string(),
            path: path.to_string(),
            recursive,
            limit: None,
        };
        from_value(self.call(method::FILES_LIST, to_value(&params)?).await?)
    }
}
