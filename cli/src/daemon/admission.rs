//! A tenant's quotas checked and taken in one step: each request that may start a session
//! (or an MCP session) takes its turn for its tenant, reads what is live, decides
//! ([`decide`], plain data), and holds a reservation until it is answered, so requests
//! arriving together are counted with each other and cannot all pass a check made before
//! any of them started.

use super::net::{Quotas, Tenant};
use cellvisor::daemon::protocol::RpcError;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What a request asks a tenant's quotas for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A session of cells by its internal name (live already, or to be started).
    Session(String),
    /// A new MCP session over HTTP (a new session of cells too).
    McpSession,
}

/// What the tenant holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Its live sessions' internal names.
    pub(crate) live: HashSet<String>,
    /// The resident memory of their workers, in bytes.
    pub(crate) memory: u64,
    /// Its open MCP sessions.
    pub(crate) mcp_open: usize,
}

/// What the tenant's requests in flight reserved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Sessions being started or used, by internal name, with how many requests hold each.
    sessions: HashMap<String, usize>,
    /// MCP sessions being opened.
    mcp: usize,
}

impl Pending {
    fn take(&mut self, ask: &Ask) {
        match ask {
            Ask::Session(name) => *self.sessions.entry(name.clone()).or_default() += 1,
            Ask::McpSession => self.mcp += 1,
        }
    }

    fn give_back(&mut self, ask: &Ask) {
        match ask {
            Ask::Session(name) => {
                if let Some(count) = self.sessions.get_mut(name) {
                    *count -= 1;
                    if *count == 0 {
                        self.sessions.remove(name);
                    }
                }
            }
            Ask::McpSession => self.mcp = self.mcp.saturating_sub(1),
        }
    }
}

/// A quota a request would exceed: its key, its limit and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exceeded {
    pub(crate) quota: &'static str,
    pub(crate) limit: u64,
    pub(crate) why: String,
}

/// Whether `ask` fits `quotas` with what the tenant holds (`usage`) and what its requests in
/// flight reserved (`pending`). A session not live nor reserved counts as one more; each new
/// session reserved counts `max-session-memory` against `max-memory` until it is live (its
/// real memory is unknown before its worker starts).
pub(crate) fn decide(
    quotas: &Quotas,
    usage: &Usage,
    pending: &Pending,
    ask: &Ask,
) -> Result<(), Exceeded> {
    let reserved_new: Vec<&String> = (pending.sessions.keys())
        .filter(|name| !usage.live.contains(*name))
        .collect();
    let held = usage.live.len() + reserved_new.len() + pending.mcp;
    let adds_one = match ask {
        Ask::Session(name) => !usage.live.contains(name) && !pending.sessions.contains_key(name),
        Ask::McpSession => true,
    };
    if let Some(max) = quotas.max_sessions {
        if adds_one && held >= max {
            return Err(Exceeded {
                quota: "max-sessions",
                limit: max as u64,
                why: format!(
                    "it has {} live sessions and {} being started; close one (`close`) first",
                    usage.live.len(),
                    held - usage.live.len()
                ),
            });
        }
    }
    if let Some(max) = quotas.max_memory {
        let per_new = quotas.max_session_memory.unwrap_or(0);
        let starting = (reserved_new.len() + pending.mcp) as u64;
        let counted = usage
            .memory
            .saturating_add(starting.saturating_mul(per_new));
        if counted >= max {
            return Err(Exceeded {
                quota: "max-memory",
                limit: max,
                why: format!(
                    "its sessions' workers hold {} bytes ({starting} being started, counted at \
                     max-session-memory each); close or reset one first",
                    counted
                ),
            });
        }
    }
    if let (Ask::McpSession, Some(max)) = (ask, quotas.max_mcp_sessions) {
        let open = usage.mcp_open + pending.mcp;
        if open >= max {
            return Err(Exceeded {
                quota: "max-mcp-sessions",
                limit: max as u64,
                why: format!(
                    "it has {open} MCP sessions open or being opened; end one (DELETE /mcp) first"
                ),
            });
        }
    }
    Ok(())
}

/// One tenant's admissions: a turn (one decision at a time) and its reservations.
#[derive(Default)]
struct Slot {
    turn: tokio::sync::Mutex<()>,
    pending: Mutex<Pending>,
}

/// Every tenant's admissions.
#[derive(Default)]
pub(crate) struct Admissions {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// A request's hold on its tenant's quota, given back when it is dropped (the request
/// answered: its session is live by then, and counted as such).
pub(crate) struct Reservation {
    held: Option<(Arc<Slot>, Ask)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((slot, ask)) = self.held.take() {
            super::lock(&slot.pending).give_back(&ask);
        }
    }
}

impl Admissions {
    /// Decides `ask` for `tenant` and reserves it: one decision per tenant at a time, with
    /// `usage` (what the tenant holds, read within its turn) and its reservations. A tenant
    /// without quotas is admitted at once.
    pub(crate) async fn admit<F, Fut>(
        &self,
        tenant: &Tenant,
        ask: Ask,
        usage: F,
    ) -> Result<Reservation, RpcError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Usage, RpcError>>,
    {
        let quotas = &tenant.quotas;
        let mcp_bounded = ask == Ask::McpSession && quotas.max_mcp_sessions.is_some();
        if quotas.max_sessions.is_none() && quotas.max_memory.is_none() && !mcp_bounded {
            return Ok(Reservation { held: None });
        }
        let slot = {
            let mut slots = super::lock(&self.slots);
            Arc::clone(slots.entry(tenant.name.clone()).or_default())
        };
        let _turn = slot.turn.lock().await;
        let usage = usage().await?;
        // Counts a panicking holder left are still counts: taken as they are, never a
        // reason to refuse the tenant for the daemon's life.
        let mut pending = super::lock(&slot.pending);
        decide(quotas, &usage, &pending, &ask).map_err(|exceeded| {
            super::tenancy::exceeded(tenant, exceeded.quota, exceeded.limit, exceeded.why)
        })?;
        pending.take(&ask);
        drop(pending);
        Ok(Reservation {
            held: Some((Arc::clone(&slot), ask)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(sessions: Option<usize>, memory: Option<u64>, mcp: Option<usize>) -> Quotas {
        Quotas {
            max_sessions: sessions,
            max_session_memory: Some(100),
            max_memory: memory,
            max_mcp_sessions: mcp,
            workspace_bytes: None,
            workspace_files: None,
        }
    }

    fn live(names: &[&str]) -> Usage {
        Usage {
            live: names.iter().map(|n| n.to_string()).collect(),
            ..Usage::default()
        }
    }

    fn session(name: &str) -> Ask {
        Ask::Session(name.into())
    }

    #[test]
    fn requests_in_flight_count_against_the_session_cap_and_a_named_one_only_once() {
        let q = quotas(Some(2), None, None);
        let mut pending = Pending::default();
        // Two concurrent opens of new sessions fill the cap before either is live.
        assert_eq!(decide(&q, &live(&[]), &pending, &session("a")), Ok(()));
        pending.take(&session("a"));
        assert_eq!(decide(&q, &live(&[]), &pending, &session("b")), Ok(()));
        pending.take(&session("b"));
        let third = decide(&q, &live(&[]), &pending, &session("c")).unwrap_err();
        assert_eq!((third.quota, third.limit), ("max-sessions", 2));
        assert!(third.why.contains("2 being started"), "{}", third.why);
        // A session reserved or live is no new one.
        assert_eq!(decide(&q, &live(&[]), &pending, &session("a")), Ok(()));
        assert_eq!(decide(&q, &live(&["a"]), &pending, &session("a")), Ok(()));
        // Live and reserved at once counts once: `a` is live, `b` reserved, so 2 held.
        assert!(decide(&q, &live(&["a"]), &pending, &session("c")).is_err());
        // Given back, the place is free again.
        pending.give_back(&session("b"));
        assert_eq!(decide(&q, &live(&["a"]), &pending, &session("c")), Ok(()));
        pending.give_back(&session("a"));
        assert_eq!(pending, Pending::default());
    }

    #[test]
    fn sessions_being_started_count_at_their_memory_cap_against_the_total() {
        let q = quotas(None, Some(250), None);
        let mut pending = Pending::default();
        let usage = Usage {
            memory: 40,
            ..live(&["a"])
        };
        assert_eq!(decide(&q, &usage, &pending, &session("b")), Ok(()));
        pending.take(&session("b"));
        // 40 + 100 (b, starting) < 250: one more starts; 40 + 200 < 250 still.
        assert_eq!(decide(&q, &usage, &pending, &session("c")), Ok(()));
        pending.take(&session("c"));
        let fits = decide(&q, &usage, &pending, &session("d"));
        assert_eq!(fits, Ok(()), "40 + 200 < 250");
        pending.take(&session("d"));
        let over = decide(&q, &usage, &pending, &session("e")).unwrap_err();
        assert_eq!(over.quota, "max-memory");
        assert!(over.why.contains("3 being started"), "{}", over.why);
    }

    #[test]
    fn mcp_sessions_being_opened_count_against_both_their_cap_and_the_sessions() {
        let q = quotas(Some(3), None, Some(2));
        let mut pending = Pending::default();
        let usage = Usage {
            mcp_open: 1,
            ..live(&["s"])
        };
        assert_eq!(decide(&q, &usage, &pending, &Ask::McpSession), Ok(()));
        pending.take(&Ask::McpSession);
        let refused = decide(&q, &usage, &pending, &Ask::McpSession).unwrap_err();
        assert_eq!((refused.quota, refused.limit), ("max-mcp-sessions", 2));
        // The MCP session being opened holds a place among the sessions too.
        pending.take(&session("t"));
        let full = decide(&q, &usage, &pending, &session("u")).unwrap_err();
        assert_eq!(full.quota, "max-sessions");
    }
}
