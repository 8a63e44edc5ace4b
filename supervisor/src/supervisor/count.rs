//! How many sessions are live, and their names: the registry's, answered without asking any
//! session or sampling any process (the daemon's idle-exit check asks it every tick; the host
//! asks for the names to tell which pairs of a `session+cwd` name are live).

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

/// Asks for the names of the live sessions (each once, whatever its languages), sorted.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct LiveSessionNames;

impl Handler<LiveSessionNames> for Supervisor {
    type Result = Vec<String>;
    fn handle(&mut self, _: LiveSessionNames, _: &mut Context<Self>) -> Vec<String> {
        let mut names: Vec<String> = self
            .sessions
            .keys()
            .map(|k| k.session.to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}
