//! The host side of the JavaScript helpers: file system, environment, spilled outputs and
//! the per-session store. Plain Rust, no QuickJS: `prelude.js` checks argument types and
//! emits the status events; these functions do the work and explain failures in messages
//! that name the helper (they become the `Error` a helper's promise rejects with).

use cellvisor_ipc::env;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Directories the helpers use, fixed when the engine starts.
#[derive(Debug, Clone, Default)]
pub struct HostDirs {
    /// Spilled outputs (`$CELLVISOR_ARTIFACT_DIR`).
    pub artifact_dir: Option<PathBuf>,
    /// `store`/`load` files (`$CELLVISOR_STORE_DIR`), created on first `store`.
    pub store_dir: Option<PathBuf>,
}

impl HostDirs {
    /// The directories the worker's environment names (empty values count as unset).
    pub fn from_env() -> Self {
        HostDirs {
            artifact_dir: env::directory(env::ARTIFACT_DIR),
            store_dir: env::directory(env::STORE_DIR),
        }
    }
}

/// `read(path, offset, limit, numbered)`: the file's text (or the selected lines, or their
/// numbered view), and how many lines were returned.
pub(super) fn read(
    path: &str,
    offset: usize,
    limit: Option<usize>,
    numbered: bool,
) -> Result<(String, usize), String> {
    let (bytes, count) = crate::text::read_lines(Path::new(path), offset, limit, numbered)
        .map_err(|err| io_message("read", path, &err))?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), count))
}

/// `write`/`append`: creates parent directories; returns the bytes written.
pub(super) fn write(path: &str, content: &str, append: bool) -> Result<usize, String> {
    let helper = if append { "append" } else { "write" };
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        fs::create_dir_all(parent).map_err(|err| io_message(helper, path, &err))?;
    }
    let mut file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .map_err(|err| io_message(helper, path, &err))?;
    file.write_all(content.as_bytes())
        .map_err(|err| io_message(helper, path, &err))?;
    Ok(content.len())
}

/// `tree(path, max_depth, show_hidden)`: the listing and how many entries it shows.
pub(super) fn tree(
    path: &str,
    max_depth: usize,
    show_hidden: bool,
) -> Result<(String, usize), String> {
    let root = Path::new(path);
    let meta = fs::metadata(root).map_err(|err| io_message("tree", path, &err))?;
    if !meta.is_dir() {
        return Err(format!("tree: {path} is not a directory"));
    }
    let mut out = path.to_string();
    let mut entries = 0;
    walk(root, "", 1, max_depth, show_hidden, &mut out, &mut entries);
    Ok((out, entries))
}

fn walk(
    dir: &Path,
    prefix: &str,
    depth: usize,
    max_depth: usize,
    show_hidden: bool,
    out: &mut String,
    entries: &mut usize,
) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<(String, bool)> = listing
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            // file_type() does not follow symlinks: a link to a directory is not descended.
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            (name, is_dir)
        })
        .filter(|(name, _)| show_hidden || !name.starts_with('.'))
        .collect();
    children.sort();
    let last = children.len().saturating_sub(1);
    for (index, (name, is_dir)) in children.iter().enumerate() {
        let (branch, indent) = if index == last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        out.push('\n');
        out.push_str(prefix);
        out.push_str(branch);
        out.push_str(name);
        if *is_dir {
            out.push('/');
        }
        *entries += 1;
        if *is_dir && depth < max_depth {
            let child_prefix = format!("{prefix}{indent}");
            walk(
                &dir.join(name),
                &child_prefix,
                depth + 1,
                max_depth,
                show_hidden,
                out,
                entries,
            );
        }
    }
}

/// `output(id...)`: the spilled outputs, joined with newlines, and their size in bytes.
pub(super) fn output(dirs: &HostDirs, ids: &[String]) -> Result<(String, usize), String> {
    if ids.is_empty() {
        return Err("output: give at least one output id".into());
    }
    let mut texts = Vec::with_capacity(ids.len());
    for id in ids {
        let stem = id.strip_suffix(".txt").unwrap_or(id);
        if stem.is_empty() || stem.contains('/') || stem.contains('\\') || stem.contains("..") {
            return Err(format!(
                "output: `{id}` is not an output id (ids are file names without a path)"
            ));
        }
        let Some(dir) = &dirs.artifact_dir else {
            return Err(format!(
                "output: unknown output id `{id}`: this worker has no spilled outputs \
                 ({} is not set)",
                env::ARTIFACT_DIR
            ));
        };
        let file = dir.join(format!("{stem}.txt"));
        match crate::runtime::read_artifact(&file) {
            Ok(bytes) => texts.push(String::from_utf8_lossy(&bytes).into_owned()),
            Err(err) if err.kind() == ErrorKind::NotFound => {
                return Err(format!(
                    "output: unknown output id `{id}` (no {})",
                    file.display()
                ))
            }
            Err(err) => return Err(format!("output: cannot read {}: {err}", file.display())),
        }
    }
    let text = texts.join("\n");
    let bytes = text.len();
    Ok((text, bytes))
}

/// An I/O error as a helper's message: `read: no such file: notes.txt (in /work)`.
fn io_message(helper: &str, path: &str, err: &std::io::Error) -> String {
    let cwd = std::env::current_dir()
        .map(|dir| format!(" (in {})", dir.display()))
        .unwrap_or_default();
    match err.kind() {
        ErrorKind::NotFound => format!("{helper}: no such file or directory: {path}{cwd}"),
        ErrorKind::PermissionDenied => format!("{helper}: permission denied: {path}{cwd}"),
        ErrorKind::IsADirectory => format!("{helper}: {path} is a directory"),
        _ => format!("{helper}: {path}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_gives_the_text_selected_lines_or_the_numbered_view() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("f.txt");
        fs::write(&file, "one\r\ntwo\nthree").expect("write");
        let path = file.to_str().expect("utf-8 path");
        assert_eq!(
            read(path, 1, None, false).expect("read"),
            ("one\r\ntwo\nthree".into(), 3)
        );
        let (text, count) = read(path, 1, None, true).expect("read");
        assert_eq!(text, "     1\tone\r\n     2\ttwo\n     3\tthree\n");
        assert_eq!(count, 3);
        assert_eq!(
            read(path, 2, Some(1), true).expect("read"),
            ("     2\ttwo\n".into(), 1)
        );
        assert_eq!(
            read(path, 2, Some(1), false).expect("read"),
            ("two\n".into(), 1)
        );
        assert_eq!(
            read(path, 9, None, false).expect("read"),
            (String::new(), 0)
        );
        let missing = read("/nonexistent/x", 1, None, false).expect_err("missing");
        assert!(
            missing.starts_with("read: no such file or directory: /nonexistent/x"),
            "{missing}"
        );
    }

    #[test]
    fn tree_draws_like_tree() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(dir.path().join("src/deep/er")).expect("dirs");
        fs::write(dir.path().join("src/main.rs"), "").expect("write");
        fs::write(dir.path().join("README"), "").expect("write");
        fs::write(dir.path().join(".hidden"), "").expect("write");
        let root = dir.path().to_str().expect("utf-8");
        let (text, entries) = tree(root, 2, false).expect("tree");
        assert_eq!(
            text,
            format!("{root}\n├── README\n└── src/\n    ├── deep/\n    └── main.rs")
        );
        assert_eq!(entries, 4);
        let (text, _) = tree(root, 1, true).expect("tree");
        assert_eq!(text, format!("{root}\n├── .hidden\n├── README\n└── src/"));
    }
}
