//! jupyter_server's own gateway client as the examiner of the Kernel Gateway API: a
//! `jupyter server --gateway-url` pointed at the daemon's listener (the path JupyterLab takes),
//! driven through jupyter_server's REST API and a Jupyter WebSocket client
//! (tests/jupyter_server_client.py): kernelspecs, a kernel's cells and their state,
//! `execute_result`, an interrupt, a restart, a notebook session, deletes; and the binary
//! `v1.kernel.websocket.jupyter.org` framing spoken to the gateway with jupyter_server's codec.

mod common;

use common::net::{free_port, venv_python, NetDaemon, TOKEN};
use common::wait_until;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// jupyter_server's own token, another than the daemon's.
const SERVER_TOKEN: &str = "jupyter-server-token-0123456789";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `jupyter server` in a process group of its own, ended with its group when dropped.
struct JupyterServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl JupyterServer {
    fn start(python: &Path, gateway: &str, dir: &Path) -> JupyterServer {
        let port = free_port();
        let log = dir.join("jupyter-server.log");
        let log_file = std::fs::File::create(&log).expect("a log file");
        let child = Command::new(python)
            .args(["-m", "jupyter_server", "--no-browser", "--allow-root"])
            .arg("--ServerApp.ip=127.0.0.1")
            .arg(format!("--ServerApp.port={port}"))
            .arg("--ServerApp.port_retries=0")
            .arg(format!("--ServerApp.root_dir={}", dir.display()))
            .arg(format!("--IdentityProvider.token={SERVER_TOKEN}"))
            .arg(format!("--GatewayClient.url={gateway}"))
            .arg(format!("--GatewayClient.auth_token={TOKEN}"))
            .arg("--GatewayClient.request_timeout=120")
            .arg("--GatewayClient.connect_timeout=60")
            // Its runtime, data and config files stay in the test's directory.
            .env("JUPYTER_RUNTIME_DIR", dir.join("runtime"))
            .env("JUPYTER_DATA_DIR", dir.join("data"))
            .env("JUPYTER_CONFIG_DIR", dir.join("config"))
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .env_remove("VIRTUAL_ENV")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("the log"))
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .expect("start jupyter server");
        let server = JupyterServer { child, port, log };
        let up = wait_until(Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).map(|_| ())
        });
        assert!(
            up.is_ok(),
            "jupyter server never listened: {up:?}\n{}",
            server.log()
        );
        let up = common::net::http_get(
            &format!("http://127.0.0.1:{port}/api/status"),
            Some(SERVER_TOKEN),
        );
        assert_eq!(
            up.0,
            200,
            "jupyter server's status: {up:?}\n{}",
            server.log()
        );
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for JupyterServer {
    /// Ends the server's process group (only it: the group is the server's own).
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
        let ended = wait_until(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten().map(|_| ()).ok_or(())
        });
        if ended.is_err() {
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

#[test]
fn jupyter_servers_gateway_client_runs_interrupts_and_restarts_cellvisor_kernels() {
    let python = venv_python(&["jupyter_server"]);
    let net = NetDaemon::start(false, "", "");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = JupyterServer::start(&python, &net.http_url(""), dir.path());

    let output = Command::new(&python)
        .arg(workspace().join("tests/jupyter_server_client.py"))
        .arg(format!("http://127.0.0.1:{}", server.port))
        .arg(SERVER_TOKEN)
        .arg(net.http_url(""))
        .arg(TOKEN)
        .env_remove("VIRTUAL_ENV")
        .output()
        .expect("run tests/jupyter_server_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "jupyter_server_client.py failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n\
         {stderr}\n--- jupyter server ---\n{}",
        output.status,
        server.log()
    );
    assert!(
        stdout.contains("all jupyter_server checks passed"),
        "{stdout}"
    );
    println!("{stdout}");

    // Every kernel the client started was deleted through jupyter_server: the daemon has
    // no session left.
    drop(server);
    let rows = net
        .daemon
        .client()
        .call("status", json!({}))
        .expect("status");
    assert_eq!(rows, json!([]), "sessions left after the client's deletes");
    net.daemon.stop();
}
