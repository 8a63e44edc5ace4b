//! `cellvisor serve` (the daemon in the foreground) and `cellvisor mcp` (an MCP server on
//! stdio): the two long-running servers.

use super::{usage_error, Globals};
use crate::daemon::{serve, ServeOptions};
use cellvisor::Options;

pub async fn run(globals: &Globals) -> i32 {
    let config = match globals.load_config() {
        Ok(config) => config,
        Err(err) => return usage_error(err),
    };
    let socket = globals.socket(&config);
    let options = ServeOptions {
        socket,
        config_path: globals.config_path(),
        supervisor: Options {
            config,
            worker_exe: None,
            runtime_dir: None,
        },
    };
    match serve(options).await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}

/// `cellvisor mcp`: the MCP server on stdio, with the configuration `serve` would use.
pub async fn run_mcp(globals: &Globals) -> i32 {
    let config = match globals.load_config() {
        Ok(config) => config,
        Err(err) => return usage_error(err),
    };
    let options = Options {
        config,
        worker_exe: None,
        runtime_dir: None,
    };
    match crate::mcp::serve_stdio(options).await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}
