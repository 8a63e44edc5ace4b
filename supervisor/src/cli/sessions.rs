//! `cellvisor status | interrupt | reset | close | stop`: talking to a running daemon.

use super::{usage_error, Globals};
use cellvisor::daemon::client::{Client, ClientError};
use cellvisor::daemon::protocol::method;
use cellvisor::{Language, SessionStatus};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print the rows as JSON.
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
}

async fn connect(globals: &Globals) -> Result<Client, i32> {
    let config = globals.load_config().map_err(usage_error)?;
    let socket = globals.socket(&config);
    Client::connect(&socket).await.map_err(|err| {
        match &err {
            ClientError::Connect { .. } => {
                eprintln!("error: {err} (is `cellvisor serve` running?)")
            }
            _ => eprintln!("error: {err}"),
        }
        1
    })
}

pub async fn status(args: StatusArgs, globals: &Globals) -> i32 {
    let mut client = match connect(globals).await {
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
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
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
    0
}

fn print_table(rows: &[SessionStatus]) {
    if rows.is_empty() {
        println!("no live sessions");
        return;
    }
    let header = [
        "SESSION", "LANG", "PID", "STATE", "RSS", "CPU%", "IDLE", "CELLS", "RESTARTS",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for row in rows {
        table.push(vec![
            row.session.clone(),
            row.language.to_string(),
            row.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            state_text(row),
            row.rss_bytes
                .map(|b| bytesize::ByteSize::b(b).to_string())
                .unwrap_or_else(|| "-".into()),
            row.cpu_percent
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "-".into()),
            humantime::format_duration(std::time::Duration::from_secs(row.idle_ms / 1000))
                .to_string(),
            row.cells_run.to_string(),
            row.restarts.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| table.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for row in table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

/// The state, with the running cell's id (and whether it runs in the background).
fn state_text(row: &SessionStatus) -> String {
    let state = serde_json::to_value(row.state)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    match (row.cell_id, row.background) {
        (Some(id), true) => format!("{state} (cell {id}, background)"),
        (Some(id), false) => format!("{state} (cell {id})"),
        (None, _) => state,
    }
}

pub async fn control(args: SessionArgs, method: &str, globals: &Globals) -> i32 {
    let language = match args.language.as_deref().map(str::parse::<Language>) {
        None => None,
        Some(Ok(language)) => Some(language),
        Some(Err(err)) => return usage_error(err),
    };
    let mut client = match connect(globals).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    match client
        .call(
            method,
            json!({"session": args.session, "language": language}),
        )
        .await
    {
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

pub async fn stop(globals: &Globals) -> i32 {
    let config = match globals.load_config() {
        Ok(config) => config,
        Err(err) => return usage_error(err),
    };
    let socket = globals.socket(&config);
    let mut client = match Client::connect(&socket).await {
        Ok(client) => client,
        Err(_) => {
            println!("no daemon is running at {}", socket.display());
            return 0;
        }
    };
    if let Err(err) = client.call(method::SHUTDOWN, json!({})).await {
        eprintln!("error: {err}");
        return 1;
    }
    // The daemon removes its socket once every worker is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while socket.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    println!("stopped the daemon at {}", socket.display());
    0
}
