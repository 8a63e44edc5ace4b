//! Sessions' workspaces as a host sees them: where a session's is, and a request without a
//! caller directory sent to work there.

use super::{Cellvisor, RequestError};
use crate::cell::EvalRequest;
use crate::names::SessionName;
use crate::workspaces::Workspace;
use std::path::Path;

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

    /// Gives a request without `cwd` its session's workspace as its directory (made if
    /// missing). Under `sessions.key = "session+cwd"` a request's directory is its state's
    /// key, so it must name one and is left as it is.
    pub(super) fn enter_workspace(&self, request: &mut EvalRequest) -> Result<(), RequestError> {
        if request.cwd.is_some() || self.keyed_by_cwd() {
            return Ok(());
        }
        let name = SessionName::parse(&request.session)?;
        let workspace = self.workspace(&name);
        workspace.create().map_err(|e| {
            RequestError::Workspace(format!(
                "cannot make session {name}'s workspace {}: {e}",
                workspace.dir().display()
            ))
        })?;
        request.cwd = Some(workspace.dir().to_path_buf());
        Ok(())
    }
}
