//! A session's state tasks: saving its namespace before a planned stop or after a cell,
//! restoring it on a fresh worker before the next cell, and a host's checkpoints and
//! `names`. A task runs on the worker like a cell (one at a time, under
//! `snapshots.timeout`); what it is for ([`StatePurpose`]) decides what happens when it ends.
//! Which stops save is [`snapshots::policy`](crate::snapshots::policy)'s decision.

use super::{CellJob, Session, Worker};
use crate::cell::CellStatus;
use crate::session::CellReport;
use crate::snapshots::policy::{self, SaveReason};
use crate::state::StateLedger;
use actix::prelude::*;
use cellvisor_ipc::state::{LoadOrder, SaveOrder, StateRefusal, StateReport, StateTask};
use std::time::SystemTime;
use tokio::sync::{oneshot, watch};

/// A state task and what it is for.
pub struct StateJob {
    /// The task; a host's is made from its [`HostAsk`] when it runs (the session knows its
    /// files and its key).
    task: Option<StateTask>,
    pub(super) purpose: StatePurpose,
    /// Keeps the job's requester alive for the session's own tasks (nobody else waits).
    _requester: Option<watch::Sender<()>>,
}

impl StateJob {
    /// A host's task: its report goes back on `report`.
    pub fn for_host(ask: HostAsk, report: oneshot::Sender<StateReport>) -> StateJob {
        StateJob {
            task: None,
            purpose: StatePurpose::Host { ask, report },
            _requester: None,
        }
    }
}

/// What a host asks of a session's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostAsk {
    /// Save it as the checkpoint of this (checked) name.
    Checkpoint(String),
    /// Replace it with the checkpoint of this (checked) name.
    Restore(String),
    /// List its user names.
    Names,
}

/// Why a state task runs.
pub enum StatePurpose {
    /// A host asked (`checkpoint`, `restore`, `names`).
    Host {
        ask: HostAsk,
        report: oneshot::Sender<StateReport>,
    },
    /// The latest snapshot, restored on a fresh worker before the next cell.
    Restore { cells_since: u64 },
    /// Saved before the worker stops.
    BeforeStop(AfterSave, SaveReason),
    /// Saved after a successful cell (`every-cell`); that cell's answer waits for the save,
    /// so it can say whether its state was saved.
    AfterCell(Option<Box<super::saved::HeldCell>>),
}

/// What a save before a stop is followed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSave {
    /// The session closes (an eviction, the daemon's stop).
    Close,
    /// The worker is replaced and the snapshot restored on the new one (memory recycle).
    Recycle,
}

/// What became of the snapshot a closing session tried to save (for the next cell's notice).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SnapshotFate {
    /// None was tried (`never`, a host's close, a worker that was busy or gone).
    #[default]
    NotTried,
    /// It was written: the next cell restores it.
    Saved,
    /// It was not written, for this reason.
    Refused(StateRefusal),
}

impl Session {
    /// Saves the namespace before the planned stop `then`, if the configuration wants a
    /// snapshot for `reason` and the worker is live and idle. True: the save runs, and the
    /// stop follows when it ends.
    pub(super) fn save_before_stop(
        &mut self,
        ctx: &mut Context<Self>,
        reason: SaveReason,
        then: AfterSave,
    ) -> bool {
        let idle = self.turns.running.is_none() && matches!(self.slot.worker, Worker::Ready { .. });
        if !idle
            || self.saves.snapshots.is_none()
            || !policy::saves(self.setup.config.snapshots.when, reason)
        {
            return false;
        }
        let Some(task) = self.save_task(reason, None) else {
            return false;
        };
        self.run_own_task(ctx, task, StatePurpose::BeforeStop(then, reason));
        true
    }

    /// Whether a save is under way that a planned stop waits for: one before the stop, or
    /// an `every-cell` save (killing it would lose the snapshot a fleet's next node needs;
    /// the stop follows it, bounded by `snapshots.timeout`).
    pub(super) fn saving_before_stop(&self) -> bool {
        self.turns.running.as_ref().is_some_and(|r| {
            matches!(
                r.job.state.as_ref().map(|s| &s.purpose),
                Some(StatePurpose::BeforeStop(..) | StatePurpose::AfterCell(_))
            )
        })
    }

    /// After a successful cell under `every-cell`: saves the namespace now, before the next
    /// cell (which waits for it) and before the cell's answer, which then says whether its
    /// state was saved. Hands the cell back when no save runs (the caller answers it).
    pub(super) fn save_after_cell(
        &mut self,
        ctx: &mut Context<Self>,
        held: super::saved::HeldCell,
    ) -> Option<super::saved::HeldCell> {
        if !policy::saves(self.setup.config.snapshots.when, SaveReason::AfterCell) {
            return Some(held);
        }
        // In etcd mode a cell whose due save is not begun (the session stops here: its lease
        // was lost; or no blob can be named under a lease) is answered `saved: false`, never
        // as a `complete` that says nothing of its state.
        let fenced = self.saves.fenced();
        let task = if self.is_closing() {
            None
        } else {
            self.save_task(SaveReason::AfterCell, None)
        };
        let Some(task) = task else {
            if fenced {
                let why = "the session stopped on this node before its state after this cell \
                           was saved (this node may no longer hold the session's lease)";
                self.deliver_held(held, super::saved::not_written(why.into()));
                return None;
            }
            return Some(held);
        };
        self.run_own_task(ctx, task, StatePurpose::AfterCell(Some(Box::new(held))));
        None
    }

    /// Restores the latest snapshot before the next cell, if one is due. True: it runs.
    pub(super) fn restore_if_due(&mut self, ctx: &mut Context<Self>) -> bool {
        if !matches!(self.slot.worker, Worker::Ready { .. }) || self.turns.running.is_some() {
            return false;
        }
        let Some(cells_since) = self.saves.take_restore() else {
            return false;
        };
        match self.latest_restore_task() {
            Ok(Some(task)) => {
                self.run_own_task(ctx, task, StatePurpose::Restore { cells_since });
                true
            }
            Ok(None) => false,
            Err(refusal) => {
                tracing::warn!(session = %self.setup.key, "snapshot not restored: {refusal}");
                self.add_notice(format!("state not restored: {refusal}"));
                false
            }
        }
    }

    /// The order to save the namespace to the checkpoint `name`, or to the latest snapshot.
    pub(crate) fn save_task(&self, reason: SaveReason, name: Option<&str>) -> Option<StateTask> {
        let store = self.saves.snapshots.as_ref()?;
        if let Err(err) = store.prepare(&self.setup.key) {
            // The worker says why in its report, when it cannot write there either.
            tracing::warn!(session = %self.setup.key, "snapshot directory: {err}");
        }
        let path = match name {
            Some(name) => store.checkpoint(&self.setup.key, name),
            None => self.latest_save_path()?,
        };
        Some(StateTask::Save(Box::new(SaveOrder {
            path: path.display().to_string(),
            key: store.session_key(&self.setup.key),
            max_bytes: self.setup.config.snapshots.max_size.as_u64(),
            taken_at: crate::snapshots::rfc3339(SystemTime::now()),
            reason: reason.as_str().to_string(),
            node: store.node().to_string(),
        })))
    }

    fn run_own_task(&mut self, ctx: &mut Context<Self>, task: StateTask, purpose: StatePurpose) {
        let (requester_alive, requester) = watch::channel(());
        let job = CellJob::for_state(
            self.saves.next_own_task(),
            self.setup.key.language,
            requester,
            oneshot::channel().0,
            StateJob {
                task: Some(task),
                purpose,
                _requester: Some(requester_alive),
            },
        );
        self.run_cell(ctx, job);
    }

    /// A state task ended with `report` (none if the worker sent none).
    pub(super) fn state_task_done(
        &mut self,
        job: StateJob,
        report: Option<StateReport>,
        ctx: &mut Context<Self>,
    ) {
        let report = report.unwrap_or_else(|| {
            StateReport::Refused(StateRefusal::Failed {
                why: "the worker ended the task without a report".into(),
            })
        });
        match job.purpose {
            StatePurpose::Host { ask, report: reply } => {
                if matches!(report, StateReport::Loaded { .. }) {
                    self.saves.in_step();
                }
                match (ask, &report) {
                    // In etcd mode, a checkpoint is one once its pointer is committed.
                    (HostAsk::Checkpoint(name), StateReport::Saved { .. }) => {
                        self.commit_checkpoint(ctx, &name, report, reply);
                    }
                    _ => {
                        let _ = reply.send(report);
                    }
                }
            }
            StatePurpose::Restore { cells_since } => self.restored(report, cells_since),
            StatePurpose::AfterCell(held) => {
                let held = held.map(|held| *held);
                self.saved_after_cell(ctx, report, job.task.as_ref(), held);
            }
            StatePurpose::BeforeStop(then, reason) => {
                let fate = match report {
                    StateReport::Saved { .. } => {
                        self.commit_saved(ctx, job.task.as_ref(), None);
                        SnapshotFate::Saved
                    }
                    StateReport::Refused(refusal) => {
                        tracing::warn!(session = %self.setup.key, "snapshot before stop not written: {}", policy::describe(&refusal));
                        SnapshotFate::Refused(refusal)
                    }
                    _ => SnapshotFate::NotTried,
                };
                match then {
                    // The workspace goes with a session that closes for a planned stop.
                    AfterSave::Close => self.save_files_then(ctx, reason, move |s, ctx| {
                        s.stop_after_save(ctx, then, fate)
                    }),
                    AfterSave::Recycle => self.stop_after_save(ctx, then, fate),
                }
            }
        }
    }

    /// The save after a cell (`task`) ended with `report`: the cell held for it is answered
    /// (or, in etcd mode, once its commit is decided), then the workspace is saved too.
    fn saved_after_cell(
        &mut self,
        ctx: &mut Context<Self>,
        report: StateReport,
        task: Option<&StateTask>,
        held: Option<super::saved::HeldCell>,
    ) {
        match report {
            StateReport::Saved { .. } => {
                self.saves.in_step();
                // Answered now, or once its commit is decided (etcd mode).
                if let Some(held) = self.commit_saved(ctx, task, held) {
                    self.deliver_held(held, super::saved::written());
                }
            }
            StateReport::Refused(refusal) => {
                let why = policy::describe(&refusal);
                tracing::warn!(session = %self.setup.key, "snapshot after cell not written: {why}");
                if let Some(held) = held {
                    self.deliver_held(held, super::saved::not_written(why));
                }
            }
            _ => {
                if let Some(held) = held {
                    let why = "the worker answered the save with no report".into();
                    self.deliver_held(held, super::saved::not_written(why));
                }
            }
        }
        // The workspace too, so a node's crash loses only what the last cell did;
        // a close that came during the save waited for both.
        self.save_files_then(ctx, SaveReason::AfterCell, |s, ctx| {
            if s.is_closing() {
                s.stop_worker(ctx);
            }
        });
    }

    /// The worker ended while a state task ran on it: the task is over, without a report.
    pub(super) fn state_task_lost(&mut self, job: StateJob, loss: &str) {
        let refusal = StateRefusal::Failed {
            why: format!("the worker ended during the task: {loss}"),
        };
        match job.purpose {
            StatePurpose::Host { report, .. } => {
                let _ = report.send(StateReport::Refused(refusal));
            }
            StatePurpose::Restore { .. } => {
                // Never again from this snapshot: it may be what ends the worker.
                self.add_notice(policy::restore_failed_notice(&refusal));
            }
            StatePurpose::AfterCell(held) => {
                if let Some(held) = held {
                    let why = format!("the worker ended during the save: {loss}");
                    self.deliver_held(*held, super::saved::not_written(why));
                }
            }
            StatePurpose::BeforeStop(AfterSave::Close, _) => {
                self.closing.fate = SnapshotFate::Refused(refusal);
            }
            StatePurpose::BeforeStop(AfterSave::Recycle, _) => {}
        }
    }

    fn restored(&mut self, report: StateReport, cells_since: u64) {
        match report {
            StateReport::Loaded {
                restored,
                skipped,
                meta,
            } => {
                self.saves.in_step();
                let ledger = policy::ledger(restored, skipped, &meta, cells_since, None);
                let this_node = self
                    .saves
                    .snapshots
                    .as_ref()
                    .map_or("", |store| store.node());
                self.add_notice(policy::restored_notice(&ledger, this_node));
                self.saves.ledger = Some(ledger);
                self.touch_latest();
            }
            StateReport::Refused(StateRefusal::Missing) => {}
            StateReport::Refused(refusal) => {
                tracing::warn!(session = %self.setup.key, "snapshot not restored: {}", policy::describe(&refusal));
                self.add_notice(policy::restore_failed_notice(&refusal));
                if matches!(refusal, StateRefusal::Tampered { .. }) {
                    // Refused once is refused for good: it must not be tried at every start.
                    self.delete_latest();
                }
            }
            _ => {}
        }
    }

    fn stop_after_save(&mut self, ctx: &mut Context<Self>, then: AfterSave, fate: SnapshotFate) {
        match then {
            AfterSave::Close => {
                self.closing.fate = fate;
                self.stop_worker(ctx);
            }
            AfterSave::Recycle => {
                if fate == SnapshotFate::Saved {
                    self.saves.restore_next(true);
                }
                self.closing.then(super::closing::AfterStop::Restart);
                self.stop_worker(ctx);
            }
        }
    }

    /// The task `job` sends its worker; `None` when the session has no snapshot directory.
    fn task_of(&self, job: &StateJob) -> Option<StateTask> {
        if let Some(task) = &job.task {
            return Some(task.clone());
        }
        let StatePurpose::Host { ask, .. } = &job.purpose else {
            return None;
        };
        match ask {
            HostAsk::Names => Some(StateTask::Names),
            HostAsk::Checkpoint(name) => self.save_task(SaveReason::Checkpoint, Some(name)),
            HostAsk::Restore(name) => {
                let store = self.saves.snapshots.as_ref()?;
                Some(StateTask::Load(Box::new(LoadOrder {
                    path: store
                        .checkpoint(&self.setup.key, name)
                        .display()
                        .to_string(),
                    key: store.session_key(&self.setup.key),
                    replace: true,
                })))
            }
        }
    }

    /// The task `job` sends its worker, or why it must not run: `Err(None)` when the session
    /// has no snapshot directory, `Err(Some(why))` in etcd mode for a restore of a
    /// checkpoint that is not the committed one.
    pub(super) fn state_task(&self, job: &StateJob) -> Result<StateTask, Option<String>> {
        if let StatePurpose::Host {
            ask: HostAsk::Restore(name),
            ..
        } = &job.purpose
        {
            if let Some(why) = self.checkpoint_refusal(name) {
                return Err(Some(why));
            }
        }
        self.task_of(job).ok_or(None)
    }

    /// A host's state task that cannot run (no snapshot directory: `why` is `None`), answered
    /// at once.
    pub(super) fn refuse_state_job(&mut self, job: CellJob, why: Option<String>) {
        let why = why.unwrap_or_else(|| {
            "snapshots are off: the snapshot directory could not be opened (see the daemon's \
             log and snapshots.dir)"
                .into()
        });
        if let Some(StatePurpose::Host { report, .. }) = job.state.map(|s| s.purpose) {
            let _ = report.send(StateReport::Refused(StateRefusal::Failed {
                why: why.clone(),
            }));
        }
        let _ = job.reply.send(CellReport::error(why));
    }

    /// The ledger for the next host cell: a restore just before it.
    pub(super) fn take_ledger(&mut self) -> Option<StateLedger> {
        self.saves.ledger.take()
    }

    pub(super) fn add_notice(&mut self, line: String) {
        self.notice.add(line);
    }

    /// A restored snapshot counts as used: the sweep's `ttl` runs from now.
    fn touch_latest(&self) {
        if let Some(store) = &self.saves.snapshots {
            let latest = store.latest(&self.setup.key);
            if let Ok(file) = std::fs::File::options().append(true).open(&latest) {
                let _ = file.set_modified(SystemTime::now());
            }
        }
    }

    /// Deletes the latest snapshot: the namespace it held is gone on purpose (a reset, another
    /// Python or sandbox), or it was refused.
    pub(super) fn delete_latest(&mut self) {
        self.saves.cancel_restore();
        if self.forget_fenced() {
            return;
        }
        if let Some(store) = &self.saves.snapshots {
            let latest = store.latest(&self.setup.key);
            if let Err(err) = std::fs::remove_file(&latest) {
                if err.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(session = %self.setup.key, "cannot delete {}: {err}", latest.display());
                }
            }
        }
    }

    /// After a worker was lost: the next worker restores the latest snapshot, if there is
    /// one. True: it will.
    pub(super) fn restore_after_loss(&mut self) -> bool {
        let due = self.saves.snapshots.as_ref().is_some_and(|store| {
            policy::restores_latest(self.setup.config.snapshots.when)
                && store.has_latest(&self.setup.key)
        });
        if due {
            self.saves.restore_next(false);
        }
        due
    }
}

/// A state task's report as the host's `reply` gets it (the report itself goes on the
/// purpose's own channel).
pub(super) fn task_report(outcome: &cellvisor_ipc::CellOutcome, output: String) -> CellReport {
    let mut report = CellReport::error(output);
    report.status = match outcome {
        cellvisor_ipc::CellOutcome::Completed => CellStatus::Complete,
        cellvisor_ipc::CellOutcome::Failed { .. }
        | cellvisor_ipc::CellOutcome::OutOfMemory { .. } => CellStatus::Error,
        cellvisor_ipc::CellOutcome::Interrupted => CellStatus::Cancelled,
    };
    report
}
