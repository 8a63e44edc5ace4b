//! A session's directories change hands (to its uid when a worker starts, back to the
//! daemon when its uid is released) off the supervisor's thread, yet in the order the
//! supervisor decided it: each walk takes a [`Ticket`] on the supervisor's thread and waits
//! for the walks of the same session ticketed before it. So a session reopened right after
//! its close never has its new uid's directories taken back by the old uid's late reclaim.

use super::dirs;
use crate::locking::lock;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The queues of every session with a walk pending.
#[derive(Default)]
pub struct Turns {
    queues: Mutex<HashMap<String, Queue>>,
    turn: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Tickets handed out.
    issued: u64,
    /// Every ticket below this one is finished.
    done: u64,
    /// Finished tickets above `done` (one whose walk was dropped before its turn).
    finished: BTreeSet<u64>,
}

/// A place in one session's queue; dropping it (walk done, failed or never run) lets the
/// next one go.
pub struct Ticket {
    turns: Arc<Turns>,
    session: String,
    n: u64,
}

impl Turns {
    /// An empty set of queues.
    pub fn new() -> Arc<Turns> {
        Arc::new(Turns::default())
    }

    /// The next place in `session`'s queue (on the supervisor's thread, in its order).
    pub fn ticket(self: &Arc<Self>, session: &str) -> Ticket {
        let mut queues = self.lock();
        let queue = queues.entry(session.to_string()).or_default();
        let n = queue.issued;
        queue.issued += 1;
        Ticket {
            turns: Arc::clone(self),
            session: session.to_string(),
            n,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Queue>> {
        // A walk that panicked finished nothing worth poisoning every other session for.
        lock(&self.queues)
    }
}

impl Ticket {
    /// Blocks until every walk of the session ticketed before this one has finished.
    pub fn wait(&self) {
        let mut queues = self.turns.lock();
        while queues
            .get(&self.session)
            .is_some_and(|queue| queue.done < self.n)
        {
            queues = self
                .turns
                .turn
                .wait(queues)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut queues = self.turns.lock();
        if let Some(queue) = queues.get_mut(&self.session) {
            queue.finished.insert(self.n);
            while queue.finished.remove(&queue.done) {
                queue.done += 1;
            }
            if queue.done == queue.issued {
                queues.remove(&self.session);
            }
        }
        drop(queues);
        self.turns.turn.notify_all();
    }
}

/// What a session's worker needs before it starts at the `uid` level: its directories
/// made and given to its uid (0700), their parents opened to traversal, in the session's
/// turn. Run off the supervisor's thread by the launcher ([`Handover::run`]).
pub struct Handover {
    /// The session's uid.
    pub uid: u32,
    /// Directories to create if missing (a snapshot directory's `checkpoints`).
    pub create: Vec<PathBuf>,
    /// The daemon's directories to open to traversal (0711).
    pub traversable: Vec<PathBuf>,
    /// The session's directories, given to `uid`.
    pub own: Vec<PathBuf>,
    /// The first run waits its turn; a restarted worker's runs again without one (the
    /// session's uid is still leased, so no reclaim of it can be pending).
    ticket: Mutex<Option<Ticket>>,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handover")
            .field("uid", &self.uid)
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}

impl Handover {
    /// A handover of `own` to `uid` that runs in `ticket`'s turn.
    pub fn new(uid: u32, own: Vec<PathBuf>, ticket: Ticket) -> Handover {
        Handover {
            uid,
            create: Vec::new(),
            traversable: Vec::new(),
            own,
            ticket: Mutex::new(Some(ticket)),
        }
    }

    /// Does it (blocking: call it off the supervisor's thread); the error names the
    /// directory and what went wrong.
    pub fn run(&self) -> Result<(), String> {
        let ticket = lock(&self.ticket).take();
        if let Some(ticket) = &ticket {
            ticket.wait();
        }
        for dir in &self.create {
            // A failure shows as the walk's below, naming the directory.
            let _ = std::fs::create_dir_all(dir);
        }
        for dir in &self.traversable {
            dirs::traversable(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        }
        let uid = self.uid;
        for dir in &self.own {
            dirs::own(dir, uid).map_err(|e| {
                format!(
                    "cannot give the session's directory {} to uid {uid}: {e}",
                    dir.display()
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_sessions_walks_run_in_ticket_order_and_others_do_not_wait() {
        let turns = Turns::new();
        let first = turns.ticket("s");
        let second = turns.ticket("s");
        let other = turns.ticket("t");
        other.wait(); // another session's queue: its turn at once
        drop(other);
        let (sent, got) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            second.wait();
            sent.send(()).unwrap();
        });
        // The second waits while the first is held...
        assert!(got.recv_timeout(Duration::from_millis(200)).is_err());
        first.wait();
        drop(first);
        // ...and goes once it is done.
        got.recv_timeout(Duration::from_secs(30)).unwrap();
        waiter.join().unwrap();
        assert!(turns.lock().is_empty(), "a drained queue is forgotten");
    }

    #[test]
    fn a_ticket_dropped_before_its_turn_does_not_let_a_later_one_jump_the_queue() {
        let turns = Turns::new();
        let first = turns.ticket("s");
        let second = turns.ticket("s");
        let third = turns.ticket("s");
        drop(second); // never run
        let (sent, got) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            third.wait();
            sent.send(()).unwrap();
        });
        assert!(got.recv_timeout(Duration::from_millis(200)).is_err());
        drop(first);
        got.recv_timeout(Duration::from_secs(30)).unwrap();
        waiter.join().unwrap();
        assert!(turns.lock().is_empty());
    }
}
