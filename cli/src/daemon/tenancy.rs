//! The tenant step at the dispatch boundary: the right a method needs, a session name
//! resolved inside the caller's tenant (and its answer shown under the client's name), the
//! caller's view of `status`, and the tenant's quotas of sessions and memory.

use super::admission::{Ask, Reservation, Usage};
use super::net::{Right, Tenant, SEPARATOR};
use super::Daemon;
use cellvisor::daemon::protocol::{code, Call, MethodName, RpcError};
use serde_json::{json, Value};

/// The right `method` needs (`status` asks either: see [`status`]).
fn right_of(method: MethodName) -> Option<Right> {
    match method {
        MethodName::Initialize | MethodName::Status => None,
        MethodName::Zygotes
        | MethodName::Shutdown
        | MethodName::ConfigReload
        | MethodName::Drain
        | MethodName::Undrain => Some(Right::Operate),
        MethodName::Eval
        | MethodName::Wait
        | MethodName::Terminate
        | MethodName::Interrupt
        | MethodName::Reset
        | MethodName::Close
        | MethodName::Own
        | MethodName::Checkpoint
        | MethodName::Restore
        | MethodName::Checkpoints
        | MethodName::Names
        | MethodName::FilesList
        | MethodName::FilesRead
        | MethodName::FilesWrite
        | MethodName::FilesDelete => Some(Right::Cells),
    }
}

/// The typed error of a call the tenant has not the right for.
fn forbidden(tenant: &Tenant, right: Right, method: &str) -> RpcError {
    RpcError {
        code: code::FORBIDDEN,
        message: format!(
            "tenant {:?} may not call {method}: it needs the `{}` right (see daemon.tenants-file)",
            tenant.name,
            right.as_str()
        ),
        data: Some(json!({ "right": right.as_str(), "tenant": tenant.name })),
    }
}

/// Refuses `what` (a transport whose calls run cells, such as MCP) to a tenant without the
/// `cells` right.
pub(super) fn may_run_cells(tenant: &Tenant, what: &str) -> Result<(), RpcError> {
    if tenant.may(Right::Cells) {
        Ok(())
    } else {
        Err(forbidden(tenant, Right::Cells, what))
    }
}

/// Refuses a method the tenant has not the right for; resolves its session name inside the
/// tenant. A name holding the tenant separator is refused for every tenant, so no tenant's
/// name is another tenant's session; only the operator names them so.
/// Runs on the params as sent, before they are read into the method's type, so that a
/// tenant's missing `session` is its own `default`.
pub(super) fn enter(
    tenant: &Tenant,
    method: MethodName,
    params: &mut Option<Value>,
) -> Result<(), RpcError> {
    if let Some(right) = right_of(method) {
        if !tenant.may(right) {
            return Err(forbidden(tenant, right, method.as_str()));
        }
    }
    if !method.names_a_session() {
        return Ok(());
    }
    let Some(object) = params.get_or_insert_with(|| json!({})).as_object_mut() else {
        return Ok(());
    };
    let name = match object.get("session") {
        Some(Value::String(name)) => name.clone(),
        None | Some(Value::Null) => "default".to_string(),
        Some(_) => return Ok(()),
    };
    // The operator (the default tenant: the Unix socket, or the one token) may act on a
    // tenant's session by the name `status` shows (`<tenant>/<name>`), never open one in a
    // tenant's namespace (`eval`, `restore`); no tenant may name one at all.
    let operator_names_a_tenants = tenant.default
        && !matches!(method, MethodName::Eval | MethodName::Restore)
        && name
            .split_once(SEPARATOR)
            .is_some_and(|(owner, _)| cellvisor::names::is_tenant_name(owner))
        && cellvisor::SessionName::parse(&name).is_ok();
    if name.contains(SEPARATOR) && !operator_names_a_tenants {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "invalid session name {name:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ - :"
            ),
        ));
    }
    if !tenant.default {
        object.insert("session".into(), Value::String(tenant.internal(&name)));
    }
    Ok(())
}

/// An answer as the tenant sees it: its sessions under the names it sent.
pub(super) fn leave(tenant: &Tenant, result: Result<Value, RpcError>) -> Result<Value, RpcError> {
    if tenant.default {
        return result;
    }
    let prefix = tenant.prefix();
    match result {
        Ok(mut value) => {
            strip(&prefix, &mut value);
            Ok(value)
        }
        Err(mut error) => {
            error.message = error.message.replace(&prefix, "");
            Err(error)
        }
    }
}

/// Removes `prefix` from every `session` field.
fn strip(prefix: &str, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                match field {
                    Value::String(name) if key == "session" => {
                        if let Some(own) = name.strip_prefix(prefix) {
                            *name = own.to_string();
                        }
                    }
                    other => strip(prefix, other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| strip(prefix, item)),
        _ => {}
    }
}

/// `status` as the tenant may see it: everything with `operate`, its own sessions with
/// `cells` (under their client names), nothing without either.
pub(super) fn status(tenant: &Tenant, rows: Value) -> Result<Value, RpcError> {
    if tenant.may(Right::Operate) {
        return Ok(rows);
    }
    if !tenant.may(Right::Cells) {
        return Err(forbidden(tenant, Right::Cells, MethodName::Status.as_str()));
    }
    let Value::Array(rows) = rows else {
        return Ok(rows);
    };
    let own: Vec<Value> = rows
        .into_iter()
        .filter(|row| {
            row["session"]
                .as_str()
                .is_some_and(|name| tenant.own(name).is_some())
        })
        .collect();
    // `leave` then shows them under the client's names.
    Ok(Value::Array(own))
}

/// Refuses a request that would take the tenant past its live sessions, its memory or (for
/// `Ask::McpSession`) its MCP sessions, or reserves its place until the returned
/// reservation is dropped: checked and taken in one step per tenant (see `admission`), so
/// concurrent requests cannot overrun a quota together. `mcp_open` counts the tenant's
/// open MCP sessions, read in its turn.
pub(crate) async fn within_quotas(
    daemon: &Daemon,
    tenant: &Tenant,
    ask: Ask,
    mcp_open: impl FnOnce() -> usize,
) -> Result<Reservation, RpcError> {
    daemon
        .admissions
        .admit(tenant, ask, || async {
            let mut usage = usage(daemon, tenant).await?;
            usage.mcp_open = mcp_open();
            Ok(usage)
        })
        .await
}

/// The tenant's live sessions and their memory, from `status`.
async fn usage(daemon: &Daemon, tenant: &Tenant) -> Result<Usage, RpcError> {
    let rows = daemon.cv.status().await.map_err(super::dispatch::refused)?;
    let mut usage = Usage::default();
    for row in serde_json::to_value(&rows)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
    {
        let Some(name) = row["session"].as_str() else {
            continue;
        };
        if tenant.own(name).is_some() {
            usage.live.insert(name.to_string());
            usage.memory += row["rss_bytes"].as_u64().unwrap_or(0);
        }
    }
    Ok(usage)
}

/// The session a request names (internal, after [`enter`]): what it asks the quotas for.
pub(super) fn asked_session(params: &Option<Value>) -> Ask {
    let name = params
        .as_ref()
        .and_then(|p| p["session"].as_str())
        .unwrap_or("default");
    Ask::Session(name.to_string())
}

/// The session a call names (internal, after [`enter`]): what it asks the quotas for.
pub(super) fn asked_by(call: &Call) -> Ask {
    Ask::Session(call.session().unwrap_or("default").to_string())
}

/// The typed error of an exceeded quota, naming it and the tenant.
pub(crate) fn exceeded(tenant: &Tenant, quota: &str, limit: u64, why: String) -> RpcError {
    RpcError {
        code: code::QUOTA_EXCEEDED,
        message: format!(
            "tenant {:?} is at its quota {quota} = {limit}: {why}",
            tenant.name
        ),
        data: Some(json!({ "quota": quota, "tenant": tenant.name, "limit": limit })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::net::Tenant;

    fn beta() -> Tenant {
        Tenant::for_tests("beta", &[Right::Cells])
    }

    #[test]
    fn a_session_name_resolves_inside_the_tenant() {
        let mut params = Some(json!({"session": "s1", "cells": []}));
        enter(&beta(), MethodName::Eval, &mut params).unwrap();
        assert_eq!(params.as_ref().unwrap()["session"], "beta/s1");
        // No session named is `default`, inside the tenant too.
        let mut params = None;
        enter(&beta(), MethodName::Close, &mut params).unwrap();
        assert_eq!(params.unwrap()["session"], "beta/default");
        // The operator's names are the names sent.
        let mut params = Some(json!({"session": "s1"}));
        enter(&Tenant::operator(), MethodName::Close, &mut params).unwrap();
        assert_eq!(params.unwrap()["session"], "s1");
        // A name holding the separator is no tenant's to send...
        let mut params = Some(json!({"session": "alpha/s1"}));
        let err = enter(&beta(), MethodName::Wait, &mut params).unwrap_err();
        assert_eq!(err.code, code::INVALID_PARAMS);
        // ...but the operator names a tenant's session as `status` shows it, and only so.
        let mut params = Some(json!({"session": "alpha/s1"}));
        enter(&Tenant::operator(), MethodName::Close, &mut params).unwrap();
        assert_eq!(params.unwrap()["session"], "alpha/s1");
        let mut params = Some(json!({"session": "alpha/s1", "cells": []}));
        let err = enter(&Tenant::operator(), MethodName::Eval, &mut params).unwrap_err();
        assert_eq!(
            err.code,
            code::INVALID_PARAMS,
            "the operator opens no tenant's session"
        );
        for bad in ["Alpha/s1", "/s1", "alpha/", "a/b/c", "alpha/s 1"] {
            let mut params = Some(json!({"session": bad}));
            let err = enter(&Tenant::operator(), MethodName::Wait, &mut params).unwrap_err();
            assert_eq!(err.code, code::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn rights_are_named_in_the_refusal() {
        for operate in [
            MethodName::Drain,
            MethodName::Shutdown,
            MethodName::ConfigReload,
            MethodName::Zygotes,
        ] {
            let err = enter(&beta(), operate, &mut None).unwrap_err();
            assert_eq!(err.code, code::FORBIDDEN);
            assert_eq!(err.data.unwrap()["right"], "operate");
        }
        let ops = Tenant::for_tests("ops", &[Right::Operate]);
        let err = enter(&ops, MethodName::Eval, &mut None).unwrap_err();
        assert_eq!(err.data.unwrap()["right"], "cells");
        assert!(enter(&ops, MethodName::Drain, &mut None).is_ok());
    }

    #[test]
    fn answers_and_status_show_only_the_tenants_own_names() {
        let rows = json!([{"session": "beta/s1"}, {"session": "alpha/s1"}, {"session": "s1"}]);
        let seen = leave(&beta(), status(&beta(), rows.clone())).unwrap();
        assert_eq!(seen, json!([{"session": "s1"}]));
        assert_eq!(status(&Tenant::operator(), rows.clone()).unwrap(), rows);
        let err = leave(
            &beta(),
            Err(RpcError::new(
                code::REQUEST_REFUSED,
                "session beta/s1 is busy",
            )),
        )
        .unwrap_err();
        assert_eq!(err.message, "session s1 is busy");
    }
}
