//! State that survives a worker, as hosts ask for it: named checkpoints (`checkpoint`,
//! `restore`, `checkpoints`) and the namespace's user names (`names`). Each is a state task
//! sent to the session like a cell (it waits its turn behind the session's cells, and starts
//! the session's worker, restoring its latest snapshot, if it has none live).

use super::eval::RequestPin;
use super::{Cellvisor, RequestError, SessionRef};
use crate::names::SessionName;
use crate::session::state::{HostAsk, StateJob};
use crate::session::{CellJob, SessionKey};
use crate::snapshots::policy::{self, describe};
use crate::state::{CheckpointInfo, RestoredState, SessionNames, StateLedger};
use crate::supervisor::Submit;
use cellvisor_ipc::state::StateReport;
use cellvisor_ipc::Language;
use std::sync::atomic::Ordering;
use tokio::sync::{oneshot, watch};

impl Cellvisor {
    /// Saves the namespace of `session` (in `language`, or in each language it has a live
    /// worker or a snapshot in) as the checkpoint `name`, replacing one of the same name.
    pub async fn checkpoint<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
        name: &str,
    ) -> Result<Vec<CheckpointInfo>, RequestError> {
        let named = session.into();
        let key = self.resolve_one(named).await?;
        let (session, shown) = (&key, named.name);
        check_name(name)?;
        let languages = match language {
            Some(language) => vec![language],
            None => self.languages_with_state(session).await?,
        };
        if languages.is_empty() {
            return Err(RequestError::NothingToCheckpoint(shown.to_string()));
        }
        // The files first: a workspace that cannot be recorded leaves no half checkpoint.
        let files = self.checkpoint_files(session, shown, name).await?;
        for &language in &languages {
            match self
                .ask(session, language, HostAsk::Checkpoint(name.to_string()))
                .await?
            {
                StateReport::Saved { .. } => {}
                other => return Err(refused(shown, language, other)),
            }
        }
        let store = self.snapshot_store()?;
        Ok(shown_as(
            store
                .checkpoints(session)
                .into_iter()
                .filter(|c| c.name == name && languages.contains(&c.language))
                .map(|c| CheckpointInfo {
                    workspace: files.clone(),
                    ..c
                })
                .collect(),
            shown,
        ))
    }

    /// Replaces the namespace of `session` (in `language`, or in each language that has the
    /// checkpoint) with what the checkpoint `name` holds; answers each language's ledger.
    pub async fn restore<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Option<Language>,
        name: &str,
    ) -> Result<Vec<RestoredState>, RequestError> {
        let named = session.into();
        let key = self.resolve_one(named).await?;
        let (session, shown) = (&key, named.name);
        check_name(name)?;
        let store = self.snapshot_store()?;
        let having = store.languages_with_checkpoint(session, name);
        let languages: Vec<Language> = match language {
            Some(language) => vec![language],
            None => having.clone(),
        };
        if languages.is_empty() || languages.iter().any(|l| !having.contains(l)) {
            return Err(RequestError::NoSuchCheckpoint {
                session: shown.to_string(),
                language,
                name: name.to_string(),
            });
        }
        // The files first: a recording refused (altered, forged) restores nothing.
        let files = self.restore_files(session, shown, name).await?;
        let mut restored = Vec::new();
        for language in languages {
            match self
                .ask(session, language, HostAsk::Restore(name.to_string()))
                .await?
            {
                StateReport::Loaded {
                    restored: names,
                    skipped,
                    meta,
                } => restored.push(RestoredState {
                    language,
                    ledger: StateLedger {
                        files: files.clone(),
                        ..policy::ledger(names, skipped, &meta, 0, Some(name.to_string()))
                    },
                }),
                other => return Err(refused(shown, language, other)),
            }
        }
        Ok(restored)
    }

    /// The checkpoints `session` has, in every language, with their sizes and times.
    pub async fn checkpoints<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
    ) -> Result<Vec<CheckpointInfo>, RequestError> {
        let named = session.into();
        let key = self.resolve_one(named).await?;
        Ok(shown_as(
            self.snapshot_store()?.checkpoints(&key),
            named.name,
        ))
    }

    /// The user names of `session`'s namespace in `language`: type, size estimate and whether
    /// a snapshot would keep each (starting the session's worker, and restoring its
    /// snapshot, if it has none live).
    pub async fn names<'a>(
        &self,
        session: impl Into<SessionRef<'a>>,
        language: Language,
    ) -> Result<SessionNames, RequestError> {
        let named = session.into();
        let key = self.resolve_one(named).await?;
        match self.ask(&key, language, HostAsk::Names).await? {
            StateReport::Names(mut names) => {
                names.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(SessionNames {
                    session: named.name.to_string(),
                    language,
                    names,
                })
            }
            other => Err(refused(named.name, language, other)),
        }
    }

    fn snapshot_store(&self) -> Result<&crate::snapshots::SnapshotStore, RequestError> {
        self.snapshots.as_deref().ok_or_else(|| {
            RequestError::State(
                "snapshots are off: the snapshot directory could not be opened (see the \
                 daemon's log and snapshots.dir)"
                    .into(),
            )
        })
    }

    /// The languages `session` has a live worker or a latest snapshot in.
    async fn languages_with_state(
        &self,
        session: &SessionName,
    ) -> Result<Vec<Language>, RequestError> {
        let mut languages: Vec<Language> = self
            .raw_status()
            .await?
            .into_iter()
            .filter(|row| row.session == session.as_str())
            .map(|row| row.language)
            .collect();
        if let Some(store) = &self.snapshots {
            languages.extend(store.languages_with_latest(session));
        }
        languages.sort();
        languages.dedup();
        Ok(languages)
    }

    /// Sends `ask` to the session as a state task, in its turn among the session's requests;
    /// the worker's report.
    async fn ask(
        &self,
        session: &SessionName,
        language: Language,
        ask: HostAsk,
    ) -> Result<StateReport, RequestError> {
        self.refuse_if_draining(session).await?;
        let lock = self.request_lock(session);
        let _turn = lock.lock().await;
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let _pin = RequestPin {
            supervisor: self.supervisor.clone(),
            request,
        };
        let (_requester_alive, requester) = watch::channel(());
        let (reply, outcome) = oneshot::channel();
        let (report, reported) = oneshot::channel();
        let job = CellJob::for_state(
            self.next_cell.fetch_add(1, Ordering::Relaxed),
            language,
            requester,
            reply,
            StateJob::for_host(ask, report),
        );
        let key = SessionKey {
            session: session.clone(),
            language,
        };
        self.supervisor
            .send(Submit {
                key,
                cwd: None,
                job,
                request,
            })
            .await
            .map_err(|_| RequestError::Stopped)?;
        let cell = outcome.await;
        // In etcd mode a checkpoint's report follows its commit, after the task's end.
        match reported.await {
            Ok(report) => Ok(report),
            Err(_) => Err(RequestError::State(match cell {
                Ok(cell) => cell.output.trim_end().to_string(),
                Err(_) => format!(
                    "session {}/{language} ended before answering",
                    Cellvisor::shown_name(session)
                ),
            })),
        }
    }
}

/// Checkpoints as hosts know them: under the session's name, not a pair's key.
fn shown_as(mut checkpoints: Vec<CheckpointInfo>, shown: &str) -> Vec<CheckpointInfo> {
    for checkpoint in &mut checkpoints {
        checkpoint.session = shown.to_string();
    }
    checkpoints
}

fn check_name(name: &str) -> Result<(), RequestError> {
    crate::snapshots::check_checkpoint_name(name).map_err(RequestError::CheckpointName)
}

/// A report that is not the one asked for, as the host's error.
fn refused(session: &str, language: Language, report: StateReport) -> RequestError {
    let why = match report {
        StateReport::Refused(refusal) => describe(&refusal),
        other => format!("unexpected answer {other:?}"),
    };
    RequestError::State(format!("session {session}/{language}: {why}"))
}
