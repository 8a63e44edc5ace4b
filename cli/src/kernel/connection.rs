//! The connection file a Jupyter front end writes for a kernel it starts: where the five
//! channels listen and the key that signs their messages.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The connection file, as `jupyter_client` writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct ConnectionFile {
    /// `tcp` (the only transport this kernel speaks).
    #[serde(default = "tcp")]
    pub transport: String,
    /// The address the channels bind to.
    pub ip: String,
    pub shell_port: u16,
    pub iopub_port: u16,
    pub stdin_port: u16,
    pub control_port: u16,
    pub hb_port: u16,
    /// The HMAC key; empty: messages are not signed.
    #[serde(default)]
    pub key: String,
    /// `hmac-sha256` (the only scheme this kernel speaks).
    #[serde(default = "sha256")]
    pub signature_scheme: String,
}

fn tcp() -> String {
    "tcp".into()
}

fn sha256() -> String {
    "hmac-sha256".into()
}

/// Why a connection file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The file cannot be read.
    #[error("cannot read the connection file {path}: {why}")]
    Read { path: PathBuf, why: String },
    /// Not the JSON of a connection file.
    #[error(
        "the connection file {path} is not one Jupyter writes ({why}); it needs ip, \
         shell_port, iopub_port, stdin_port, control_port, hb_port and key"
    )]
    Parse { path: PathBuf, why: String },
    /// A transport other than TCP.
    #[error("transport {0:?} is not spoken by this kernel; the transport it speaks is tcp")]
    Transport(String),
    /// A signature scheme other than HMAC-SHA256.
    #[error(
        "signature scheme {0:?} is not spoken by this kernel; the scheme it speaks is hmac-sha256"
    )]
    Scheme(String),
}

impl ConnectionFile {
    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<ConnectionFile, ConnectionError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConnectionError::Read {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        ConnectionFile::parse(&text).map_err(|e| match e {
            ConnectionError::Parse { why, .. } => ConnectionError::Parse {
                path: path.to_path_buf(),
                why,
            },
            other => other,
        })
    }

    /// Reads and checks a connection file's text.
    pub fn parse(text: &str) -> Result<ConnectionFile, ConnectionError> {
        let file: ConnectionFile =
            serde_json::from_str(text).map_err(|e| ConnectionError::Parse {
                path: PathBuf::new(),
                why: e.to_string(),
            })?;
        if file.transport != "tcp" {
            return Err(ConnectionError::Transport(file.transport));
        }
        if file.signature_scheme != "hmac-sha256" {
            return Err(ConnectionError::Scheme(file.signature_scheme));
        }
        Ok(file)
    }

    /// What a user should know about the file at `path` (read with mode `mode`) before the
    /// kernel listens: anyone who reads the key can run code in the session, and without a
    /// key anyone who reaches the ports can.
    pub fn warnings(&self, path: &Path, mode: u32) -> Vec<String> {
        let mut warnings = Vec::new();
        if mode & 0o077 != 0 {
            warnings.push(format!(
                "the connection file {} may be read by other users (mode {:04o}): its key \
                 lets them run code in this kernel's session; Jupyter writes it with mode \
                 0600",
                path.display(),
                mode & 0o777
            ));
        }
        if self.key.is_empty() {
            warnings.push(format!(
                "the connection file {} has no key: messages are not signed, and any process \
                 that reaches {} can run code in this kernel's session",
                path.display(),
                self.ip
            ));
        }
        warnings
    }

    /// The ZeroMQ endpoint of `port`.
    pub fn endpoint(&self, port: u16) -> String {
        format!("tcp://{}:{port}", self.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"shell_port": 1, "iopub_port": 2, "stdin_port": 3,
        "control_port": 4, "hb_port": 5, "ip": "127.0.0.1", "key": "k",
        "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "x"}"#;

    #[test]
    fn a_file_jupyter_writes_is_read() {
        let file = ConnectionFile::parse(FILE).unwrap();
        assert_eq!(file.endpoint(file.hb_port), "tcp://127.0.0.1:5");
        assert_eq!(file.key, "k");
    }

    #[test]
    fn a_file_others_may_read_or_without_a_key_is_warned_of() {
        let file = ConnectionFile::parse(FILE).unwrap();
        let path = Path::new("/run/user/1/kernel-1.json");
        assert!(file.warnings(path, 0o100600).is_empty());
        let warned = file.warnings(path, 0o100644);
        assert_eq!(warned.len(), 1);
        assert!(
            warned[0].contains("kernel-1.json") && warned[0].contains("0644"),
            "{warned:?}"
        );
        let open = ConnectionFile::parse(&FILE.replace("\"key\": \"k\"", "\"key\": \"\"")).unwrap();
        let warned = open.warnings(path, 0o600);
        assert!(warned[0].contains("no key"), "{warned:?}");
    }

    #[test]
    fn other_transports_schemes_and_garbage_are_named() {
        let ipc = FILE.replace("\"tcp\"", "\"ipc\"");
        let err = ConnectionFile::parse(&ipc).unwrap_err().to_string();
        assert!(err.contains("\"ipc\"") && err.contains("tcp"), "{err}");
        let md5 = FILE.replace("hmac-sha256", "hmac-md5");
        let err = ConnectionFile::parse(&md5).unwrap_err().to_string();
        assert!(
            err.contains("hmac-md5") && err.contains("hmac-sha256"),
            "{err}"
        );
        let err = ConnectionFile::parse(r#"{"ip": "x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("shell_port"), "{err}");
        let err = ConnectionFile::read(Path::new("/nonexistent/kernel.json")).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/kernel.json"),
            "{err}"
        );
    }
}
