//! The node as an operator's orchestrator sees it: its name, its health and readiness
//! probes, its metrics, and its drain.

use super::{Cellvisor, RequestError};
use crate::supervisor::{
    Admit, GaugesQuery, HealthCheck, HoldsSession, ReadinessCheck, RenewLeases, SetDraining,
    WaitNoSessions,
};
use cellvisor_config::Config;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the supervisor and its sessions have to answer a health check.
pub const HEALTH_BOUND: Duration = Duration::from_secs(2);

/// Whether the process and its actors answer ([`Cellvisor::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Everything answered within [`HEALTH_BOUND`].
    pub healthy: bool,
    /// What did not, when something did not.
    pub reason: Option<String>,
}

/// Whether this node takes new sessions ([`Cellvisor::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// New sessions are taken.
    pub ready: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// Where a drain stands ([`Cellvisor::drain`], [`Cellvisor::drain_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// The node is draining.
    pub draining: bool,
    /// Sessions still live.
    pub live: usize,
}

/// This node's name: `daemon.node`, else the host name, else `localhost`.
pub(super) fn node_name(config: &Config) -> String {
    config
        .daemon
        .node
        .clone()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|n| n.into_string().ok())
        })
        .unwrap_or_else(|| "localhost".into())
}

/// `future`'s output, or `None` after `bound` when the caller runs on a tokio runtime (the
/// daemon does); on another executor the supervisor's own bound on its sessions applies.
async fn bounded<F: std::future::Future>(bound: Duration, future: F) -> Option<F::Output> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::time::timeout(bound, future).await.ok(),
        Err(_) => Some(future.await),
    }
}

/// What a probe of the supervisor answered as a failure: its own reason, its having
/// stopped, or its silence past `bound`; `None` when it passed.
async fn probe_failure<F>(bound: Duration, asked: F) -> Option<String>
where
    F: std::future::Future<Output = Result<Result<(), String>, actix::MailboxError>>,
{
    match bounded(bound, asked).await {
        Some(Ok(Ok(()))) => None,
        Some(Ok(Err(reason))) => Some(reason),
        Some(Err(_)) => Some("the supervisor has stopped".into()),
        None => Some(format!(
            "the supervisor did not answer within {} ms",
            bound.as_millis()
        )),
    }
}

impl Cellvisor {
    /// This node's name, as results, `status` rows and metrics carry it.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The metrics: a daemon counts its connections here ([`crate::metrics::Metrics::connection_opened`]).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Every metric as OpenMetrics text ([`crate::metrics::CONTENT_TYPE`]), the gauges read
    /// from the registry now.
    pub async fn scrape(&self) -> Result<String, RequestError> {
        let gauges = self
            .supervisor
            .send(GaugesQuery)
            .await
            .map_err(|_| RequestError::Stopped)?;
        self.metrics.refresh(&gauges);
        self.metrics
            .encode()
            .map_err(|err| RequestError::State(format!("cannot encode the metrics: {err}")))
    }

    /// Whether the supervisor, and through it each session, answers within
    /// [`HEALTH_BOUND`].
    pub async fn health(&self) -> Health {
        let asked = self.supervisor.send(HealthCheck {
            bound: HEALTH_BOUND,
        });
        let reason = probe_failure(HEALTH_BOUND + HEALTH_BOUND / 2, asked).await;
        Health {
            healthy: reason.is_none(),
            reason,
        }
    }

    /// Whether this node takes new sessions: not while draining, nor when every enabled
    /// language is at `max-sessions` with no idle session to evict.
    pub async fn readiness(&self) -> Readiness {
        let asked = self.supervisor.send(ReadinessCheck);
        let reason = probe_failure(HEALTH_BOUND, asked).await;
        Readiness {
            ready: reason.is_none(),
            reason,
        }
    }

    /// Starts draining: new sessions are refused ([`RequestError::Draining`]), live ones are
    /// served; idle ones stop now, busy ones once idle for `daemon.drain-idle`.
    pub async fn drain(&self) -> Result<DrainState, RequestError> {
        self.set_draining(true).await
    }

    /// Ends a drain: new sessions are taken again.
    pub async fn undrain(&self) -> Result<DrainState, RequestError> {
        self.set_draining(false).await
    }

    /// Whether the node is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Waits until no session is live or `timeout` has passed; answers where the drain
    /// stands then.
    pub async fn drain_wait(&self, timeout: Duration) -> Result<DrainState, RequestError> {
        self.supervisor
            .send(WaitNoSessions { timeout })
            .await
            .map_err(|_| RequestError::Stopped)?;
        Ok(DrainState {
            draining: self.is_draining(),
            live: self.live_sessions().await?,
        })
    }

    async fn set_draining(&self, on: bool) -> Result<DrainState, RequestError> {
        self.draining.store(on, Ordering::Relaxed);
        self.supervisor
            .send(SetDraining(on))
            .await
            .map_err(|_| RequestError::Stopped)?;
        Ok(DrainState {
            draining: on,
            live: self.live_sessions().await?,
        })
    }

    /// Whether a request for `session` would be taken here, without taking anything: not
    /// while draining unless the session is live here, nor while another node holds its
    /// lease. A router's connection for one session (a WebSocket upgrade naming it) is
    /// answered by this before it is accepted, so the router can send it elsewhere.
    pub async fn admission(&self, session: &str) -> Result<(), RequestError> {
        self.refuse_if_draining(session).await?;
        let Some(leases) = &self.leases else {
            return Ok(());
        };
        if leases.holds(session) {
            return Ok(());
        }
        let (book, name) = (leases.clone(), session.to_string());
        let holder = tokio::task::spawn_blocking(move || book.holder(&name))
            .await
            .ok()
            .flatten();
        match holder {
            Some((node, retry_after)) if node != self.node => Err(RequestError::LeasedElsewhere {
                session: session.to_string(),
                node,
                retry_after,
            }),
            _ => Ok(()),
        }
    }

    /// Takes what a request for `session` needs to run here: the session's lease, when this
    /// node is a fleet's (unless it holds it already), and with `resume` the proof that the
    /// session exists (live here, or saved).
    pub(super) async fn admit(
        &self,
        session: &crate::names::SessionName,
        resume: bool,
    ) -> Result<(), RequestError> {
        let leased = self
            .leases
            .as_ref()
            .is_none_or(|book| session.is_throwaway() || book.holds(session));
        if leased && !resume {
            return Ok(());
        }
        if let (false, Some(book)) = (leased, &self.leases) {
            // Off the event loop: an etcd lease is a round trip or two.
            let (book, name) = (book.clone(), session.to_string());
            tokio::task::spawn_blocking(move || book.acquire(&name))
                .await
                .map_err(|_| RequestError::Stopped)?
                .map_err(super::lease_refusal)?;
        }
        self.supervisor
            .send(Admit {
                session: session.clone(),
                resume,
            })
            .await
            .map_err(|_| RequestError::Stopped)?
    }

    /// Before a request's cells run (its turn on the session come): this node must still be
    /// able to prove it holds the session's lease. One that cannot (a keep-alive older than
    /// the lease's time to live, after a pause) stops the session here without saving, lets
    /// the lease go and answers `LEASED_ELSEWHERE`, so the router retries, and the session
    /// is served from its committed state. A lease lost while the request waited is taken
    /// again (or its holder named).
    pub(super) async fn prove_lease(
        &self,
        session: &crate::names::SessionName,
    ) -> Result<(), RequestError> {
        let Some(book) = &self.leases else {
            return Ok(());
        };
        if session.is_throwaway() || book.provable(session) {
            return Ok(());
        }
        if !book.holds(session) {
            return self.admit(session, false).await;
        }
        tracing::warn!(%session, "cannot prove the lease: the session stops here");
        let _ = self.supervisor.send(RenewLeases).await;
        let (book, name) = (book.clone(), session.to_string());
        let holder = tokio::task::spawn_blocking(move || book.holder(&name))
            .await
            .ok()
            .flatten();
        Err(match holder {
            Some((node, retry_after)) => RequestError::LeasedElsewhere {
                session: session.to_string(),
                node,
                retry_after,
            },
            None => RequestError::lease_let_go(session.to_string()),
        })
    }

    /// Whether a later cell of a request may still run: its node must still prove the lease.
    pub(super) fn lease_still_provable(&self, session: &crate::names::SessionName) -> bool {
        self.leases
            .as_ref()
            .is_none_or(|book| session.is_throwaway() || book.provable(session))
    }

    /// While draining, refuses a request for a session this node does not hold in any
    /// language (the supervisor refuses one that slips past, too).
    pub(super) async fn refuse_if_draining(&self, session: &str) -> Result<(), RequestError> {
        if !self.is_draining() {
            return Ok(());
        }
        let held = self
            .supervisor
            .send(HoldsSession(session.to_string()))
            .await
            .map_err(|_| RequestError::Stopped)?;
        if held {
            Ok(())
        } else {
            Err(RequestError::Draining(self.node.clone()))
        }
    }
}
