//! One sampler of the workers' process trees per supervisor, serving `limits.max-rss` (a
//! `MemoryTick` to each session) and `status` (memory and CPU per row).

use super::messages::SampleTick;
use super::Supervisor;
use crate::locking::lock;
use crate::session::{MemoryTick, SessionState, SessionStatus};
use crate::usage::ProcessSampler;
use actix::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the workers' memory is sampled while a cell runs and `limits.max-rss` is set:
/// a worker can outgrow its cap by at most what it allocates in this time. Reading the known
/// members of each worker tree costs one small `/proc` read per process.
pub const BUSY_SAMPLE_INTERVAL: Duration = Duration::from_millis(50);

/// How often, at most, worker trees are discovered afresh while sampling fast (a new child
/// of a cell is measured from then on).
const TREE_REFRESH: Duration = Duration::from_secs(1);

impl Handler<SampleTick> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: SampleTick, ctx: &mut Context<Self>) {
        self.sample_timer = None;
        self.sample_memory(ctx);
        self.arm_sampling(ctx);
    }
}

impl Supervisor {
    /// Schedules the next sample: fast while a cell runs under a memory cap, else once per
    /// heartbeat interval.
    pub(super) fn arm_sampling(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.sample_timer.take() {
            ctx.cancel_future(timer);
        }
        let heartbeat = self.config.sessions.heartbeat_interval;
        self.sampling_fast = self.caps_memory()
            && self
                .sessions
                .values()
                .any(|e| e.state == SessionState::Busy);
        let wait = if self.sampling_fast {
            BUSY_SAMPLE_INTERVAL.min(heartbeat)
        } else {
            heartbeat
        };
        self.sample_timer = Some(ctx.notify_later(SampleTick, wait));
    }

    /// Measures every worker's tree once (on the blocking pool) and tells each session its
    /// figure.
    pub(super) fn sample_memory(&mut self, ctx: &mut Context<Self>) {
        if !self.caps_memory() {
            return;
        }
        let roots: Vec<u32> = self.sessions.values().filter_map(|e| e.pid).collect();
        let refresh = TREE_REFRESH.min(self.config.sessions.heartbeat_interval);
        let discover = self.last_discovery.is_none_or(|at| at.elapsed() >= refresh);
        if discover {
            self.last_discovery = Some(Instant::now());
        }
        let sampler = Arc::clone(&self.sampler);
        let sample = tokio::task::spawn_blocking(move || lock(&sampler).sample(&roots, discover));
        ctx.spawn(sample.into_actor(self).map(|usage, act, _| {
            let Ok(usage) = usage else {
                return;
            };
            for entry in act.sessions.values() {
                if let Some((pid, usage)) = entry.pid.and_then(|pid| Some((pid, usage.get(&pid)?)))
                {
                    entry.addr.do_send(MemoryTick {
                        pid,
                        rss: usage.rss_bytes,
                    });
                }
            }
        }));
    }
}

/// Adds each worker tree's memory and CPU to `rows`, from a fresh sample taken on the
/// blocking pool.
pub(super) async fn add_usage(sampler: &Arc<Mutex<ProcessSampler>>, rows: &mut [SessionStatus]) {
    let pids: Vec<u32> = rows.iter().filter_map(|r| r.pid).collect();
    let sampler = Arc::clone(sampler);
    let Ok(usage) = tokio::task::spawn_blocking(move || lock(&sampler).usage(&pids)).await else {
        return;
    };
    for row in rows {
        if let Some(u) = row.pid.and_then(|pid| usage.get(&pid)) {
            row.rss_bytes = Some(u.rss_bytes);
            row.cpu_percent = Some(u.cpu_percent);
        }
    }
}
