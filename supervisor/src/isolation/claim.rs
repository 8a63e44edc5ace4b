//! A daemon's claim on its uid range, held for its life: a second daemon whose range shares
//! a uid with a live one refuses to start (or falls back at `auto`) instead of ending the
//! first one's cells with its start-up sweep and leasing their uids.
//!
//! Each claim is an exclusive `flock` on `cellvisor-uids-FIRST-LAST.lock` (the holder's pid
//! inside) in `/run`; the kernel drops it when the holder dies, so a crashed daemon leaves no
//! claim behind. Claims are made one at a time under `cellvisor-uids.lock`, and a new one
//! tries every other range's file that overlaps: held means live, and refused.

use cellvisor_config::UidRange;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A lock on a uid range, held for the daemon's life: released when dropped.
pub type RangeClaim = Flock<File>;

/// Claims `range` machine-wide (in `/run`). `Ok(None)`: no lock can be had here (no writable
/// `/run`), so none is checked.
pub fn claim_range(range: UidRange) -> Result<Option<RangeClaim>, String> {
    claim_range_in(Path::new("/run"), range)
}

fn claim_range_in(dir: &Path, range: UidRange) -> Result<Option<RangeClaim>, String> {
    // Held while this claim checks the others and takes its own, so two daemons starting at
    // once with overlapping ranges cannot both see the other's range free.
    let Some(_turn) = open_lock(&dir.join("cellvisor-uids.lock"))
        .and_then(|file| Flock::lock(file, FlockArg::LockExclusive).ok())
    else {
        return Ok(None);
    };
    for (other, path) in claimed_ranges(dir) {
        if other != range && overlap(other, range) {
            if let Some(holder) = live_holder(&path) {
                return Err(refusal(range, other, &path, &holder));
            }
        }
    }
    let own = dir.join(file_name(range));
    let Some(file) = open_lock(&own) else {
        return Ok(None);
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut claim) => {
            // Who holds it, for the next daemon's error.
            let _ = claim.set_len(0);
            let _ = claim.rewind();
            let _ = write!(claim, "{}", std::process::id());
            Ok(Some(claim))
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            Err(refusal(range, range, &own, &read_holder(&mut file)))
        }
        Err(_) => Ok(None),
    }
}

fn file_name(range: UidRange) -> String {
    format!("cellvisor-uids-{}-{}.lock", range.first, range.last)
}

/// The ranges that have (or had) a claim file in `dir`.
fn claimed_ranges(dir: &Path) -> Vec<(UidRange, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let range = name
                .to_str()?
                .strip_prefix("cellvisor-uids-")?
                .strip_suffix(".lock")?
                .to_string();
            Some((UidRange::parse(&range).ok()?, entry.path()))
        })
        .collect()
}

fn overlap(a: UidRange, b: UidRange) -> bool {
    a.first <= b.last && b.first <= a.last
}

/// The pid written in a claim file whose lock a live daemon holds; `None` when nobody holds
/// it (its daemon is gone). The probe's own lock is dropped at once.
fn live_holder(path: &Path) -> Option<String> {
    let file = open_lock(path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_unheld) => None,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => Some(read_holder(&mut file)),
        Err(_) => None,
    }
}

fn open_lock(path: &Path) -> Option<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()
}

fn read_holder(file: &mut File) -> String {
    let mut holder = String::new();
    let _ = file.read_to_string(&mut holder);
    holder.trim().to_string()
}

fn refusal(range: UidRange, held: UidRange, path: &Path, holder: &str) -> String {
    let by = if holder.is_empty() {
        String::new()
    } else {
        format!(" (pid {holder})")
    };
    let what = if held == range {
        format!("isolation.uids = \"{range}\" is used by another daemon on this machine{by}")
    } else {
        format!(
            "isolation.uids = \"{range}\" overlaps \"{held}\", the range of another daemon on \
             this machine{by}"
        )
    };
    format!(
        "{what}, which holds {}: give each daemon a range of its own (isolation.uids), or set \
         isolation.level = \"none\"",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> UidRange {
        UidRange::parse(text).unwrap()
    }

    #[test]
    fn a_range_another_daemon_holds_is_refused_naming_it_and_free_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim_range_in(dir.path(), range("61000-61009"))
            .unwrap()
            .expect("a claim");
        let err = claim_range_in(dir.path(), range("61000-61009")).unwrap_err();
        assert!(
            err.contains("61000-61009")
                && err.contains(&format!("pid {}", std::process::id()))
                && err.contains("a range of its own"),
            "{err}"
        );
        assert!(claim_range_in(dir.path(), range("61010-61019"))
            .unwrap()
            .is_some());
        drop(first);
        assert!(claim_range_in(dir.path(), range("61000-61009"))
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_range_that_shares_one_uid_with_a_live_claim_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let held = claim_range_in(dir.path(), range("61000-61009"))
            .unwrap()
            .expect("a claim");
        for overlapping in ["61009-61019", "60990-61000", "61003-61004", "60000-62000"] {
            let err = claim_range_in(dir.path(), range(overlapping)).unwrap_err();
            assert!(
                err.contains(&format!("\"{overlapping}\" overlaps \"61000-61009\""))
                    && err.contains(&format!("pid {}", std::process::id())),
                "{err}"
            );
        }
        // Ranges beside it are free, and so is every range once the holder is gone: its file
        // stays behind but holds nothing.
        let beside = claim_range_in(dir.path(), range("61010-61019"))
            .unwrap()
            .expect("a claim");
        drop(held);
        assert!(dir.path().join("cellvisor-uids-61000-61009.lock").exists());
        assert!(claim_range_in(dir.path(), range("60000-61009"))
            .unwrap()
            .is_some());
        drop(beside);
    }

    #[test]
    fn files_that_are_not_claims_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "cellvisor-uids-x-y.lock",
            "cellvisor-uids-5-1.lock",
            "other.lock",
        ] {
            std::fs::write(dir.path().join(name), "1").unwrap();
        }
        assert!(claim_range_in(dir.path(), range("20001-20010"))
            .unwrap()
            .is_some());
    }

    #[test]
    fn overlap_is_sharing_at_least_one_uid() {
        assert!(overlap(range("20001-20010"), range("20010-20020")));
        assert!(overlap(range("20005-20006"), range("20001-20010")));
        assert!(!overlap(range("20001-20010"), range("20011-20020")));
        assert!(!overlap(range("20011-20020"), range("20001-20010")));
    }
}
