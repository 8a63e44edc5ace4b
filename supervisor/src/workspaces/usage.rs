//! What a workspace holds and the quotas on it (`workspaces.max-bytes`, `max-files`, and a
//! tenant's own): measured by descriptors, never following a link; the decision of whether a
//! write fits is plain data.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::os::fd::{AsFd, OwnedFd};

/// How deep [`measure`] goes; a deeper tree counts as far as this.
const MAX_DEPTH: usize = 64;

/// What a tree of files holds: its regular files' bytes and its entries (files,
/// directories, links), the tree's own directory not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Bytes of the regular files.
    pub bytes: u64,
    /// Entries: files, directories, links.
    pub files: u64,
}

/// One bound on a workspace (or on a tenant's workspaces together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Where it comes from, as the error names it (`workspaces.max-bytes` ...).
    pub scope: Scope,
    /// The most bytes.
    pub max_bytes: Option<u64>,
    /// The most entries.
    pub max_files: Option<u64>,
}

/// Whose quota: the node's on every workspace, or a tenant's on all of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// `[workspaces]` of the configuration: each workspace.
    #[default]
    Workspace,
    /// The tenants file: a tenant's workspaces together.
    Tenant,
}

/// A write (or a cell) that would leave a workspace over a quota.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {what} would hold {would} {unit}, over its quota {quota} = {limit}; remove files \
     (files/delete) or write less"
)]
pub struct Exceeded {
    /// The quota's name: `workspaces.max-bytes`, `workspaces.max-files`, or the tenants
    /// file's `workspace-bytes`, `workspace-files`.
    pub quota: &'static str,
    /// Its limit.
    pub limit: u64,
    /// What the workspace would hold.
    pub would: u64,
    /// `bytes` or `files`.
    pub unit: &'static str,
    /// `workspace` or `tenant's workspaces`.
    pub what: &'static str,
}

impl Quota {
    /// Whether this quota bounds anything.
    pub fn is_set(&self) -> bool {
        self.max_bytes.is_some() || self.max_files.is_some()
    }

    /// Whether a workspace holding `now` may hold `now - freed + added`.
    pub fn admits(&self, now: Usage, freed: Usage, added: Usage) -> Result<(), Exceeded> {
        let after = Usage {
            bytes: now
                .bytes
                .saturating_sub(freed.bytes)
                .saturating_add(added.bytes),
            files: now
                .files
                .saturating_sub(freed.files)
                .saturating_add(added.files),
        };
        self.holds(after)
    }

    /// Whether `usage` is within the quota.
    pub fn holds(&self, usage: Usage) -> Result<(), Exceeded> {
        let (bytes_name, files_name, what) = match self.scope {
            Scope::Workspace => ("workspaces.max-bytes", "workspaces.max-files", "workspace"),
            Scope::Tenant => ("workspace-bytes", "workspace-files", "tenant's workspaces"),
        };
        if let Some(limit) = self.max_bytes.filter(|limit| usage.bytes > *limit) {
            return Err(Exceeded {
                quota: bytes_name,
                limit,
                would: usage.bytes,
                unit: "bytes",
                what,
            });
        }
        if let Some(limit) = self.max_files.filter(|limit| usage.files > *limit) {
            return Err(Exceeded {
                quota: files_name,
                limit,
                would: usage.files,
                unit: "files",
                what,
            });
        }
        Ok(())
    }
}

/// What the directory open on `dir` holds, walked by descriptors.
pub fn measure(dir: &impl AsFd) -> std::io::Result<Usage> {
    let mut usage = Usage::default();
    walk(dir.as_fd(), 0, &mut usage)?;
    Ok(usage)
}

/// What the directory `path` holds (nothing when it is not there).
pub fn measure_path(path: &std::path::Path) -> std::io::Result<Usage> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Usage::default()),
        Err(errno) => return Err(errno.into()),
    };
    measure(&fd)
}

fn walk(dir: std::os::fd::BorrowedFd<'_>, depth: usize, usage: &mut Usage) -> std::io::Result<()> {
    for item in rustix::fs::Dir::read_from(dir)? {
        let Ok(item) = item else { continue };
        let name = item.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        usage.files += 1;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {
                usage.bytes = usage
                    .bytes
                    .saturating_add(u64::try_from(stat.st_size).unwrap_or(0));
            }
            FileType::Directory if depth < MAX_DEPTH => {
                let sub: Result<OwnedFd, _> = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                if let Ok(sub) = sub {
                    walk(sub.as_fd(), depth + 1, usage)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_names_itself_and_its_limit() {
        let quota = Quota {
            scope: Scope::Workspace,
            max_bytes: Some(100),
            max_files: Some(3),
        };
        let now = Usage {
            bytes: 60,
            files: 2,
        };
        assert!(quota
            .admits(
                now,
                Usage::default(),
                Usage {
                    bytes: 40,
                    files: 1
                }
            )
            .is_ok());
        let err = quota
            .admits(
                now,
                Usage::default(),
                Usage {
                    bytes: 41,
                    files: 1,
                },
            )
            .unwrap_err();
        assert_eq!(
            (err.quota, err.limit, err.would),
            ("workspaces.max-bytes", 100, 101)
        );
        assert!(
            err.to_string().contains("workspaces.max-bytes = 100"),
            "{err}"
        );
        // Replacing a file frees what it held.
        let freed = Usage {
            bytes: 50,
            files: 1,
        };
        assert!(quota
            .admits(
                now,
                freed,
                Usage {
                    bytes: 90,
                    files: 1
                }
            )
            .is_ok());
        let tenant = Quota {
            scope: Scope::Tenant,
            max_bytes: None,
            max_files: Some(1),
        };
        let err = tenant.holds(Usage { bytes: 0, files: 2 }).unwrap_err();
        assert_eq!(err.quota, "workspace-files");
        assert!(!Quota::default().is_set());
        assert!(Quota::default()
            .holds(Usage {
                bytes: u64::MAX,
                files: u64::MAX
            })
            .is_ok());
    }

    #[test]
    fn measuring_counts_files_and_never_follows_a_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/a"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("b"), [0u8; 5]).unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("l")).unwrap();
        let usage = measure_path(dir.path()).unwrap();
        assert_eq!(
            usage,
            Usage {
                bytes: 15,
                files: 4
            }
        );
        assert_eq!(
            measure_path(&dir.path().join("missing")).unwrap(),
            Usage::default()
        );
    }
}
