//! `read`, `write`/`append` and `tree`: the file helpers of JavaScript and Lua, on paths and
//! bytes. `read` streams the file and keeps only the selected lines, so `read(log, 1, 10)`
//! of a huge log costs ten lines, not the log (JavaScript once read whole files; Lua
//! streamed, and streaming is what both do now).

use super::HelperError;
use std::fs;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Refuses a `scheme://` path.
fn local_path(helper: &'static str, path: &Path) -> Result<(), HelperError> {
    match super::uri_scheme(path.as_os_str().as_bytes()) {
        Some(_) => Err(HelperError::Uri {
            helper,
            path: path.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// `read(path, offset, limit, numbered)`: the lines of the file from line `offset`
/// (1-based), at most `limit`, as they are in the file (so the whole file is its exact
/// text), or with `numbered` each as `cat -n` shows it; and how many lines that is.
pub fn read(
    path: &Path,
    offset: usize,
    limit: Option<usize>,
    numbered: bool,
) -> Result<(Vec<u8>, usize), HelperError> {
    local_path("read", path)?;
    read_lines(path, offset, limit, numbered).map_err(|err| HelperError::io("read", path, err))
}

fn read_lines(
    path: &Path,
    offset: usize,
    limit: Option<usize>,
    numbered: bool,
) -> std::io::Result<(Vec<u8>, usize)> {
    let mut reader = std::io::BufReader::new(fs::File::open(path)?);
    let (mut out, mut count, mut number) = (Vec::new(), 0usize, 0usize);
    let mut line = Vec::new();
    while limit != Some(count) {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if number < offset {
            continue;
        }
        if numbered {
            out.extend_from_slice(format!("{number:6}\t").as_bytes());
            out.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(&line));
            out.push(b'\n');
        } else {
            out.extend_from_slice(&line);
        }
        count += 1;
    }
    Ok((out, count))
}

/// `write` (or, with `append`, `append`): creates parent directories; the bytes written.
pub fn write(path: &Path, content: &[u8], append: bool) -> Result<usize, HelperError> {
    let helper = if append { "append" } else { "write" };
    local_path(helper, path)?;
    let written = (|| {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)?
            .write_all(content)
    })();
    written.map_err(|err| HelperError::io(helper, path, err))?;
    Ok(content.len())
}

pub use cellvisor_os::atomic_file::{write_atomically, Durability};

/// `tree(path, max_depth, show_hidden)`: the listing, drawn as `tree` draws it, and how many
/// entries it shows.
pub fn tree(
    path: &Path,
    max_depth: usize,
    show_hidden: bool,
) -> Result<(Vec<u8>, usize), HelperError> {
    local_path("tree", path)?;
    let meta = fs::metadata(path).map_err(|err| HelperError::io("tree", path, err))?;
    if !meta.is_dir() {
        let err = std::io::Error::from_raw_os_error(libc::ENOTDIR);
        return Err(HelperError::io("tree", path, err));
    }
    let mut listing = Listing {
        out: path.as_os_str().as_bytes().to_vec(),
        entries: 0,
        max_depth,
        show_hidden,
    };
    listing.walk(path, &mut Vec::new(), 1);
    Ok((listing.out, listing.entries))
}

struct Listing {
    out: Vec<u8>,
    entries: usize,
    max_depth: usize,
    show_hidden: bool,
}

impl Listing {
    fn walk(&mut self, dir: &Path, prefix: &mut Vec<u8>, depth: usize) {
        // An unreadable directory is listed but not entered, as `tree` does.
        let Ok(read) = fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<(Vec<u8>, bool)> = read
            .filter_map(Result::ok)
            .map(|entry| {
                // file_type() does not follow symlinks: a link to a directory is not entered.
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                (entry.file_name().as_bytes().to_vec(), is_dir)
            })
            .filter(|(name, _)| self.show_hidden || !name.starts_with(b"."))
            .collect();
        entries.sort();
        let total = entries.len();
        for (index, (name, is_dir)) in entries.into_iter().enumerate() {
            let last = index + 1 == total;
            self.out.push(b'\n');
            self.out.extend_from_slice(prefix);
            self.out
                .extend_from_slice(if last { "└── " } else { "├── " }.as_bytes());
            self.out.extend_from_slice(&name);
            self.entries += 1;
            if is_dir {
                self.out.push(b'/');
                if depth < self.max_depth {
                    let kept = prefix.len();
                    prefix.extend_from_slice(if last { "    " } else { "│   " }.as_bytes());
                    self.walk(
                        &dir.join(std::ffi::OsStr::from_bytes(&name)),
                        prefix,
                        depth + 1,
                    );
                    prefix.truncate(kept);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text((bytes, count): (Vec<u8>, usize)) -> (String, usize) {
        (String::from_utf8(bytes).expect("utf-8"), count)
    }

    #[test]
    fn read_gives_the_text_selected_lines_or_the_numbered_view() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("f.txt");
        fs::write(&file, "one\r\ntwo\nthree").expect("write");
        let read = |offset, limit, numbered| text(read(&file, offset, limit, numbered).unwrap());
        assert_eq!(read(1, None, false), ("one\r\ntwo\nthree".into(), 3));
        assert_eq!(
            read(1, None, true),
            ("     1\tone\r\n     2\ttwo\n     3\tthree\n".into(), 3)
        );
        assert_eq!(read(2, Some(1), true), ("     2\ttwo\n".into(), 1));
        assert_eq!(read(2, Some(1), false), ("two\n".into(), 1));
        assert_eq!(read(9, None, false), (String::new(), 0));
    }

    #[test]
    fn failures_read_as_python_words_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = Path::new("/nonexistent/x");
        assert_eq!(
            read(missing, 1, None, false).unwrap_err().to_string(),
            "read: No such file or directory: '/nonexistent/x'"
        );
        assert_eq!(
            read(dir.path(), 1, None, false).unwrap_err().to_string(),
            format!("read: Is a directory: '{}'", dir.path().display())
        );
        let file = dir.path().join("f");
        fs::write(&file, "").expect("write");
        assert_eq!(
            tree(&file, 1, false).unwrap_err().to_string(),
            format!("tree: Not a directory: '{}'", file.display())
        );
        assert_eq!(
            write(&file.join("under-a-file"), b"x", true)
                .unwrap_err()
                .to_string(),
            format!(
                "append: File exists: '{}'",
                file.join("under-a-file").display()
            )
        );
    }

    #[test]
    fn uris_are_refused_by_every_helper_and_colons_elsewhere_are_paths() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(
            write(Path::new("https://x/y"), b"z", false)
                .unwrap_err()
                .to_string(),
            "write: 'https://x/y' is a URI: file helpers take local file paths only \
             (remote and file:// URIs are not supported)"
        );
        assert!(!Path::new("https:").exists());
        let file = Path::new("file:///etc/hostname");
        let refused = read(file, 1, None, false).unwrap_err().to_string();
        assert!(
            refused.starts_with("read: 'file:///etc/hostname' is a URI"),
            "{refused}"
        );
        let refused = write(Path::new("s3+x.y-z://b/k"), b"", true)
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("append: 's3+x.y-z://b/k' is a URI"),
            "{refused}"
        );
        let refused = tree(Path::new("ftp://host"), 1, false)
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("tree: 'ftp://host' is a URI"),
            "{refused}"
        );
        // Not a scheme: a path that only holds `://` further on, or starts with a digit.
        let local = dir.path().join("a b://c");
        assert_eq!(write(&local, b"z", false).expect("written"), 1);
        assert!(local_path("read", Path::new("1x://y")).is_ok());
        assert!(local_path("read", Path::new("./https://x")).is_ok());
    }

    #[test]
    fn write_creates_parents_and_append_appends() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a/b/notes.txt");
        assert_eq!(write(&file, b"one\n", false).expect("write"), 4);
        assert_eq!(write(&file, b"two", true).expect("append"), 3);
        assert_eq!(fs::read_to_string(&file).expect("read"), "one\ntwo");
        write(&file, b"new", false).expect("write");
        assert_eq!(fs::read_to_string(&file).expect("read"), "new");
    }

    #[test]
    fn tree_draws_like_tree() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(dir.path().join("src/deep/er")).expect("dirs");
        fs::write(dir.path().join("src/main.rs"), "").expect("write");
        fs::write(dir.path().join("README"), "").expect("write");
        fs::write(dir.path().join(".hidden"), "").expect("write");
        let root = dir.path().display();
        assert_eq!(
            text(tree(dir.path(), 2, false).expect("tree")),
            (
                format!("{root}\n├── README\n└── src/\n    ├── deep/\n    └── main.rs"),
                4
            )
        );
        let (listing, _) = text(tree(dir.path(), 1, true).expect("tree"));
        assert_eq!(
            listing,
            format!("{root}\n├── .hidden\n├── README\n└── src/")
        );
    }
}
