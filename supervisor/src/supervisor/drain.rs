//! The drain of a node: `SetDraining` and its `DrainTick`. While draining the supervisor
//! starts no session whose name it does not already hold (in any language); idle sessions
//! are stopped at once, and a session busy when the drain began once it has been idle for
//! `daemon.drain-idle`, through the eviction path (so `[snapshots]` saves them first).

use super::messages::{DrainTick, SetDraining, WaitNoSessions};
use super::Supervisor;
use crate::session::outcome::Eviction;
use crate::session::{CellReport, SessionKey};
use actix::prelude::*;
use std::time::Duration;

/// The state of a drain under way.
pub(super) struct Draining {
    timer: SpawnHandle,
}

/// How often a drain looks for sessions that have become idle long enough: a quarter of
/// `drain-idle`, within 20 ms and 1 s.
pub fn tick_interval(drain_idle: Duration) -> Duration {
    (drain_idle / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

impl Handler<SetDraining> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: SetDraining, ctx: &mut Context<Self>) {
        match (msg.0, self.draining.take()) {
            (true, Some(draining)) => self.draining = Some(draining),
            (true, None) => {
                tracing::info!("draining: no new sessions; idle sessions stop");
                let interval = tick_interval(self.config.daemon.drain_idle);
                let timer = ctx.run_interval(interval, |_, ctx| ctx.notify(DrainTick));
                self.draining = Some(Draining { timer });
                self.refuse_waiting_new_sessions();
                self.stop_drained(Duration::ZERO);
            }
            (false, Some(draining)) => {
                tracing::info!("undrained: taking new sessions again");
                ctx.cancel_future(draining.timer);
                self.drain_waiting(ctx);
            }
            (false, None) => {}
        }
    }
}

impl Handler<DrainTick> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: DrainTick, _: &mut Context<Self>) {
        if self.draining.is_some() {
            self.stop_drained(self.config.daemon.drain_idle);
        }
    }
}

impl Handler<WaitNoSessions> for Supervisor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: WaitNoSessions, _: &mut Context<Self>) -> Self::Result {
        if self.sessions.is_empty() {
            return Box::pin(async {});
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.no_sessions_waiters.push(tx);
        Box::pin(async move {
            let _ = actix::clock::timeout(msg.timeout, rx).await;
        })
    }
}

impl Supervisor {
    /// Tells the drain's waiters once the last session is gone.
    pub(super) fn tell_if_no_sessions(&mut self) {
        if self.sessions.is_empty() {
            for waiter in self.no_sessions_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Whether the node is draining.
    pub(super) fn is_draining(&self) -> bool {
        self.draining.is_some()
    }

    /// Whether a live session is named `session` (in any language).
    pub(super) fn holds(&self, session: &str) -> bool {
        self.sessions.keys().any(|k| k.session == session)
    }

    /// The error a cell for a session this draining node does not hold gets.
    pub(super) fn draining_refusal(key: &SessionKey) -> CellReport {
        CellReport::error(format!(
            "this node is draining: it starts no new session (session {key}); send the request \
             to another node, or retry after `cellvisor undrain`"
        ))
    }

    /// Stops every session that can be evicted and has been idle at least `idle`.
    fn stop_drained(&mut self, idle: Duration) {
        let due: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, e)| e.evictable() && e.last_active.elapsed() >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let eviction = Eviction::Drained { key: key.clone() };
            self.close_entry(&key, Some(eviction));
        }
    }

    /// Requests waiting for room to start a session the node does not hold are refused.
    fn refuse_waiting_new_sessions(&mut self) {
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.drain(|submit| {
            if self.holds(&submit.key.session) {
                return Some(submit);
            }
            let _ = submit.job.reply.send(Self::draining_refusal(&submit.key));
            None
        });
        self.waiting = waiting;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_looks_often_enough_for_its_idle_time_but_not_too_often() {
        assert_eq!(tick_interval(Duration::ZERO), Duration::from_millis(20));
        assert_eq!(
            tick_interval(Duration::from_millis(400)),
            Duration::from_millis(100)
        );
        assert_eq!(
            tick_interval(Duration::from_secs(60)),
            Duration::from_secs(1)
        );
    }
}
