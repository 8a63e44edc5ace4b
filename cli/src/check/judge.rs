//! The `judge` scorer: an external command that grades a case, so a host can plug in an LLM
//! judge (or any program) without cellvisor holding a model.
//!
//! The command (argv, no shell) runs in the case's workspace, in a process group of its own,
//! with the case as JSON on stdin ([`JudgeInput`]). It prints one JSON object on stdout:
//! `{"score": 0.8, "reason": "..."}` with `score` in 0..1. It passes at `threshold` (default
//! 0.7). A judge that cannot start, exits non-zero, outlives its timeout (default 60 s) or
//! prints anything else scores 0 with the reason. When it ends (or is stopped), its whole
//! process group is killed and it is reaped: nothing it started outlives the scorer.

use super::scorer::{excerpt, ScoreOutcome};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Seconds a judge may run when its scorer sets no `timeout`.
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// Longest `timeout` a scorer may set, in seconds.
pub const MAX_TIMEOUT_SECS: f64 = 3600.0;
/// The score a judge passes at when its scorer sets no `threshold` (the anchor's 0.7).
pub const DEFAULT_THRESHOLD: f64 = 0.7;
/// The name of a judge scorer that gives none (the anchor's).
pub const DEFAULT_NAME: &str = "llm.judge";
/// Stdout kept from a judge; the rest is read and dropped.
const MAX_STDOUT: usize = 64 * 1024;
/// Stderr kept (its end) to explain a failing judge.
const MAX_STDERR: usize = 4 * 1024;
/// How long the judge's pipes may stay open after its process group was killed.
const DRAIN: Duration = Duration::from_secs(2);

/// What a judge reads on stdin: the case as it ran.
#[derive(Debug, Serialize)]
pub struct JudgeInput<'a> {
    pub variant: &'a str,
    pub suite: &'a str,
    pub id: &'a str,
    pub description: Option<&'a str>,
    pub tags: &'a [String],
    /// The scorer's `rubric`, if it gives one.
    pub rubric: Option<&'a str>,
    /// How the cells under test ended.
    pub status: cellvisor::cell::CellStatus,
    /// The case's cells as written.
    pub case_cells: &'a [cellvisor::cell::CellSpec],
    /// Each cell's result, as `cellvisor eval --json` gives it.
    pub setup: &'a [cellvisor::cell::CellResult],
    pub cells: &'a [cellvisor::cell::CellResult],
    /// The captured workspace (`workspace.json`).
    pub workspace: &'a super::workspace::WorkspaceSnapshot,
    /// The verdicts of the case's other (non-judge) scorers.
    pub scores: &'a [ScoreOutcome],
}

/// Why a judge gave no score.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("timed out after {0:?}; its process group was killed")]
    Timeout(Duration),
    #[error("exited with {status}{stderr}")]
    Failed { status: String, stderr: String },
    #[error("printed no {{\"score\": 0..1, \"reason\": \"...\"}} object: {0}")]
    Output(String),
    #[error("cannot wait for it: {0}")]
    Wait(std::io::Error),
}

/// The judge's grade.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub score: f64,
    pub reason: Option<String>,
}

/// Checks a judge scorer's fields when its case file is read.
pub fn validate(
    command: &[String],
    timeout: Option<f64>,
    threshold: Option<f64>,
) -> Result<(), String> {
    if command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err("a judge needs `command = [\"program\", \"arg\", ...]`".into());
    }
    if let Some(t) = timeout {
        if !(t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_SECS) {
            return Err(format!(
                "judge timeout must be above 0 and at most {MAX_TIMEOUT_SECS} seconds, got {t}"
            ));
        }
    }
    if let Some(t) = threshold {
        if !(0.0..=1.0).contains(&t) {
            return Err(format!("judge threshold must be in 0..1, got {t}"));
        }
    }
    Ok(())
}

/// Parses what a judge printed: one JSON object with a `score` in 0..1 and an optional
/// string `reason`.
pub fn parse_output(stdout: &str) -> Result<Verdict, JudgeError> {
    let garbage = || JudgeError::Output(excerpt(stdout.trim()));
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|_| garbage())?;
    let score = value
        .get("score")
        .and_then(serde_json::Value::as_f64)
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or_else(garbage)?;
    let reason = match value.get("reason") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(reason)) => Some(reason.clone()),
        Some(_) => return Err(garbage()),
    };
    Ok(Verdict { score, reason })
}

/// Runs the judge and grades the case: never fails, a broken judge scores 0 with why. With
/// the outcome, the grade the judge gave (`None` when it gave none), for its `metric`.
pub async fn score(
    name: String,
    command: &[String],
    input: &[u8],
    cwd: &Path,
    timeout: Option<f64>,
    threshold: Option<f64>,
) -> (ScoreOutcome, Option<f64>) {
    let limit = Duration::from_secs_f64(timeout.unwrap_or(DEFAULT_TIMEOUT_SECS));
    let threshold = threshold.unwrap_or(DEFAULT_THRESHOLD);
    match run(command, input, cwd, limit).await {
        Ok(verdict) => (
            ScoreOutcome {
                name,
                passed: verdict.score >= threshold,
                score: verdict.score,
                details: match verdict.reason {
                    Some(reason) if !reason.trim().is_empty() => reason,
                    _ => format!("scored {} with no reason", verdict.score),
                },
            },
            Some(verdict.score),
        ),
        Err(err) => (
            ScoreOutcome::binary(name, false, format!("judge failed: {err}")),
            None,
        ),
    }
}

/// Kills a process group (SIGKILL) when dropped: after the judge ended, on its timeout, and
/// when the run is dropped (Ctrl-C) while it runs.
struct GroupKill(Option<nix::unistd::Pid>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // ESRCH: the group is already gone.
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Runs the command and parses its verdict.
pub async fn run(
    command: &[String],
    input: &[u8],
    cwd: &Path,
    limit: Duration,
) -> Result<Verdict, JudgeError> {
    let Some((program, args)) = command.split_first() else {
        return Err(JudgeError::Output("no command".into()));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| JudgeError::Spawn {
            program: program.clone(),
            source,
        })?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(nix::unistd::Pid::from_raw);
    let group = GroupKill(pid);
    // The pipes are served by tasks of their own, so a judge that does not read its stdin
    // or fills its stdout cannot stall the wait for it.
    let writer = child.stdin.take().map(|mut stdin| {
        let input = input.to_vec();
        tokio::spawn(async move {
            // A judge may not read its input (EPIPE): that is its business.
            let _ = stdin.write_all(&input).await;
        })
    });
    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_capped(s, MAX_STDOUT)));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_capped(s, MAX_STDERR)));
    let ended = tokio::time::timeout(limit, exited(pid)).await;
    // Whatever the judge left running goes with it; then the leader is reaped.
    drop(group);
    let status = child.wait().await.map_err(JudgeError::Wait);
    if let Some(writer) = writer {
        writer.abort();
    }
    if ended.is_err() {
        for task in [out, err].into_iter().flatten() {
            task.abort();
        }
        return Err(JudgeError::Timeout(limit));
    }
    let status = status?;
    let stdout = collect(out).await;
    let stderr = collect(err).await;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let stderr = stderr.trim();
        return Err(JudgeError::Failed {
            status: status.to_string(),
            stderr: if stderr.is_empty() {
                String::new()
            } else {
                format!(": {}", excerpt(stderr))
            },
        });
    }
    parse_output(&String::from_utf8_lossy(&stdout))
}

/// Waits until the process `pid` has exited without reaping it (`WNOWAIT`), so its process
/// group can be killed while its id still cannot be reused.
async fn exited(pid: Option<nix::unistd::Pid>) {
    let Some(pid) = pid else { return };
    let waiting = tokio::task::spawn_blocking(move || {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        loop {
            match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(nix::errno::Errno::EINTR) => continue,
                _ => return,
            }
        }
    });
    let _ = waiting.await;
}

async fn collect(task: Option<tokio::task::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    let Some(task) = task else {
        return Vec::new();
    };
    let abort = task.abort_handle();
    match tokio::time::timeout(DRAIN, task).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            abort.abort();
            Vec::new()
        }
    }
}

/// Reads a pipe to its end, keeping the first `cap` bytes.
async fn read_capped(mut pipe: impl AsyncRead + Unpin, cap: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_one_json_object_with_a_score_in_range() {
        assert_eq!(
            parse_output(" {\"score\": 0.8, \"reason\": \"close\"}\n").unwrap(),
            Verdict {
                score: 0.8,
                reason: Some("close".into())
            }
        );
        assert_eq!(parse_output("{\"score\": 1}").unwrap().reason, None);
        for bad in [
            "",
            "0.8 close",
            "{\"score\": 1.5}",
            "{\"score\": -0.1}",
            "{\"score\": \"1\"}",
            "{\"reason\": \"no score\"}",
            "{\"score\": 1, \"reason\": 3}",
            "[1]",
        ] {
            let err = parse_output(bad).unwrap_err().to_string();
            assert!(err.starts_with("printed no {\"score\""), "{bad}: {err}");
        }
    }

    #[test]
    fn fields_are_checked_when_read() {
        let cmd = ["judge.sh".to_string()];
        assert!(validate(&cmd, None, None).is_ok());
        assert!(validate(&cmd, Some(0.5), Some(1.0)).is_ok());
        assert!(validate(&[], None, None).unwrap_err().contains("command"));
        assert!(validate(&[" ".into()], None, None).is_err());
        assert!(validate(&cmd, Some(0.0), None)
            .unwrap_err()
            .contains("timeout"));
        assert!(validate(&cmd, Some(f64::NAN), None).is_err());
        assert!(validate(&cmd, Some(7200.0), None).is_err());
        assert!(validate(&cmd, None, Some(1.1))
            .unwrap_err()
            .contains("threshold"));
        assert_eq!(DEFAULT_NAME, "llm.judge");
        assert_eq!(DEFAULT_THRESHOLD, 0.7);
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn a_judge_reads_the_case_and_runs_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("answer.txt"), "42").unwrap();
        let script = r#"input=$(cat); a=$(cat answer.txt); case "$input" in *needle*) printf '{"score": 0.9, "reason": "saw %s"}' "$a";; *) echo '{"score": 0}';; esac"#;
        let outcome = score(
            "j".into(),
            &sh(script),
            b"{\"x\": \"needle\"}",
            dir.path(),
            None,
            None,
        )
        .await;
        assert_eq!(outcome.1, Some(0.9), "the grade, for the judge's metric");
        let outcome = outcome.0;
        assert_eq!((outcome.score, outcome.passed), (0.9, true), "{outcome:?}");
        assert_eq!(outcome.details, "saw 42");
        let strict = score(
            "j".into(),
            &sh(script),
            b"{\"x\": \"needle\"}",
            dir.path(),
            None,
            Some(0.95),
        )
        .await
        .0;
        assert!(!strict.passed);
    }

    #[tokio::test]
    async fn a_broken_judge_scores_zero_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                sh("echo nope >&2; exit 3"),
                "exited with exit status: 3: \"nope\"",
            ),
            (sh("echo 'looks fine to me'"), "printed no {\"score\""),
            (vec!["/no/such/judge".into()], "cannot start /no/such/judge"),
        ];
        for (command, reason) in cases {
            let outcome = score("j".into(), &command, b"{}", dir.path(), None, None)
                .await
                .0;
            assert_eq!((outcome.score, outcome.passed), (0.0, false));
            assert!(outcome.details.contains(reason), "{command:?}: {outcome:?}");
        }
    }

    #[tokio::test]
    async fn a_slow_judge_is_killed_with_its_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // The judge starts a grandchild that would outlive it, then hangs.
        let script = format!("sleep 300 & echo $! > {}; sleep 300", pids.display());
        let started = std::time::Instant::now();
        let outcome = score("j".into(), &sh(&script), b"", dir.path(), Some(0.5), None)
            .await
            .0;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            outcome.details.contains("timed out after 500ms"),
            "{outcome:?}"
        );
        let grandchild = std::fs::read_to_string(&pids).unwrap();
        let grandchild = grandchild.trim().to_string();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            // Killed: gone, or a zombie left for init to reap (it is not our child).
            let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat"));
            stat.map_or(true, |s| s.contains(") Z "))
        });
        assert!(gone, "the judge's grandchild {grandchild} was left running");
    }

    #[tokio::test]
    async fn a_judge_that_exits_leaving_a_background_process_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        // The background sleep holds stdout open; the judge's end kills it.
        let script = "sleep 300 & echo '{\"score\": 1, \"reason\": \"ok\"}'";
        let started = std::time::Instant::now();
        let outcome = score("j".into(), &sh(script), b"", dir.path(), Some(30.0), None)
            .await
            .0;
        assert!(outcome.passed, "{outcome:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
