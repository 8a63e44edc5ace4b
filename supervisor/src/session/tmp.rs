//! A session's temporary directory: where it is, its removal when the session forgets, and
//! its quota (`sandbox.tmp-max`).

use super::setup::Setup;
use super::Session;

impl Setup {
    /// This session's temporary directory in its language (a sandboxed worker's `TMPDIR`):
    /// removed when the session forgets (close, reset, eviction without a snapshot).
    pub(super) fn tmp_dir(&self) -> std::path::PathBuf {
        self.spec
            .run_dir
            .join("tmp")
            .join(self.key.session.dir_name())
            .join(self.key.language.short_name())
    }

    /// Makes [`tmp_dir`](Self::tmp_dir) again for a new worker (a reset or close removed it):
    /// a `TMPDIR` that does not exist sends Python's `tempfile` back to `/tmp`. At the `uid`
    /// level the directory is the uid's, given when the session starts.
    pub(super) fn make_tmp_dir(&self) {
        if self.spec.uid.is_some() || !self.spec.env.has_session_tmp() {
            return;
        }
        let dir = self.tmp_dir();
        if let Err(err) = cellvisor_ipc::socket::ensure_private_dir_nofollow(&dir) {
            tracing::warn!(session = %self.key, "cannot make the session's temporary directory {}: {err}", dir.display());
        }
    }

    /// Removes [`tmp_dir`](Self::tmp_dir) and what it holds (links inside are removed, never
    /// followed), then its session's directory when no other language's is left in it.
    pub(super) fn remove_tmp_dir(&self) {
        let dir = self.tmp_dir();
        match std::fs::remove_dir_all(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(session = %self.key, "cannot remove the session's temporary directory {}: {err}", dir.display());
            }
            _ => {}
        }
        if let Some(parent) = dir.parent() {
            // Fails while another language's directory is in it: that one removes it.
            let _ = std::fs::remove_dir(parent);
        }
    }
}

impl Session {
    /// After a sandboxed cell: when the session's temporary directory holds more than
    /// `sandbox.tmp-max`, its files are removed and the line that says so is answered.
    pub(super) fn enforce_tmp_quota(&self) -> Option<String> {
        self.env.sandbox.as_ref()?;
        let max = self.setup.config.sandbox.tmp_max.as_u64();
        let dir = self.setup.tmp_dir();
        let used = tree_bytes(&dir, max)?;
        if used <= max {
            return None;
        }
        // Its contents only: the worker's sandbox rule names the directory itself.
        if let Err(err) = clear_dir(&dir) {
            tracing::warn!(session = %self.setup.key, "cannot empty the session's temporary directory: {err}");
        }
        Some(format!(
            "[cellvisor] this session's temporary directory held more than sandbox.tmp-max ({}); \
             its files were removed: keep temporary files smaller, or raise sandbox.tmp-max",
            bytesize::ByteSize::b(max)
        ))
    }
}

/// Removes everything in `dir` (links removed, never followed), keeping `dir` itself.
fn clear_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The bytes of the regular files under `dir` (links not followed), counting stops once past
/// `stop_after`; `None` when `dir` cannot be read.
pub(super) fn tree_bytes(dir: &std::path::Path, stop_after: u64) -> Option<u64> {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    let mut first = true;
    while let Some(next) = pending.pop() {
        let entries = match std::fs::read_dir(&next) {
            Ok(entries) => entries,
            Err(_) if first => return None,
            Err(_) => continue,
        };
        first = false;
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
                if total > stop_after {
                    return Some(total);
                }
            }
        }
    }
    Some(total)
}
