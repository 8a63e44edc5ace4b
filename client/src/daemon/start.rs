//! Starting a daemon when none listens on the socket (the CLI's first `eval`), and where its
//! log goes.

use super::{Client, ClientError};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a freshly started daemon may take to listen.
const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(15);

impl Client {
    /// Connects, starting a daemon in the background first when none is listening: `program
    /// serve --socket path [--config config]`, its output to `log` (default: next to the
    /// socket, see [`log_path`]). `program` is the cellvisor executable, named by the caller
    /// because the running program is not always cellvisor: a Rust host linking this crate
    /// would otherwise start itself (the CLI passes its own executable). The daemon found or
    /// started must speak this client's protocol ([`Client::check_version`]).
    pub async fn connect_or_start(
        path: &Path,
        program: &Path,
        config: Option<&Path>,
        log: Option<&Path>,
    ) -> Result<Client, ClientError> {
        let within = super::health::health_timeout()?;
        match Client::connect_within(path, within).await {
            Ok(client) => return checked(client).await,
            Err(ClientError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) => {}
            // A daemon that failed its health check is replaced, and only one proven to be
            // this socket's cellvisor daemon: anything else is left alone, and said.
            Err(ClientError::Unresponsive {
                pid: Some(pid),
                waited,
                ..
            }) => match super::health::prove_stale(pid, path) {
                Ok(()) => {
                    super::health::replace_stale(pid, path).await?;
                    eprintln!(
                        "cellvisor: the daemon at {} (process {pid}) did not answer within {} s; \
                         stopped it and started a new one",
                        path.display(),
                        waited.as_secs_f64()
                    );
                }
                Err(why) => {
                    return Err(ClientError::Start(format!(
                        "the process listening at {} (process {pid}) did not answer within {} s, \
                         and it was left alone: {why}. Stop it or remove the socket, or name \
                         another with --socket",
                        path.display(),
                        waited.as_secs_f64()
                    )))
                }
            },
            Err(other) => return Err(other),
        }
        let log = log.map_or_else(|| log_path(path), Path::to_path_buf);
        start_daemon(program, path, config, &log)?;
        let deadline = Instant::now() + DAEMON_START_TIMEOUT;
        loop {
            match Client::connect_within(path, within).await {
                Ok(client) => return checked(client).await,
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
}

/// `client`, once its daemon is known to speak this client's protocol.
async fn checked(mut client: Client) -> Result<Client, ClientError> {
    client.check_version().await?;
    Ok(client)
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
