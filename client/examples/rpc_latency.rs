//! The Rust client's per-cell wall time on one daemon's Unix socket and on its WebSocket,
//! interleaved in blocks (scripts/bench_network.py runs it with `--rust`):
//!
//! ```text
//! rpc_latency SOCKET URL TOKEN_FILE [CA_FILE] [--cells N] [--block B] [--language L]
//! ```
//!
//! Prints one JSON line: each transport's median (microseconds) and the ratio.

use cellvisor_client::daemon::{Client, Remote, Token};
use cellvisor_client::EvalRequest;
use std::path::PathBuf;
use std::time::Instant;

fn usage() -> ! {
    eprintln!(
        "usage: rpc_latency SOCKET URL TOKEN_FILE [CA_FILE] [--cells N] [--block B] [--language L]"
    );
    std::process::exit(2)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn one_cell(client: &mut Client, request: &EvalRequest) -> f64 {
    let started = Instant::now();
    match client.eval(request, |_| {}).await {
        Ok(result) if !result.is_error => started.elapsed().as_secs_f64(),
        other => {
            eprintln!("the trivial cell failed: {other:?}");
            std::process::exit(1)
        }
    }
}

async fn run() -> Result<(), String> {
    let mut positional = Vec::new();
    let (mut cells, mut block, mut language) = (2000usize, 100usize, "py".to_string());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--cells" => cells = value().parse().map_err(|e| format!("--cells: {e}"))?,
            "--block" => block = value().parse().map_err(|e| format!("--block: {e}"))?,
            "--language" => language = value(),
            _ => positional.push(arg),
        }
    }
    if !(3..=4).contains(&positional.len()) || block == 0 {
        usage()
    }
    let code = if language == "lua" {
        "return 1+1"
    } else {
        "1+1"
    };
    let mut remote = Remote::new(&positional[1]).map_err(|e| e.to_string())?;
    remote.token =
        Some(Token::from_file(&PathBuf::from(&positional[2]), None).map_err(|e| e.to_string())?);
    remote.ca_file = positional.get(3).map(PathBuf::from);
    let mut clients = [
        Client::connect(&PathBuf::from(&positional[0]))
            .await
            .map_err(|e| e.to_string())?,
        Client::connect_remote(&remote)
            .await
            .map_err(|e| e.to_string())?,
    ];
    let requests: Vec<EvalRequest> = ["rust-unix", "rust-ws"]
        .iter()
        .map(|session| {
            serde_json::from_value(serde_json::json!({
                "session": session, "cells": [{"language": language, "code": code}]
            }))
            .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let mut samples = [Vec::new(), Vec::new()];
    for (i, client) in clients.iter_mut().enumerate() {
        for _ in 0..200 {
            one_cell(client, &requests[i]).await;
        }
    }
    while samples[0].len() < cells {
        for (i, client) in clients.iter_mut().enumerate() {
            for _ in 0..block.min(cells - samples[i].len()) {
                samples[i].push(one_cell(client, &requests[i]).await);
            }
        }
    }
    let [unix, ws] = &mut samples;
    let (unix, ws) = (median(unix) * 1e6, median(ws) * 1e6);
    println!(
        "{}",
        serde_json::json!({"unix_us": (unix * 10.0).round() / 10.0, "ws_us": (ws * 10.0).round() / 10.0,
                           "ratio": ((ws / unix) * 1000.0).round() / 1000.0, "cells": cells})
    );
    Ok(())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(message) = result {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}
