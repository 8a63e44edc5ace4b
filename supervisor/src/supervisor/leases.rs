//! A fleet's node runs a session only under its lease: `Admit` takes it for a request
//! (with `resume`, only for a session that exists), `RenewLeases` keeps the leases of the
//! sessions live here, gives up the others, and stops the sessions whose leases were lost.

use super::messages::{Admit, RenewLeases};
use super::Supervisor;
use crate::names::SessionName;
use crate::request_error::RequestError;
use crate::session::CloseSession;
use actix::prelude::*;

impl Handler<Admit> for Supervisor {
    type Result = Result<(), RequestError>;
    fn handle(&mut self, msg: Admit, _: &mut Context<Self>) -> Self::Result {
        if self.holds(&msg.session) {
            return Ok(());
        }
        self.take_lease(&msg.session)?;
        if msg.resume && !self.has_saved_state(&msg.session) {
            self.release_lease_if_unused(&msg.session);
            return Err(RequestError::SessionUnknown(msg.session.to_string()));
        }
        Ok(())
    }
}

impl Handler<RenewLeases> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: RenewLeases, _: &mut Context<Self>) {
        let Some(leases) = self.base.leases.clone() else {
            return;
        };
        let renewal = leases.renew(|session| self.in_use(session));
        for (session, why) in renewal.lost {
            // Another node may run it now: stop it here without saving over what that node
            // restored, and let its next request be routed again.
            tracing::warn!(%session, "stopping the session here: {why}");
            self.stop_unleased(&session);
        }
    }
}

impl Supervisor {
    /// Renews the leases every third of their time to live, when this node has any.
    pub(super) fn arm_lease_renewal(&mut self, ctx: &mut Context<Self>) {
        if let Some(leases) = &self.base.leases {
            ctx.run_interval(leases.renew_interval(), |_, ctx| ctx.notify(RenewLeases));
        }
    }

    /// Takes `session`'s lease, unless this node is no fleet's or the session is a
    /// throw-away one (a per-call request's, never saved, never moved).
    pub(super) fn take_lease(&self, session: &SessionName) -> Result<(), RequestError> {
        let Some(leases) = &self.base.leases else {
            return Ok(());
        };
        if session.is_throwaway() {
            return Ok(());
        }
        leases
            .acquire(session)
            .map_err(crate::request_error::lease_refusal)
    }

    /// Gives `session`'s lease up once nothing here uses it (its last worker stopped and
    /// saved, and no cell of it waits).
    pub(super) fn release_lease_if_unused(&self, session: &str) {
        if let Some(leases) = &self.base.leases {
            if !self.in_use(session) {
                leases.release(session);
            }
        }
    }

    /// Whether a worker of `session` is live here or a cell of it waits for room.
    fn in_use(&self, session: &str) -> bool {
        self.holds(session) || self.waiting.any(|submit| submit.key.session == session)
    }

    /// Whether `session` has a snapshot in any language (what `resume` may start from).
    fn has_saved_state(&self, session: &SessionName) -> bool {
        self.base
            .snapshots
            .as_ref()
            .is_some_and(|store| !store.languages_with_latest(session).is_empty())
    }

    /// Stops `session`'s workers here without saving: its lease is another node's now.
    fn stop_unleased(&mut self, session: &str) {
        for (key, addr) in self.matching(session, None) {
            if let Some(entry) = self.sessions.get_mut(&key) {
                entry.closing = true;
            }
            addr.do_send(CloseSession {
                eviction: None,
                save: None,
                reply: None,
            });
        }
    }
}
