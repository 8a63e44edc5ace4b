//! A build without the `etcd` feature (which needs `protoc` to build etcd\'s client): the
//! config may still say `leases = "etcd"`, and the daemon refuses to start naming the feature.
//! No value of [`EtcdLeases`] can exist here, so no snapshot store is ever fenced and the
//! methods below are never reached.

pub use super::etcd_settings::EtcdSettings;
use super::pointer::{Pointer, RequestsPointer};
use super::LeaseError;
use cellvisor_ipc::Language;
use std::time::Duration;

/// Why a pointer was not committed (never, in this build).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {}

/// Leases in etcd: none in a build without the `etcd` feature.
#[derive(Debug)]
pub enum EtcdLeases {}

impl EtcdLeases {
    /// Refuses: this build has no etcd client.
    pub fn connect(
        _settings: &EtcdSettings,
        _node: &str,
        _ttl: Duration,
        _timeout: Duration,
    ) -> Result<EtcdLeases, LeaseError> {
        Err(LeaseError::Io {
            path: std::path::PathBuf::from("etcd"),
            why: "fleet.leases = \"etcd\" needs a cellvisor built with the `etcd` feature \
                  (cargo build --features etcd; the released packages have it); use \
                  leases = \"file\" on one host"
                .to_string(),
        })
    }

    /// Never called: no value exists.
    pub fn pointer(&self, _session: &str, _language: Language) -> Option<Pointer> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn next_blob(&self, _session: &str) -> Option<(String, i64)> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn commit_with_progress(
        &self,
        _session: &str,
        _language: Language,
        _pointer: Pointer,
        _progress: Option<crate::once::progress::Progress>,
    ) -> tokio::sync::oneshot::Receiver<Result<(), CommitError>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn progress(&self, _session: &str) -> Vec<crate::once::progress::Progress> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn provable(&self, _session: &str) -> bool {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn forget(&self, _session: &str, _language: Language) {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn requests(&self, _session: &str) -> Result<Option<RequestsPointer>, CommitError> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn checkpoint(&self, _session: &str, _language: Language, _name: &str) -> Option<Pointer> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn commit_checkpoint(
        &self,
        _session: &str,
        _language: Language,
        _name: &str,
        _pointer: Pointer,
    ) -> tokio::sync::oneshot::Receiver<Result<(), CommitError>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn token(&self, _session: &str) -> Option<i64> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn next_seq(&self, _session: &str) -> Option<(i64, u64)> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn commit_requests(
        &self,
        _session: &str,
        _pointer: RequestsPointer,
        _within: Duration,
    ) -> Result<(), CommitError> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn forget_requests(&self, _session: &str) {
        match *self {}
    }
}

impl super::LeaseBackend for EtcdLeases {
    fn ttl(&self) -> Duration {
        match *self {}
    }

    fn acquire(&self, _session: &str) -> Result<Option<i64>, LeaseError> {
        match *self {}
    }

    fn renew(&self, _session: &str) -> Result<(), LeaseError> {
        match *self {}
    }

    fn provable(&self, _session: &str) -> bool {
        match *self {}
    }

    fn release(&self, _session: &str) {
        match *self {}
    }

    fn holder(&self, _session: &str) -> Option<(String, Duration)> {
        match *self {}
    }

    fn settle(&self) {
        match *self {}
    }
}
