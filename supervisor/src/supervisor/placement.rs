//! Where a host's cell goes under the per-language cap: `Submit`, `RequestDone`,
//! `SessionEvent` and `RoomWaitExpired`, and their handlers. The decisions are plain data:
//! [`capacity::place`] (run here / start / evict the least recently used idle session /
//! wait) and the [`WaitingRoom`](super::waiting::WaitingRoom) (admit, drain in order as
//! room frees, expire).

use super::capacity::{self, Placement, Slot};
use super::messages::{RequestDone, RoomWaitExpired, SessionEvent, Submit};
use super::{Supervisor, EVICTED_MEMORY};
use crate::session::outcome::{self, Eviction};
use crate::session::{CellReport, RunCell, SessionKey, SessionState};
use actix::prelude::*;
use cellvisor_ipc::Language;

impl Handler<Submit> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        if self.stopping {
            let _ = msg
                .job
                .reply
                .send(CellReport::error("cellvisor is shutting down".into()));
            return;
        }
        if self.is_draining()
            && !self.sessions.contains_key(&msg.key)
            && !self.holds(&msg.key.session)
        {
            let _ = msg.job.reply.send(Self::draining_refusal(&msg.key));
            return;
        }
        if !self.sessions.contains_key(&msg.key) {
            if let Err(refusal) = self.take_lease(&msg.key.session) {
                let _ = msg.job.reply.send(CellReport::error(refusal.to_string()));
                return;
            }
        }
        // Earlier waiters go first.
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
        // A new session queues behind earlier ones waiting for room; a live one just runs.
        let live = self.sessions.contains_key(&msg.key);
        if self.waiting.must_queue(&msg.key.language, live) {
            self.wait_for_room(msg, ctx);
            return;
        }
        if let Some(submit) = self.try_place(msg, ctx) {
            self.wait_for_room(submit, ctx);
        }
    }
}

impl Handler<RequestDone> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: RequestDone, ctx: &mut Context<Self>) {
        for entry in self.sessions.values_mut() {
            entry.pinned_by.retain(|r| *r != msg.request);
        }
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
    }
}

impl Handler<SessionEvent> for Supervisor {
    type Result = ();
    fn handle(&mut self, event: SessionEvent, ctx: &mut Context<Self>) {
        match event {
            SessionEvent::Changed {
                key,
                state,
                received,
                last_active,
                pid,
            } => {
                if let Some(entry) = self.sessions.get_mut(&key) {
                    entry.state = state;
                    entry.received = received;
                    entry.last_active = last_active;
                    entry.pid = pid;
                }
                if state == SessionState::Busy
                    && !self.sampling_fast
                    && self.config.limits.max_rss.is_some()
                {
                    self.arm_sampling(ctx);
                }
            }
            SessionEvent::Stopped {
                key,
                eviction,
                snapshot,
            } => {
                self.sessions.remove(&key);
                self.base.ended.tell(&key);
                self.release_lease_if_unused(&key.session);
                self.release_uid_if_unused(&key.session, ctx);
                self.tell_if_no_sessions();
                let notice =
                    eviction.and_then(|e| crate::snapshots::policy::eviction_notice(&e, &snapshot));
                if let Some(notice) = notice {
                    if self.evicted.len() >= EVICTED_MEMORY {
                        if let Some(oldest) = self.evicted_order.pop_front() {
                            self.evicted.remove(&oldest);
                        }
                    }
                    self.evicted_order.push_back(key.clone());
                    self.evicted.insert(key, notice);
                }
            }
        }
        if !self.waiting.is_empty() {
            self.drain_waiting(ctx);
        }
    }
}

impl Handler<RoomWaitExpired> for Supervisor {
    type Result = ();
    /// The cell fails with the cap's message, naming its session.
    fn handle(&mut self, msg: RoomWaitExpired, _: &mut Context<Self>) {
        let Some((submit, waited)) = self.waiting.expire(msg.id) else {
            return;
        };
        let cap = self.config.sessions.max_sessions;
        let message = outcome::no_room(&submit.key, cap, waited);
        let _ = submit.job.reply.send(CellReport::error(message));
    }
}

impl Supervisor {
    /// The live sessions of `language`, as the capacity decision sees them.
    fn slots(&self, language: Language) -> Vec<Slot<SessionKey>> {
        self.sessions
            .iter()
            .filter(|(k, _)| k.language == language)
            .map(|(k, e)| Slot {
                key: k.clone(),
                evictable: e.evictable(),
                closing: e.closing,
                last_active: e.last_active,
            })
            .collect()
    }

    /// Places a submission, or gives it back when it has to wait.
    fn try_place(&mut self, submit: Submit, ctx: &mut Context<Self>) -> Option<Submit> {
        let cap = self.config.sessions.max_sessions;
        if self.is_draining()
            && !self.sessions.contains_key(&submit.key)
            && !self.holds(&submit.key.session)
        {
            let _ = submit.job.reply.send(Self::draining_refusal(&submit.key));
            return None;
        }
        let placement = match self.sessions.get(&submit.key) {
            Some(entry) => capacity::for_live(entry.closing),
            None => capacity::place(&submit.key, &self.slots(submit.key.language), cap),
        };
        match placement {
            Placement::RunHere => {
                if let Some(entry) = self.sessions.get_mut(&submit.key) {
                    entry.sent += 1;
                    entry.state = SessionState::Busy;
                    if !entry.pinned_by.contains(&submit.request) {
                        entry.pinned_by.push(submit.request);
                    }
                    entry.addr.do_send(RunCell(submit.job));
                }
                None
            }
            Placement::Start => {
                self.start_session(submit, ctx);
                None
            }
            Placement::Evict(victim) => {
                let eviction = Eviction::ForRoom {
                    key: victim.clone(),
                    cap,
                };
                self.close_entry(&victim, Some(eviction));
                Some(submit)
            }
            Placement::Wait => Some(submit),
        }
    }

    /// Offers room to the waiting submissions in arrival order; an abandoned one leaves.
    pub(super) fn drain_waiting(&mut self, ctx: &mut Context<Self>) {
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.drain(|submit| {
            if submit.job.abandoned() {
                return None;
            }
            self.try_place(submit, ctx)
        });
        self.waiting = waiting;
    }

    /// Lets `submit` wait for room for as long as its cell's timeout.
    fn wait_for_room(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        let timeout = self.config.cells.timeout_for(submit.job.spec.timeout);
        let id = self.waiting.admit(submit.key.language, submit, timeout);
        ctx.notify_later(RoomWaitExpired { id }, timeout);
    }
}
