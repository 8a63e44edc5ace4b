//! Watching a session: every request's cells and their events as they happen, for an
//! observer that joins a session another host drives (the Jupyter gateway's iopub, where a
//! person watches an agent's cells). One broadcast per watched session name; a request on a
//! session nobody watches costs one map lookup, and its events go straight to its host.

use super::{lock, Cellvisor};
use crate::cell::{CellEvent, CellResult, CellSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Events a watcher may fall behind by before it misses some (it is then told how many).
const WATCH_BACKLOG: usize = 1024;

/// One thing that happened in a watched session.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The request it belongs to (unique in this supervisor).
    pub request: u64,
    /// The tag its host gave the request ([`Cellvisor::eval_tagged`]; 0 for the others), so a
    /// watcher can tell its own requests from everyone else's.
    pub origin: u64,
    /// What happened.
    pub what: WatchEvent,
}

/// What a watcher sees of a request.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// The request began: its cells, in order (`CellStarted`'s `index` is a place in them).
    Began {
        /// The cells as sent.
        cells: Vec<CellSpec>,
    },
    /// An event of one of its cells, as its host receives it.
    Event(CellEvent),
    /// The request ended with these results.
    Ended {
        /// Every cell's result.
        cells: Vec<CellResult>,
    },
}

/// The broadcasts of the watched sessions, by session name.
#[derive(Default)]
pub(super) struct Watchers(Mutex<HashMap<String, broadcast::Sender<Arc<Watched>>>>);

impl Watchers {
    fn sender(&self, session: &str) -> Option<broadcast::Sender<Arc<Watched>>> {
        let watchers = lock(&self.0);
        let sender = watchers.get(session)?;
        (sender.receiver_count() > 0).then(|| sender.clone())
    }

    /// The events channel a request's cells report to: a tee through the session's
    /// broadcast while someone watches it, else the host's own channel untouched.
    pub(super) fn tap(
        &self,
        session: &str,
        request: u64,
        origin: u64,
        cells: &[CellSpec],
        events: Option<mpsc::Sender<CellEvent>>,
    ) -> (Option<mpsc::Sender<CellEvent>>, Option<Tap>) {
        let Some(broadcast) = self.sender(session) else {
            return (events, None);
        };
        let publish = move |what: WatchEvent| {
            let _ = broadcast.send(Arc::new(Watched {
                request,
                origin,
                what,
            }));
        };
        publish(WatchEvent::Began {
            cells: cells.to_vec(),
        });
        let (tee, mut from_cells) = mpsc::channel::<CellEvent>(64);
        let (ended, mut ended_rx) = oneshot::channel::<Ended>();
        tokio::spawn(async move {
            let mut running = true;
            loop {
                tokio::select! {
                    biased;
                    event = from_cells.recv() => {
                        let Some(event) = event else {
                            // Every sender is gone: the request ended (or was dropped).
                            if running {
                                // No results when the request was dropped (its host left).
                                let (cells, flushed) = match (&mut ended_rx).await {
                                    Ok((cells, flushed)) => (cells, Some(flushed)),
                                    Err(_) => (Vec::new(), None),
                                };
                                publish(WatchEvent::Ended { cells });
                                flushed.map(|f| f.send(()));
                            }
                            break;
                        };
                        if running {
                            publish(WatchEvent::Event(event.clone()));
                        }
                        if let Some(host) = &events {
                            let _ = host.send(event).await;
                        }
                    }
                    results = &mut ended_rx, if running => {
                        // What the cells sent before the request ended goes first.
                        while let Ok(event) = from_cells.try_recv() {
                            publish(WatchEvent::Event(event.clone()));
                            if let Some(host) = &events {
                                let _ = host.send(event).await;
                            }
                        }
                        let (cells, flushed) = match results {
                            Ok((cells, flushed)) => (cells, Some(flushed)),
                            Err(_) => (Vec::new(), None),
                        };
                        publish(WatchEvent::Ended { cells });
                        // The host has every event before its request's answer.
                        flushed.map(|f| f.send(()));
                        running = false;
                    }
                }
            }
        });
        (Some(tee), Some(Tap { ended }))
    }
}

/// A request's results, and the signal that every event before them reached its host.
type Ended = (Vec<CellResult>, oneshot::Sender<()>);

/// A watched request's end, told to its watchers once every event before it went out.
pub(super) struct Tap {
    ended: oneshot::Sender<Ended>,
}

impl Tap {
    /// Tells the watchers the request ended; returns once its host has every event of it.
    pub(super) async fn ended(self, cells: &[CellResult]) {
        let (flushed, done) = oneshot::channel();
        if self.ended.send((cells.to_vec(), flushed)).is_ok() {
            let _ = done.await;
        }
    }
}

impl Cellvisor {
    /// Every session that ends from now on (closed, evicted, stopped): its name and the
    /// language whose worker went, as it goes. A follower that falls behind by more than
    /// 256 ends is told it lagged (and should look at what is live).
    pub fn follow_ends(&self) -> broadcast::Receiver<crate::supervisor::ends::SessionEnded> {
        self.ends.follow()
    }

    /// Every request's cells and events on `session` (its name as requests send it, every
    /// cwd of it), from now until the receiver is dropped. A watcher that falls behind by
    /// more than a thousand events misses the oldest and is told so by the receiver.
    pub fn watch(&self, session: &str) -> broadcast::Receiver<Arc<Watched>> {
        let mut watchers = lock(&self.watchers.0);
        watchers.retain(|_, sender| sender.receiver_count() > 0);
        watchers
            .entry(session.to_string())
            .or_insert_with(|| broadcast::channel(WATCH_BACKLOG).0)
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellReport;
    use cellvisor_ipc::Language;

    fn output(text: &str) -> CellEvent {
        CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: text.into(),
        }
    }

    #[tokio::test]
    async fn an_unwatched_session_keeps_the_hosts_channel_and_a_watched_one_sees_it_all_in_order() {
        let watchers = Watchers::default();
        let cells = vec![CellSpec::new(Language::Python, "print(1)")];
        let (host, mut host_rx) = mpsc::channel(8);
        let (events, tap) = watchers.tap("s", 1, 0, &cells, Some(host.clone()));
        assert!(tap.is_none(), "nobody watches: no tee");
        assert!(events.is_some_and(|e| e.same_channel(&host)));

        let mut watched = {
            let mut map = lock(&watchers.0);
            let (sender, receiver) = broadcast::channel(16);
            map.insert("s".into(), sender);
            receiver
        };
        let (events, tap) = watchers.tap("s", 2, 7, &cells, Some(host));
        let (events, tap) = (events.expect("a tee"), tap.expect("a tap"));
        events.send(output("a")).await.unwrap();
        events.send(output("b")).await.unwrap();
        let result = CellReport::error("x".into()).into_result(0, 1, &cells[0]);
        // The channel stays open (a cell's job may still hold it) while the end is told,
        // and the end waits until the host has every event.
        tap.ended(std::slice::from_ref(&result)).await;
        let mut host_saw = Vec::new();
        while let Ok(event) = host_rx.try_recv() {
            host_saw.push(event);
        }
        assert_eq!(host_saw, vec![output("a"), output("b")]);
        let mut seen = Vec::new();
        while let Ok(item) = watched.try_recv() {
            assert_eq!((item.request, item.origin), (2, 7));
            seen.push(match &item.what {
                WatchEvent::Began { cells } => format!("began {}", cells.len()),
                WatchEvent::Event(CellEvent::Output { text, .. }) => format!("out {text}"),
                WatchEvent::Event(_) => "event".into(),
                WatchEvent::Ended { cells } => format!("ended {:?}", cells[0].report.status),
            });
        }
        assert_eq!(seen, ["began 1", "out a", "out b", "ended Error"]);
        drop(events);
    }

    #[tokio::test]
    async fn a_request_whose_channel_closes_first_still_ends_for_its_watchers() {
        let watchers = Watchers::default();
        let mut watched = {
            let (sender, receiver) = broadcast::channel(16);
            lock(&watchers.0).insert("s".into(), sender);
            receiver
        };
        let cells = vec![CellSpec::new(Language::Lua, "x")];
        let (events, tap) = watchers.tap("s", 3, 0, &cells, None);
        drop(events);
        let result = CellReport::error("x".into()).into_result(0, 1, &cells[0]);
        tap.expect("a tap").ended(&[result]).await;
        let mut last = None;
        while let Ok(item) = watched.recv().await {
            let ended = matches!(item.what, WatchEvent::Ended { .. });
            last = Some(item);
            if ended {
                break;
            }
        }
        assert!(
            matches!(last.map(|i| i.what.clone()), Some(WatchEvent::Ended { cells }) if cells.len() == 1)
        );
    }
}
