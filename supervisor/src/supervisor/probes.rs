//! What probes and scrapes ask of the registry: `HealthCheck` (the supervisor and each
//! session answer within a bound), `ReadinessCheck` (decided by [`capacity::readiness`]),
//! `HoldsSession` (the drain's check of a request) and `GaugesQuery` (the metrics' gauges).

use super::capacity::{self, Room};
use super::messages::{GaugesQuery, HealthCheck, HoldsSession, ReadinessCheck};
use super::Supervisor;
use crate::metrics::RegistryGauges;
use crate::session::{QueryStatus, Session, SessionKey};
use actix::prelude::*;
use cellvisor_ipc::Language;

impl Handler<HealthCheck> for Supervisor {
    type Result = ResponseFuture<Result<(), String>>;
    fn handle(&mut self, msg: HealthCheck, _: &mut Context<Self>) -> Self::Result {
        let sessions: Vec<(SessionKey, Addr<Session>)> = self
            .sessions
            .iter()
            .map(|(k, e)| (k.clone(), e.addr.clone()))
            .collect();
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + msg.bound;
            for (key, addr) in sessions {
                match tokio::time::timeout_at(deadline, addr.send(QueryStatus)).await {
                    Ok(Ok(_)) => {}
                    // A session that stopped meanwhile is not a fault.
                    Ok(Err(_)) => {}
                    Err(_) => {
                        return Err(format!(
                            "session {key} did not answer within {} ms",
                            msg.bound.as_millis()
                        ))
                    }
                }
            }
            Ok(())
        })
    }
}

impl Handler<ReadinessCheck> for Supervisor {
    type Result = Result<(), String>;
    fn handle(&mut self, _: ReadinessCheck, _: &mut Context<Self>) -> Self::Result {
        if self.stopping {
            return Err("the supervisor is shutting down".into());
        }
        let rooms: Vec<(Language, Room)> = self
            .enabled_languages()
            .into_iter()
            .map(|language| (language, self.room(language)))
            .collect();
        capacity::readiness(self.is_draining(), &rooms)
    }
}

impl Handler<HoldsSession> for Supervisor {
    type Result = bool;
    fn handle(&mut self, msg: HoldsSession, _: &mut Context<Self>) -> bool {
        self.holds(&msg.0)
    }
}

impl Handler<GaugesQuery> for Supervisor {
    type Result = MessageResult<GaugesQuery>;
    fn handle(&mut self, _: GaugesQuery, _: &mut Context<Self>) -> Self::Result {
        let mut sessions = Vec::new();
        for entry in self.sessions.iter() {
            let (key, entry) = entry;
            match sessions
                .iter_mut()
                .find(|(l, s, _)| *l == key.language && *s == entry.state)
            {
                Some((_, _, count)) => *count += 1,
                None => sessions.push((key.language, entry.state, 1)),
            }
        }
        let cap = self.config.sessions.max_sessions;
        MessageResult(RegistryGauges {
            sessions,
            capacity: self
                .enabled_languages()
                .into_iter()
                .map(|language| (language, cap))
                .collect(),
            draining: self.is_draining(),
        })
    }
}

impl Supervisor {
    /// The languages `python.enabled`, `js.enabled` and `lua.enabled` leave on.
    fn enabled_languages(&self) -> Vec<Language> {
        Language::ALL
            .into_iter()
            .filter(|language| match language {
                Language::Python => self.config.python.enabled,
                Language::JavaScript => self.config.js.enabled,
                Language::Lua => self.config.lua.enabled,
            })
            .collect()
    }

    /// How full `language` is.
    fn room(&self, language: Language) -> Room {
        let of_language = self.sessions.iter().filter(|(k, _)| k.language == language);
        Room {
            live: of_language.clone().count(),
            evictable: of_language.filter(|(_, e)| e.evictable()).count(),
            cap: self.config.sessions.max_sessions,
        }
    }
}
