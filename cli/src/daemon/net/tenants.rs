//! Tenants: who a network credential is. Each token maps to one tenant, with its rights
//! (`cells`: run and manage its own sessions; `operate`: the node itself) and its quotas.
//! Without `daemon.tenants-file`, `daemon.token-file`'s token is the default tenant, with
//! every right and no quota, as the Unix socket's caller is.

use super::token::{bearer, Token};
use super::NetworkError;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The rights a tenant may be given, as the tenants file spells them.
pub(crate) const RIGHTS: &[&str] = &["cells", "operate"];

/// A right a method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Right {
    /// Run cells in the tenant's own sessions, and everything done to them.
    Cells,
    /// Operate the node: `status` of everything, `zygotes`, `drain`, `undrain`,
    /// `config/reload`, `shutdown`.
    Operate,
}

impl Right {
    /// The word the tenants file and the errors use.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Right::Cells => "cells",
            Right::Operate => "operate",
        }
    }
}

/// A tenant's bounds; `None` is unbounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Quotas {
    /// Live sessions at once.
    pub(crate) max_sessions: Option<usize>,
    /// The resident memory of one session's worker tree (`limits.max-rss` for its
    /// sessions, at most the node's), in bytes.
    pub(crate) max_session_memory: Option<u64>,
    /// The resident memory of all its sessions' workers, in bytes.
    pub(crate) max_memory: Option<u64>,
    /// MCP sessions over HTTP at once.
    pub(crate) max_mcp_sessions: Option<usize>,
    /// The bytes of all its sessions' workspaces together.
    pub(crate) workspace_bytes: Option<u64>,
    /// The files (and directories) of all its sessions' workspaces together.
    pub(crate) workspace_files: Option<u64>,
}

/// One tenant: its name, rights and quotas.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Tenant {
    /// The tenant's name (the prefix of its sessions' internal names).
    pub(crate) name: String,
    /// The default tenant: the Unix socket's caller, and `daemon.token-file`'s; its session
    /// names are the names clients send.
    pub(crate) default: bool,
    rights: Vec<Right>,
    pub(crate) quotas: Quotas,
}

/// What separates a tenant's name from a session's in the internal name. Session names a
/// client sends may not hold it, so no client name is another tenant's internal name.
pub(crate) const SEPARATOR: char = '/';

impl Tenant {
    /// The operator: the default tenant, every right, no quota.
    pub(crate) fn operator() -> Tenant {
        Tenant {
            name: "default".into(),
            default: true,
            rights: vec![Right::Cells, Right::Operate],
            quotas: Quotas::default(),
        }
    }

    /// A tenant of the tenants file, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, rights: &[Right]) -> Tenant {
        Tenant {
            name: name.into(),
            default: false,
            rights: rights.to_vec(),
            quotas: Quotas::default(),
        }
    }

    /// Whether the tenant holds `right`.
    pub(crate) fn may(&self, right: Right) -> bool {
        self.rights.contains(&right)
    }

    /// The prefix of the tenant's internal session names (empty for the default tenant).
    pub(crate) fn prefix(&self) -> String {
        match self.default {
            true => String::new(),
            false => format!("{}{SEPARATOR}", self.name),
        }
    }

    /// The internal name of the tenant's session `name`.
    pub(crate) fn internal(&self, name: &str) -> String {
        format!("{}{name}", self.prefix())
    }

    /// The client's name of an internal session name, if it is one of this tenant's.
    pub(crate) fn own<'a>(&self, internal: &'a str) -> Option<&'a str> {
        match self.default {
            true => (!internal.contains(SEPARATOR)).then_some(internal),
            false => internal.strip_prefix(&self.prefix()),
        }
    }
}

/// Who made a request: the tenant, and the credential (a token's digest) it came with.
#[derive(Debug, Clone)]
pub(crate) struct Principal {
    pub(crate) tenant: Arc<Tenant>,
    /// The token's digest; zero for the Unix socket.
    pub(crate) credential: [u8; 32],
}

impl Principal {
    /// The Unix socket's caller.
    pub(crate) fn operator() -> Principal {
        Principal {
            tenant: Arc::new(Tenant::operator()),
            credential: [0; 32],
        }
    }
}

/// The credentials the network listeners admit, each mapped to its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tenants {
    entries: Vec<([u8; 32], Arc<Tenant>)>,
}

/// The tenants file, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tenants: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Entry {
    name: String,
    token_file: Option<PathBuf>,
    #[serde(default)]
    token_files: Vec<PathBuf>,
    #[serde(default = "cells_only")]
    rights: Vec<String>,
    max_sessions: Option<usize>,
    max_session_memory: Option<String>,
    max_memory: Option<String>,
    max_mcp_sessions: Option<usize>,
    workspace_bytes: Option<String>,
    workspace_files: Option<u64>,
}

fn cells_only() -> Vec<String> {
    vec!["cells".into()]
}

impl Tenants {
    /// No credential at all (what a plan leaves once the daemon holds its tenants).
    pub(crate) fn empty() -> Tenants {
        Tenants {
            entries: Vec::new(),
        }
    }

    /// `daemon.token-file`'s token as the default tenant.
    pub(crate) fn single(token: &Token) -> Tenants {
        Tenants {
            entries: vec![(token.digest(), Arc::new(Tenant::operator()))],
        }
    }

    /// Reads `daemon.tenants-file` and every token file it names (relative to its directory).
    pub(crate) fn load(path: &Path) -> Result<Tenants, NetworkError> {
        let refuse = |reason: String| NetworkError::Tenants {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
        let file: File = toml::from_str(&text).map_err(|e| refuse(e.message().to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Tenants::from_entries(file.tenants, base).map_err(refuse)
    }

    fn from_entries(entries: Vec<Entry>, base: &Path) -> Result<Tenants, String> {
        if entries.is_empty() {
            return Err(
                "it names no tenant: add a [[tenants]] table with a name and a \
                        token-file"
                    .into(),
            );
        }
        let mut names = HashSet::new();
        let mut digests: Vec<([u8; 32], Arc<Tenant>)> = Vec::new();
        for entry in entries {
            check_name(&entry.name)?;
            if !names.insert(entry.name.clone()) {
                return Err(format!("the tenant name {:?} is used twice", entry.name));
            }
            let tenant = Arc::new(tenant_of(&entry)?);
            let files: Vec<PathBuf> = entry
                .token_file
                .iter()
                .chain(&entry.token_files)
                .cloned()
                .collect();
            if files.is_empty() {
                return Err(format!(
                    "tenant {:?} has no token: set token-file (or token-files)",
                    entry.name
                ));
            }
            for file in files {
                let token = Token::load(&base.join(&file)).map_err(|e| e.to_string())?;
                if let Some((_, other)) = digests.iter().find(|(d, _)| *d == token.digest()) {
                    return Err(format!(
                        "tenant {:?}'s token in {} is also a token of tenant {:?}: each token \
                         names one tenant",
                        entry.name,
                        file.display(),
                        other.name
                    ));
                }
                digests.push((token.digest(), Arc::clone(&tenant)));
            }
        }
        Ok(Tenants { entries: digests })
    }

    /// The principal of an `Authorization` header's bearer token, if it is one of ours.
    pub(crate) fn admit(&self, authorization: Option<&[u8]>) -> Option<Principal> {
        let presented = authorization.and_then(bearer)?;
        let digest: [u8; 32] = Sha256::digest(presented).into();
        // Every entry is compared, in constant time, whichever matches.
        let mut found = None;
        for (known, tenant) in &self.entries {
            if bool::from(digest.ct_eq(known)) {
                found = Some(Arc::clone(tenant));
            }
        }
        found.map(|tenant| Principal {
            tenant,
            credential: digest,
        })
    }

    /// The memory cap of each tenant's sessions, by their name's prefix.
    pub(crate) fn memory_caps(&self) -> Vec<(String, u64)> {
        let mut caps: Vec<(String, u64)> = Vec::new();
        for (_, tenant) in &self.entries {
            if let Some(cap) = tenant.quotas.max_session_memory {
                let prefix = tenant.prefix();
                if !tenant.default && !caps.iter().any(|(p, _)| *p == prefix) {
                    caps.push((prefix, cap));
                }
            }
        }
        caps
    }

    /// Whether `principal`'s credential still names the same tenant, with the same rights
    /// and quotas (after a reload, or a token file's change).
    pub(crate) fn still_admits(&self, principal: &Principal) -> bool {
        self.entries
            .iter()
            .any(|(d, t)| *d == principal.credential && **t == *principal.tenant)
    }
}

/// A tenant name: what session names are prefixed with, so a short, plain word.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'));
    match ok {
        true => Ok(()),
        false => Err(format!(
            "invalid tenant name {name:?}: use 1 to 32 characters from a-z 0-9 - _, starting \
             with a letter or digit"
        )),
    }
}

fn tenant_of(entry: &Entry) -> Result<Tenant, String> {
    let mut rights = Vec::new();
    for right in &entry.rights {
        rights.push(match right.as_str() {
            "cells" => Right::Cells,
            "operate" => Right::Operate,
            other => {
                return Err(format!(
                    "tenant {:?}: unknown right {other:?}; the rights are {}",
                    entry.name,
                    RIGHTS.join(" and ")
                ))
            }
        });
    }
    let size = |key: &str, value: &Option<String>| -> Result<Option<u64>, String> {
        let Some(text) = value else {
            return Ok(None);
        };
        text.parse::<bytesize::ByteSize>()
            .map(|size| Some(size.as_u64()))
            .map_err(|e| {
                format!(
                    "tenant {:?}: {key} {text:?} is not a size ({e}); write it like \"4GiB\"",
                    entry.name
                )
            })
    };
    let max_memory = size("max-memory", &entry.max_memory)?;
    let max_session_memory = size("max-session-memory", &entry.max_session_memory)?;
    let workspace_bytes = size("workspace-bytes", &entry.workspace_bytes)?;
    Ok(Tenant {
        name: entry.name.clone(),
        default: false,
        rights,
        quotas: Quotas {
            max_sessions: entry.max_sessions,
            max_session_memory,
            max_memory,
            max_mcp_sessions: entry.max_mcp_sessions,
            workspace_bytes,
            workspace_files: entry.workspace_files,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(toml_text: &str, tokens: &[(&str, &str)]) -> Result<Tenants, NetworkError> {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in tokens {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let path = dir.path().join("tenants.toml");
        std::fs::write(&path, toml_text).unwrap();
        Tenants::load(&path)
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn each_token_names_its_tenant() {
        let t = tenants(
            "[[tenants]]\nname = \"alpha\"\ntoken-file = \"a\"\nmax-sessions = 2\n\
             [[tenants]]\nname = \"ops\"\ntoken-files = [\"b\"]\nrights = [\"operate\", \"cells\"]\n",
            &[("a", A), ("b", B)],
        )
        .unwrap();
        let alpha = t.admit(Some(format!("Bearer {A}").as_bytes())).unwrap();
        assert_eq!(alpha.tenant.name, "alpha");
        assert!(alpha.tenant.may(Right::Cells) && !alpha.tenant.may(Right::Operate));
        assert_eq!(alpha.tenant.quotas.max_sessions, Some(2));
        assert_eq!(alpha.tenant.internal("s1"), "alpha/s1");
        assert_eq!(alpha.tenant.own("alpha/s1"), Some("s1"));
        assert_eq!(alpha.tenant.own("ops/s1"), None);
        let ops = t.admit(Some(format!("Bearer {B}").as_bytes())).unwrap();
        assert!(ops.tenant.may(Right::Operate));
        assert!(t.admit(Some(b"Bearer cccccccccccccccccccc")).is_none());
        assert!(t.still_admits(&alpha));
    }

    #[test]
    fn mistakes_are_named() {
        let err =
            |text: &str, tokens: &[(&str, &str)]| tenants(text, tokens).unwrap_err().to_string();
        let twice = err(
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a\"\n[[tenants]]\nname = \"a\"\ntoken-file = \"b\"\n",
            &[("a", A), ("b", B)],
        );
        assert!(twice.contains("\"a\" is used twice"), "{twice}");
        let same = err(
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a\"\n[[tenants]]\nname = \"b\"\ntoken-file = \"b\"\n",
            &[("a", A), ("b", A)],
        );
        assert!(same.contains("also a token of tenant \"a\""), "{same}");
        let right = err(
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a\"\nrights = [\"root\"]\n",
            &[("a", A)],
        );
        assert!(
            right.contains("unknown right \"root\"") && right.contains("cells and operate"),
            "{right}"
        );
        let name = err(
            "[[tenants]]\nname = \"A/B\"\ntoken-file = \"a\"\n",
            &[("a", A)],
        );
        assert!(name.contains("invalid tenant name"), "{name}");
        let key = err(
            "[[tenants]]\nname = \"a\"\ntoken-file = \"a\"\nmax-ram = 1\n",
            &[("a", A)],
        );
        assert!(key.contains("max-ram"), "{key}");
        let none = err("[[tenants]]\nname = \"a\"\n", &[]);
        assert!(none.contains("no token"), "{none}");
    }
}
