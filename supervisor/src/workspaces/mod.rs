//! Workspaces: every session served without a caller directory (network clients, MCP over
//! HTTP, library calls without `cwd`, per-call requests on a name) works in a directory of
//! its own under `[workspaces] root` (docs/workspaces.md).
//!
//! A leaf module for where a workspace is: it uses only [`crate::names`] and the
//! configuration, so the snapshot and checkpoint code, the daemon and the hosts all find a
//! session's files the same way.
//!
//! The layout is injective: `<root>/local/<dir_name>` for the sessions of the operator (the
//! Unix socket, the library) and `<root>/tenants/<tenant>/<dir_name of the bare name>` for a
//! tenant's `<tenant>/<name>`, each component from [`crate::names::encode_component`], so two
//! sessions never share a directory and no name reaches outside its tenant's.

pub mod files;
pub mod usage;

use crate::names::{encode_component, SessionName};
use cellvisor_config::WorkspacesConfig;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The directory of the operator's sessions' workspaces, under the root.
const LOCAL: &str = "local";
/// The directory of the tenants' directories, under the root.
const TENANTS: &str = "tenants";

/// Where workspaces live: `workspaces.root`, else `$XDG_STATE_HOME/cellvisor/workspaces`.
pub fn root(config: &WorkspacesConfig) -> PathBuf {
    config
        .root
        .clone()
        .unwrap_or_else(crate::paths::workspaces_dir)
}

/// The directory of every workspace of tenant `tenant` (what its tenant quotas bound).
pub fn tenant_dir(root: &Path, tenant: &str) -> PathBuf {
    root.join(TENANTS).join(encode_component(tenant))
}

/// One session's workspace: a directory only it works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    dir: PathBuf,
}

impl Workspace {
    /// The workspace of `session` under `root` (a per-call request's throw-away session
    /// works in its named session's: pass the name, not the throw-away key).
    pub fn of(root: &Path, session: &SessionName) -> Workspace {
        let dir = match session.as_str().split_once('/') {
            Some((tenant, name)) => tenant_dir(root, tenant).join(encode_component(name)),
            None => root.join(LOCAL).join(session.dir_name()),
        };
        Workspace { dir }
    }

    /// The workspace `path` lies in (the workspace itself or a directory inside it), if it
    /// lies in one under `root`.
    pub fn containing(root: &Path, path: &Path) -> Option<Workspace> {
        let rest = path.strip_prefix(root).ok()?;
        let parts: Vec<_> = rest.components().take(3).collect();
        let depth = match parts.first()?.as_os_str().to_str()? {
            LOCAL => 2,
            TENANTS => 3,
            _ => return None,
        };
        if parts.len() < depth
            || parts
                .iter()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return None;
        }
        let dir = parts[..depth]
            .iter()
            .fold(root.to_path_buf(), |dir, part| dir.join(part));
        Some(Workspace { dir })
    }

    /// The workspace's directory (which may not exist yet: see [`Workspace::create`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the directory if missing: the workspace 0700, the directories on the way 0711
    /// (entered by a session's uid, listed by nobody but the daemon). Something else in its
    /// place (a link to another session's workspace or anywhere, a file) is refused, never
    /// entered: the session's cells would work there.
    pub fn create(&self) -> io::Result<()> {
        if let Some(parent) = self.dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(parent)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Err(err) if err.kind() != io::ErrorKind::AlreadyExists => Err(err),
            Err(_) if !std::fs::symlink_metadata(&self.dir)?.is_dir() => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "something that is not a directory (a link or a file) is in its place; \
                 remove it to have the workspace made again",
            )),
            _ => Ok(()),
        }
    }

    /// Removes the workspace and everything in it (a `close` that does not keep it). A
    /// workspace that is not there is no error.
    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> SessionName {
        SessionName::parse(text).unwrap()
    }

    #[test]
    fn a_link_or_a_file_in_a_workspaces_place_is_refused_and_a_directory_kept() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = Workspace::of(root.path(), &name("linked"));
        linked.create().unwrap();
        std::fs::remove_dir(linked.dir()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, linked.dir()).unwrap();
        let err = linked.create().expect_err("a link is refused");
        assert!(err.to_string().contains("not a directory"), "{err}");
        let file = Workspace::of(root.path(), &name("file"));
        file.create().unwrap();
        std::fs::remove_dir(file.dir()).unwrap();
        std::fs::write(file.dir(), b"x").unwrap();
        assert!(file.create().is_err());
        let kept = Workspace::of(root.path(), &name("kept"));
        kept.create().unwrap();
        std::fs::write(kept.dir().join("f"), b"y").unwrap();
        kept.create().expect("an existing directory is kept");
        assert!(kept.dir().join("f").is_file());
    }

    #[test]
    fn sessions_and_tenants_get_directories_apart() {
        let root = Path::new("/w");
        assert_eq!(
            Workspace::of(root, &name("s1")).dir(),
            Path::new("/w/local/s1")
        );
        assert_eq!(
            Workspace::of(root, &name("beta/s1")).dir(),
            Path::new("/w/tenants/beta/s1")
        );
        assert_eq!(
            Workspace::of(root, &name("..")).dir(),
            Path::new("/w/local/%2E.")
        );
        let all = ["s1", "beta/s1", "alpha/s1", "beta/s2", "local", "tenants"];
        let dirs: std::collections::HashSet<_> = all
            .iter()
            .map(|n| Workspace::of(root, &name(n)).dir)
            .collect();
        assert_eq!(dirs.len(), all.len());
    }

    #[test]
    fn the_workspace_a_directory_lies_in() {
        let root = Path::new("/w");
        for session in ["s1", "beta/s1"] {
            let ws = Workspace::of(root, &name(session));
            assert_eq!(Workspace::containing(root, ws.dir()).as_ref(), Some(&ws));
            assert_eq!(
                Workspace::containing(root, &ws.dir().join("a/b")).as_ref(),
                Some(&ws)
            );
        }
        for outside in [
            "/w",
            "/w/local",
            "/w/tenants/beta",
            "/elsewhere/local/s1",
            "/w/x/y",
        ] {
            assert_eq!(
                Workspace::containing(root, Path::new(outside)),
                None,
                "{outside}"
            );
        }
    }

    #[test]
    fn create_and_remove() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let ws = Workspace::of(root.path(), &name("beta/s1"));
        ws.create().unwrap();
        ws.create().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(ws.dir()), 0o700);
        assert_eq!(mode(ws.dir().parent().unwrap()), 0o711);
        std::fs::write(ws.dir().join("f"), "x").unwrap();
        ws.remove().unwrap();
        assert!(!ws.dir().exists());
        ws.remove().unwrap();
    }
}
