//! `cellvisor wait | terminate`: a cell that went to the background (its request returned
//! `running`), through the daemon.

use super::{usage_error, Globals};
use cellvisor::daemon::client::ClientError;
use cellvisor::daemon::protocol::method;
use cellvisor::{CellResult, EvalResult};
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// The cell's id, from the result that said it is still running.
    cell_id: u64,
    /// The session the cell runs in.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// How long to watch before printing the output so far (default 10000).
    #[arg(long, value_name = "MS")]
    yield_time_ms: Option<u64>,
    /// Cap on the printed output, in tokens (about 4 bytes each).
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Print the structured result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct TerminateArgs {
    /// The cell's id, from the result that said it is still running.
    cell_id: u64,
    /// The session the cell runs in.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// The directory whose state is meant under `sessions.key = "session+cwd"` (default:
    /// this one; relative to it). Ignored under the default key.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Print the structured result as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn wait(args: WaitArgs, globals: &Globals) -> i32 {
    let mut params = json!({
        "session": args.session,
        "cell_id": args.cell_id,
        "yield_time_ms": args.yield_time_ms,
        "max_tokens": args.max_tokens,
    });
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    call(globals, method::WAIT, params, &args.session, args.json).await
}

pub async fn terminate(args: TerminateArgs, globals: &Globals) -> i32 {
    let mut params = json!({"session": args.session, "cell_id": args.cell_id});
    match globals.session_cwd(&args.session, args.cwd.as_deref()) {
        Ok(cwd) => super::sessions::with_cwd(&mut params, cwd),
        Err(code) => return code,
    }
    call(globals, method::TERMINATE, params, &args.session, args.json).await
}

/// Calls `method` and prints the cell it answers; the exit status is the cell's (0 while it
/// still runs), 2 for a refusal.
async fn call(
    globals: &Globals,
    method: &str,
    params: serde_json::Value,
    session: &str,
    json: bool,
) -> i32 {
    let connection = match globals.connect_daemon(Some(session)).await {
        Ok(connection) => connection,
        Err(code) => return code,
    };
    let mut client = match connection.client {
        Ok(client) => client,
        Err(err @ ClientError::Connect { .. }) => {
            eprintln!("error: {err} (is the daemon running? background cells live in it)");
            return 1;
        }
        Err(err) => {
            eprintln!("error: {}", super::target::describe(&err));
            return 1;
        }
    };
    let answer = match client.call(method, params).await {
        Ok(answer) => answer,
        Err(ClientError::Rpc(error)) => return usage_error(error.message),
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    }
    let cell: CellResult = match serde_json::from_value(answer) {
        Ok(cell) => cell,
        Err(err) => {
            eprintln!("error: unexpected answer from the daemon: {err}");
            return 1;
        }
    };
    let status = cell.report.status;
    if !json {
        // Printed as `eval` prints a cell: output, truncation note, displays, and how to
        // collect the rest while it runs.
        super::eval::print_result(&EvalResult::from_cells(vec![cell]), false, session);
    }
    i32::from(status.failed())
}

/// What the CLI says about a cell that goes on in the background.
pub fn still_running(cell_id: u64, session: &str) -> String {
    let session = if session == "default" {
        String::new()
    } else {
        format!(" --session {session}")
    };
    format!(
        "cell {cell_id} is still running in the background: `cellvisor wait {cell_id}{session}` \
         for the rest, `cellvisor terminate {cell_id}{session}` to stop it"
    )
}
