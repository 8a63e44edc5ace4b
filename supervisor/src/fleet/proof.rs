//! Whether this node can still prove it holds a lease: plain data, decided from when the
//! last keep-alive that etcd acknowledged was sent, the time to live etcd granted with it, a
//! safety margin and the time now, all read from the boot clock (which keeps counting while
//! the process is stopped and while the machine is suspended, so a pause shows as elapsed
//! time, never as none).
// Plain data the `etcd` feature uses whole; a build without it uses a part.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use std::time::Duration;

/// A reading of the boot clock (`CLOCK_BOOTTIME`): time since boot, suspends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// The boot clock now; the monotonic clock where the boot clock cannot be read.
    pub fn now() -> BootInstant {
        let read = |id| {
            nix::time::clock_gettime(id)
                .ok()
                .map(|t| Duration::new(t.tv_sec().max(0) as u64, t.tv_nsec().max(0) as u32))
        };
        BootInstant(
            read(nix::time::ClockId::CLOCK_BOOTTIME)
                .or_else(|| read(nix::time::ClockId::CLOCK_MONOTONIC))
                .unwrap_or_default(),
        )
    }

    /// A reading `since_boot` after boot (for tests).
    #[cfg(test)]
    pub fn at(since_boot: Duration) -> BootInstant {
        BootInstant(since_boot)
    }

    /// How long after `earlier` this reading is (zero when it is not after).
    pub fn since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

/// What a node knows of one lease: when the request that etcd last acknowledged with a
/// live time to live was sent, and that time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acknowledged {
    /// When the request (the grant or a keep-alive) was sent: etcd extended the lease no
    /// earlier than this, so the lease lasts at least `ttl` from here.
    pub sent: BootInstant,
    /// The time to live etcd answered with.
    pub ttl: Duration,
}

/// The margin kept below a lease's time to live: a fifth of it, at least 200 ms, so clock
/// rates that differ slightly between this node and etcd's leader never let a node act on a
/// lease etcd has already let go.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 5).max(Duration::from_millis(200))
}

/// Whether the lease acknowledged by `ack` is provably still held at `now`: only while
/// `now` is before `ack.sent + ttl - margin`. A node paused past that (stopped, suspended,
/// starved) no longer knows, whatever it held before.
pub fn provably_held(ack: Acknowledged, now: BootInstant) -> bool {
    let good_for = ack.ttl.saturating_sub(margin(ack.ttl));
    now.since(ack.sent) < good_for && now >= ack.sent
}

/// What a keep-alive's answer means for the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// etcd extended it by this time to live.
    Extended(Duration),
    /// etcd answered with no time to live: the lease is gone (expired or revoked).
    Gone,
    /// No answer (an error, a closed stream, a timeout): the lease may live or not.
    NoAnswer,
}

/// The next state of a lease after a keep-alive sent at `sent` was answered `answer`:
/// `Some(ack)` while it is held (the new acknowledgement, or the old one when there was no
/// answer and the old one is still provable), `None` once it is lost.
pub fn after_keep_alive(
    last: Acknowledged,
    sent: BootInstant,
    answer: KeepAlive,
    now: BootInstant,
) -> Option<Acknowledged> {
    match answer {
        KeepAlive::Extended(ttl) if !ttl.is_zero() => Some(Acknowledged { sent, ttl }),
        KeepAlive::Extended(_) | KeepAlive::Gone => None,
        KeepAlive::NoAnswer => provably_held(last, now).then_some(last),
    }
}

/// The whole seconds etcd is asked for, for a configured time to live (etcd counts leases
/// in seconds): rounded up, at least 1.
pub fn ttl_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn at(ms: u64) -> BootInstant {
        BootInstant::at(Duration::from_millis(ms))
    }

    #[test]
    fn a_lease_is_provable_only_within_its_ttl_less_the_margin_from_the_request() {
        let ack = Acknowledged {
            sent: at(10_000),
            ttl: 5 * S,
        };
        assert_eq!(margin(5 * S), S);
        assert!(provably_held(ack, at(10_000)));
        assert!(provably_held(ack, at(13_999)));
        assert!(!provably_held(ack, at(14_000)), "the margin is kept");
        assert!(!provably_held(ack, at(60_000)), "a long pause");
        assert!(
            !provably_held(ack, at(9_000)),
            "a clock that went back proves nothing"
        );
    }

    #[test]
    fn a_short_ttl_keeps_a_margin_of_at_least_200_ms() {
        assert_eq!(
            margin(Duration::from_millis(500)),
            Duration::from_millis(200)
        );
        let ack = Acknowledged {
            sent: at(0),
            ttl: Duration::from_millis(150),
        };
        assert!(
            !provably_held(ack, at(0)),
            "a ttl below the margin proves nothing"
        );
    }

    #[test]
    fn only_an_answer_with_a_live_ttl_extends_and_no_answer_keeps_only_what_is_provable() {
        let last = Acknowledged {
            sent: at(0),
            ttl: 3 * S,
        };
        assert_eq!(
            after_keep_alive(last, at(1_000), KeepAlive::Extended(3 * S), at(1_010)),
            Some(Acknowledged {
                sent: at(1_000),
                ttl: 3 * S
            })
        );
        assert_eq!(
            after_keep_alive(last, at(1_000), KeepAlive::Gone, at(1_010)),
            None
        );
        assert_eq!(
            after_keep_alive(
                last,
                at(1_000),
                KeepAlive::Extended(Duration::ZERO),
                at(1_010)
            ),
            None
        );
        assert_eq!(
            after_keep_alive(last, at(1_000), KeepAlive::NoAnswer, at(1_010)),
            Some(last)
        );
        assert_eq!(
            after_keep_alive(last, at(2_000), KeepAlive::NoAnswer, at(2_500)),
            None,
            "past ttl - margin with no answer: lost"
        );
    }

    #[test]
    fn ttls_are_asked_in_whole_seconds_rounded_up() {
        assert_eq!(ttl_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ttl_seconds(2 * S), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(2_500)), 3);
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(BootInstant::now().since(a) >= Duration::from_millis(5));
    }
}
