//! At the `landlock` level a network client's state task (`restore`, `checkpoint`, `names`)
//! must run in a worker the level confined. A worker started by a state task alone would
//! start unconfined, and what it loads (a checkpoint's pickle) is the tenant's own code. So
//! before such a task, each language it may touch gets an empty cell sent the way the
//! client's cells are: a live confined worker is kept as it is, anything else is replaced
//! by a confined one.

use super::connection::Connection;
use super::Daemon;
use cellvisor::cell::EvalRequest;
use cellvisor::daemon::protocol::RpcError;
use cellvisor_ipc::Language;
use serde_json::json;

/// Whether a request from `connection` needs its session's workers confined first.
pub(super) fn needed(daemon: &Daemon, connection: &Connection) -> bool {
    connection.origin == cellvisor::Origin::Network && daemon.cv.isolation().confines(true)
}

/// Starts (or keeps) a confined worker of `session`, in its workspace, in each of `languages`.
pub(super) async fn confine(
    daemon: &Daemon,
    connection: &Connection,
    session: &str,
    languages: &[Language],
) -> Result<(), RpcError> {
    if !needed(daemon, connection) {
        return Ok(());
    }
    for language in languages {
        let request: EvalRequest = serde_json::from_value(json!({
            "session": session,
            "cells": [{"language": language, "code": ""}],
        }))
        .map_err(|e| {
            RpcError::new(
                cellvisor::daemon::protocol::code::INTERNAL_ERROR,
                e.to_string(),
            )
        })?;
        daemon
            .cv
            .eval_from(cellvisor::Origin::Network, request, None, None)
            .await
            .map_err(super::dispatch::refused)?;
    }
    Ok(())
}

/// The languages a state task with `language` may load into a worker: that one, or (none
/// named) those the session has saved state in, of the checkpoint `name` when one is
/// named. A session's list that cannot be read leaves every language, never none.
pub(super) async fn languages(
    daemon: &Daemon,
    connection: &Connection,
    session: &str,
    name: Option<&str>,
    language: Option<Language>,
) -> Vec<Language> {
    if let Some(language) = language {
        return vec![language];
    }
    if !needed(daemon, connection) {
        return Vec::new();
    }
    let Ok(saved) = daemon
        .cv
        .checkpoints(cellvisor::SessionRef::new(session, None))
        .await
    else {
        return Language::ALL.to_vec();
    };
    Language::ALL
        .into_iter()
        .filter(|l| {
            saved
                .iter()
                .any(|c| c.language == *l && name.is_none_or(|name| c.name == name))
        })
        .collect()
}
