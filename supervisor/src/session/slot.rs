//! The session's worker slot: the worker in its phase (none, starting, ready on its link,
//! stopping), the generation that tells its messages from a predecessor's, the worker
//! started ahead of demand and the pool to claim one from, why the last start failed, the
//! restart budget and the failure it ends in, and the heartbeat's count and timer.

use super::kernel_oom::OomCounters;
use super::link::Link;
use super::messages::ClaimWorker;
use super::outcome::KillReason;
use super::policy::RestartBudget;
use crate::spawn::{ProcessHandle, StartedWorker};
use actix::{Recipient, SpawnHandle};
use cellvisor_ipc::ToWorker;
use std::time::{Duration, Instant};

/// The worker in its phase.
pub(super) enum Worker {
    None,
    Starting {
        generation: u64,
    },
    Ready {
        generation: u64,
        link: Link,
        last_heard: Instant,
        /// Set when we killed it on purpose for a policy (heartbeat, grace, memory).
        killed_for: Option<KillReason>,
        /// The kernel's OOM-kill counts when it started, to tell an OOM kill from another
        /// SIGKILL if it dies of one.
        oom_before: OomCounters,
    },
    Stopping {
        generation: u64,
        process: ProcessHandle,
    },
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Beat {
    NoWorker,
    /// Heard from in time, and pinged.
    Pinged,
    /// Silent for longer than the timeout.
    Silent,
}

/// The worker slot (see the module).
pub(super) struct Slot {
    pub worker: Worker,
    generation: u64,
    /// A worker started ahead of demand (`python.prewarm`), used for the first start.
    pub prestarted: Option<StartedWorker>,
    /// Where a Python session claims a prewarmed worker for a later start.
    pub pool: Option<Recipient<ClaimWorker>>,
    /// Why the last worker could not start, until one does.
    pub start_error: Option<String>,
    /// Set when a loss used up the restart budget: the session refuses cells until reset.
    pub failed: Option<String>,
    pub budget: RestartBudget,
    heartbeat_seq: u64,
    pub heartbeat_timer: Option<SpawnHandle>,
}

impl Slot {
    /// An empty slot with `budget`; its first start uses `prestarted` if there is one.
    pub fn new(
        budget: RestartBudget,
        prestarted: Option<StartedWorker>,
        pool: Option<Recipient<ClaimWorker>>,
    ) -> Slot {
        Slot {
            worker: Worker::None,
            generation: 0,
            prestarted,
            pool,
            start_error: None,
            failed: None,
            budget,
            heartbeat_seq: 0,
            heartbeat_timer: None,
        }
    }

    /// A start begins: the slot waits for the worker of the returned generation.
    pub fn begin_start(&mut self) -> u64 {
        self.generation += 1;
        self.worker = Worker::Starting {
            generation: self.generation,
        };
        self.generation
    }

    /// Whether a message of `generation` is about the worker in the slot (ready or stopping).
    pub fn is_current(&self, generation: u64) -> bool {
        match &self.worker {
            Worker::Ready { generation: g, .. } | Worker::Stopping { generation: g, .. } => {
                *g == generation
            }
            _ => false,
        }
    }

    /// Whether the slot waits for the worker of `generation` to start.
    pub fn is_starting(&self, generation: u64) -> bool {
        matches!(self.worker, Worker::Starting { generation: g } if g == generation)
    }

    /// Whether the worker of `generation` is the ready one.
    pub fn is_ready(&self, generation: u64) -> bool {
        matches!(self.worker, Worker::Ready { generation: g, .. } if g == generation)
    }

    /// Whether a worker is on its way in or out: nothing can run until it is settled.
    pub fn in_transition(&self) -> bool {
        matches!(
            self.worker,
            Worker::Starting { .. } | Worker::Stopping { .. }
        )
    }

    /// Whether no worker is there (nor on its way).
    pub fn is_empty(&self) -> bool {
        matches!(self.worker, Worker::None)
    }

    /// The ready worker's link.
    pub fn link(&self) -> Option<&Link> {
        match &self.worker {
            Worker::Ready { link, .. } => Some(link),
            _ => None,
        }
    }

    /// The ready worker's generation.
    pub fn ready_generation(&self) -> Option<u64> {
        match &self.worker {
            Worker::Ready { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    /// The worker's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        match &self.worker {
            Worker::Ready { link, .. } => Some(link.pid),
            Worker::Stopping { process, .. } => Some(process.pid()),
            _ => None,
        }
    }

    /// One heartbeat on the ready worker: it was heard from since the last (any frame is as
    /// good as a pong; while its reader waits for a slow host it reads nothing, held back on
    /// purpose, not dead) or within `timeout`, and is pinged; or it has been silent longer.
    pub fn beat(&mut self, timeout: Duration) -> Beat {
        let Worker::Ready {
            link, last_heard, ..
        } = &mut self.worker
        else {
            return Beat::NoWorker;
        };
        if link.heard_since_last_look() || link.host_stalled() {
            *last_heard = Instant::now();
        }
        if last_heard.elapsed() > timeout {
            return Beat::Silent;
        }
        self.heartbeat_seq += 1;
        link.send(ToWorker::Ping {
            seq: self.heartbeat_seq,
        });
        Beat::Pinged
    }

    /// Why the session cannot run cells, as its status says: its failure, or else why its
    /// last worker could not start.
    pub fn reason(&self) -> Option<String> {
        self.failed.clone().or_else(|| self.start_error.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> Slot {
        Slot::new(RestartBudget::new(1), None, None)
    }

    #[test]
    fn each_start_is_a_new_generation_and_only_a_live_worker_is_current() {
        let mut slot = slot();
        assert!(slot.is_empty() && !slot.in_transition());
        let first = slot.begin_start();
        let second = slot.begin_start();
        assert_eq!((first, second), (1, 2));
        assert!(slot.is_starting(second) && !slot.is_starting(first));
        assert!(slot.in_transition());
        // Messages about a worker still starting (or a predecessor) are about no live one.
        assert!(!slot.is_current(second) && !slot.is_ready(second));
        assert_eq!(slot.ready_generation(), None);
        assert_eq!((slot.pid(), slot.link().is_some()), (None, false));
    }

    #[test]
    fn no_worker_has_no_heartbeat_and_a_failure_outranks_a_start_error() {
        let mut slot = slot();
        assert_eq!(slot.beat(Duration::ZERO), Beat::NoWorker);
        slot.begin_start();
        assert_eq!(slot.beat(Duration::ZERO), Beat::NoWorker, "not started yet");
        assert_eq!(slot.reason(), None);
        slot.start_error = Some("no python".into());
        assert_eq!(slot.reason().as_deref(), Some("no python"));
        slot.failed = Some("over budget".into());
        assert_eq!(slot.reason().as_deref(), Some("over budget"));
    }
}
