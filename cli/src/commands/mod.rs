//! Command-line interface: argument parsing and the subcommands.

mod background;
mod check;
mod config_cmd;
mod drain;
mod eval;
mod kernel;
mod protocol;
mod serve;
mod sessions;
mod state;
mod target;

use cellvisor::daemon::client::{Client, ClientError, Remote};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit status for bad input (flags, files, languages).
pub const EXIT_USAGE: i32 = 2;

/// What `cellvisor --version` prints after the name: the program's version and the two
/// protocols it speaks (the daemon's JSON-RPC, the workers' ipc), so that a client and a
/// daemon, or a daemon and its workers, can be told apart after an upgrade.
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (protocol {}, worker ipc {})",
        env!("CARGO_PKG_VERSION"),
        cellvisor::daemon::protocol::PROTOCOL_VERSION,
        cellvisor_ipc::PROTOCOL_VERSION
    )
});

#[derive(Debug, Parser)]
#[command(
    name = "cellvisor",
    version = VERSION.as_str(),
    about = "Persistent Python, JavaScript and Lua cells in supervised worker processes"
)]
struct Cli {
    /// Configuration file (default: $CELLVISOR_CONFIG, then $XDG_CONFIG_HOME/cellvisor/config.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The daemon's socket (default: $CELLVISOR_SOCKET, then daemon.socket from the config,
    /// then daemon.sock in the runtime directory).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// A daemon on the network instead of the local one: the WebSocket URL of its listener,
    /// wss://HOST:PORT (TLS) or ws://HOST:PORT (default: $CELLVISOR_CONNECT). Nothing is
    /// started for it.
    #[arg(long, global = true, value_name = "URL")]
    connect: Option<String>,
    /// The file holding the remote daemon's bearer token (default: $CELLVISOR_TOKEN_FILE).
    #[arg(long, global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM certificates to trust for a wss:// daemon instead of the system's CA bundle, such
    /// as its self-signed certificate (default: $CELLVISOR_TLS_CA).
    #[arg(long, global = true, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run cells and print their results (through the daemon, started on first use).
    Eval(eval::EvalArgs),
    /// Watch a cell that went to the background: print its output since the last look, or
    /// its final result once it ends.
    Wait(background::WaitArgs),
    /// Stop a cell that went to the background (interrupt, grace, kill) and print its end.
    Terminate(background::TerminateArgs),
    /// Run the daemon in the foreground.
    Serve,
    /// MCP server on stdio, for agent desktops (its own supervisor; one connection, one session).
    Mcp,
    /// List live sessions: pid, state, memory, CPU, idle time, cells, restarts.
    Status(sessions::StatusArgs),
    /// Interrupt the running cell of a session.
    Interrupt(sessions::SessionArgs),
    /// Replace a session's workers with fresh ones (state is lost, a failed session recovers).
    Reset(sessions::SessionArgs),
    /// Close a session's workers.
    Close(sessions::SessionArgs),
    /// Save a session's namespace as a named checkpoint (an undo point).
    Checkpoint(state::CheckpointArgs),
    /// Replace a session's namespace with a named checkpoint.
    Restore(state::CheckpointArgs),
    /// List a session's checkpoints with their sizes and times.
    Checkpoints(state::CheckpointsArgs),
    /// List the user names of a session's namespace, and whether a snapshot keeps each.
    Names(state::NamesArgs),
    /// Stop taking new sessions and stop the idle ones (live sessions keep being served);
    /// `--wait` returns once none is live. SIGUSR1 does the same.
    Drain(drain::DrainArgs),
    /// Take new sessions again after a drain (SIGUSR2 does the same).
    Undrain,
    /// Stop the daemon and every worker.
    Stop,
    /// Check the configuration or show the values in force.
    Config(config_cmd::ConfigArgs),
    /// Run suites of scored cells (case files) and summarize them; exit 1 when a case fails.
    Check(check::CheckArgs),
    /// A Jupyter kernel on a connection file's ZeroMQ channels, backed by a session
    /// (`kernel install` writes its kernelspecs).
    Kernel(kernel::KernelArgs),
    /// The daemon's protocol: `protocol schema` prints its JSON Schema, generated from the
    /// types the daemon reads and writes.
    Protocol(protocol::ProtocolArgs),
}

/// Global settings every subcommand may need.
pub struct Globals {
    config_path: Option<PathBuf>,
    socket: Option<PathBuf>,
    network: target::RemoteFlags,
}

impl Globals {
    /// The config file in force: `--config`, else the usual search.
    fn config_path(&self) -> Option<PathBuf> {
        cellvisor_config::locate(self.config_path.as_deref())
    }

    fn load_config(&self) -> Result<cellvisor::Config, String> {
        cellvisor_config::load(self.config_path.as_deref()).map_err(|e| e.to_string())
    }

    /// The daemon socket, given the configuration.
    fn socket(&self, config: &cellvisor::Config) -> PathBuf {
        cellvisor::daemon::socket_path(self.socket.as_deref(), config.daemon.socket.as_deref())
    }

    /// The remote daemon `--connect` (or `$CELLVISOR_CONNECT`) names, bound to `session`
    /// when given; `None` for the local one.
    fn remote(&self, session: Option<&str>) -> Result<Option<Remote>, i32> {
        self.network.remote(session).map_err(usage_error)
    }

    /// The `cwd` a command naming a session sends (so under `sessions.key = "session+cwd"`
    /// it names the pair `cellvisor eval` from the same directory ran in): this directory, or
    /// `--cwd` resolved against it; for a remote daemon only an absolute `--cwd`, since this
    /// machine's directories mean nothing there. A bad `--cwd` is reported (code in `Err`).
    fn session_cwd(
        &self,
        session: &str,
        given: Option<&std::path::Path>,
    ) -> Result<Option<PathBuf>, i32> {
        if self.remote(Some(session))?.is_some() {
            return match given {
                None => Ok(None),
                Some(dir) if dir.is_absolute() => Ok(Some(dir.to_path_buf())),
                Some(dir) => Err(usage_error(format!(
                    "with --connect, --cwd names a directory on the daemon's machine and must \
                     be absolute (not {})",
                    dir.display()
                ))),
            };
        }
        let here = std::env::current_dir()
            .map_err(|e| usage_error(format!("cannot read the current directory: {e}")))?;
        Ok(Some(match given {
            Some(dir) => here.join(dir),
            None => here,
        }))
    }

    /// A connection to the running daemon (the remote one, bound to `session` when given, or
    /// the local one). A bad configuration or bad flags are already reported (their exit code
    /// is in `Err`); an absent daemon is left to the caller, since what it means differs (an
    /// error for `status`, nothing to do for `stop`).
    async fn connect_daemon(&self, session: Option<&str>) -> Result<DaemonConnection, i32> {
        if let Some(remote) = self.remote(session)? {
            let client = Client::connect_remote(&remote).await;
            return Ok(DaemonConnection {
                target: Target::Remote(remote.url.to_string()),
                client,
            });
        }
        let config = self.load_config().map_err(usage_error)?;
        let socket = self.socket(&config);
        let client = Client::connect(&socket).await;
        Ok(DaemonConnection {
            target: Target::Socket(socket),
            client,
        })
    }
}

/// Where a command's daemon is.
enum Target {
    /// The local daemon's socket.
    Socket(PathBuf),
    /// A remote daemon's URL.
    Remote(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Socket(path) => write!(f, "{}", path.display()),
            Target::Remote(url) => f.write_str(url),
        }
    }
}

/// The outcome of [`Globals::connect_daemon`]: the daemon tried, and the client or why not.
struct DaemonConnection {
    target: Target,
    client: Result<Client, ClientError>,
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = err.print();
            return code;
        }
    };
    let globals = Globals {
        config_path: cli.config,
        network: target::RemoteFlags {
            connect: cli.connect,
            token_file: cli.token_file,
            tls_ca: cli.tls_ca,
            socket_given: cli.socket.is_some(),
        },
        socket: cli.socket,
    };
    let default_log = match cli.command {
        // rmcp logs every MCP session it creates at info, with the client's parameters.
        Command::Serve => "info,rmcp=warn",
        // stderr only: stdout is the MCP protocol.
        Command::Mcp => "warn",
        // A message refused for its signature is said on stderr, the kernel's log.
        Command::Kernel(_) => "warn",
        _ => "error",
    };
    init_logging(default_log);
    // Serve, mcp and `eval --no-daemon` hold the user's environment and run a supervisor
    // whose cells must not read it back through /proc.
    if let Err(err) = cellvisor::secrets::make_non_dumpable() {
        tracing::warn!("cannot make this process non-dumpable: {err}");
    }
    if matches!(cli.command, Command::Serve) {
        // The daemon runs its connections on the actix system its actors run on: one
        // thread, so a cell crosses no thread inside the daemon.
        return actix::System::new().block_on(async move { serve::run(&globals).await });
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return 1;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Eval(args) => eval::run(args, &globals).await,
            Command::Wait(args) => background::wait(args, &globals).await,
            Command::Terminate(args) => background::terminate(args, &globals).await,
            Command::Serve => serve::run(&globals).await,
            Command::Mcp => serve::run_mcp(&globals).await,
            Command::Status(args) => sessions::status(args, &globals).await,
            Command::Interrupt(args) => sessions::control(args, "interrupt", &globals).await,
            Command::Reset(args) => sessions::control(args, "reset", &globals).await,
            Command::Close(args) => sessions::control(args, "close", &globals).await,
            Command::Checkpoint(args) => state::checkpoint(args, &globals).await,
            Command::Restore(args) => state::restore(args, &globals).await,
            Command::Checkpoints(args) => state::checkpoints(args, &globals).await,
            Command::Names(args) => state::names(args, &globals).await,
            Command::Drain(args) => drain::drain(args, &globals).await,
            Command::Undrain => drain::undrain(&globals).await,
            Command::Stop => sessions::stop(&globals).await,
            Command::Config(args) => config_cmd::run(args, &globals),
            Command::Check(args) => check::run(args, &globals).await,
            Command::Kernel(args) => kernel::run(args, &globals).await,
            Command::Protocol(args) => protocol::run(args),
        }
    })
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CELLVISOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Prints `error: ...` and returns the usage exit code.
fn usage_error(message: impl std::fmt::Display) -> i32 {
    eprintln!("error: {message}");
    EXIT_USAGE
}
