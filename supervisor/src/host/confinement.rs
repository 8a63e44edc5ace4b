//! Which sandbox a request's cells run under: the operator's `[sandbox]` tightened by the
//! request, or, at the `landlock` isolation level, the level's own policy for the sessions
//! it confines (every one, or those served on the network); and the daemon's own files,
//! carved out of every rule whatever the policy lists.

use super::{Cellvisor, RequestError};
use crate::cell::EvalRequest;
use crate::locking::lock;
use std::path::{Path, PathBuf};

/// Where a request came from: the `landlock` level of `auto` confines network ones only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// The Unix socket, the library, `eval --no-daemon`, MCP over stdio.
    #[default]
    Local,
    /// A network listener: WebSocket, HTTP `/v1/rpc`, MCP over HTTP.
    Network,
}

/// The daemon's own directories and files no cell may read: the supervisor's (state,
/// runtime, artifact and snapshot directories, the snapshot key) and the host's (token,
/// tenants and TLS key files, its socket's directory, its log).
#[derive(Debug, Default)]
pub(super) struct Hidden {
    pub(super) own: Vec<PathBuf>,
    pub(super) host: Vec<PathBuf>,
}

impl Hidden {
    /// Every hidden path, as given and as the kernel resolves it (a rule is taken on what a
    /// path resolves to, so a link on the way must not keep it visible), without repeats.
    fn paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = Vec::new();
        for path in self.own.iter().chain(&self.host) {
            if path.as_os_str().is_empty() || path == Path::new("/") {
                continue;
            }
            all.push(path.clone());
            all.extend(resolved(path));
        }
        all.sort();
        all.dedup();
        all
    }
}

/// What `path` resolves to; for a path not made yet (an artifact directory before its first
/// spill), its resolved parent joined with its name, so the set does not change when it is
/// made (a changed set would replace a confined session's worker).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Some(real);
    }
    let parent = std::fs::canonicalize(path.parent()?).ok()?;
    Some(parent.join(path.file_name()?))
}

impl Cellvisor {
    /// Names the host's own secret files and directories (token files, the tenants file, the
    /// TLS key, its socket's directory and log): carved out of every sandboxed or
    /// Landlock-confined cell's rules from the next worker on, besides the supervisor's own.
    /// Replaces what an earlier call named (a reload names them again).
    pub fn hide_from_cells(&self, paths: impl IntoIterator<Item = PathBuf>) {
        lock(&self.hidden).host = paths.into_iter().collect();
    }

    /// The paths no cell may read (see [`Cellvisor::hide_from_cells`]).
    pub fn hidden_from_cells(&self) -> Vec<PathBuf> {
        lock(&self.hidden).paths()
    }

    /// The sandbox this request's cells run under: the operator's policy tightened by the
    /// request, else the `landlock` level's where it confines a request from `origin`;
    /// checked against the kernel (a required one it cannot enforce is refused).
    pub(super) fn sandbox_plan(
        &self,
        request: &EvalRequest,
        origin: Origin,
    ) -> Result<Option<crate::sandbox::Plan>, RequestError> {
        // Read in place: a request without a sandbox copies none of the operator's lists.
        let (policy, by_level) = {
            let config = lock(&self.config);
            let operator = &config.sandbox;
            let asked = crate::sandbox::effective(operator, request.sandbox.as_ref())
                .map_err(RequestError::Sandbox)?;
            match asked {
                Some(policy) => (policy, false),
                None if self.isolation.confines(origin == Origin::Network) => {
                    (crate::sandbox::isolation_policy(operator), true)
                }
                None => return Ok(None),
            }
        };
        let cwd = match &request.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir()
                .map_err(|e| RequestError::Sandbox(format!("no working directory: {e}")))?,
        };
        let hidden = self.hidden_from_cells();
        let real_cwd = std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone());
        // A session's workspace is its own even where the workspaces live under the daemon's
        // state directory (the default): the rules grant that one directory after the carve
        // out, and the rest of the state directory (other sessions' workspaces included)
        // stays hidden. Only the request's own session's workspace, wherever a link led.
        let own_workspace = crate::names::SessionName::parse(&request.session)
            .ok()
            .map(|name| self.workspace(&name).dir().to_path_buf())
            .and_then(|dir| std::fs::canonicalize(dir).ok())
            .filter(|dir| real_cwd.starts_with(dir));
        if let Some(dir) =
            crate::sandbox::inside_hidden(&real_cwd, &hidden).filter(|_| own_workspace.is_none())
        {
            return Err(RequestError::Sandbox(format!(
                "cwd {} lies in {}, one of the daemon's own directories, which no cell may \
                 read or write: run the session in a directory of its own",
                cwd.display(),
                dir.display()
            )));
        }
        let mut plan = crate::sandbox::plan(policy, crate::sandbox::KernelSupport::detect(), cwd)
            .map_err(RequestError::Sandbox)?;
        plan.hidden = hidden;
        plan.by_level = by_level;
        plan.workspace = own_workspace;
        Ok(Some(plan))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_are_given_and_resolved_without_the_root_or_repeats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("state");
        std::fs::create_dir_all(&real).expect("state");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let hidden = Hidden {
            own: vec![link.clone(), PathBuf::from("/"), real.clone()],
            host: vec![dir.path().join("token"), real.clone()],
        };
        let paths = hidden.paths();
        let real = real.canonicalize().expect("canonical");
        assert!(paths.contains(&link) && paths.contains(&real), "{paths:?}");
        assert!(paths.contains(&dir.path().join("token")), "{paths:?}");
        assert!(!paths.contains(&PathBuf::from("/")), "{paths:?}");
        let mut unique = paths.clone();
        unique.dedup();
        assert_eq!(unique, paths);
    }
}
