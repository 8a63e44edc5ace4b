//! `cellvisor checkpoint | restore | checkpoints | names`: a session's state that survives
//! its worker, through the running daemon (see docs/snapshots.md).

use super::{usage_error, Globals};
use cellvisor::daemon::protocol::method;
use cellvisor::state::{CheckpointInfo, RestoredState, SessionNames};
use cellvisor::Language;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// The checkpoint's name (1 to 64 of A-Z a-z 0-9 . _ -).
    name: String,
    /// The session.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Only this language (py, js, lua); default every language with state.
    #[arg(short, long)]
    language: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CheckpointsArgs {
    /// The session.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct NamesArgs {
    /// The session.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// The language whose namespace is listed (py, js, lua).
    #[arg(short, long)]
    language: String,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// `checkpoint NAME`: saves the session's namespace.
pub async fn checkpoint(args: CheckpointArgs, globals: &Globals) -> i32 {
    let Ok(language) = parse_language(args.language.as_deref()) else {
        return super::EXIT_USAGE;
    };
    let mut params = json!({"session": args.session, "language": language, "name": args.name});
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    call(
        globals,
        method::CHECKPOINT,
        params,
        args.json,
        |rows: Vec<CheckpointInfo>| {
            rows.iter()
                .map(|c| {
                    format!(
                        "saved checkpoint {:?} of {}/{} ({} bytes)",
                        c.name, c.session, c.language, c.bytes
                    )
                })
                .collect()
        },
    )
    .await
}

/// `restore NAME`: replaces the session's namespace with the checkpoint's.
pub async fn restore(args: CheckpointArgs, globals: &Globals) -> i32 {
    let Ok(language) = parse_language(args.language.as_deref()) else {
        return super::EXIT_USAGE;
    };
    let mut params = json!({"session": args.session, "language": language, "name": args.name});
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    call(
        globals,
        method::RESTORE,
        params,
        args.json,
        |rows: Vec<RestoredState>| {
            rows.iter()
                .map(|r| format!("{}: {}", r.language, crate::render::ledger_line(&r.ledger)))
                .collect()
        },
    )
    .await
}

/// `checkpoints`: lists the session's checkpoints.
pub async fn checkpoints(args: CheckpointsArgs, globals: &Globals) -> i32 {
    let mut params = json!({"session": args.session});
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    let session = args.session.clone();
    call(
        globals,
        method::CHECKPOINTS,
        params,
        args.json,
        move |rows: Vec<CheckpointInfo>| {
            if rows.is_empty() {
                return vec![format!("session {session} has no checkpoints")];
            }
            rows.iter()
                .map(|c| {
                    format!(
                        "{:4} {:24} {:>12} bytes  {}",
                        c.language.to_string(),
                        c.name,
                        c.bytes,
                        c.taken_at
                    )
                })
                .collect()
        },
    )
    .await
}

/// `names -l LANG`: lists the user names of the session's namespace.
pub async fn names(args: NamesArgs, globals: &Globals) -> i32 {
    let language = match args.language.parse::<Language>() {
        Ok(language) => language,
        Err(err) => return usage_error(err),
    };
    let mut params = json!({"session": args.session, "language": language});
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    call(
        globals,
        method::NAMES,
        params,
        args.json,
        |listed: SessionNames| {
            if listed.names.is_empty() {
                return vec![format!(
                    "{}/{} has no names of its own",
                    listed.session, listed.language
                )];
            }
            listed
                .names
                .iter()
                .map(|n| {
                    let size = n
                        .size_bytes
                        .map(|b| b.to_string())
                        .unwrap_or_else(|| "?".into());
                    let kept = if n.saveable { "saved" } else { "not saved" };
                    let note = n
                        .note
                        .as_deref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default();
                    format!(
                        "{:20} {:14} {:>10} bytes  {kept}{note}",
                        n.name, n.kind, size
                    )
                })
                .collect()
        },
    )
    .await
}

fn parse_language(word: Option<&str>) -> Result<Option<Language>, ()> {
    match word.map(str::parse::<Language>) {
        None => Ok(None),
        Some(Ok(language)) => Ok(Some(language)),
        Some(Err(err)) => {
            usage_error(err);
            Err(())
        }
    }
}

/// Calls `method` on the daemon and prints its answer: as JSON, or as the lines `text`
/// makes of it.
async fn call<T: serde::de::DeserializeOwned>(
    globals: &Globals,
    method: &str,
    params: Value,
    as_json: bool,
    text: impl FnOnce(T) -> Vec<String>,
) -> i32 {
    let session = params["session"].as_str().map(str::to_string);
    let mut client = match super::sessions::connect(globals, session.as_deref()).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let answer = match client.call(method, params).await {
        Ok(answer) => answer,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
        return 0;
    }
    match serde_json::from_value::<T>(answer) {
        Ok(answer) => {
            for line in text(answer) {
                println!("{line}");
            }
            0
        }
        Err(err) => {
            eprintln!("error: unexpected answer from the daemon: {err}");
            1
        }
    }
}
