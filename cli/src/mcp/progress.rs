//! Progress while a tool call holds a running cell: an MCP client (and the user behind it)
//! sees the cell's output as it comes, and a client whose request times out without news
//! (often after a few minutes) keeps waiting while a silent cell is still alive.
//!
//! When the request carries a `progressToken` (in its `_meta`), the cell's streamed output
//! goes out as `notifications/progress` messages, at most one per [`OUTPUT_EVERY`] (what
//! arrives in between is sent together), and a cell silent for [`HEARTBEAT`] gets a
//! heartbeat naming how long it has run. `progress` counts the notifications, so it always
//! increases. Output still waiting when the call ends is not sent: the result holds it, and
//! follows at once.

use cellvisor::cell::CellEvent;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext, RoleServer};
use std::time::Duration;
use tokio::time::Instant;

/// At most one output message per this long (four a second).
pub(super) const OUTPUT_EVERY: Duration = Duration::from_millis(250);

/// A silent cell gets a heartbeat this often, well within the request timeouts of MCP
/// clients (tens of seconds at the least).
pub(super) const HEARTBEAT: Duration = Duration::from_secs(2);

/// A progress message carries the tail of the call's output so far, at most this much (the
/// anchor's streaming tail buffer: twice its 50 KB output window, 100 KB), so a client that
/// shows the latest message shows the recent output whole, however fast the cell prints.
pub(super) const MAX_MESSAGE_BYTES: usize = 2 * 50 * 1024;

/// A notification not written within this long (a client that stopped reading) ends the
/// progress of its request, so that it cannot hold the cell up.
const SEND_WITHIN: Duration = Duration::from_secs(5);

/// The progress of one request, or nothing when the request asked for none.
pub(super) struct Progress {
    sink: Option<Sink>,
    text: Pending,
    cells: usize,
    started: Instant,
    /// When the last notification went out (the start, before the first).
    last: Instant,
}

/// Where the notifications go.
struct Sink {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    /// Notifications sent so far: the next one's `progress`.
    sent: u64,
}

impl Progress {
    /// The progress of the request of `context`, whose call runs `cells` cells; sends
    /// nothing when the request has no `progressToken`.
    pub(super) fn for_request(context: &RequestContext<RoleServer>, cells: usize) -> Progress {
        let sink = context.meta.get_progress_token().map(|token| Sink {
            token,
            peer: context.peer.clone(),
            sent: 0,
        });
        let now = Instant::now();
        Progress {
            sink,
            text: Pending::default(),
            cells,
            started: now,
            last: now,
        }
    }

    /// Whether anything is sent: the cells' events are wanted only then.
    pub(super) fn wanted(&self) -> bool {
        self.sink.is_some()
    }

    /// Takes in one of the cells' events.
    pub(super) fn take(&mut self, event: &CellEvent) {
        if self.sink.is_some() {
            if let Some(text) = event_text(event, self.cells) {
                self.text.push(&text);
            }
        }
    }

    /// Resolves when the next notification is due: the coalesced output once
    /// [`OUTPUT_EVERY`] has passed since the last one, else a heartbeat after [`HEARTBEAT`]
    /// of silence; never when nothing is sent.
    pub(super) fn due(&self) -> impl std::future::Future<Output = ()> {
        let at = self.sink.as_ref().map(|_| {
            let wait = if self.text.is_empty() {
                HEARTBEAT
            } else {
                OUTPUT_EVERY
            };
            self.last + wait
        });
        async move {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        }
    }

    /// Sends what is due: the output taken in since the last notification, or a heartbeat.
    pub(super) async fn send(&mut self) {
        let now = Instant::now();
        let message = self.text.take().unwrap_or_else(|| {
            format!(
                "(still running after {} s)",
                now.duration_since(self.started).as_secs()
            )
        });
        self.last = now;
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        sink.sent += 1;
        // The count of notifications: strictly increasing, as MCP requires.
        let param = ProgressNotificationParam::new(sink.token.clone(), sink.sent as f64)
            .with_message(message);
        match tokio::time::timeout(SEND_WITHIN, sink.peer.notify_progress(param)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::debug!("progress not sent, no more for this request: {err}");
                self.sink = None;
            }
            Err(_) => {
                tracing::info!("the MCP client reads no progress: no more for this request");
                self.sink = None;
            }
        }
    }

    /// Sends no more: the client gave the request up.
    pub(super) fn stop(&mut self) {
        self.sink = None;
    }
}

/// What an event adds to the progress text: the output and the displays' text as the cell
/// shows them, and a header when a cell of several starts.
fn event_text(event: &CellEvent, cells: usize) -> Option<String> {
    match event {
        CellEvent::Output { text, .. } => Some(text.clone()),
        CellEvent::Display { bundle, .. } => {
            let shown = match bundle.get("text/plain").and_then(|t| t.as_str()) {
                Some(text) => text.to_string(),
                None => {
                    let mime = bundle
                        .as_object()
                        .and_then(|b| b.keys().next().cloned())
                        .unwrap_or_else(|| "display".to_string());
                    format!("[{mime}]")
                }
            };
            Some(with_newline(shown))
        }
        CellEvent::CellStarted {
            index,
            language,
            title,
        } if cells > 1 => {
            let label = title.clone().unwrap_or_else(|| language.to_string());
            Some(format!("[{}/{cells}] {label}\n", index + 1))
        }
        CellEvent::CellStarted { .. }
        | CellEvent::Status { .. }
        | CellEvent::Value { .. }
        | CellEvent::ClearOutput { .. }
        | CellEvent::CellDone { .. } => None,
    }
}

fn with_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The call's output so far as the next notification carries it: its last
/// [`MAX_MESSAGE_BYTES`] at most, how much was left out before them, and whether anything
/// came since the last notification.
#[derive(Debug, Default)]
struct Pending {
    text: String,
    skipped: usize,
    fresh: bool,
}

impl Pending {
    /// Whether nothing came since the last notification.
    fn is_empty(&self) -> bool {
        !self.fresh
    }

    fn push(&mut self, text: &str) {
        self.fresh |= !text.is_empty();
        self.text.push_str(text);
        if self.text.len() > MAX_MESSAGE_BYTES {
            let mut cut = self.text.len() - MAX_MESSAGE_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.skipped += cut;
        }
    }

    /// The message (the tail so far), if anything came since the last one.
    fn take(&mut self) -> Option<String> {
        if !std::mem::take(&mut self.fresh) {
            return None;
        }
        let text = &self.text;
        Some(if self.skipped > 0 {
            format!(
                "[... {} bytes of output not shown ...]\n{text}",
                self.skipped
            )
        } else {
            text.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellvisor_ipc::Language;
    use serde_json::json;

    #[test]
    fn output_arriving_between_messages_goes_out_together() {
        let mut pending = Pending::default();
        assert_eq!(pending.take(), None);
        pending.push("one\n");
        pending.push("two\n");
        assert_eq!(pending.take().as_deref(), Some("one\ntwo\n"));
        assert!(pending.is_empty());
        assert_eq!(pending.take(), None, "nothing new, no message");
        // Each message carries the tail so far, as the anchor's live updates do.
        pending.push("three\n");
        assert_eq!(pending.take().as_deref(), Some("one\ntwo\nthree\n"));
    }

    #[test]
    fn a_flood_keeps_its_end_and_says_how_much_was_left_out() {
        let mut pending = Pending::default();
        let line = "é".repeat(100) + "\n";
        for _ in 0..1000 {
            pending.push(&line);
        }
        let message = pending.take().unwrap_or_default();
        let (note, kept) = message.split_once('\n').unwrap_or_default();
        let skipped = 1000 * line.len() - MAX_MESSAGE_BYTES.min(1000 * line.len());
        // The cut never splits a character: a byte or two more may go.
        assert!(
            note.starts_with("[... ") && note.ends_with(" bytes of output not shown ...]"),
            "{note}"
        );
        let said: usize = note
            .trim_start_matches("[... ")
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            (skipped..skipped + 2).contains(&said),
            "{said} vs {skipped}"
        );
        assert!(kept.len() <= MAX_MESSAGE_BYTES);
        assert!(message.ends_with(&line));
    }

    #[test]
    fn events_become_the_text_a_cell_shows() {
        let output = CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: "x = 1\n".into(),
        };
        assert_eq!(event_text(&output, 1).as_deref(), Some("x = 1\n"));
        let display = CellEvent::Display {
            index: 0,
            bundle: json!({"image/png": "iVBO", "text/plain": "<Figure>"}),
        };
        assert_eq!(event_text(&display, 1).as_deref(), Some("<Figure>\n"));
        let image = CellEvent::Display {
            index: 0,
            bundle: json!({"image/png": "iVBO"}),
        };
        assert_eq!(event_text(&image, 1).as_deref(), Some("[image/png]\n"));
        let started = |title: Option<&str>| CellEvent::CellStarted {
            index: 1,
            language: Language::Lua,
            title: title.map(str::to_string),
        };
        assert_eq!(event_text(&started(None), 1), None, "one cell: no header");
        assert_eq!(
            event_text(&started(None), 3).as_deref(),
            Some("[2/3] lua\n")
        );
        assert_eq!(
            event_text(&started(Some("load")), 3).as_deref(),
            Some("[2/3] load\n")
        );
        let status = CellEvent::Status {
            index: 0,
            status: json!({"op": "read"}),
        };
        assert_eq!(event_text(&status, 1), None);
    }
}
