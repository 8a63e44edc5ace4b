//! What a session is made with and keeps for its life: its key, the configuration (replaced
//! whole on a reload), its workers' spec (which follows the request's Python and sandbox),
//! where its outputs spill, how it starts workers, and where it reports and counts.

use super::messages::SessionEvent;
use super::SessionKey;
use crate::artifacts::ArtifactStore;
use crate::output::SinkLimits;
use crate::session::CellReport;
use crate::spawn::{Launcher, WorkerSpec};
use actix::Recipient;
use cellvisor_config::Config;
use std::sync::Arc;

/// The session's fixed setup (the part of [`super::SessionSetup`] it keeps for its life).
pub(crate) struct Setup {
    pub key: SessionKey,
    pub config: Arc<Config>,
    pub spec: WorkerSpec,
    /// Where spilled outputs go, and their total size.
    pub artifacts: Arc<ArtifactStore>,
    pub launcher: Arc<dyn Launcher>,
    /// Where the session reports its state.
    pub events: Recipient<SessionEvent>,
    /// Where its cells, starts, crashes and kills are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl Setup {
    /// The output limits of cell `cell_id` on worker `pid`: the configuration's, with a
    /// request's tighter cap (`job_cap`); a sandboxed session's artifacts (or one with its
    /// own uid) go in its own directory, which it reads them back from.
    pub fn sink_limits(
        &self,
        job_cap: Option<u64>,
        pid: u32,
        cell_id: u64,
        own_dir: bool,
    ) -> SinkLimits {
        let output = &self.config.output;
        let max_bytes = capped(output.max_bytes.as_u64(), job_cap);
        SinkLimits {
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
            max_lines: output.max_lines,
            max_line_length: output.max_line_length,
            artifact_name: artifact_name(
                &self.key.session.dir_name(),
                self.key.language,
                pid,
                cell_id,
                own_dir || self.spec.uid.is_some(),
            ),
            artifacts: Arc::clone(&self.artifacts),
        }
    }

    /// The limits a `wait` that asked for at most `max_bytes` cuts a result with (its
    /// `ticket` names the artifact the whole text goes to).
    pub fn wait_limits(&self, max_bytes: usize, cell_id: u64, ticket: u64) -> SinkLimits {
        SinkLimits {
            max_bytes,
            max_lines: self.config.output.max_lines,
            max_line_length: self.config.output.max_line_length,
            artifact_name: format!(
                "{}-{}-wait-{}-{}.txt",
                self.key.session.dir_name(),
                self.key.language,
                cell_id,
                ticket
            ),
            artifacts: Arc::clone(&self.artifacts),
        }
    }

    /// Counts a code cell's end (its status, duration and output) in the metrics.
    pub fn count_cell(&self, report: &CellReport) {
        self.metrics.cell_ended(
            self.key.language,
            report.status,
            report.duration_ms / 1000.0,
            report.output.len(),
        );
    }
}

/// The configuration's cap on a cell's kept output, tightened by a request's own.
fn capped(configured: u64, requested: Option<u64>) -> u64 {
    requested.map_or(configured, |cap| cap.min(configured))
}

/// A cell's artifact file, relative to the artifact directory: a sandboxed session's go in a
/// directory of its own, the only one its worker may read.
fn artifact_name(
    session: &str,
    language: cellvisor_ipc::Language,
    pid: u32,
    cell_id: u64,
    own_dir: bool,
) -> String {
    let file = format!("{session}-{language}-{pid}-{cell_id}.txt");
    if own_dir {
        format!("{session}/{file}")
    } else {
        file
    }
}

#[cfg(test)]
impl Setup {
    /// A setup for unit tests: session `s` in Python, its files under `dir`, the default
    /// configuration, a scripted launcher; its events go to `events`.
    pub(crate) fn for_tests(dir: &std::path::Path, events: Recipient<SessionEvent>) -> Setup {
        let key = SessionKey::for_tests();
        Setup {
            config: Arc::new(Config::default()),
            spec: WorkerSpec {
                exe: "/nonexistent/cellvisor".into(),
                exe_args: Vec::new(),
                fallback: None,
                language: key.language,
                run_dir: dir.to_path_buf(),
                cwd: None,
                env: crate::environment::WorkerEnv::default(),
                start_timeout: std::time::Duration::from_secs(5),
                rlimits: Vec::new(),
                zygote: false,
                preload: Vec::new(),
                uid: None,
                handover: None,
            },
            key,
            artifacts: ArtifactStore::new(dir.join("artifacts"), u64::MAX),
            launcher: crate::testing::FakeLauncher::new(),
            events,
            metrics: Arc::new(crate::metrics::Metrics::new("node-a")),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use actix::prelude::*;

    /// Takes a session's events and forgets them.
    pub(crate) struct Ignore;

    impl Actor for Ignore {
        type Context = Context<Self>;
    }

    impl Handler<SessionEvent> for Ignore {
        type Result = ();
        fn handle(&mut self, _: SessionEvent, _: &mut Context<Self>) {}
    }

    #[test]
    fn a_requests_cap_only_tightens_the_configured_one() {
        assert_eq!(capped(1000, None), 1000);
        assert_eq!(capped(1000, Some(10)), 10);
        assert_eq!(capped(1000, Some(5000)), 1000);
    }

    #[test]
    fn a_sandboxed_sessions_artifacts_go_in_its_own_directory() {
        assert_eq!(
            artifact_name("s", cellvisor_ipc::Language::Lua, 7, 3, false),
            "s-lua-7-3.txt"
        );
        assert_eq!(
            artifact_name("s", cellvisor_ipc::Language::Lua, 7, 3, true),
            "s/s-lua-7-3.txt"
        );
    }

    #[actix_rt::test]
    async fn limits_follow_the_configuration_the_request_and_the_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut setup = Setup::for_tests(dir.path(), Ignore.start().recipient());
        let configured = setup.config.output.max_bytes.as_u64() as usize;
        let limits = setup.sink_limits(None, 7, 3, false);
        assert_eq!(limits.max_bytes, configured);
        assert_eq!(limits.artifact_name, "s-py-7-3.txt");
        assert_eq!(setup.sink_limits(Some(10), 7, 3, false).max_bytes, 10);
        setup.spec.uid = Some(1234);
        let own = setup.sink_limits(None, 7, 3, false);
        assert_eq!(
            own.artifact_name, "s/s-py-7-3.txt",
            "a uid's session reads its own"
        );
        let wait = setup.wait_limits(5, 3, 9);
        assert_eq!(
            (wait.max_bytes, wait.artifact_name.as_str()),
            (5, "s-py-wait-3-9.txt")
        );
    }
}
