//! Sessions' workspaces as a host sees them: where a session's is, and a request without a
//! caller directory sent to work there.

use super::{Cellvisor, RequestError};
use crate::cell::EvalRequest;
use crate::names::SessionName;
use crate::workspaces::Workspace;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

impl Cellvisor {
    /// The root of every session's workspace (`workspaces.root`).
    pub fn workspaces_root(&self) -> &Path {
        &self.workspaces
    }

    /// The workspace of `session` (a session name as the supervisor holds it: a tenant's
    /// `<tenant>/<name>`), which may not exist yet.
    pub fn workspace(&self, session: &SessionName) -> Workspace {
        Workspace::of(&self.workspaces, session)
    }

    /// The request's look at its session's workspace, when it has no caller directory (and
    /// sessions are not keyed by one): one `statx`, whose answer the request's every check
    /// shares (the files to bring back, the directory it works in, its Python's choice), so
    /// a cell costs one look at the file system, not one per check. Under `sessions.key =
    /// "session+cwd"` a request's directory is its state's key, so it must name one: no look.
    pub(super) fn look_at_workspace(
        &self,
        request: &EvalRequest,
    ) -> Result<Option<WorkspaceLook>, RequestError> {
        if request.cwd.is_some() || self.keyed_by_cwd() {
            return Ok(None);
        }
        let name = SessionName::parse(&request.session)?;
        let dir = self.workspace(&name).dir().to_path_buf();
        let found = std::fs::symlink_metadata(&dir).ok();
        Ok(Some(WorkspaceLook { name, dir, found }))
    }

    /// Gives a request its session's workspace as its directory (made if missing) when it
    /// has a `look` (no directory of its own). Answers the workspace's modification time
    /// when the look found it there (for the Python choice).
    pub(super) async fn enter_workspace(
        &self,
        request: &mut EvalRequest,
        look: Option<WorkspaceLook>,
    ) -> Result<Option<SystemTime>, RequestError> {
        let Some(look) = look else {
            return Ok(None);
        };
        // Per cell, the workspace is there (a directory, not a link): the request's one look
        // says so, with no hop to the blocking pool nor a `mkdir` per level. A workspace
        // lost meanwhile (a node's disk), or replaced by something else, is made again (or
        // refused) below.
        if let Some(found) = look.found.as_ref().filter(|meta| meta.is_dir()) {
            let modified = found.modified().ok();
            request.cwd = Some(look.dir);
            return Ok(modified);
        }
        let WorkspaceLook { name, dir, .. } = look;
        let workspace = self.workspace(&name);
        // Off the actors' thread, as every file operation of the host.
        let made = tokio::task::spawn_blocking(move || workspace.create())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        made.map_err(|e| {
            RequestError::Workspace(format!(
                "cannot make session {name}'s workspace {}: {e}",
                dir.display()
            ))
        })?;
        request.cwd = Some(dir);
        Ok(None)
    }
}

/// A session's workspace as a request found it at its start.
pub(super) struct WorkspaceLook {
    pub(super) name: SessionName,
    pub(super) dir: PathBuf,
    /// What is at `dir` (not following a link), `None` when nothing is.
    pub(super) found: Option<std::fs::Metadata>,
}

impl Cellvisor {
    /// After a cell that ran in a workspace: when the workspace is over
    /// `workspaces.max-bytes` or `max-files`, the cell's result becomes an error saying so
    /// (the files stay, for the host to take out or remove). Measured off the actors'
    /// thread, by descriptors.
    pub(super) async fn check_workspace_after_cell(
        &self,
        cwd: Option<&Path>,
        result: &mut crate::cell::CellResult,
    ) {
        let quota = self.workspace_quota();
        let Some(workspace) = cwd
            .filter(|_| quota.is_set())
            .and_then(|cwd| Workspace::containing(&self.workspaces, cwd))
        else {
            return;
        };
        let measured = tokio::task::spawn_blocking(move || {
            crate::workspaces::usage::measure_path(workspace.dir())
        })
        .await;
        let Ok(Ok(usage)) = measured else {
            return;
        };
        if let Err(exceeded) = quota.holds(usage) {
            let output = &mut result.report.output;
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&format!(
                "[cellvisor] after this cell the session's workspace is over its quota: \
                 {exceeded}\n"
            ));
            if result.report.status != crate::cell::CellStatus::Running {
                result.report.status = crate::cell::CellStatus::Error;
                result.exit_code = 1;
            }
        }
    }

    /// The node's quota on each workspace (`workspaces.max-bytes`, `max-files`), as in force.
    pub fn workspace_quota(&self) -> crate::workspaces::usage::Quota {
        let config = crate::locking::lock(&self.config);
        crate::workspaces::usage::Quota {
            scope: crate::workspaces::usage::Scope::Workspace,
            max_bytes: config.workspaces.max_bytes.map(|b| b.as_u64()),
            max_files: config.workspaces.max_files,
        }
    }

    /// The directory a network client's `cwd` names: `cwd` relative to `session`'s
    /// workspace, a directory beneath it (never through a link out of it). The workspace is
    /// made if missing. A client on the network names no path outside its workspace.
    pub async fn workspace_cwd(
        &self,
        session: &SessionName,
        cwd: &Path,
    ) -> Result<std::path::PathBuf, RequestError> {
        let workspace = self.workspace(session);
        let (session, cwd) = (session.clone(), cwd.to_path_buf());
        tokio::task::spawn_blocking(move || confine_cwd(&workspace, &session, &cwd))
            .await
            .unwrap_or_else(|e| Err(RequestError::Workspace(e.to_string())))
    }
}

/// [`Cellvisor::workspace_cwd`], blocking: the directory `cwd` names inside `workspace`.
fn confine_cwd(
    workspace: &Workspace,
    session: &SessionName,
    cwd: &Path,
) -> Result<std::path::PathBuf, RequestError> {
    let rule = |why: String| {
        RequestError::Workspace(format!(
            "cwd {:?} is refused: {why}; a network client's cwd names a directory inside \
             its session's workspace, relative to it (like \"data\"), never a path outside it",
            cwd.display().to_string()
        ))
    };
    let text = cwd.to_str().ok_or_else(|| rule("it is not UTF-8".into()))?;
    if cwd.is_absolute() {
        return Err(rule("it is absolute".into()));
    }
    workspace.create().map_err(|e| {
        RequestError::Workspace(format!(
            "cannot make session {session}'s workspace {}: {e}",
            workspace.dir().display()
        ))
    })?;
    let root =
        crate::workspaces::files::Root::open(workspace.dir()).map_err(|e| rule(e.to_string()))?;
    root.directory(text).map_err(|e| rule(e.to_string()))?;
    let relative =
        crate::workspaces::files::check_path(text, true).map_err(|e| rule(e.to_string()))?;
    Ok(match relative {
        "." => workspace.dir().to_path_buf(),
        inner => workspace.dir().join(inner),
    })
}
