//! A running cell's output since its host last looked at it. The connection's reader writes
//! it; the session cuts it when the cell yields, when a `wait` returns and when the cell
//! ends. Each cut is bounded by its own [`OutputSink`] (head + tail, the whole in an
//! artifact), so a background cell nobody watches holds bounded memory.
//!
//! A `yield_control()` reaches the reader in order with the output, but the session cuts a
//! moment later (on a loaded machine, many frames later): the reader
//! [`holds`](CellOutput::hold) what comes after the yield in the next window's own sink until
//! the session has cut (or let go), so the host gets the output up to the yield exactly,
//! however much the cell printed meanwhile.

use crate::cell::CellEvent;
use crate::locking::lock;
use crate::output::{OutputSink, SinkLimits, SinkResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::mpsc;

/// The shared output of one running cell.
pub(crate) struct CellOutput {
    window: Mutex<Window>,
    /// The request that started the cell stopped watching: its event stream is done with.
    background: AtomicBool,
    /// The event stream of the `wait` watching the cell in the background, while it does.
    watcher: Mutex<Option<mpsc::Sender<CellEvent>>>,
}

struct Window {
    sink: OutputSink,
    limits: SinkLimits,
    /// Cuts so far: each window after the first spills to an artifact of its own.
    cuts: u32,
    displays: Vec<serde_json::Value>,
    status_events: Vec<serde_json::Value>,
    /// What came after a yield the session has not cut at yet: the next window, already.
    held: Option<Held>,
    /// A `clear_output(wait=True)` waiting for the cell's next output to clear before it.
    clear_pending: bool,
}

/// The window after a yield, filling while the session has not cut at the yield yet. Its
/// sink is bounded as any window's (head + tail, the whole in its artifact), so a session
/// however far behind never makes the window before the yield take what came after it.
struct Held {
    sink: OutputSink,
    displays: Vec<serde_json::Value>,
    status_events: Vec<serde_json::Value>,
}

/// What a cell produced in one window.
pub(crate) struct Observed {
    pub output: SinkResult,
    pub displays: Vec<serde_json::Value>,
    pub status_events: Vec<serde_json::Value>,
}

impl CellOutput {
    pub fn new(limits: SinkLimits) -> CellOutput {
        CellOutput {
            window: Mutex::new(Window {
                sink: OutputSink::new(limits.clone()),
                limits,
                cuts: 0,
                displays: Vec::new(),
                status_events: Vec::new(),
                held: None,
                clear_pending: false,
            }),
            background: AtomicBool::new(false),
            watcher: Mutex::new(None),
        }
    }

    /// A panic elsewhere while holding the lock leaves plain data behind: still usable.
    fn lock(&self) -> MutexGuard<'_, Window> {
        lock(&self.window)
    }

    pub fn write(&self, data: &[u8]) {
        let mut window = self.lock();
        if !data.is_empty() {
            window.clear_if_pending();
        }
        match &mut window.held {
            Some(held) => held.sink.write(data),
            None => window.sink.write(data),
        }
    }

    pub fn display(&self, bundle: serde_json::Value) {
        let mut window = self.lock();
        window.clear_if_pending();
        match &mut window.held {
            Some(held) => held.displays.push(bundle),
            None => window.displays.push(bundle),
        }
    }

    pub fn status(&self, status: serde_json::Value) {
        let mut window = self.lock();
        match &mut window.held {
            Some(held) => held.status_events.push(status),
            None => window.status_events.push(status),
        }
    }

    /// The cell cleared its output, as a notebook clears a cell's: the text and displays
    /// shown so far in this window go (since the yield, when one is pending), now or, with
    /// `wait`, when the next output arrives. What helpers reported (status events) stays.
    pub fn clear(&self, wait: bool) {
        let mut window = self.lock();
        window.clear_pending = true;
        if !wait {
            window.clear_if_pending();
        }
    }

    /// The cell yielded here: what comes next waits for the session's cut (or [`release`]).
    ///
    /// [`release`]: CellOutput::release
    pub fn hold(&self) {
        let mut window = self.lock();
        if window.held.is_none() {
            // It becomes the window after the next cut.
            let limits = window.part_limits(window.cuts + 2);
            window.held = Some(Held {
                sink: OutputSink::new(limits),
                displays: Vec::new(),
                status_events: Vec::new(),
            });
        }
    }

    /// Nobody took the output at the yield: what was held joins the window.
    pub fn release(&self) {
        self.lock().release();
    }

    /// Everything since the last cut, up to a pending yield; the next window starts with what
    /// came after that yield.
    pub fn cut(&self) -> Observed {
        let mut window = self.lock();
        window.cuts += 1;
        let next = match window.held.take() {
            Some(held) => held,
            None => Held {
                sink: OutputSink::new(window.part_limits(window.cuts + 1)),
                displays: Vec::new(),
                status_events: Vec::new(),
            },
        };
        let sink = std::mem::replace(&mut window.sink, next.sink);
        Observed {
            output: sink.finish(),
            displays: std::mem::replace(&mut window.displays, next.displays),
            status_events: std::mem::replace(&mut window.status_events, next.status_events),
        }
    }

    /// The cell's last window: everything, held or not.
    pub fn finish(&self) -> Observed {
        self.release();
        self.cut()
    }

    /// The cell went to the background: its request's event stream gets nothing more.
    pub fn go_background(&self) {
        self.background.store(true, Ordering::SeqCst);
    }

    pub fn in_background(&self) -> bool {
        self.background.load(Ordering::SeqCst)
    }

    /// A `wait` watches the cell in the background: its events go to `events` from now on
    /// (`None`: the wait wants none, or answered).
    pub fn watch(&self, events: Option<mpsc::Sender<CellEvent>>) {
        *lock(&self.watcher) = events;
    }

    /// Where a background cell's events go now, if a `wait` that reads them watches it.
    pub fn watcher(&self) -> Option<mpsc::Sender<CellEvent>> {
        let mut watcher = lock(&self.watcher);
        if watcher.as_ref().is_some_and(mpsc::Sender::is_closed) {
            *watcher = None;
        }
        watcher.clone()
    }
}

impl Window {
    /// Carries out a pending clear before the output that follows it.
    fn clear_if_pending(&mut self) {
        if !std::mem::take(&mut self.clear_pending) {
            return;
        }
        match &mut self.held {
            Some(held) => {
                held.sink.clear();
                held.displays.clear();
            }
            None => {
                self.sink.clear();
                self.displays.clear();
            }
        }
    }

    /// The held window joins this one (nobody took the yield), its artifact with it.
    fn release(&mut self) {
        if let Some(held) = self.held.take() {
            held.sink.replay_into(&mut self.sink);
            self.displays.extend(held.displays);
            self.status_events.extend(held.status_events);
        }
    }

    /// The limits of window `part` (from 1): each after the first spills to an artifact of
    /// its own, `<name>-part<part>.txt`.
    fn part_limits(&self, part: u32) -> SinkLimits {
        let mut limits = self.limits.clone();
        let stem = limits
            .artifact_name
            .strip_suffix(".txt")
            .unwrap_or(&limits.artifact_name)
            .to_string();
        limits.artifact_name = format!("{stem}-part{part}.txt");
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::ArtifactStore;

    fn output(dir: &std::path::Path, max_bytes: usize) -> CellOutput {
        CellOutput::new(SinkLimits {
            max_bytes,
            max_lines: 100,
            max_line_length: 1000,
            artifact_name: "s-js-1-7.txt".into(),
            artifacts: ArtifactStore::new(dir.to_path_buf(), 1 << 20),
        })
    }

    #[test]
    fn each_cut_holds_what_came_since_the_previous_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 1000);
        out.write(b"a\n");
        out.display(serde_json::json!({"text/plain": "d"}));
        let first = out.cut();
        assert_eq!(first.output.text, "a\n");
        assert_eq!(first.displays.len(), 1);
        out.write(b"b\n");
        let second = out.cut();
        assert_eq!(second.output.text, "b\n");
        assert!(second.displays.is_empty());
        assert_eq!(out.cut().output.text, "");
    }

    #[test]
    fn a_cut_after_a_yield_ends_at_the_yield_and_nothing_is_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 1000);
        out.write(b"before\n");
        out.hold();
        out.write(b"after\n");
        out.status(serde_json::json!({"op": "notify"}));
        let at_yield = out.cut();
        assert_eq!(at_yield.output.text, "before\n");
        assert!(at_yield.status_events.is_empty());
        out.write(b"more\n");
        let next = out.cut();
        assert_eq!(next.output.text, "after\nmore\n");
        assert_eq!(next.status_events.len(), 1);
        // A yield nobody took: the held output stays in the window.
        out.write(b"x\n");
        out.hold();
        out.write(b"y\n");
        out.release();
        assert_eq!(out.cut().output.text, "x\ny\n");
        // The last window takes everything, held or not.
        out.hold();
        out.write(b"z\n");
        assert_eq!(out.finish().output.text, "z\n");
    }

    #[test]
    fn a_cut_long_after_a_yield_still_ends_at_the_yield() {
        // A loaded machine: the session cuts after the cell printed far past the budget.
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 16);
        out.write(b"before\n");
        out.hold();
        for _ in 0..10 {
            out.write(b"0123456789\n");
        }
        out.write(b"done\n");
        let at_yield = out.cut();
        assert_eq!(at_yield.output.text, "before\n");
        assert!(
            !at_yield.output.truncation.truncated,
            "{:?}",
            at_yield.output
        );
        out.write(b"later\n");
        let next = out.cut().output;
        assert!(next.truncation.truncated, "{next:?}");
        assert!(next.text.ends_with("later\n"), "{}", next.text);
        let path = next.truncation.artifact_path.expect("artifact");
        assert!(path.ends_with("s-js-1-7-part2.txt"), "{path:?}");
        let whole = format!("{}done\nlater\n", "0123456789\n".repeat(10));
        assert_eq!(std::fs::read_to_string(&path).expect("artifact"), whole);
    }

    #[test]
    fn a_held_window_nobody_took_joins_the_window_before_it_with_its_artifact() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 16);
        out.write(b"a\n");
        out.hold();
        out.write(&b"0123456789\n".repeat(10));
        out.display(serde_json::json!({"text/plain": "d"}));
        out.release();
        out.write(b"z\n");
        let cut = out.cut();
        assert_eq!(cut.displays.len(), 1);
        let path = cut.output.truncation.artifact_path.expect("artifact");
        let whole = format!("a\n{}z\n", "0123456789\n".repeat(10));
        assert_eq!(std::fs::read_to_string(&path).expect("artifact"), whole);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(left, vec![path], "the held window's artifact is gone");
        // At the end, a held window is part of the last one.
        out.hold();
        out.write(b"last\n");
        assert_eq!(out.finish().output.text, "last\n");
    }

    #[test]
    fn a_clear_drops_what_was_shown_before_it_at_once_or_with_the_next_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 1000);
        out.write(b"old\n");
        out.display(serde_json::json!({"text/plain": "d"}));
        out.status(serde_json::json!({"op": "read"}));
        out.clear(false);
        out.write(b"new\n");
        let cut = out.cut();
        assert_eq!(cut.output.text, "new\n");
        assert_eq!(cut.output.truncation.total_bytes, 4);
        assert!(cut.displays.is_empty());
        assert_eq!(cut.status_events.len(), 1, "helper reports are not output");
        // A progress loop: `clear_output(wait=True); print(i)` ends showing the last.
        for i in 0..3 {
            out.clear(true);
            out.write(format!("{i}\n").as_bytes());
        }
        assert_eq!(out.cut().output.text, "2\n");
        // A waiting clear with nothing after it clears nothing (as in a notebook).
        out.write(b"kept\n");
        out.clear(true);
        assert_eq!(out.cut().output.text, "kept\n");
        // The next output clears, a display as well as text.
        out.write(b"x\n");
        out.clear(true);
        out.display(serde_json::json!({"text/plain": "shown"}));
        let cut = out.finish();
        assert_eq!(cut.output.text, "");
        assert_eq!(
            cut.displays,
            vec![serde_json::json!({"text/plain": "shown"})]
        );
    }

    #[test]
    fn a_clear_after_a_yield_clears_only_what_came_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 1000);
        out.write(b"before\n");
        out.hold();
        out.write(b"after\n");
        out.clear(false);
        out.write(b"last\n");
        assert_eq!(out.cut().output.text, "before\n");
        assert_eq!(out.cut().output.text, "last\n");
    }

    #[test]
    fn a_clear_deletes_the_artifact_of_the_cleared_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 16);
        out.write(&b"0123456789\n".repeat(10));
        out.clear(false);
        out.write(b"short\n");
        let result = out.finish().output;
        assert_eq!(result.text, "short\n");
        assert!(!result.truncation.truncated, "{result:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_window_past_the_limits_spills_to_an_artifact_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = output(dir.path(), 16);
        out.write(b"first window\n");
        let _ = out.cut();
        out.write(&b"0123456789\n".repeat(10));
        let spilled = out.cut().output;
        assert!(spilled.truncation.truncated, "{spilled:?}");
        let path = spilled.truncation.artifact_path.expect("artifact");
        assert!(
            path.to_string_lossy().ends_with("s-js-1-7-part2.txt"),
            "{path:?}"
        );
        assert_eq!(
            std::fs::read(&path).expect("artifact").len(),
            110,
            "the whole window is kept"
        );
    }
}
