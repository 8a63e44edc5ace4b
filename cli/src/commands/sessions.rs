//! `cellvisor status | interrupt | reset | close | stop`: talking to a running daemon.

use super::{usage_error, Globals, Target};
use crate::render::StatusTable;
use cellvisor::daemon::client::{Client, ClientError};
use cellvisor::daemon::protocol::method;
use cellvisor::{Language, SessionStatus};
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print what the text shows as one JSON object: `sessions` (the rows), `zygotes` and
    /// `node` (its name, whether it drains, its isolation).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    /// The session.
    #[arg(short, long)]
    session: String,
    /// Only this language's worker (py, js, lua); default all of the session's.
    #[arg(short, long)]
    language: Option<String>,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
}

/// A connection to the daemon (bound to `session` when remote and given); a failure is
/// reported, with its exit code in `Err`.
pub(super) async fn connect(globals: &Globals, session: Option<&str>) -> Result<Client, i32> {
    globals
        .connect_daemon(session)
        .await?
        .client
        .map_err(|err| {
            eprintln!("error: {}", super::target::describe(&err));
            1
        })
}

pub async fn status(args: StatusArgs, globals: &Globals) -> i32 {
    let mut client = match connect(globals, None).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let rows = match client.call(method::STATUS, json!({})).await {
        Ok(rows) => rows,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    // What the text view shows besides the rows; a daemon too old to answer these shows the
    // rows alone.
    let zygotes = client.call(method::ZYGOTES, json!({})).await.ok();
    let node = client.call(method::INITIALIZE, json!({})).await.ok();
    if args.json {
        let view = json!({
            "sessions": rows,
            "zygotes": zygotes.unwrap_or_else(|| json!([])),
            "node": node.as_ref().map(node_state),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&view).unwrap_or_default()
        );
        return 0;
    }
    let rows: Vec<SessionStatus> = match serde_json::from_value(rows) {
        Ok(rows) => rows,
        Err(err) => {
            eprintln!("error: unexpected status from the daemon: {err}");
            return 1;
        }
    };
    print_table(&rows);
    if let Some(zygotes) = &zygotes {
        print!("{}", crate::render::ZygoteLines(zygotes));
    }
    // The node's own state: a draining node says so under its rows, and who cells run as.
    if let Some(node) = &node {
        if let Some(line) = isolation_line(&node["isolation"]) {
            println!("{line}");
        }
        if node["draining"].as_bool() == Some(true) {
            let name = node["node"].as_str().unwrap_or("this node");
            println!("node {name} is draining: no new sessions (`cellvisor undrain` ends it)");
        }
    }
    0
}

/// The node's state as `status --json` shows it: the parts of `initialize`'s answer that the
/// text view prints under the rows.
fn node_state(node: &serde_json::Value) -> serde_json::Value {
    json!({
        "node": node["node"],
        "draining": node["draining"].as_bool().unwrap_or(false),
        "isolation": node["isolation"],
    })
}

/// The line `status` prints for the node's isolation (`initialize`'s `isolation`): the
/// level, who cells run as, and why.
fn isolation_line(isolation: &serde_json::Value) -> Option<String> {
    let level = isolation["level"].as_str()?;
    let what = match (isolation["uids"].as_str(), isolation["landlock"].as_str()) {
        (Some(uids), _) => format!("sessions run as uids {uids}"),
        (None, Some("network")) => "network sessions confined by Landlock away from the \
                                    daemon's files; local cells run as the daemon's user"
            .to_string(),
        (None, Some(_)) => {
            "every session confined by Landlock away from the daemon's files".to_string()
        }
        (None, None) => "cells run as the daemon's user".to_string(),
    };
    Some(match isolation["reason"].as_str() {
        Some(reason) => format!("isolation: {level} ({what}): {reason}"),
        None => format!("isolation: {level} ({what})"),
    })
}

fn print_table(rows: &[SessionStatus]) {
    print!("{}", StatusTable { rows, own: None });
}

pub async fn control(args: SessionArgs, method: &str, globals: &Globals) -> i32 {
    let language = match args.language.as_deref().map(str::parse::<Language>) {
        None => None,
        Some(Ok(language)) => Some(language),
        Some(Err(err)) => return usage_error(err),
    };
    let cwd = match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => cwd,
        Err(code) => return code,
    };
    let mut client = match connect(globals, Some(&args.session)).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let mut params = json!({"session": args.session, "language": language});
    with_cwd(&mut params, cwd);
    match client.call(method, params).await {
        Ok(result) => {
            let count = result["sessions"].as_u64().unwrap_or(0);
            let what = match method {
                "interrupt" => "interrupted",
                "reset" => "reset",
                _ => "closed",
            };
            if count == 0 && method != "interrupt" {
                eprintln!("no live worker for session {}", args.session);
            } else {
                println!("{what} {count} worker(s) of session {}", args.session);
            }
            0
        }
        Err(ClientError::Rpc(error)) => usage_error(error.message),
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}

/// Adds `cwd` to a method's params when there is one (a daemon from before `cwd` is not
/// sent the field when there is nothing to send).
pub(super) fn with_cwd(params: &mut serde_json::Value, cwd: Option<PathBuf>) {
    if let (Some(cwd), Some(object)) = (cwd, params.as_object_mut()) {
        object.insert("cwd".into(), json!(cwd));
    }
}

pub async fn stop(globals: &Globals) -> i32 {
    let (target, client) = match globals.connect_daemon(None).await {
        Ok(connection) => (connection.target, connection.client),
        Err(code) => return code,
    };
    let mut client = match (client, &target) {
        (Ok(client), _) => client,
        (Err(_), Target::Socket(_)) => {
            println!("no daemon is running at {target}");
            return 0;
        }
        // A remote daemon that cannot be reached is not known to be stopped.
        (Err(err), Target::Remote(_)) => {
            eprintln!("error: {}", super::target::describe(&err));
            return 1;
        }
    };
    if let Err(err) = client.call(method::SHUTDOWN, json!({})).await {
        eprintln!("error: {err}");
        return 1;
    }
    // The daemon removes its socket once every worker is gone; a remote one closes the
    // connection when it exits.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    match &target {
        Target::Socket(socket) => {
            while socket.exists() && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        Target::Remote(_) => {
            let _ = tokio::time::timeout_at(deadline.into(), client.closed()).await;
        }
    }
    println!("stopped the daemon at {target}");
    0
}
