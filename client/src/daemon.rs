//! The daemon's client, as the CLI uses it: one connection, requests answered in order,
//! `eval/event` notifications handed to a callback while an `eval` runs.

use crate::cell::{EvalRequest, EvalResult};
use crate::protocol::{method, RpcError};
use serde_json::Value;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// The daemon socket: `explicit`, else `$CELLVISOR_SOCKET`, else the config's
/// `daemon.socket`, else `daemon.sock` in the per-user runtime directory.
pub fn socket_path(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    if let Some(path) = std::env::var_os("CELLVISOR_SOCKET").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    if let Some(path) = configured {
        return path.to_path_buf();
    }
    cellvisor_ipc::socket::default_runtime_dir().join("daemon.sock")
}

/// How long a freshly started daemon may take to listen.
const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(15);

/// What went wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at `path` (no daemon), or it refused us.
    #[error("cannot connect to the cellvisor daemon at {path}: {source}")]
    Connect {
        /// The socket tried.
        path: PathBuf,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// A daemon could not be started, or did not start listening in time.
    #[error("cannot start a cellvisor daemon: {0}")]
    Start(String),
    /// Reading or writing the connection failed.
    #[error("lost the connection to the daemon: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon closed the connection before answering (it stopped, or crashed).
    #[error("the daemon closed the connection")]
    Closed,
    /// The daemon refused the call; its error says what was wrong and what is allowed.
    #[error("{}", .0.message)]
    Rpc(RpcError),
    /// The daemon answered something this client does not understand (a version mismatch).
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
}

/// A connection to the daemon.
pub struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl Client {
    /// Connects to a daemon already listening at `path`.
    pub async fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| ClientError::Connect {
                path: path.to_path_buf(),
                source,
            })?;
        let (reader, writer) = stream.into_split();
        Ok(Client {
            reader: BufReader::new(reader),
            writer,
            next_id: 1,
        })
    }

    /// Connects, starting a daemon in the background first when none is listening: `program
    /// serve --socket path [--config config]`, its output to `log` (default: next to the
    /// socket, see [`log_path`]). `program` is the cellvisor executable, named by the caller
    /// because the running program is not always cellvisor: a Rust host linking this crate
    /// would otherwise start itself (the CLI passes its own executable).
    pub async fn connect_or_start(
        path: &Path,
        program: &Path,
        config: Option<&Path>,
        log: Option<&Path>,
    ) -> Result<Client, ClientError> {
        match Client::connect(path).await {
            Ok(client) => return Ok(client),
            Err(ClientError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(other) => return Err(other),
        }
        let log = log.map_or_else(|| log_path(path), Path::to_path_buf);
        start_daemon(program, path, config, &log)?;
        let deadline = Instant::now() + DAEMON_START_TIMEOUT;
        loop {
            match Client::connect(path).await {
                Ok(client) => return Ok(client),
                Err(err) if Instant::now() >= deadline => {
                    return Err(ClientError::Start(format!(
                        "it did not start listening within {}s ({err}); see {}",
                        DAEMON_START_TIMEOUT.as_secs(),
                        log.display()
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Calls `method` and waits for its result; notifications meanwhile go to `on_event`.
    pub async fn call_with_events(
        &mut self,
        method: &str,
        params: Value,
        mut on_event: impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params
        })
        .to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await?;
        let mut buf = String::new();
        loop {
            buf.clear();
            if self.reader.read_line(&mut buf).await? == 0 {
                return Err(ClientError::Closed);
            }
            let message: Value = serde_json::from_str(&buf)
                .map_err(|e| ClientError::Protocol(format!("{e}: {buf}")))?;
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(error) = message.get("error") {
                    let error: RpcError = serde_json::from_value(error.clone())
                        .map_err(|e| ClientError::Protocol(e.to_string()))?;
                    return Err(ClientError::Rpc(error));
                }
                return Ok(message.get("result").cloned().unwrap_or(Value::Null));
            }
            if message.get("method").is_some() {
                on_event(&message);
            }
        }
    }

    /// Calls `method` and waits for its result, ignoring notifications meanwhile.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.call_with_events(method, params, |_| {}).await
    }

    /// Runs an `eval`, handing each progress event's params to `on_event`.
    pub async fn eval(
        &mut self,
        request: &EvalRequest,
        mut on_event: impl FnMut(&Value),
    ) -> Result<EvalResult, ClientError> {
        let params =
            serde_json::to_value(request).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let result = self
            .call_with_events(method::EVAL, params, |message| {
                if let Some(params) = message.get("params") {
                    on_event(params);
                }
            })
            .await?;
        serde_json::from_value(result).map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

/// The daemon's log file: next to its socket.
pub fn log_path(socket: &Path) -> PathBuf {
    socket.with_extension("log")
}

/// Starts `program serve` detached from this process (its own session, output to the log).
fn start_daemon(
    program: &Path,
    socket: &Path,
    config: Option<&Path>,
    log_file: &Path,
) -> Result<(), ClientError> {
    if let Some(dir) = socket.parent() {
        cellvisor_ipc::socket::ensure_private_dir(dir)
            .map_err(|e| ClientError::Start(format!("{}: {e}", dir.display())))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_file)
        .map_err(|e| ClientError::Start(format!("cannot open {}: {e}", log_file.display())))?;
    let log_err = log
        .try_clone()
        .map_err(|e| ClientError::Start(e.to_string()))?;
    let mut command = std::process::Command::new(program);
    command.arg("serve").arg("--socket").arg(socket);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err));
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from our terminal session
    // so it outlives this command.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| ClientError::Start(format!("cannot run {}: {e}", program.display())))?;
    // The daemon is on its own now; reap it if it exits while we are still here.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    Ok(())
}
