//! The daemon's life once it listens: the signals it obeys, its exit when idle, and the
//! reload of its configuration.

use super::{lock, ConnectionLimits, Daemon};
use cellvisor::daemon::protocol::{code, RpcError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration; SIGUSR1 drains it
/// and SIGUSR2 undrains it (what `cellvisor drain` and `undrain` ask).
pub(super) fn spawn_signal_handlers(daemon: &Arc<Daemon>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let daemon = Arc::clone(daemon);
        if let Ok(mut stream) = signal(kind) {
            tokio::spawn(async move {
                if stream.recv().await.is_some() {
                    tracing::info!("signal received");
                    let _ = daemon.shutdown.send(true);
                }
            });
        }
    }
    for (kind, drain) in [
        (SignalKind::user_defined1(), true),
        (SignalKind::user_defined2(), false),
    ] {
        let daemon = Arc::clone(daemon);
        if let Ok(mut stream) = signal(kind) {
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    let done = match drain {
                        true => daemon.cv.drain().await,
                        false => daemon.cv.undrain().await,
                    };
                    match done {
                        Ok(state) => tracing::info!(
                            draining = state.draining,
                            live = state.live,
                            "drain set by signal"
                        ),
                        Err(err) => tracing::error!("drain not changed: {err}"),
                    }
                }
            });
        }
    }
    let daemon = Arc::clone(daemon);
    if let Ok(mut hangups) = signal(SignalKind::hangup()) {
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match reload(&daemon).await {
                    Ok(changes) => {
                        tracing::info!(changed = changes.len(), "configuration reloaded (SIGHUP)")
                    }
                    Err(err) => tracing::error!("configuration not reloaded: {}", err.message),
                }
            }
        });
    }
}

/// What one look at an idle daemon decides.
#[derive(Debug, PartialEq, Eq)]
enum IdleVerdict {
    /// A client or a session is there: the idle time starts again.
    Busy,
    /// Idle, but not yet for `daemon.idle-exit`.
    Wait,
    /// Idle for `daemon.idle-exit`: the daemon exits.
    Exit,
}

/// The verdict for a daemon that has `busy` clients or sessions, idle for `idle_for` under
/// an `idle_exit` of more than zero.
fn idle_verdict(busy: bool, idle_for: Duration, idle_exit: Duration) -> IdleVerdict {
    if busy {
        IdleVerdict::Busy
    } else if idle_for >= idle_exit {
        IdleVerdict::Exit
    } else {
        IdleVerdict::Wait
    }
}

/// How often an idle daemon looks again: four times per `idle_exit`, within 100 ms to 30 s.
fn idle_tick(idle_exit: Duration) -> Duration {
    (idle_exit / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

/// Exits once there have been no sessions and no clients for `daemon.idle-exit`, the value
/// in force at each look: a reload that changes it applies at once (zero turns it off).
/// Each look counts connections and live sessions; it samples no worker.
pub(super) fn spawn_idle_exit(daemon: &Arc<Daemon>) {
    let daemon = Arc::clone(daemon);
    let mut setting = daemon.idle_exit.subscribe();
    tokio::spawn(async move {
        let mut last_activity = Instant::now();
        loop {
            let idle_exit = *setting.borrow_and_update();
            if idle_exit.is_zero() {
                // Off until a reload turns it on; the idle time counts from then.
                if setting.changed().await.is_err() {
                    return;
                }
                last_activity = Instant::now();
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(idle_tick(idle_exit)) => {}
                changed = setting.changed() => match changed {
                    // Look again under the new value.
                    Ok(()) => continue,
                    Err(_) => return,
                },
            }
            let busy = daemon.connections.load(Ordering::SeqCst) > 0
                || daemon.cv.live_sessions().await.unwrap_or(0) > 0;
            match idle_verdict(busy, last_activity.elapsed(), idle_exit) {
                IdleVerdict::Busy => last_activity = Instant::now(),
                IdleVerdict::Wait => {}
                IdleVerdict::Exit => {
                    tracing::info!(
                        "no sessions for {}: exiting",
                        humantime::format_duration(idle_exit)
                    );
                    let _ = daemon.shutdown.send(true);
                    return;
                }
            }
        }
    });
}

/// Re-reads the config file; a bad file is refused and the configuration in force is kept.
pub(super) async fn reload(daemon: &Daemon) -> Result<Vec<String>, RpcError> {
    let config = cellvisor_config::load(daemon.config_path.as_deref()).map_err(|e| {
        RpcError::new(
            code::REQUEST_REFUSED,
            format!("{e}\nthe configuration in force is unchanged"),
        )
    })?;
    reload_token(daemon, &config)?;
    apply_memory_caps(daemon).await;
    *lock(&daemon.limits) = ConnectionLimits::from_config(&config);
    daemon.idle_exit.send_replace(config.daemon.idle_exit);
    daemon
        .cv
        .reload(config)
        .await
        .map_err(|e| RpcError::new(code::SHUTTING_DOWN, e.to_string()))
}

/// With network listeners, re-reads `daemon.tenants-file` or `daemon.token-file`; one that
/// cannot be read refuses the whole reload, so the listeners are never left without
/// credentials. Connections whose credential no longer names their tenant then close.
fn reload_token(daemon: &Daemon, config: &cellvisor_config::Config) -> Result<(), RpcError> {
    let mut tenants = lock(&daemon.tenants);
    if tenants.is_none() {
        return Ok(());
    }
    let loaded = super::net::credentials(&config.daemon).map_err(|e| {
        RpcError::new(
            code::REQUEST_REFUSED,
            format!("{e}\nthe configuration in force is unchanged"),
        )
    })?;
    *tenants = Some(loaded);
    drop(tenants);
    *lock(&daemon.credential_keys) = config.daemon.clone();
    daemon.hide_secrets();
    daemon
        .credentials
        .send_modify(|generation| *generation += 1);
    Ok(())
}

/// Puts `loaded` in force if it differs from the credentials in force (and tells the
/// connections to look at theirs); answers whether it did.
fn replace_credentials(daemon: &Daemon, loaded: super::net::Tenants) -> bool {
    let mut tenants = lock(&daemon.tenants);
    if tenants.as_ref() == Some(&loaded) {
        return false;
    }
    tracing::info!("the network credentials changed on disk: replaced");
    *tenants = Some(loaded);
    drop(tenants);
    daemon.hide_secrets();
    daemon
        .credentials
        .send_modify(|generation| *generation += 1);
    true
}

/// Gives the supervisor the tenants' `max-session-memory` caps.
pub(super) async fn apply_memory_caps(daemon: &Daemon) {
    let caps = lock(&daemon.tenants)
        .as_ref()
        .map(super::net::Tenants::memory_caps)
        .unwrap_or_default();
    if let Err(err) = daemon.cv.set_memory_caps(caps).await {
        tracing::warn!("cannot apply the tenants' memory caps: {err}");
    }
}

/// How often the token and tenants files are looked at for a change.
const CREDENTIALS_POLL: Duration = Duration::from_secs(2);

/// With network listeners, re-reads the token (or tenants) files every
/// [`CREDENTIALS_POLL`]: a token changed on disk replaces the one in force without a reload,
/// and the connections of a token that is gone close. Files that cannot be read keep the
/// credentials in force (and say so once).
pub(super) fn spawn_credentials_watch(daemon: &Arc<Daemon>) {
    if lock(&daemon.tenants).is_none() {
        return;
    }
    let daemon = Arc::clone(daemon);
    tokio::spawn(async move {
        let mut shutdown = daemon.shutdown.subscribe();
        let mut warned = false;
        loop {
            tokio::select! {
                () = tokio::time::sleep(CREDENTIALS_POLL) => {}
                _ = shutdown.changed() => return,
            }
            let keys = lock(&daemon.credential_keys).clone();
            let loaded = tokio::task::spawn_blocking(move || super::net::credentials(&keys)).await;
            match loaded {
                Ok(Ok(loaded)) => {
                    warned = false;
                    if replace_credentials(&daemon, loaded) {
                        apply_memory_caps(&daemon).await;
                    }
                }
                Ok(Err(err)) if !warned => {
                    warned = true;
                    tracing::warn!("{err}; the credentials in force are kept");
                }
                _ => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_daemon_exits_only_after_idle_exit_without_clients_or_sessions() {
        let minute = Duration::from_secs(60);
        assert_eq!(idle_verdict(true, 2 * minute, minute), IdleVerdict::Busy);
        assert_eq!(idle_verdict(false, minute / 2, minute), IdleVerdict::Wait);
        assert_eq!(idle_verdict(false, minute, minute), IdleVerdict::Exit);
        assert_eq!(idle_verdict(false, 2 * minute, minute), IdleVerdict::Exit);
    }

    #[test]
    fn an_idle_daemon_looks_four_times_per_idle_exit_within_bounds() {
        assert_eq!(idle_tick(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(
            idle_tick(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        assert_eq!(
            idle_tick(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
    }
}
