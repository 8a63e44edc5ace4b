//! Descriptor exhaustion: a cell that leaves its worker (nearly) out of file descriptors
//! (EMFILE, "Too many open files") would make every later cell fail, its helpers and even
//! `subprocess` included. After each cell the worker's open descriptors are counted against
//! its limit; a worker with no headroom left is replaced, so the next cell runs on a fresh
//! one and its notice says why (the anchor's host tears the session down and restarts it on
//! EMFILE). Its state cannot be saved first: saving needs descriptors.

use super::closing::AfterStop;
use super::{Session, Worker};
use actix::Context;

/// What a worker's descriptors look like after a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// Open in the worker process now.
    pub open: u64,
    /// Its soft `RLIMIT_NOFILE`.
    pub limit: u64,
}

impl Descriptors {
    /// Whether the worker is out of descriptors: fewer free than a helper call, a snapshot
    /// and the interpreter's own imports need (1%, at least 16).
    pub fn exhausted(self) -> bool {
        let headroom = (self.limit / 100).max(16);
        self.open.saturating_add(headroom) > self.limit
    }

    /// What a worker reported with its `Done`; `None` when it could not count them (or
    /// its limit is unlimited), or it reported nothing (a scripted worker).
    pub fn reported(usage: cellvisor_ipc::DoneUsage) -> Option<Descriptors> {
        (usage.descriptors_limit > 0).then_some(Descriptors {
            open: usage.descriptors_open,
            limit: usage.descriptors_limit,
        })
    }

    /// The worker `pid`'s descriptors, read from `/proc`; `None` when they cannot be read
    /// (the process is gone, or the limit is unlimited).
    pub fn of(pid: u32) -> Option<Descriptors> {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
        let limit = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))?
            .trim_start_matches("Max open files")
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(Descriptors { open, limit })
    }
}

/// The direct children of `pid` (its threads' `children` lists).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

impl Session {
    /// After a cell: replaces a worker the cell left out of descriptors (see the module),
    /// as it `reported` them with the cell's `Done` (read from `/proc` here only for a worker
    /// that reports none); whether it did.
    pub(super) fn replace_if_out_of_descriptors(
        &mut self,
        reported: Option<Option<Descriptors>>,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Worker::Ready { link, .. } = &self.slot.worker else {
            return false;
        };
        let seen = match reported {
            Some(seen) => seen.filter(|d| d.exhausted()),
            None => self.descriptors_from_proc(link.pid),
        };
        let Some(seen) = seen else {
            return false;
        };
        tracing::warn!(
            session = %self.setup.key,
            pid = link.pid,
            open = seen.open,
            limit = seen.limit,
            "worker out of file descriptors after a cell: replacing it"
        );
        self.add_notice(format!(
            "the worker was replaced: the previous cell left {} of its {} file descriptors \
             open (too many open files, EMFILE), so nothing more could run there; its state \
             is gone (close files, sockets and pipes a cell opens, e.g. with `with open(...)`)",
            seen.open, seen.limit
        ));
        self.closing.then(AfterStop::Restart);
        self.stop_worker(ctx);
        true
    }

    /// The exhausted descriptors of a worker that reported none, from `/proc`: Python's
    /// interpreter (the shim's child; the shim itself opens none for a cell), or the
    /// JavaScript and Lua engines' own process.
    fn descriptors_from_proc(&self, pid: u32) -> Option<Descriptors> {
        let pids = if self.setup.key.language == cellvisor_ipc::Language::Python {
            children(pid)
        } else {
            vec![pid]
        };
        pids.into_iter()
            .filter_map(Descriptors::of)
            .find(|d| d.exhausted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_exhausted_when_fewer_than_its_headroom_are_free() {
        let at = |open, limit| Descriptors { open, limit }.exhausted();
        assert!(!at(10, 1024));
        assert!(!at(1008, 1024));
        assert!(at(1009, 1024));
        assert!(at(1024, 1024));
        // 1% of a large limit.
        assert!(!at(19_799, 20_000));
        assert!(at(19_801, 20_000));
        assert!(at(5, 16));
    }

    #[test]
    fn this_process_has_readable_descriptors() {
        let seen = Descriptors::of(std::process::id()).expect("own /proc");
        assert!(seen.open > 0 && seen.limit >= seen.open, "{seen:?}");
    }
}
