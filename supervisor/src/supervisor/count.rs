//! How many sessions are live: the registry's size, answered without asking any session or
//! sampling any process (the daemon's idle-exit check asks it every tick).

use super::Supervisor;
use actix::prelude::*;

/// Asks for the number of live sessions (those `status` would list).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct LiveSessions;

impl Handler<LiveSessions> for Supervisor {
    type Result = usize;
    fn handle(&mut self, _: LiveSessions, _: &mut Context<Self>) -> usize {
        self.sessions.len()
    }
}
