//! Strangers are cheap: a network connection that has not yet presented the token holds a
//! place of its own (`daemon.max-unauthenticated-connections`), apart from the authenticated
//! ones (`daemon.max-network-connections`), at most `daemon.max-connections-per-address` from
//! one IP address, and for at most `daemon.unauthenticated-timeout`.
//!
//! When every stranger's place is taken, a new connection takes the oldest stranger's: a
//! client with the token, which presents it at once, keeps getting in however many silent
//! connections a stranger opens, and each of those costs the daemon one buffer until it is
//! pushed out or its time is up.

use super::super::lock;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// What a new unauthenticated connection is given: plain data, so the policy has unit tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// A free place.
    Take,
    /// Every place is taken: the oldest stranger is closed and this one takes its place.
    EvictOldest,
    /// Its address holds its share already: closed at once.
    Refuse,
}

/// The admission of a connection from an address that holds `from_address` strangers, when
/// `live` strangers of at most `cap` are connected, at most `per_address` from one address.
pub(super) fn admission(
    live: usize,
    cap: usize,
    from_address: usize,
    per_address: usize,
) -> Admission {
    if from_address >= per_address {
        Admission::Refuse
    } else if live >= cap {
        Admission::EvictOldest
    } else {
        Admission::Take
    }
}

/// What one "address" is for `daemon.max-connections-per-address`: an IPv4 address (an
/// IPv4-mapped IPv6 one counts as its IPv4 address), or an IPv6 address's /64 prefix. One
/// host is commonly given a whole /64, so counting IPv6 by full address would let it open
/// the per-address share from each of 2^64 addresses.
pub(super) fn source(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from_bits(
                v6.to_bits() & !((1u128 << 64) - 1),
            )),
        },
    }
}

struct Entry {
    id: u64,
    address: IpAddr,
    close: Arc<Notify>,
}

#[derive(Default)]
struct Book {
    /// Oldest first.
    live: VecDeque<Entry>,
    per_address: HashMap<IpAddr, usize>,
    next_id: u64,
}

impl Book {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let at = self.live.iter().position(|e| e.id == id)?;
        let entry = self.live.remove(at)?;
        self.release_address(entry.address);
        Some(entry)
    }

    fn release_address(&mut self, address: IpAddr) {
        if let Some(count) = self.per_address.get_mut(&address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
    }
}

/// The strangers' places, shared by every listener.
pub(super) struct Strangers {
    book: Mutex<Book>,
    cap: usize,
    per_address: usize,
}

impl Strangers {
    pub(super) fn new(cap: usize, per_address: usize) -> Arc<Strangers> {
        Arc::new(Strangers {
            book: Mutex::new(Book::default()),
            cap: cap.max(1),
            per_address: per_address.max(1),
        })
    }

    /// A place for a new connection from `address`, or `None` (its address, by [`source`],
    /// holds its share).
    pub(super) fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Stranger> {
        let address = source(address);
        let mut book = lock(&self.book);
        let from_address = book.per_address.get(&address).copied().unwrap_or(0);
        match admission(book.live.len(), self.cap, from_address, self.per_address) {
            Admission::Refuse => return None,
            Admission::EvictOldest => {
                if let Some(oldest) = book.live.pop_front() {
                    book.release_address(oldest.address);
                    oldest.close.notify_one();
                }
            }
            Admission::Take => {}
        }
        book.next_id += 1;
        let id = book.next_id;
        let close = Arc::new(Notify::new());
        book.live.push_back(Entry {
            id,
            address,
            close: Arc::clone(&close),
        });
        *book.per_address.entry(address).or_default() += 1;
        Some(Stranger {
            id,
            close,
            strangers: Arc::clone(self),
        })
    }

    /// How many strangers are connected (for tests).
    #[cfg(test)]
    fn live(&self) -> usize {
        lock(&self.book).live.len()
    }
}

/// One unauthenticated connection's place: given up when it authenticates or ends.
pub(super) struct Stranger {
    id: u64,
    close: Arc<Notify>,
    strangers: Arc<Strangers>,
}

impl Stranger {
    /// Resolves when a newer connection took this one's place: it is to be closed.
    pub(super) fn pushed_out(&self) -> Arc<Notify> {
        Arc::clone(&self.close)
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        lock(&self.strangers.book).remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_book_pushes_out_the_oldest_and_an_address_keeps_to_its_share() {
        assert_eq!(admission(0, 2, 0, 1), Admission::Take);
        assert_eq!(admission(2, 2, 0, 1), Admission::EvictOldest);
        assert_eq!(admission(0, 2, 1, 1), Admission::Refuse);
        assert_eq!(admission(5, 2, 3, 3), Admission::Refuse);
    }

    #[test]
    fn ipv6_counts_by_its_64_prefix_and_mapped_ipv4_as_ipv4() {
        let ip = |t: &str| t.parse::<IpAddr>().expect("ip");
        assert_eq!(source(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            source(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_ne!(source(ip("2001:db8:1:3::1")), source(ip("2001:db8:1:2::1")));
        let strangers = Strangers::new(10, 2);
        let _a = strangers.admit(ip("2001:db8::1")).expect("room");
        let _b = strangers.admit(ip("2001:db8::ffff:1")).expect("room");
        assert!(
            strangers.admit(ip("2001:db8::abcd:2")).is_none(),
            "a third address of the same /64 is over the share of 2"
        );
        assert!(
            strangers.admit(ip("2001:db8:0:1::1")).is_some(),
            "another /64"
        );
    }

    #[tokio::test]
    async fn the_oldest_stranger_is_told_to_go_and_places_come_back() {
        let strangers = Strangers::new(2, 2);
        let a: IpAddr = "127.0.0.2".parse().expect("ip");
        let b: IpAddr = "127.0.0.3".parse().expect("ip");
        let first = strangers.admit(a).expect("room");
        let second = strangers.admit(a).expect("room");
        assert!(strangers.admit(a).is_none(), "a's share is 2");
        let pushed = first.pushed_out();
        let third = strangers.admit(b).expect("b takes the oldest's place");
        tokio::time::timeout(std::time::Duration::from_secs(5), pushed.notified())
            .await
            .expect("the oldest was told");
        assert_eq!(strangers.live(), 2);
        drop(first);
        assert_eq!(
            strangers.live(),
            2,
            "an evicted place is not given back twice"
        );
        drop((second, third));
        assert_eq!(strangers.live(), 0);
        assert!(strangers.admit(a).is_some(), "a's share came back");
    }
}
