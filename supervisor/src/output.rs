//! A cell's output sink: bounded memory whatever the cell prints.
//!
//! Up to the limits everything stays in memory. Past them the sink keeps a head and a tail
//! (half the budget each), writes the whole stream to an artifact file, and the result says so
//! in structured fields instead of truncating silently. An artifact that cannot be completed
//! (the directory's cap, a full disk) is deleted, and the result says why.

use crate::artifacts::ArtifactStore;
use crate::cell::Truncation;
use bytesize::ByteSize;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// Limits and the artifact location for one cell's output.
#[derive(Debug, Clone)]
pub struct SinkLimits {
    pub max_bytes: usize,
    pub max_lines: usize,
    /// Longer lines are cut in the returned text (characters); the artifact keeps them.
    pub max_line_length: usize,
    /// The file name the whole stream goes to once it no longer fits.
    pub artifact_name: String,
    pub artifacts: Arc<ArtifactStore>,
}

/// Collects one cell's output.
pub struct OutputSink {
    limits: SinkLimits,
    total_bytes: u64,
    newlines: u64,
    last_byte: Option<u8>,
    /// Everything, until the output overflows; then the head only.
    head: Vec<u8>,
    /// After overflow: the most recent bytes (at most twice the tail budget between trims).
    tail: Vec<u8>,
    artifact: Option<BufWriter<File>>,
    /// Where the artifact is, once created.
    artifact_path: Option<PathBuf>,
    artifact_error: Option<String>,
}

/// The kept text of a finished sink and its truncation fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkResult {
    pub text: String,
    pub truncation: Truncation,
}

impl OutputSink {
    pub fn new(limits: SinkLimits) -> OutputSink {
        OutputSink {
            limits,
            total_bytes: 0,
            newlines: 0,
            last_byte: None,
            head: Vec::new(),
            tail: Vec::new(),
            artifact: None,
            artifact_path: None,
            artifact_error: None,
        }
    }

    fn overflowed(&self) -> bool {
        self.artifact.is_some() || self.artifact_error.is_some()
    }

    fn tail_budget(&self) -> usize {
        self.limits.max_bytes - self.limits.max_bytes / 2
    }

    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.total_bytes += data.len() as u64;
        self.newlines += memchr::memchr_iter(b'\n', data).count() as u64;
        self.last_byte = data.last().copied();

        if !self.overflowed() {
            self.head.extend_from_slice(data);
            if self.head.len() > self.limits.max_bytes
                || self.lines() > self.limits.max_lines as u64
            {
                self.spill();
            }
            return;
        }
        self.write_artifact(data);
        self.tail.extend_from_slice(data);
        let budget = self.tail_budget();
        if self.tail.len() > 2 * budget {
            let cut = self.tail.len() - budget;
            self.tail.drain(..cut);
        }
    }

    fn lines(&self) -> u64 {
        self.newlines + u64::from(matches!(self.last_byte, Some(b) if b != b'\n'))
    }

    /// Moves the buffered output to the artifact file and splits it into head and tail.
    fn spill(&mut self) {
        self.spill_whole();
        let head_budget = self.limits.max_bytes / 2;
        let head_lines = self.limits.max_lines / 2;
        let cut = cut_point(&self.head, head_budget, head_lines);
        self.tail = self.head.split_off(cut);
    }

    /// Writes everything kept so far to a new artifact without dropping any of it from memory.
    fn spill_whole(&mut self) {
        match self.limits.artifacts.create(&self.limits.artifact_name) {
            Ok((path, file)) => {
                self.artifact = Some(BufWriter::with_capacity(256 * 1024, file));
                self.artifact_path = Some(path);
                let head = std::mem::take(&mut self.head);
                self.write_artifact(&head);
                self.head = head;
            }
            Err(e) => self.artifact_error = Some(e.to_string()),
        }
    }

    /// Appends to the artifact within the directory's cap; past it, or on a write error, the
    /// partial artifact is deleted and the reason kept for the result.
    fn write_artifact(&mut self, data: &[u8]) {
        let (Some(artifact), Some(path)) = (&mut self.artifact, &self.artifact_path) else {
            return;
        };
        let len = data.len() as u64;
        let failure = if !self.limits.artifacts.reserve(path, len) {
            Some(format!(
                "the artifact directory is full (output.artifact-max-total = {})",
                ByteSize::b(self.limits.artifacts.max_total())
            ))
        } else {
            artifact.write_all(data).err().map(|e| e.to_string())
        };
        if let Some(reason) = failure {
            self.abandon_artifact(reason);
        }
    }

    fn abandon_artifact(&mut self, reason: String) {
        self.artifact = None;
        if let Some(path) = self.artifact_path.take() {
            self.limits.artifacts.discard(&path);
        }
        self.artifact_error = Some(reason);
    }

    /// Forgets everything written so far (the cell cleared its output): the sink starts
    /// again, and an artifact that held the cleared text is deleted with it.
    pub fn clear(&mut self) {
        self.artifact = None;
        if let Some(path) = self.artifact_path.take() {
            self.limits.artifacts.discard(&path);
        }
        *self = OutputSink::new(self.limits.clone());
    }

    /// Writes everything this sink took to `target`, as if it had gone there in the first
    /// place, and deletes this sink's artifact: output kept apart (after a yield) that joins
    /// the window before it after all. The artifact is read back through the sink's own
    /// handle; what it could not keep (its artifact failed) is named in a line in its place.
    pub fn replay_into(mut self, target: &mut OutputSink) {
        if !self.overflowed() {
            target.write(&self.head);
            return;
        }
        let mut copied = 0;
        let failure = match self.artifact.take() {
            Some(artifact) => copy_back(artifact, target, &mut copied).err(),
            None => Some(
                self.artifact_error
                    .take()
                    .unwrap_or_else(|| "the artifact was not written".to_string()),
            ),
        };
        if let Some(path) = self.artifact_path.take() {
            self.limits.artifacts.discard(&path);
        }
        let Some(reason) = failure else {
            return;
        };
        // Nothing read back: the head, the note, the tail; cut short: the note alone.
        let tail = if copied == 0 {
            target.write(&self.head);
            copied = self.head.len() as u64;
            tail_of(&self.tail, self.tail_budget(), self.limits.max_lines)
        } else {
            &[][..]
        };
        let omitted = self.total_bytes.saturating_sub(copied + tail.len() as u64);
        let newline = if matches!(target.last_byte, Some(b) if b != b'\n') {
            "\n"
        } else {
            ""
        };
        target.write(
            format!(
                "{newline}[... {omitted} bytes omitted; the full output could not be kept: {reason} ...]\n"
            )
            .as_bytes(),
        );
        target.write(tail);
    }

    /// Ends the stream: flushes the artifact and renders the kept text, its over-long lines
    /// cut (the whole output is then in the artifact too).
    pub fn finish(mut self) -> SinkResult {
        let max_line = self.limits.max_line_length;
        if !self.overflowed() && has_line_longer_than(&self.head, max_line) {
            self.spill_whole();
        }
        let mut result = self.render();
        if let Some(cut) = cut_long_lines(&result.text, max_line) {
            result.text = cut;
        }
        result
    }

    fn render(mut self) -> SinkResult {
        let total_lines = self.lines();
        let truncated = self.overflowed();
        self.flush_artifact();
        // Nothing dropped (the output fits, or spilled only for a long line): the text is whole.
        let whole =
            !truncated || (self.tail.is_empty() && self.head.len() as u64 == self.total_bytes);
        let text = if whole {
            String::from_utf8_lossy(&self.head).into_owned()
        } else {
            self.head_and_tail(total_lines)
        };
        SinkResult {
            text,
            truncation: Truncation {
                truncated,
                total_bytes: self.total_bytes,
                total_lines,
                artifact_path: self.artifact_path.take(),
                artifact_error: self.artifact_error.take(),
            },
        }
    }

    /// The head, a line saying what was omitted and where the whole output is, and the tail.
    fn head_and_tail(&self, total_lines: u64) -> String {
        let tail_budget = self.tail_budget();
        let tail_lines = self.limits.max_lines - self.limits.max_lines / 2;
        let tail = tail_of(&self.tail, tail_budget, tail_lines);
        let kept = (self.head.len() + tail.len()) as u64;
        let omitted_bytes = self.total_bytes.saturating_sub(kept);
        let where_ = match (&self.artifact_error, &self.artifact_path) {
            (None, Some(path)) => format!(
                "full output in {} ({})",
                path.display(),
                cellvisor_ipc::env::artifact_reference(path)
            ),
            (Some(e), _) => format!("the full output could not be kept: {e}"),
            (None, None) => "the full output could not be kept".to_string(),
        };
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[... {omitted_bytes} bytes omitted of {} bytes / {total_lines} lines; {where_} ...]\n",
            self.total_bytes
        ));
        text.push_str(&String::from_utf8_lossy(tail));
        text
    }

    /// Flushes the artifact and marks it finished (prunable); a failed flush abandons it.
    fn flush_artifact(&mut self) {
        if let Some(mut artifact) = self.artifact.take() {
            match artifact.flush() {
                Err(e) => self.abandon_artifact(e.to_string()),
                Ok(()) => {
                    if let Some(path) = &self.artifact_path {
                        self.limits.artifacts.finished(path);
                    }
                }
            }
        }
    }
}

/// Copies a sink's whole artifact to `target` from its start, counting the bytes `copied`.
fn copy_back(
    artifact: BufWriter<File>,
    target: &mut OutputSink,
    copied: &mut u64,
) -> Result<(), String> {
    let mut file = artifact.into_inner().map_err(|e| e.error().to_string())?;
    file.rewind().map_err(|e| e.to_string())?;
    let mut chunk = vec![0; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(read) => {
                target.write(&chunk[..read]);
                *copied += read as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Whether a line of `buf` has more than `max_chars` characters (bytes first: cheap).
fn has_line_longer_than(buf: &[u8], max_chars: usize) -> bool {
    if buf.len() <= max_chars {
        return false;
    }
    buf.split(|b| *b == b'\n').any(|line| {
        line.len() > max_chars && String::from_utf8_lossy(line).chars().count() > max_chars
    })
}

/// `text` with each line longer than `max_chars` characters cut there and marked; `None`
/// when no line is that long.
fn cut_long_lines(text: &str, max_chars: usize) -> Option<String> {
    if !has_line_longer_than(text.as_bytes(), max_chars) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        match line.char_indices().nth(max_chars) {
            Some((cut, _)) => {
                let more = line[cut..].chars().count();
                out.push_str(&line[..cut]);
                out.push_str(&format!(
                    "[... line cut: {more} more characters; the whole line is in the artifact ...]"
                ));
            }
            None => out.push_str(line),
        }
    }
    Some(out)
}

/// Where to end a head of at most `max_bytes` and `max_lines`: after a newline when there is
/// one in the second half of the window, so lines (and UTF-8 characters) stay whole.
fn cut_point(buf: &[u8], max_bytes: usize, max_lines: usize) -> usize {
    let mut end = buf.len().min(max_bytes);
    if let Some((pos, _)) = memchr::memchr_iter(b'\n', &buf[..end])
        .enumerate()
        .find(|(n, _)| *n + 1 >= max_lines.max(1))
        .map(|(n, pos)| (pos, n))
    {
        end = pos + 1;
    }
    match memchr::memrchr(b'\n', &buf[..end]) {
        Some(pos) if pos + 1 >= end / 2 => pos + 1,
        _ => end,
    }
}

/// The last part of `buf` within `max_bytes` and `max_lines`, starting after a newline when
/// one is near.
fn tail_of(buf: &[u8], max_bytes: usize, max_lines: usize) -> &[u8] {
    let start = buf.len().saturating_sub(max_bytes);
    // A final newline ends the last line; it does not start another.
    let body_end = if buf.ends_with(b"\n") {
        buf.len() - 1
    } else {
        buf.len()
    };
    let body = &buf[start..body_end.max(start)];
    if let Some(pos) = memchr::memrchr_iter(b'\n', body).nth(max_lines.max(1) - 1) {
        return &buf[start + pos + 1..];
    }
    if start > 0 {
        if let Some(pos) = memchr::memchr(b'\n', body) {
            if pos < body.len() / 2 {
                return &buf[start + pos + 1..];
            }
        }
    }
    &buf[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(dir: &tempfile::TempDir, max_bytes: usize, max_lines: usize) -> OutputSink {
        sink_capped(dir, max_bytes, max_lines, 1 << 30)
    }

    fn sink_capped(
        dir: &tempfile::TempDir,
        max_bytes: usize,
        max_lines: usize,
        max_total: u64,
    ) -> OutputSink {
        OutputSink::new(SinkLimits {
            max_bytes,
            max_lines,
            max_line_length: 4000,
            artifact_name: "s-py-1-1.txt".into(),
            artifacts: ArtifactStore::new(dir.path().join("artifacts"), max_total),
        })
    }

    #[test]
    fn a_long_line_is_cut_in_the_text_and_kept_whole_in_the_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputSink::new(SinkLimits {
            max_bytes: 64 * 1024,
            max_lines: 100,
            max_line_length: 100,
            artifact_name: "s-py-1-1.txt".into(),
            artifacts: ArtifactStore::new(dir.path().join("artifacts"), 1 << 30),
        });
        let long = "é".repeat(250);
        s.write(format!("short\n{long}\nend\n").as_bytes());
        let result = s.finish();
        let lines: Vec<&str> = result.text.lines().collect();
        assert_eq!(lines[0], "short");
        assert!(lines[1].starts_with(&"é".repeat(100)), "{}", lines[1]);
        assert!(
            lines[1].ends_with(
                "[... line cut: 150 more characters; the whole line is in the artifact ...]"
            ),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], "end");
        assert!(result.truncation.truncated);
        let artifact = result.truncation.artifact_path.expect("artifact");
        assert_eq!(
            std::fs::read_to_string(artifact).unwrap(),
            format!("short\n{long}\nend\n")
        );
    }

    #[test]
    fn small_output_is_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(&dir, 1024, 100);
        s.write(b"hello\n");
        s.write(b"world");
        let r = s.finish();
        assert_eq!(r.text, "hello\nworld");
        assert!(!r.truncation.truncated);
        assert_eq!(r.truncation.total_lines, 2);
        assert_eq!(r.truncation.total_bytes, 11);
    }

    #[test]
    fn big_output_keeps_head_and_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(&dir, 1000, 3000);
        let mut all = Vec::new();
        for i in 0..10_000 {
            let line = format!("line {i}\n");
            all.extend_from_slice(line.as_bytes());
            s.write(line.as_bytes());
        }
        let r = s.finish();
        assert!(r.truncation.truncated);
        assert_eq!(r.truncation.total_lines, 10_000);
        assert_eq!(r.truncation.total_bytes, all.len() as u64);
        assert!(r.text.starts_with("line 0\n"));
        assert!(r.text.ends_with("line 9999\n"));
        assert!(r.text.len() < 1200, "kept {} bytes", r.text.len());
        let path = r.truncation.artifact_path.unwrap();
        let notice = format!(
            "full output in {} (artifact://s-py-1-1) ...]",
            path.display()
        );
        assert!(r.text.contains(&notice), "{}", r.text);
        assert_eq!(std::fs::read(path).unwrap(), all);
    }

    #[test]
    fn the_line_limit_applies_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(&dir, 1 << 20, 10);
        for _ in 0..100 {
            s.write(b"x\n");
        }
        let r = s.finish();
        assert!(r.truncation.truncated);
        let kept_lines = r.text.lines().filter(|l| *l == "x").count();
        assert_eq!(kept_lines, 10, "{}", r.text);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(&dir, 1024, 100);
        s.write(b"ok \xff\xfe end\n");
        assert_eq!(s.finish().text, "ok \u{fffd}\u{fffd} end\n");
    }

    #[test]
    fn an_unwritable_artifact_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("artifacts"), b"a file, not a directory").unwrap();
        let mut s = sink(&dir, 100, 100);
        s.write(&[b'y'; 500]);
        let r = s.finish();
        assert!(r.truncation.truncated);
        assert!(r.truncation.artifact_path.is_none());
        assert!(r.text.contains("could not be kept"), "{}", r.text);
    }

    #[test]
    fn a_replayed_sink_gives_its_whole_stream_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut target = sink(&dir, 1 << 20, 1000);
        target.write(b"first\n");
        let mut held = sink(&dir, 100, 100);
        let mut all = Vec::new();
        for i in 0..100 {
            let line = format!("line {i}\n");
            all.extend_from_slice(line.as_bytes());
            held.write(line.as_bytes());
        }
        assert!(held.overflowed());
        held.replay_into(&mut target);
        let result = target.finish();
        assert!(!result.truncation.truncated);
        assert_eq!(result.text.as_bytes(), [&b"first\n"[..], &all].concat());
        let left = std::fs::read_dir(dir.path().join("artifacts"))
            .unwrap()
            .count();
        assert_eq!(left, 0, "the replayed sink's artifact was deleted");
        // A sink that could not keep its artifact gives its head and tail, and says so.
        let mut target = sink(&dir, 1 << 20, 1000);
        let mut capped = sink_capped(&dir, 100, 100, 150);
        for _ in 0..5 {
            capped.write(&[b'z'; 60]);
        }
        capped.write(b"\nend\n");
        capped.replay_into(&mut target);
        let text = target.finish().text;
        assert!(text.starts_with(&"z".repeat(50)), "{text}");
        assert!(text.contains("output.artifact-max-total"), "{text}");
        assert!(text.ends_with("end\n"), "{text}");
    }

    #[test]
    fn output_past_the_directory_cap_leaves_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink_capped(&dir, 100, 100, 1000);
        for _ in 0..50 {
            s.write(&[b'z'; 100]);
        }
        let r = s.finish();
        assert!(r.truncation.truncated);
        assert!(r.truncation.artifact_path.is_none());
        let why = r.truncation.artifact_error.unwrap_or_default();
        assert!(why.contains("output.artifact-max-total"), "{why}");
        assert!(r.text.contains("could not be kept"), "{}", r.text);
        let left = std::fs::read_dir(dir.path().join("artifacts"))
            .unwrap()
            .count();
        assert_eq!(left, 0, "the partial artifact was deleted");
    }
}
