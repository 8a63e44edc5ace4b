//! Versions between a client and its daemon. A daemon left running across an upgrade speaks
//! the old protocol: it would refuse a new client's field as "unknown field", and a client of
//! another version would misread its answers. So a client says its protocol version in
//! `initialize` (the daemon refuses a mismatch with both versions), compares the daemon's,
//! and, when the daemon refuses a method or its params, asks which version it speaks before
//! blaming the request.

use super::{no_tools, Client, ClientError};
use crate::protocol::{
    code, method, InitializeResult, RpcError, VersionMismatch, PROTOCOL_VERSION,
};
use serde_json::json;

/// This client's program version, sent in `initialize` and shown in mismatch messages.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

impl Client {
    /// Says this client's protocol version to the daemon and checks the daemon's:
    /// [`ClientError::VersionMismatch`] when they differ (whichever side finds it first).
    pub async fn check_version(&mut self) -> Result<InitializeResult, ClientError> {
        let params =
            json!({"protocol_version": PROTOCOL_VERSION, "client_version": CLIENT_VERSION});
        let answer = match self
            .exchange(method::INITIALIZE, params, |_| {}, no_tools)
            .await
        {
            Ok(answer) => answer,
            Err(ClientError::Rpc(refusal)) if refusal.code == code::PROTOCOL_MISMATCH => {
                let data = refusal.data.clone().unwrap_or_default();
                return Err(match serde_json::from_value::<VersionMismatch>(data) {
                    Ok(mismatch) => ClientError::VersionMismatch(mismatch),
                    Err(_) => ClientError::Rpc(refusal),
                });
            }
            Err(other) => return Err(other),
        };
        let server: InitializeResult = serde_json::from_value(answer.clone())
            .map_err(|e| ClientError::Protocol(format!("initialize answered {answer}: {e}")))?;
        if server.protocol_version != PROTOCOL_VERSION {
            return Err(ClientError::VersionMismatch(VersionMismatch {
                daemon_protocol: server.protocol_version,
                daemon_version: server.server_version,
                client_protocol: PROTOCOL_VERSION,
                client_version: CLIENT_VERSION.to_string(),
            }));
        }
        Ok(server)
    }

    /// What to report for `refusal` of a method or params: the version mismatch when the
    /// daemon speaks another protocol, else the refusal itself.
    pub(super) async fn explain_refusal(&mut self, refusal: RpcError) -> ClientError {
        match self.check_version().await {
            Err(mismatch @ ClientError::VersionMismatch(_)) => mismatch,
            _ => ClientError::Rpc(refusal),
        }
    }
}

/// Whether `refusal` of a call to `method` may come from a daemon of another protocol: it
/// did not know the method, or refused its params (an "unknown field").
pub(super) fn may_be_version_skew(method: &str, refusal: &RpcError) -> bool {
    method != method::INITIALIZE
        && matches!(refusal.code, code::METHOD_NOT_FOUND | code::INVALID_PARAMS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_of_methods_and_params_are_checked_against_the_version() {
        let refusal = |code| RpcError::new(code, "x");
        assert!(may_be_version_skew("eval", &refusal(code::INVALID_PARAMS)));
        assert!(may_be_version_skew(
            "names",
            &refusal(code::METHOD_NOT_FOUND)
        ));
        assert!(!may_be_version_skew(
            "eval",
            &refusal(code::REQUEST_REFUSED)
        ));
        assert!(!may_be_version_skew(
            "initialize",
            &refusal(code::INVALID_PARAMS)
        ));
    }

    #[test]
    fn the_mismatch_names_both_versions_and_the_remedy() {
        let text = VersionMismatch {
            daemon_protocol: 1,
            daemon_version: "0.1.0".into(),
            client_protocol: 2,
            client_version: "0.2.0".into(),
        }
        .to_string();
        assert!(text.contains("protocol 1 (cellvisor 0.1.0)"), "{text}");
        assert!(text.contains("protocol 2 (cellvisor 0.2.0)"), "{text}");
        assert!(text.contains("`cellvisor stop`"), "{text}");
    }
}
