//! `cellvisor serve`: the daemon in the foreground.

use super::{usage_error, Globals};
use cellvisor::daemon::server::{serve, ServeOptions};
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
