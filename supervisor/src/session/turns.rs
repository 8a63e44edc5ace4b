//! The session's turns: the queue of cells and state tasks in arrival order, the one
//! running (with who watches it, its output, its deadline and timers), the results of
//! background cells nobody collected yet, the tickets that tell one `wait` from the next,
//! and the counts the session's status shows.

use super::notice::Notice;
use super::observation::{Observer, Uncollected};
use super::policy::Deadline;
use super::window::CellOutput;
use super::{CellJob, CellReply};
use crate::session::CellReport;
use actix::SpawnHandle;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// The queue and the turn (see the module).
pub(super) struct Turns {
    pub queue: VecDeque<CellJob>,
    pub running: Option<Running>,
    /// Results of background cells that ended while nobody waited.
    pub uncollected: Uncollected<crate::cell::CellResult>,
    next_ticket: u64,
    /// Cells handed to this session so far (see [`SessionEvent::Changed`](super::SessionEvent)).
    received: u64,
    /// Code cells that ran to their end here.
    pub cells_run: u64,
    pub last_active: Instant,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            queue: VecDeque::new(),
            running: None,
            uncollected: Uncollected::new(),
            next_ticket: 1,
            received: 0,
            cells_run: 0,
            last_active: Instant::now(),
        }
    }
}

impl Turns {
    /// A job arrived (counted whether it runs or is refused).
    pub fn receive(&mut self) {
        self.received += 1;
    }

    /// Jobs handed to this session so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// A new ticket for a `wait` or `terminate`.
    pub fn take_ticket(&mut self) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        ticket
    }

    /// The ticket the next `wait` gets (it names a cut result's artifact).
    pub fn peek_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// The running cell, if it is `cell_id`.
    pub fn running_as(&mut self, cell_id: u64) -> Option<&mut Running> {
        self.running.as_mut().filter(|r| r.cell_id == cell_id)
    }

    /// Something happened: the session's idle time starts again.
    pub fn touch(&mut self) {
        self.last_active = Instant::now();
    }

    /// How long the session has been idle (0 while a cell runs).
    pub fn idle_ms(&self) -> u64 {
        match self.running {
            Some(_) => 0,
            None => self.last_active.elapsed().as_millis() as u64,
        }
    }

    /// Drops queued jobs nobody waits for any more from the front; whether one is left.
    pub fn drop_abandoned(&mut self) -> bool {
        while self.queue.front().is_some_and(CellJob::abandoned) {
            self.queue.pop_front();
        }
        !self.queue.is_empty()
    }

    /// Answers the next queued job with `why`, an error, instead of running it.
    pub fn refuse_next(&mut self, why: String) {
        if let Some(job) = self.queue.pop_front() {
            let _ = job.reply.send(CellReport::error(why));
        }
    }

    /// Answers every queued job with `why`, an error (the session closes).
    pub fn refuse_all(&mut self, why: &str) {
        for job in self.queue.drain(..) {
            let _ = job.reply.send(CellReport::error(why.to_string()));
        }
    }
}

pub(super) struct Running {
    pub(super) cell_id: u64,
    /// Kept whole so a cell whose worker died before starting it can run on the next one
    /// (its `reply` is in `observer` meanwhile).
    pub(super) job: CellJob,
    /// Who gets the cell's output next: its requester, nobody, or one `wait`.
    pub(super) observer: Observer<oneshot::Sender<CellReport>, Waiter>,
    /// The output since the last look, shared with the connection's reader.
    pub(super) output: Arc<CellOutput>,
    /// The watch on the requester, cancelled when the cell goes to the background.
    pub(super) requester_watch: SpawnHandle,
    /// The current `wait`'s timer (a stale `WaitExpired` after the cell's end is ignored).
    pub(super) wait_timer: Option<SpawnHandle>,
    pub(super) started: Instant,
    pub(super) deadline: Deadline,
    /// The futures that exist for this cell alone, cancelled when it ends: the pending
    /// `CellDeadline`, `GraceExpired` and `CellYield` (its yield time), and the watch on its
    /// requester (left running, a request of N cells would leave N watchers for the actor to
    /// poll on every wake-up).
    pub(super) timers: Vec<SpawnHandle>,
    pub(super) notice: Notice,
    /// What a restore just before this cell brought back.
    pub(super) ledger: Option<crate::state::StateLedger>,
    /// The largest memory the supervisor's sampler saw the worker's tree use during the
    /// cell (0 when it does not sample: no `limits.max-rss`).
    pub(super) peak_rss: u64,
}

impl Running {
    /// The report of this cell when its worker was lost under it: `status` and `text` as
    /// the loss decided, its usage up to the loss.
    pub(super) fn report_at_loss(
        &mut self,
        status: crate::cell::CellStatus,
        text: String,
        truncation: crate::cell::Truncation,
        readings: crate::usage::CellReadings,
    ) -> CellReport {
        let duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let usage = readings.usage(self.peak_rss, duration_ms, truncation.total_bytes);
        CellReport {
            status,
            output: text,
            duration_ms,
            displays: Vec::new(),
            status_events: Vec::new(),
            truncation,
            notice: self.notice.take(),
            state: None,
            processes_ended: None,
            usage: Some(usage),
            out_of_memory: None,
            saved: None,
        }
    }

    /// The job back, to run on the next worker, while its request still waits for it.
    pub(super) fn into_requeued(self) -> Result<CellJob, Box<Running>> {
        match self.observer {
            Observer::Requester(reply) => {
                let mut job = self.job;
                job.reply = reply;
                Ok(job)
            }
            observer => Err(Box::new(Running { observer, ..self })),
        }
    }
}

/// A `wait` (or `terminate`) watching a background cell.
#[derive(Debug)]
pub(super) struct Waiter {
    /// Tells this wait's timer from an earlier wait's.
    pub(super) ticket: u64,
    pub(super) max_bytes: Option<u64>,
    pub(super) reply: CellReply,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellStatus;
    use crate::session::state::{HostAsk, StateJob};
    use cellvisor_ipc::Language;
    use tokio::sync::watch;

    /// A queued job, its requester (dropping it abandons the job) and its answer.
    fn job(id: u64) -> (CellJob, watch::Sender<()>, oneshot::Receiver<CellReport>) {
        let (requester, watched) = watch::channel(());
        let (reply, answer) = oneshot::channel();
        let state = StateJob::for_host(HostAsk::Names, oneshot::channel().0);
        let mut job = CellJob::for_state(id, Language::Python, watched, reply, state);
        job.state = None;
        (job, requester, answer)
    }

    #[test]
    fn tickets_and_arrivals_count_up() {
        let mut turns = Turns::default();
        assert_eq!((turns.take_ticket(), turns.take_ticket()), (1, 2));
        assert_eq!(turns.peek_ticket(), 3);
        turns.receive();
        assert_eq!(turns.received(), 1);
        assert!(turns.running_as(1).is_none());
    }

    #[test]
    fn abandoned_jobs_at_the_front_are_dropped_and_refusals_are_answered() {
        let mut turns = Turns::default();
        let (first, gone, _) = job(1);
        let (second, _keep2, mut second_answer) = job(2);
        let (third, _keep3, mut third_answer) = job(3);
        turns.queue.extend([first, second, third]);
        drop(gone);
        assert!(turns.drop_abandoned());
        assert_eq!(turns.queue.front().map(|j| j.cell_id), Some(2));
        turns.refuse_next("no python".into());
        let refused = second_answer.try_recv().expect("answered");
        assert_eq!(
            (refused.status, refused.output.as_str()),
            (CellStatus::Error, "no python\n")
        );
        turns.refuse_all("closed");
        assert_eq!(
            third_answer.try_recv().expect("answered").output,
            "closed\n"
        );
        assert!(!turns.drop_abandoned(), "nothing left");
    }
}
