//! A case's working directory: a fresh temporary directory seeded from the case's
//! `workspace` directory, and what is in it after the cells ran.

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

/// Text kept per captured file; longer files are cut (and marked `truncated`).
pub const MAX_FILE_CHARS: usize = 256 * 1024;

/// Text kept for a whole workspace; files past it are listed without their content (and
/// marked `truncated`), so a cell that makes thousands of files cannot bloat the artifacts.
pub const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;

/// Files captured from a workspace after a case.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceSnapshot {
    /// The working directory the cells ran in (removed after the case unless it is
    /// retained).
    #[serde(default)]
    pub cwd: String,
    pub files: Vec<WorkspaceFile>,
}

/// One captured file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceFile {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Not UTF-8 text (or holds NUL): its content is not kept.
    pub binary: bool,
    /// `content` holds only the first [`MAX_FILE_CHARS`] characters.
    pub truncated: bool,
    pub content: Option<String>,
    /// A symbolic link: listed, never followed (it may point out of the workspace), so it
    /// has no content.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub symlink: bool,
}

impl WorkspaceSnapshot {
    /// The file at `path` (relative; `./` and `a/../b` are resolved), if it was captured.
    pub fn file(&self, path: &str) -> Option<&WorkspaceFile> {
        let wanted = normalize(Path::new(path))?;
        self.files.iter().find(|f| f.path == wanted)
    }
}

/// `path` as a `/`-separated relative path, or `None` when it leaves the workspace.
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// Why a workspace could not be prepared or captured.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot create a workspace: {0}")]
    Create(std::io::Error),
    #[error("cannot copy the workspace seed {seed}: {message}")]
    Seed { seed: PathBuf, message: String },
}

/// A fresh temporary directory with `seed` (if any) copied in, at `target` (relative, checked
/// when the case was read) or its root; removed when dropped.
pub fn prepare(
    seed: Option<&Path>,
    target: Option<&str>,
) -> Result<tempfile::TempDir, WorkspaceError> {
    let dir = tempfile::Builder::new()
        .prefix("cellvisor-check-")
        .tempdir()
        .map_err(WorkspaceError::Create)?;
    if let Some(seed) = seed {
        let to = match target.and_then(|t| normalize(Path::new(t))) {
            Some(target) if !target.is_empty() => dir.path().join(target),
            _ => dir.path().to_path_buf(),
        };
        std::fs::create_dir_all(&to)
            .and_then(|()| copy_tree(seed, &to).map_err(std::io::Error::other))
            .map_err(|err| WorkspaceError::Seed {
                seed: seed.to_path_buf(),
                message: err.to_string(),
            })?;
    }
    Ok(dir)
}

/// Copies the files and directories under `from` into `to`. A symbolic link is refused,
/// named: copied as a link it would let a cell's relative write land outside the workspace
/// (and outside `--out`), and followed it could bring in files from anywhere.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry.map_err(|e| e.to_string())?;
        let relative = entry.path().strip_prefix(from).map_err(|e| e.to_string())?;
        let target = to.join(relative);
        let kind = entry.file_type();
        if kind.is_symlink() {
            let points_to = std::fs::read_link(entry.path())
                .map(|link| link.display().to_string())
                .unwrap_or_else(|_| "?".into());
            return Err(format!(
                "{} is a symbolic link (to {points_to}); seeds hold files and directories \
                 only: replace the link with a copy of what it points to",
                relative.display()
            ));
        }
        let copied = if kind.is_dir() {
            std::fs::create_dir_all(&target)
        } else {
            std::fs::copy(entry.path(), &target).map(drop)
        };
        copied.map_err(|e| format!("{}: {e}", relative.display()))?;
    }
    Ok(())
}

/// Whether `seed` lies outside `suite_dir` (the directory of its case file), both resolved:
/// `cellvisor check` refuses such a seed unless `--allow-outside-seeds`, so a suite from
/// elsewhere cannot copy any directory of the user's into its workspaces and `--out`.
pub fn seed_outside(suite_dir: &Path, seed: &Path) -> bool {
    match (suite_dir.canonicalize(), seed.canonicalize()) {
        (Ok(dir), Ok(seed)) => !seed.starts_with(dir),
        _ => true,
    }
}

/// Every file under `root` at the relative paths `only` (files or directories; all of the
/// workspace when empty). Symbolic links are listed, not followed, also when one is (or is on
/// the way to) a path of `only`; paths are in order.
pub fn capture(root: &Path, only: &[String]) -> WorkspaceSnapshot {
    let mut starts: Vec<PathBuf> = only
        .iter()
        .filter_map(|p| normalize(Path::new(p)))
        .filter(|p| !through_link(root, p))
        .map(|p| root.join(p))
        .collect();
    if only.is_empty() {
        starts.push(root.to_path_buf());
    }
    let mut files = Vec::new();
    let mut budget = MAX_TOTAL_BYTES;
    for start in starts {
        let entries = walkdir::WalkDir::new(&start)
            .follow_links(false)
            .follow_root_links(false)
            .sort_by_file_name()
            .into_iter()
            .flatten();
        for entry in entries {
            if entry.file_type().is_dir() {
                continue;
            }
            let Some(path) = entry.path().strip_prefix(root).ok().and_then(normalize) else {
                continue;
            };
            if path.is_empty() || files.iter().any(|f: &WorkspaceFile| f.path == path) {
                continue;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let symlink = entry.path_is_symlink();
            let is_file = entry.file_type().is_file() && !symlink;
            let head = if is_file && budget > 0 {
                read_head(entry.path())
            } else {
                None
            };
            let text = head
                .as_deref()
                .and_then(|b| std::str::from_utf8(b).ok())
                .filter(|t| !t.contains('\0'));
            let (content, truncated) = match text {
                Some(text) => {
                    let cut = text
                        .char_indices()
                        .nth(MAX_FILE_CHARS)
                        .map_or(text.len(), |(at, _)| at);
                    let mut cut = cut.min(budget);
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    budget -= cut;
                    (Some(text[..cut].to_string()), size > cut as u64)
                }
                None => (None, is_file && head.is_none()),
            };
            files.push(WorkspaceFile {
                path,
                size,
                binary: is_file && head.is_some() && content.is_none(),
                truncated,
                content,
                symlink,
            });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    WorkspaceSnapshot {
        cwd: root.display().to_string(),
        files,
    }
}

/// Whether a directory on the way to `relative` (below `root`) is a symbolic link: the
/// path's last component itself is listed as a link by the walk, never followed.
fn through_link(root: &Path, relative: &str) -> bool {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = relative.split('/').filter(|p| !p.is_empty()).collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

/// The first bytes of a file, enough for [`MAX_FILE_CHARS`] characters, cut back to a
/// character boundary.
fn read_head(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let limit = (MAX_FILE_CHARS * 4) as u64;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(limit)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 == limit {
        // A multi-byte character may be cut at the end.
        while !bytes.is_empty() && std::str::from_utf8(&bytes).is_err() {
            bytes.pop();
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_with_a_symbolic_link_is_refused_naming_it() {
        let seed = tempfile::tempdir().unwrap();
        std::fs::create_dir(seed.path().join("data")).unwrap();
        std::os::unix::fs::symlink("/etc", seed.path().join("data/escape")).unwrap();
        let err = prepare(Some(seed.path()), None).unwrap_err().to_string();
        assert!(
            err.contains("data/escape is a symbolic link (to /etc)"),
            "{err}"
        );
    }

    #[test]
    fn seeds_outside_the_suite_directory_are_told_apart() {
        let suite = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(suite.path().join("seeds/a")).unwrap();
        assert!(!seed_outside(suite.path(), &suite.path().join("seeds/a")));
        assert!(!seed_outside(
            suite.path(),
            &suite.path().join("seeds/../seeds/a")
        ));
        assert!(seed_outside(
            &suite.path().join("seeds"),
            &suite.path().join("seeds/../")
        ));
        assert!(seed_outside(suite.path(), Path::new("/etc")));
        assert!(seed_outside(suite.path(), &suite.path().join("missing")));
    }

    #[test]
    fn a_seed_is_copied_and_the_result_captured() {
        let seed = tempfile::tempdir().unwrap();
        std::fs::create_dir(seed.path().join("data")).unwrap();
        std::fs::write(seed.path().join("data/in.csv"), "a,b\n1,2\n").unwrap();
        std::fs::write(seed.path().join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
        let workspace = prepare(Some(seed.path()), None).unwrap();
        std::fs::write(workspace.path().join("out.txt"), "done").unwrap();
        std::os::unix::fs::symlink("data/in.csv", workspace.path().join("link")).unwrap();
        let snapshot = capture(workspace.path(), &[]);
        let paths: Vec<&str> = snapshot.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["blob.bin", "data/in.csv", "link", "out.txt"]);
        let csv = snapshot.file("./data/in.csv").unwrap();
        assert_eq!(csv.content.as_deref(), Some("a,b\n1,2\n"));
        assert_eq!(csv.size, 8);
        assert!(snapshot.file("blob.bin").unwrap().binary);
        assert!(!snapshot.file("link").unwrap().binary);
        assert!(snapshot.file("../out.txt").is_none());
        let only = capture(workspace.path(), &["data".into(), "out.txt".into()]);
        let paths: Vec<&str> = only.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["data/in.csv", "out.txt"]);
    }

    #[test]
    fn links_out_of_the_workspace_are_listed_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let root = workspace.path();
        std::os::unix::fs::symlink(outside.path(), root.join("door")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("leak.txt"))
            .unwrap();
        for only in [
            vec![],
            vec!["door".to_string()],
            vec!["leak.txt".to_string()],
        ] {
            let snapshot = capture(root, &only);
            assert!(
                snapshot
                    .files
                    .iter()
                    .all(|f| f.content.is_none() && f.symlink),
                "{only:?}: {snapshot:?}"
            );
        }
        let through = capture(root, &["door/secret.txt".to_string()]);
        assert!(through.files.is_empty(), "{through:?}");
        let leak = capture(root, &[]);
        let leak = leak.file("leak.txt").expect("listed");
        assert!(leak.symlink && !leak.binary && leak.content.is_none());
    }

    #[test]
    fn long_files_are_cut_and_marked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.txt"), "é".repeat(MAX_FILE_CHARS + 5)).unwrap();
        let snapshot = capture(dir.path(), &[]);
        let big = &snapshot.files[0];
        assert!(big.truncated);
        assert_eq!(
            big.content.as_deref().map(|c| c.chars().count()),
            Some(MAX_FILE_CHARS)
        );
    }
}
