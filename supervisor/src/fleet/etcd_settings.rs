//! How a node reaches etcd (`fleet.etcd-*`), read from the config whether or not this build
//! speaks etcd, so a build without it can refuse `leases = "etcd"` by name.
// Plain data the `etcd` feature uses whole; a build without it uses a part.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use std::path::PathBuf;

/// How to reach etcd (`fleet.etcd-*`).
#[derive(Debug, Clone, Default)]
pub struct EtcdSettings {
    /// `http://host:2379` or `https://...` URLs of the cluster's members.
    pub endpoints: Vec<String>,
    /// The CA that signed the members' certificates (PEM).
    pub ca_file: Option<PathBuf>,
    /// This node's client certificate and key (PEM), for members that ask for one.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub key_file: Option<PathBuf>,
    /// etcd's user name, with the password read from `password_file`.
    pub user: Option<String>,
    /// A file holding the user's password (its first line).
    pub password_file: Option<PathBuf>,
}
