//! A running cell's output since its host last looked at it. The connection's reader writes
//! it; the session cuts it when the cell yields, when a `wait` returns and when the cell
//! ends. Each cut is bounded by its own [`OutputSink`] (head + tail, the whole in an
//! artifact), so a background cell nobody watches holds bounded memory.

use crate::output::{OutputSink, SinkLimits, SinkResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The shared output of one running cell.
pub(crate) struct CellOutput {
    window: Mutex<Window>,
    /// The request that started the cell stopped watching: its event stream is done with.
    background: AtomicBool,
}

struct Window {
    sink: OutputSink,
    limits: SinkLimits,
    /// Cuts so far: each window after the first spills to an artifact of its own.
    cuts: u32,
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
            }),
            background: AtomicBool::new(false),
        }
    }

    /// A panic elsewhere while holding the lock leaves plain data behind: still usable.
    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self, data: &[u8]) {
        self.lock().sink.write(data);
    }

    pub fn display(&self, bundle: serde_json::Value) {
        self.lock().displays.push(bundle);
    }

    pub fn status(&self, status: serde_json::Value) {
        self.lock().status_events.push(status);
    }

    /// Everything since the last cut; the next window starts empty.
    pub fn cut(&self) -> Observed {
        let mut window = self.lock();
        window.cuts += 1;
        let mut limits = window.limits.clone();
        let stem = limits
            .artifact_name
            .strip_suffix(".txt")
            .unwrap_or(&limits.artifact_name)
            .to_string();
        limits.artifact_name = format!("{stem}-part{}.txt", window.cuts + 1);
        let sink = std::mem::replace(&mut window.sink, OutputSink::new(limits));
        Observed {
            output: sink.finish(),
            displays: std::mem::take(&mut window.displays),
            status_events: std::mem::take(&mut window.status_events),
        }
    }

    /// The cell went to the background: its request's event stream gets nothing more.
    pub fn go_background(&self) {
        self.background.store(true, Ordering::SeqCst);
    }

    pub fn in_background(&self) -> bool {
        self.background.load(Ordering::SeqCst)
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
