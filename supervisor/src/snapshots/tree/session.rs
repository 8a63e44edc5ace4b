//! One session's recorded workspaces, beside its snapshots:
//!
//! ```text
//! <dir>/<session>/workspace/latest.tree              what a session that moved finds
//! <dir>/<session>/workspace/checkpoints/<name>.tree  with the checkpoint of that name
//! <dir>/<session>/workspace/blobs/<2 hex>/<62 hex>   file contents, shared by all of them
//! <dir>/<session>/workspace/.lock                    one recording, restore or collection at a time
//! ```
//!
//! A recording reuses the hashes of the newest manifest, and after each one the blobs no
//! manifest names are deleted (under the lock, so no recording in progress loses one).

use super::apply::restore;
use super::blobs::{Blobs, Collected};
use super::diff::FileChanges;
use super::sealed::{open, seal, Body};
use super::walk::{record, Recorded};
use super::{Hash, Kind, Manifest, TreeError};
use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const LATEST: &str = "latest";
const SUFFIX: &str = ".tree";
const CHECKPOINTS: &str = "checkpoints";

/// Which manifest: the latest (saved with the session's snapshots) or a named checkpoint
/// (its name already checked by `check_checkpoint_name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label<'a> {
    /// Saved at the session's planned stops.
    Latest,
    /// A host's named checkpoint.
    Checkpoint(&'a str),
}

impl Label<'_> {
    fn text(&self) -> String {
        match self {
            Label::Latest => LATEST.to_string(),
            Label::Checkpoint(name) => format!("checkpoint:{name}"),
        }
    }
}

/// One session's recorded workspaces.
#[derive(Debug)]
pub struct SessionTrees {
    dir: PathBuf,
    key: Vec<u8>,
    node: String,
    /// How long a change waits for the lock another holds ([`TreeError::Locked`] past it).
    lock_wait: Duration,
}

/// How long a change to a session's recorded workspace waits for its lock when not told
/// otherwise ([`SessionTrees::with_lock_wait`]): `snapshots.timeout`'s default.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(60);

/// A manifest read back.
#[derive(Debug, Clone)]
pub struct Restored {
    /// What the restore changed.
    pub changes: FileChanges,
    /// When the manifest was taken.
    pub taken_at: String,
    /// Why it was taken.
    pub reason: String,
    /// The node that took it.
    pub node: String,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TreeError {
    let path = path.to_path_buf();
    move |source| TreeError::Io { what, path, source }
}

impl SessionTrees {
    /// The trees under `dir`, authenticated with `key`; `node` is written into each.
    pub fn new(dir: PathBuf, key: Vec<u8>, node: &str) -> SessionTrees {
        SessionTrees {
            dir,
            key,
            node: node.to_string(),
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }

    /// These trees, whose changes wait at most `wait` for a lock another holds.
    pub fn with_lock_wait(mut self, wait: Duration) -> SessionTrees {
        self.lock_wait = wait;
        self
    }

    fn blobs(&self) -> Blobs {
        Blobs::new(self.dir.join("blobs"))
    }

    /// The file of a manifest.
    pub fn path(&self, label: Label<'_>) -> PathBuf {
        match label {
            Label::Latest => self.dir.join(format!("{LATEST}{SUFFIX}")),
            Label::Checkpoint(name) => self.dir.join(CHECKPOINTS).join(format!("{name}{SUFFIX}")),
        }
    }

    /// Whether that manifest exists.
    pub fn has(&self, label: Label<'_>) -> bool {
        self.path(label)
            .symlink_metadata()
            .is_ok_and(|m| m.is_file())
    }

    /// The session's recording lock, waited for at most `lock_wait` ([`TreeError::Locked`]).
    fn lock(&self) -> Result<super::lock::TreeLock, TreeError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(self.dir.join(CHECKPOINTS))
            .map_err(io("create", &self.dir))?;
        super::lock::take(&self.dir.join(".lock"), self.lock_wait)
    }

    fn read(&self, label: Label<'_>) -> Result<Body, TreeError> {
        let path = self.path(label);
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        open(&self.key, &label.text(), &bytes, &path)
    }

    /// Every manifest file (latest and checkpoints), with its label.
    fn manifests(&self) -> Vec<(PathBuf, String)> {
        let mut found = Vec::new();
        if self.has(Label::Latest) {
            found.push((self.path(Label::Latest), Label::Latest.text()));
        }
        if let Ok(entries) = fs::read_dir(self.dir.join(CHECKPOINTS)) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(name) = name.strip_suffix(SUFFIX) {
                    found.push((entry.path(), Label::Checkpoint(name).text()));
                }
            }
        }
        found
    }

    /// Records the workspace at `root` as `label`, replacing an earlier one of that label.
    pub fn record(
        &self,
        root: &Path,
        label: Label<'_>,
        reason: &str,
    ) -> Result<Recorded, TreeError> {
        let _lock = self.lock()?;
        let previous = self.newest();
        let recorded = record(root, previous.as_ref(), &self.blobs())?;
        let body = Body {
            label: label.text(),
            taken_at: crate::snapshots::rfc3339(SystemTime::now()),
            reason: reason.to_string(),
            node: self.node.clone(),
            manifest: recorded.manifest,
        };
        let bytes = seal(&self.key, &body)?;
        let path = self.path(label);
        let mut temp = tempfile::Builder::new()
            .prefix(".tree-")
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(io("create", &self.dir))?;
        temp.write_all(&bytes).map_err(io("write", &path))?;
        temp.persist(&path)
            .map_err(|err| io("write", &path)(err.error))?;
        let _ = self.collect_locked();
        Ok(Recorded {
            manifest: body.manifest,
            ..recorded
        })
    }

    /// The newest manifest that opens, whose stamps spare re-reading unchanged files.
    fn newest(&self) -> Option<Manifest> {
        let mut files = self.manifests();
        files.sort_by_key(|(path, _)| {
            path.metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        });
        files.into_iter().rev().find_map(|(path, label)| {
            let bytes = fs::read(&path).ok()?;
            open(&self.key, &label, &bytes, &path)
                .ok()
                .map(|b| b.manifest)
        })
    }

    /// Restores manifest `label` into the workspace at `root`. A lock another process keeps
    /// past the bound (a node paused while recording) is gone around (one held in this
    /// process is waited for): a restore only reads,
    /// a manifest is replaced whole by a rename, every blob is checked before any file is
    /// written, and a collection deletes only blobs no manifest names. So the holder, if it
    /// ever runs again, can at worst make the restore refuse a missing blob, never restore a
    /// wrong file, and the session is served without waiting on it.
    pub fn restore(&self, root: &Path, label: Label<'_>) -> Result<Restored, TreeError> {
        let _lock = match self.lock() {
            Ok(lock) => Some(lock),
            Err(err @ TreeError::Locked { .. }) => {
                tracing::warn!("{err}; restoring without the lock");
                None
            }
            Err(err) => return Err(err),
        };
        let body = self.read(label)?;
        let changes = restore(root, &body.manifest, &self.blobs())?;
        // A restore is a use: the sweep's ttl counts from it.
        let _ = fs::File::options()
            .write(true)
            .open(self.path(label))
            .and_then(|f| f.set_modified(SystemTime::now()));
        Ok(Restored {
            changes,
            taken_at: body.taken_at,
            reason: body.reason,
            node: body.node,
        })
    }

    /// Deletes the blobs no manifest names. Nothing is deleted while a manifest fails its
    /// check (its blobs cannot be told apart then).
    #[cfg(test)]
    pub fn collect(&self) -> Result<Collected, TreeError> {
        let _lock = self.lock()?;
        self.collect_locked()
    }

    fn collect_locked(&self) -> Result<Collected, TreeError> {
        let mut live: HashSet<Hash> = HashSet::new();
        for (path, label) in self.manifests() {
            let bytes = fs::read(&path).map_err(io("read", &path))?;
            let body = open(&self.key, &label, &bytes, &path)?;
            live.extend(body.manifest.entries.values().filter_map(|e| match e.kind {
                Kind::File { hash, .. } => Some(hash),
                _ => None,
            }));
        }
        Ok(self.blobs().collect(&live))
    }

    /// Deletes manifest `label` (its blobs go at the next collection).
    pub fn forget(&self, label: Label<'_>) -> Result<(), TreeError> {
        let path = self.path(label);
        match fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &path)(err)),
            _ => Ok(()),
        }
    }

    /// The bytes the blobs hold.
    #[cfg(test)]
    pub fn blob_bytes(&self) -> u64 {
        self.blobs().bytes()
    }

    /// The sweep's part: deletes the manifests unused for `ttl` (counted from their last
    /// write or restore), then the blobs no manifest names any more; how many manifests went.
    pub fn expire(&self, ttl: Duration, now: SystemTime) -> usize {
        let Ok(_lock) = self.lock() else {
            return 0;
        };
        let expired: Vec<PathBuf> = self
            .manifests()
            .into_iter()
            .map(|(path, _)| path)
            .filter(|path| {
                path.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|used| now.duration_since(used).unwrap_or_default() > ttl)
            })
            .collect();
        let gone = expired
            .iter()
            .filter(|path| fs::remove_file(path).is_ok())
            .count();
        if gone > 0 {
            if let Err(err) = self.collect_locked() {
                tracing::warn!("workspace blobs not collected: {err}");
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trees(dir: &Path, key: u8) -> SessionTrees {
        SessionTrees::new(dir.join("store"), vec![key; 32], "node-a")
    }

    #[test]
    fn checkpoints_share_unchanged_files_and_collection_keeps_what_they_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(&root).expect("mkdir");
        fs::write(root.join("big"), vec![7u8; 100_000]).expect("write");
        fs::write(root.join("small"), b"v1").expect("write");
        let trees = trees(dir.path(), 1);
        let first = trees
            .record(&root, Label::Checkpoint("one"), "checkpoint")
            .expect("one");
        assert_eq!(first.new_bytes, 100_002);
        fs::write(root.join("small"), b"v2").expect("change");
        let second = trees
            .record(&root, Label::Checkpoint("two"), "checkpoint")
            .expect("two");
        assert_eq!(
            (second.hashed_files, second.new_bytes),
            (1, 2),
            "only the change is stored"
        );
        assert_eq!(trees.blob_bytes(), 100_004);
        // Restoring "one" after "two" brings v1 back; forgetting "one" frees only v1.
        let restored = trees
            .restore(&root, Label::Checkpoint("one"))
            .expect("restore");
        assert_eq!(restored.changes.restored, ["small"]);
        assert_eq!(fs::read(root.join("small")).expect("small"), b"v1");
        trees.forget(Label::Checkpoint("one")).expect("forget");
        assert_eq!(trees.collect().expect("collect").bytes, 2);
        assert_eq!(trees.blob_bytes(), 100_002);
        trees
            .restore(&root, Label::Checkpoint("two"))
            .expect("two is whole");
        assert_eq!(fs::read(root.join("small")).expect("small"), b"v2");
    }

    #[test]
    fn a_lock_held_past_the_bound_refuses_a_recording_and_is_gone_around_by_a_restore() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(&root).expect("mkdir");
        fs::write(root.join("f"), b"kept").expect("write");
        let trees = trees(dir.path(), 1).with_lock_wait(Duration::from_millis(200));
        trees
            .record(&root, Label::Latest, "after cell")
            .expect("recorded");
        // Another process (a node paused mid-recording) keeps the lock: a lock of its own
        // file description, not one taken here.
        let held = fs::File::options()
            .write(true)
            .open(dir.path().join("store/.lock"))
            .expect("the lock file");
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .expect("held");
        let err = trees
            .record(&root, Label::Latest, "after cell")
            .expect_err("locked");
        assert!(matches!(err, TreeError::Locked { .. }), "{err}");
        assert_eq!(trees.expire(Duration::ZERO, SystemTime::now()), 0);
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).expect("mkdir");
        let restored = trees
            .restore(&elsewhere, Label::Latest)
            .expect("restored without the lock");
        assert_eq!(restored.changes.added, ["f"]);
        assert_eq!(fs::read(elsewhere.join("f")).expect("f"), b"kept");
        drop(held);
        trees
            .record(&root, Label::Latest, "after cell")
            .expect("recorded once freed");
    }

    #[test]
    fn a_swapped_or_foreign_manifest_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(&root).expect("mkdir");
        fs::write(root.join("f"), b"x").expect("write");
        let trees = trees(dir.path(), 1);
        trees
            .record(&root, Label::Checkpoint("a"), "checkpoint")
            .expect("a");
        fs::write(root.join("f"), b"y").expect("write");
        trees
            .record(&root, Label::Checkpoint("b"), "checkpoint")
            .expect("b");
        fs::copy(
            trees.path(Label::Checkpoint("a")),
            trees.path(Label::Checkpoint("b")),
        )
        .expect("swap");
        let err = trees
            .restore(&root, Label::Checkpoint("b"))
            .expect_err("swapped");
        assert!(err.to_string().contains("integrity check failed"), "{err}");
        let other = SessionTrees::new(dir.path().join("store"), vec![2; 32], "node-a");
        let err = other
            .restore(&root, Label::Checkpoint("a"))
            .expect_err("foreign key");
        assert!(err.to_string().contains("integrity check failed"), "{err}");
        // While a manifest fails its check, collection deletes nothing.
        assert!(trees.collect().is_err());
        assert_eq!(fs::read(root.join("f")).expect("f"), b"y");
    }
}
