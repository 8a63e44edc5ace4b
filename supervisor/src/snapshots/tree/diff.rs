//! What restoring a manifest over a workspace changes: plain data, decided here and carried
//! out by [`apply`](super::apply).

use super::walk::{Found, Seen, SeenKind};
use super::{display, Entry, Hash, Kind, Manifest, RelPath};

pub use crate::state::FileChanges;

/// One step of a restore.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Delete what is at the path (a directory's content is deleted by earlier steps).
    Remove(RelPath),
    /// Make the path as the entry says (replacing a file of the same kind in place).
    Write(RelPath, Entry),
}

/// A restore: removals deepest first, then writes parents first, and what the ledger says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// What they change.
    pub changes: FileChanges,
}

impl Plan {
    /// The blobs the writes need, with the path each is for.
    pub fn blobs(&self) -> impl Iterator<Item = (&Hash, &RelPath)> {
        self.steps.iter().filter_map(|step| match step {
            Step::Write(
                path,
                Entry {
                    kind: Kind::File { hash, .. },
                    ..
                },
            ) => Some((hash, path)),
            _ => None,
        })
    }
}

/// The plan to turn the workspace `found` into `target`. `same_content(path, hash)` says
/// whether the file found at `path` holds the content `hash` (the caller reads it only when
/// its stamp differs from the manifest's).
pub fn plan(
    target: &Manifest,
    found: &Found,
    mut same_content: impl FnMut(&RelPath, &Seen, &Hash) -> bool,
) -> Plan {
    let mut removals: Vec<RelPath> = Vec::new();
    let mut writes: Vec<(RelPath, Entry)> = Vec::new();
    let mut changes = FileChanges::default();
    let listed = |kind: &SeenKind| !matches!(kind, SeenKind::Dir);
    for (path, seen) in found {
        if !target.entries.contains_key(path) {
            removals.push(path.clone());
            if listed(&seen.kind) {
                changes.removed.push(display(path));
            }
        }
    }
    for (path, entry) in &target.entries {
        let Some(seen) = found.get(path) else {
            writes.push((path.clone(), entry.clone()));
            if !matches!(entry.kind, Kind::Dir) {
                changes.added.push(display(path));
            }
            continue;
        };
        let same_kind = matches!(
            (&entry.kind, &seen.kind),
            (Kind::Dir, SeenKind::Dir)
                | (Kind::File { .. }, SeenKind::File)
                | (Kind::Symlink { .. }, SeenKind::Symlink(_))
        );
        let unchanged = match (&entry.kind, &seen.kind) {
            (Kind::Dir, SeenKind::Dir) => seen.mode == entry.mode,
            (Kind::File { hash, size }, SeenKind::File) => {
                seen.mode == entry.mode
                    && seen.stamp.size == *size
                    && (seen.stamp == entry.stamp || same_content(path, seen, hash))
            }
            (Kind::Symlink { target }, SeenKind::Symlink(now)) => target == now,
            _ => false,
        };
        if unchanged {
            continue;
        }
        // A link is replaced, never written through; another kind goes first.
        if !same_kind || matches!(entry.kind, Kind::Symlink { .. }) {
            removals.push(path.clone());
        }
        writes.push((path.clone(), entry.clone()));
        if !matches!(entry.kind, Kind::Dir) || !same_kind {
            changes.restored.push(display(path));
        }
    }
    // Children sort after their parent (a path is a prefix of its children's).
    removals.sort_by(|a, b| b.cmp(a));
    let steps = removals
        .into_iter()
        .map(Step::Remove)
        .chain(
            writes
                .into_iter()
                .map(|(path, entry)| Step::Write(path, entry)),
        )
        .collect();
    Plan { steps, changes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshots::tree::Stamp;

    fn stamp(ino: u64, size: u64) -> Stamp {
        Stamp {
            ino,
            size,
            ..Stamp::default()
        }
    }

    fn file(hash: u8, ino: u64, size: u64) -> Entry {
        Entry {
            kind: Kind::File {
                hash: [hash; 32],
                size,
            },
            mode: 0o644,
            stamp: stamp(ino, size),
        }
    }

    fn dir() -> Entry {
        Entry {
            kind: Kind::Dir,
            mode: 0o755,
            stamp: Stamp::default(),
        }
    }

    fn seen(kind: SeenKind, ino: u64, size: u64, mode: u32) -> Seen {
        Seen {
            kind,
            mode,
            stamp: stamp(ino, size),
        }
    }

    fn p(path: &str) -> RelPath {
        path.as_bytes().to_vec()
    }

    #[test]
    fn changed_deleted_and_new_files_are_restored_added_and_removed() {
        let target = Manifest {
            entries: [
                (p("data"), dir()),
                (p("data/a.csv"), file(1, 10, 5)),
                (p("data/b.csv"), file(2, 11, 5)),
                (p("keep.txt"), file(3, 12, 3)),
            ]
            .into(),
        };
        let found: Found = [
            (p("data"), seen(SeenKind::Dir, 1, 0, 0o755)),
            // Rewritten in place: same size, another stamp, another content.
            (p("data/a.csv"), seen(SeenKind::File, 10, 5, 0o644)),
            (p("keep.txt"), seen(SeenKind::File, 12, 3, 0o644)),
            (p("new"), seen(SeenKind::Dir, 2, 0, 0o755)),
            (p("new/out.bin"), seen(SeenKind::File, 13, 9, 0o644)),
        ]
        .into_iter()
        .map(|(path, mut s)| {
            if path == p("data/a.csv") {
                s.stamp.mtime = (99, 0);
            }
            (path, s)
        })
        .collect();
        let mut asked = Vec::new();
        let plan = plan(&target, &found, |path, _, _| {
            asked.push(display(path));
            false
        });
        assert_eq!(
            asked,
            ["data/a.csv"],
            "only a file whose stamp moved is read"
        );
        assert_eq!(
            plan.changes,
            FileChanges {
                restored: vec!["data/a.csv".into()],
                added: vec!["data/b.csv".into()],
                removed: vec!["new/out.bin".into()],
            }
        );
        let removals: Vec<_> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Remove(path) => Some(display(path)),
                Step::Write(..) => None,
            })
            .collect();
        assert_eq!(removals, ["new/out.bin", "new"], "children before parents");
        assert_eq!(plan.blobs().count(), 2);
    }

    #[test]
    fn an_identical_workspace_needs_nothing() {
        let target = Manifest {
            entries: [(p("a"), file(1, 10, 5))].into(),
        };
        let found: Found = [(p("a"), seen(SeenKind::File, 99, 5, 0o644))].into();
        // Another inode (another node), same content: read, found the same, left alone.
        let plan = plan(&target, &found, |_, _, _| true);
        assert!(plan.steps.is_empty() && plan.changes.is_empty(), "{plan:?}");
    }

    #[test]
    fn a_link_where_a_directory_was_is_removed_before_the_directory_is_made() {
        let target = Manifest {
            entries: [(p("d"), dir()), (p("d/f"), file(1, 10, 1))].into(),
        };
        let found: Found = [(
            p("d"),
            seen(SeenKind::Symlink(b"/etc".to_vec()), 5, 4, 0o777),
        )]
        .into();
        let plan = plan(&target, &found, |_, _, _| false);
        assert_eq!(plan.steps[0], Step::Remove(p("d")));
        assert!(
            matches!(&plan.steps[1], Step::Write(path, e) if *path == p("d") && e.kind == Kind::Dir)
        );
        assert!(matches!(&plan.steps[2], Step::Write(path, _) if *path == p("d/f")));
        assert_eq!(plan.changes.restored, ["d"]);
        assert_eq!(plan.changes.added, ["d/f"]);
    }

    #[test]
    fn a_mode_change_alone_is_restored() {
        let target = Manifest {
            entries: [(p("run.sh"), file(1, 10, 5))].into(),
        };
        let found: Found = [(p("run.sh"), seen(SeenKind::File, 10, 5, 0o755))].into();
        let plan = plan(&target, &found, |_, _, _| true);
        assert_eq!(plan.changes.restored, ["run.sh"]);
    }
}
