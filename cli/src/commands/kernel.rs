//! `cellvisor kernel` (a Jupyter kernel on a connection file's channels) and `cellvisor
//! kernel install` (its kernelspecs).

use super::{usage_error, Globals};
use crate::kernel::connection::ConnectionFile;
use crate::kernel::install::{self, Place};
use crate::kernel::parent::Parent;
use crate::kernel::session::{DaemonPlace, Session};
use cellvisor::Language;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct KernelArgs {
    #[command(subcommand)]
    action: Option<KernelAction>,
    /// The connection file the front end wrote (its `{connection_file}`).
    #[arg(short = 'f', long, value_name = "FILE")]
    connection_file: Option<PathBuf>,
    /// The kernel's language: py, js or lua.
    #[arg(short, long)]
    language: Option<String>,
    /// Attach to this session (never closed by the kernel) instead of a fresh one of the
    /// kernel's own (closed when the kernel shuts down).
    #[arg(short, long)]
    session: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum KernelAction {
    /// Write the kernelspecs cellvisor-python, cellvisor-javascript and cellvisor-lua.
    Install(InstallArgs),
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("place").args(["user", "sys_prefix", "prefix"])))]
struct InstallArgs {
    /// Into the user's Jupyter data directory (the default): $JUPYTER_DATA_DIR, else
    /// ~/.local/share/jupyter.
    #[arg(long)]
    user: bool,
    /// Into the Python environment in use: $VIRTUAL_ENV, else the sys.prefix of python3.
    #[arg(long)]
    sys_prefix: bool,
    /// Into DIR/share/jupyter/kernels.
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// The kernels attach to this session instead of each getting a fresh one.
    #[arg(long)]
    session: Option<String>,
    /// The languages, comma-separated.
    #[arg(long, default_value = "py,js,lua")]
    languages: String,
}

pub async fn run(args: KernelArgs, globals: &Globals) -> i32 {
    if let Some(KernelAction::Install(install)) = args.action {
        return install_specs(install);
    }
    let Some(file) = args.connection_file else {
        return usage_error(
            "cellvisor kernel needs --connection-file FILE (Jupyter passes {connection_file}); \
             to write the kernelspecs, run `cellvisor kernel install`",
        );
    };
    let language = match args.language.as_deref().map(str::parse::<Language>) {
        Some(Ok(language)) => language,
        Some(Err(err)) => return usage_error(err),
        None => return usage_error("cellvisor kernel needs --language py, js or lua"),
    };
    if let Some(name) = &args.session {
        if let Err(err) = install::check_session(name) {
            return usage_error(err);
        }
    }
    let connection = match ConnectionFile::read(&file) {
        Ok(connection) => connection,
        Err(err) => return usage_error(err),
    };
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).map_or(0, |m| m.permissions().mode());
        for warning in connection.warnings(&file, mode) {
            eprintln!("warning: {warning}");
        }
    }
    let config = match globals.load_config() {
        Ok(config) => config,
        Err(err) => return usage_error(err),
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(err) => {
            eprintln!("error: cannot find this program to start a daemon: {err}");
            return 1;
        }
    };
    let place = DaemonPlace {
        socket: globals.socket(&config),
        program,
        config: globals.config_path(),
    };
    let session = match Session::open(place, args.session, language).await {
        Ok(session) => session,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let ending = tokio::sync::watch::Sender::new(None);
    watch_the_end(&ending);
    match crate::kernel::serve::serve(connection, session, ending).await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}

/// Ends the kernel (as a shutdown does: its own session closed) when the front end that
/// started it is gone, or on SIGTERM (what jupyter_client sends a kernel slow to shut down).
fn watch_the_end(ending: &crate::kernel::serve::Ending) {
    let jpy_parent_pid = std::env::var("JPY_PARENT_PID").ok();
    let ppid = nix::unistd::getppid().as_raw();
    if let Some(parent) = Parent::of(jpy_parent_pid.as_deref(), ppid) {
        let ending = ending.clone();
        tokio::spawn(async move {
            parent.wait().await;
            tracing::warn!("the process that started this kernel is gone: ending");
            let _ = ending.send(Some(false));
        });
    }
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut terminate) => {
            let ending = ending.clone();
            tokio::spawn(async move {
                if terminate.recv().await.is_some() {
                    let _ = ending.send(Some(false));
                }
            });
        }
        Err(err) => tracing::warn!("cannot watch for SIGTERM: {err}"),
    }
}

fn install_specs(args: InstallArgs) -> i32 {
    let place = match (args.prefix, args.sys_prefix) {
        (Some(prefix), _) => Place::Prefix(prefix),
        (None, true) => Place::SysPrefix,
        (None, false) => Place::User,
    };
    let languages = match install::parse_languages(&args.languages) {
        Ok(languages) => languages,
        Err(err) => return usage_error(err),
    };
    if let Some(name) = &args.session {
        if let Err(err) = install::check_session(name) {
            return usage_error(err);
        }
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(err) => {
            eprintln!("error: cannot find this program for the kernelspecs' argv: {err}");
            return 1;
        }
    };
    let dir = match install::kernels_dir(&place, &|name| std::env::var(name).ok()) {
        Ok(dir) => dir,
        Err(err) => return usage_error(err),
    };
    match install::install(&dir, &languages, &program, args.session.as_deref()) {
        Ok(written) => {
            for spec in written {
                println!("installed kernelspec {}", spec.display());
            }
            0
        }
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}
