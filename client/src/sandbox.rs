//! A request's sandbox fields and a session's sandbox as `status` shows it: what hosts send
//! and read. The policy itself (tightening, planning against the kernel, the rules) is the
//! supervisor's.

use serde::{Deserialize, Serialize};

/// A request's own sandbox fields: each may only tighten the operator's policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SandboxRequest {
    /// `true` turns the sandbox on for this request; `false` is refused when the operator
    /// turned it on.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `true`: a kernel that cannot enforce the whole policy refuses the request instead of
    /// running it with less.
    #[serde(default)]
    pub required: Option<bool>,
    /// Replaces the read list; each entry must lie inside one of the operator's.
    #[serde(default)]
    pub read: Option<Vec<String>>,
    /// Replaces the write list; each entry must lie inside one of the operator's.
    #[serde(default)]
    pub write: Option<Vec<String>>,
    /// `none`, `loopback` or `all`; it may only be tighter than the operator's.
    #[serde(default)]
    pub network: Option<String>,
    /// Also give each worker a network namespace of its own, so no protocol reaches outside it.
    #[serde(default)]
    pub network_namespace: Option<bool>,
    /// Also confine `connect` on named Unix sockets to the write paths.
    #[serde(default)]
    pub confine_unix_connect: Option<bool>,
}

/// One thing the sandbox enforces, and the Landlock ABI (or kernel facility) it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// Read/write rules on files and directories.
    Files,
    /// TCP connect and bind denied (`network = "none"`).
    Tcp,
    /// Signals and abstract Unix sockets scoped to the worker.
    Scopes,
    /// A network namespace of the worker's own.
    NetworkNamespace,
    /// `connect` on named Unix sockets confined to the write rules.
    UnixConnect,
}

impl Feature {
    /// The Landlock ABI it needs; `None` for the namespace, which needs user namespaces.
    pub fn abi(self) -> Option<u32> {
        match self {
            Feature::Files => Some(1),
            Feature::Tcp => Some(4),
            Feature::Scopes => Some(6),
            Feature::UnixConnect => Some(9),
            Feature::NetworkNamespace => None,
        }
    }

    /// What it is, with the key that asks for it, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Feature::Files => "filesystem rules (sandbox.read, sandbox.write)",
            Feature::Tcp => "TCP rules (sandbox.network = \"none\")",
            Feature::Scopes => "signal and abstract-socket scoping",
            Feature::NetworkNamespace => {
                "a network namespace (sandbox.network = \"loopback\" or sandbox.network-namespace)"
            }
            Feature::UnixConnect => {
                "rules on connecting to named Unix sockets (sandbox.confine-unix-connect)"
            }
        }
    }
}

/// A session's sandbox as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxStatus {
    /// The Landlock ABI the kernel offers (0 when it has none).
    pub landlock_abi: u32,
    /// What the kernel actually enforces for this session.
    pub enforced: Vec<Feature>,
    /// The network policy in force.
    pub network: String,
    /// What could not be enforced, when the sandbox is not `required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl SandboxStatus {
    /// One word-list for the status table: `landlock 7: files,tcp,scopes`.
    pub fn short(&self) -> String {
        let names: Vec<&str> = self
            .enforced
            .iter()
            .map(|f| match f {
                Feature::Files => "files",
                Feature::Tcp => "tcp",
                Feature::Scopes => "signals",
                Feature::NetworkNamespace => "netns",
                Feature::UnixConnect => "unix",
            })
            .collect();
        let warn = if self.warning.is_some() {
            " (partial)"
        } else {
            ""
        };
        format!("abi {}: {}{warn}", self.landlock_abi, names.join(","))
    }
}
