//! `cellvisor drain [--wait] [--timeout D]` and `cellvisor undrain`: a rolling upgrade's
//! steps against a running daemon (SIGUSR1 and SIGUSR2 do the same).

use super::sessions::connect;
use super::{usage_error, Globals};
use cellvisor::daemon::client::ClientError;
use cellvisor::daemon::protocol::{method, DrainResult};
use serde_json::json;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// Return only once no session is live (or at the timeout; exit 1 if some are left).
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits, like `30s` or `5m` (at most an hour).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    timeout: Duration,
}

pub async fn drain(args: DrainArgs, globals: &Globals) -> i32 {
    let timeout_ms = u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX);
    let params = json!({"wait": args.wait, "timeout_ms": timeout_ms});
    let Some(result) = call(globals, method::DRAIN, params).await else {
        return 1;
    };
    match (args.wait, result.live) {
        (true, 0) => println!("node {} drained: no session is live", result.node),
        (true, live) => {
            println!(
                "node {} is draining; {live} session(s) still live after {}",
                result.node,
                humantime::format_duration(args.timeout)
            );
            return 1;
        }
        (false, live) => println!(
            "node {} is draining: no new sessions; {live} session(s) live",
            result.node
        ),
    }
    0
}

pub async fn undrain(globals: &Globals) -> i32 {
    let Some(result) = call(globals, method::UNDRAIN, json!({})).await else {
        return 1;
    };
    println!(
        "node {} takes new sessions again; {} session(s) live",
        result.node, result.live
    );
    0
}

/// Calls `method` on the daemon; prints why not and answers `None` when it fails.
async fn call(globals: &Globals, method: &str, params: serde_json::Value) -> Option<DrainResult> {
    let mut client = connect(globals, None).await.ok()?;
    match client.call(method, params).await {
        Ok(value) => match serde_json::from_value::<DrainResult>(value) {
            Ok(result) => Some(result),
            Err(err) => {
                eprintln!("error: unexpected answer from the daemon: {err}");
                None
            }
        },
        Err(ClientError::Rpc(error)) => {
            usage_error(error.message);
            None
        }
        Err(err) => {
            eprintln!("error: {err}");
            None
        }
    }
}
